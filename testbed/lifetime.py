"""``Served``: the ``with`` block of a server that has a ``start`` and a ``stop``."""

from __future__ import annotations

from typing import TypeVar

_Served = TypeVar("_Served", bound="Served")


class Served:
    """A base for a server: ``with server:`` starts it, gives it, and stops it however the
    block ends."""

    def start(self: _Served) -> _Served:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Served) -> _Served:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
