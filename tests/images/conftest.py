"""The session's demo build, shared by the docker tests of this directory
(``test_build_docker.py``, ``test_build_docker_image.py``): built once, on first use."""

from __future__ import annotations

import pytest

from tests.support.demo_build import Demo, build_demo


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """``make demo`` once: both targets built, gated and tagged (an index credential set)."""
    return build_demo(tmp_path_factory.mktemp("image-cache"))
