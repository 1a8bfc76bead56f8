"""``Closing``: the context manager of a thing that has a ``close``."""

from __future__ import annotations

from typing import TypeVar

_Closing = TypeVar("_Closing", bound="Closing")


class Closing:
    """A base for a thing that is closed when done: ``with thing:`` gives the thing itself and
    calls its ``close`` on the way out, however the block ends (as ``contextlib.closing``)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Closing) -> _Closing:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
