"""The fake Bearer registry of the publishing tests, served on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.publishing import BearerRegistry, serving


@pytest.fixture
def fake() -> Iterator[str]:
    """A registry at the returned ``127.0.0.1:PORT`` behind Bearer tokens (``BearerRegistry``)."""
    BearerRegistry.log.clear()
    with serving(BearerRegistry) as address:
        BearerRegistry.port = int(address.rsplit(":", 1)[1])
        yield address
