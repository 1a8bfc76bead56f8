"""The session's builds the builder's docker tests share: the signed local apt repositories they
build from (test_build_docker.py, test_build_docker_mirrors.py), each made by
ci/make-apt-repo.sh and served by ci/serve-dir.sh on its own fixed port, and the components
stack's image (test_build_docker.py, test_build_docker_linkage.py); each once per session,
whichever module asks first."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.demo_build import Demo, build_components
from tests.support.environment import unavailable

ROOT = Path(__file__).resolve().parents[3]
APT_PORT = "18642"
SDK_PORT = "18653"


@pytest.fixture(scope="session")
def components(demo: Demo) -> Demo:
    """stack/demo-components.yaml built once (``build_components``): the demo with its lock."""
    return build_components(demo)


@pytest.fixture(scope="session")
def apt_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The signed local apt repository of ci/make-apt-repo.sh, served: (url, fingerprint)."""
    yield from _served_apt_repo(tmp_path_factory.mktemp("apt"), APT_PORT, {})


@pytest.fixture(scope="session")
def sdk_repo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A second signed repository (ci/make-apt-repo.sh) standing in for the MUSA SDK's: it
    holds Debian's `hello`, which the base image lacks. (url, fingerprint)."""
    yield from _served_apt_repo(
        tmp_path_factory.mktemp("sdk-apt"), SDK_PORT, {"CI_APT_REPO_PACKAGES": "hello"}
    )


def _served_apt_repo(work: Path, port: str, env: dict[str, str]) -> Iterator[tuple[str, str]]:
    """Build a signed repository with ci/make-apt-repo.sh under ``work``, serve it on ``port``
    with ci/serve-dir.sh, yield (url, fingerprint), then stop serving it."""
    script = ROOT / "ci" / "make-apt-repo.sh"
    if not script.exists():
        unavailable("ci/make-apt-repo.sh is missing", marker="docker")
    made = subprocess.run(
        ["bash", str(script), str(work / "repo"), str(work / "gnupg")],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, **env},
    )
    if made.returncode != 0:
        unavailable(f"ci/make-apt-repo.sh failed: {made.stderr[-2000:]}", marker="docker")
    fingerprint = made.stdout.strip().splitlines()[-1]
    served = subprocess.run(
        ["bash", str(ROOT / "ci" / "serve-dir.sh"), str(work / "repo"), port],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if served.returncode != 0:
        unavailable(f"ci/serve-dir.sh failed: {served.stderr[-2000:]}", marker="docker")
    try:
        yield f"http://127.0.0.1:{port}", fingerprint
    finally:
        subprocess.run(
            ["bash", str(ROOT / "ci" / "serve-dir.sh"), "--stop", port], check=False, timeout=60
        )
