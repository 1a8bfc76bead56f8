"""The stand-in registry of the publishing tests: skopeo replaced by ``FakeSkopeo``."""

from __future__ import annotations

import pytest

import images.engine.skopeo
from tests.support.publishing import FakeSkopeo


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> str:
    """A registry at the returned address, as ``FakeSkopeo`` plays it (``t`` and ``multi``
    tagged); every command that asks a registry gets it."""
    FakeSkopeo.reset()
    monkeypatch.setattr(images.engine.skopeo, "Skopeo", FakeSkopeo)
    return "127.0.0.1:5999"
