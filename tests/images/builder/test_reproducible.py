"""Docker tests: the image's digest does not depend on the daemon that built it.

The session's demo (the ``demo`` fixture, built by the first daemon: overlay2, its BuildKit
cache warm, umask 022) is built again by a second daemon started here, with a data root of its
own and the vfs storage driver, nothing cached, from a process with umask 077: the same digest.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import build_image
from tests.support.demo_build import ROOT, Demo
from tests.support.environment import BASE_IMAGE, unavailable
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.second_daemon import DOCKERD, second_daemon

pytestmark = pytest.mark.docker


@pytest.fixture
def other_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if os.geteuid() != 0 or not Path(DOCKERD).exists() or shutil.which("ip") is None:
        unavailable("a second Docker daemon needs root, dockerd and ip", marker="docker")
    root = tmp_path_factory.mktemp("second-daemon")
    with second_daemon(root, docker=DOCKER, base_image=BASE_IMAGE) as host:
        yield host


def test_another_daemon_with_another_driver_and_umask_builds_the_same_digest(
    demo: Demo, other_daemon: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", other_daemon)
    report = tmp_path / "final.json"
    argv = [
        "build", str(ROOT / "stack" / "demo.yaml"), "--target", "final",
        "--lock", str(demo.lock_dir), "--cache-dir", str(demo.cache),
        "--index", f"demo={demo.index_url}", "--network", "host",
        "--build-report", str(report), "--progress", "quiet",
    ]  # fmt: skip
    err = io.StringIO()
    umask = os.umask(0o077)
    try:
        code = build_image.main(argv, out=io.StringIO(), err=err)
    finally:
        os.umask(umask)
    assert code == 0, err.getvalue()
    assert json.loads(report.read_text())["digest"] == demo.digests["final"]
