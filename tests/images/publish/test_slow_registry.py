"""A registry that answers too slowly to ever end, against the real command line and the real
skopeo: its head trickled a byte at a time, or its manifest trickled without a length, is cut
off after ``--timeout`` seconds per attempt and refused as ``error[registry-unreachable]``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.index_server import IndexServer

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(shutil.which("skopeo") is None, reason="needs skopeo")


def _host(server: IndexServer) -> str:
    return server.url.split("//", 1)[1]


def _pin(server: IndexServer, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    ref = f"{_host(server)}/team/app:1"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env["DOCKER_CONFIG"] = str(tmp_path / "docker")  # no login of this host's
    return subprocess.run(
        [sys.executable, str(ROOT / "build_image.py"), "pin", ref, "--timeout", "1",
         "--retries", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def _refusal(server: IndexServer) -> str:
    return (
        f"error[registry-unreachable]: the registry {_host(server)} did not answer within "
        f"2s ({_host(server)}/team/app:1, 2 attempts)\nhint: retry, or raise --timeout\n"
    )


def test_a_registry_that_trickles_its_head_is_cut_off(tmp_path: Path) -> None:
    with IndexServer(tmp_path / "root") as server:
        server.trickle("/v2/", 1, times=100, head=True)
        result = _pin(server, tmp_path)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", _refusal(server))
        assert "/v2/" in server.paths()  # skopeo reached it: not a refused connection


def test_a_registry_that_trickles_a_manifest_without_a_length_is_cut_off(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    (root / "v2").mkdir(parents=True)
    (root / "v2" / "index.html").write_text("{}")
    manifest = root / "v2" / "team" / "app" / "manifests" / "1"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"schemaVersion": 2, "layers": []}' + " " * 4096)
    with IndexServer(root) as server:
        server.trickle("/v2/team/", 1, times=100, unframed=True)
        result = _pin(server, tmp_path)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", _refusal(server))
        assert "/v2/team/app/manifests/1" in server.paths()  # the answer that trickled
