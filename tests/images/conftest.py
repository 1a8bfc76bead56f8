"""The session's demo build, shared by the docker tests under this directory (the builder's
``test_build_docker*.py``, publishing's ``test_verify_rebuild.py``): built once, on first use."""

from __future__ import annotations

import pytest

from tests.support.demo_build import Demo, build_demo


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """``make demo`` once: both targets built, gated and tagged (an index credential set)."""
    return build_demo(tmp_path_factory.mktemp("image-cache"))
