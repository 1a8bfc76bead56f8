"""Stand-ins of the serving stage: the demo's stand-in ``vllm serve`` in a process of its own
(``stand_in_server``), the local Docker daemon on a TCP port as a remote GPU host's is reached
(``DockerTcpEndpoint``), serve-check evidence bundles as ``serve-check`` writes them
(``write_serve_check``) and small serving profiles for the stand-in server (``write_profile``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from core.errors import BuildImageError
from core.transport import Transport
from images.builder.workspace import Workspace
from images.serve.check import CheckOutcome, ServeCheckBundle, write_bundle
from images.serve.client import get_json

ROOT = Path(__file__).resolve().parents[1]  # the checkout: demo/vllm is the stand-in


def write_serve_check(root: Path, image_id: str, *, passed: bool = True) -> Path:
    """A serve-check bundle of ``image_id`` under the workspace ``root``; returns its path."""
    outcome = CheckOutcome(
        name="capital",
        passed=passed,
        reason=None if passed else "the answer 'Paris' does not contain 'Beijing'",
        text="Beijing" if passed else "Paris",
        finish_reason="stop",
        output_tokens=1,
        ttft_ms=20.0,
        e2e_ms=20.0,
    )
    bundle = ServeCheckBundle(
        image=image_id,
        image_id=image_id,
        repo_digests=(),
        docker_host="unix:///var/run/docker.sock",
        host={"name": "gpu-host"},
        launch=("docker", "run", image_id),
        server_url="http://127.0.0.1:8000",
        ready_after=1.0,
        checks=(outcome,),
        log_patterns={},
        log_tail="",
        failures=() if passed else (f"request capital: {outcome.reason}",),
        time="2026-12-01T00:00:00Z",
        profile={},
    )
    return write_bundle(Workspace(root).serve_check_dir(image_id), bundle, "")


def write_profile(
    path: Path,
    model: Path,
    *,
    env: dict[str, str] | None = None,
    devices: tuple[str, ...] = (),
    deadline: float = 30,
    probe: tuple[list[str], str] | None = None,
    ab: dict[str, object] | None = None,
) -> Path:
    """A small serving profile for the demo's stand-in server (a few short requests)."""
    contract: dict[str, object] = {
        "input_len": 16,
        "output_len": 6,
        "concurrency": [1, 2],
        "warmups": 0,
        "runs": 1,
        "requests_per_run": 4,
        "thresholds": {"throughput_delta": -5.0, "p99_e2e_delta": 10.0},
        "bootstrap": {"resamples": 200},
        "request_timeout": 30,
    }
    contract.update(ab or {})
    launch: dict[str, object] = {
        "port": 8000,
        "env": {"VLLM_USE_RUST_FRONTEND": "0", **(env or {})},
    }
    if devices:
        launch["devices"] = list(devices)
    doc: dict[str, object] = {
        "model": {"path": str(model), "mount": "/models/demo", "name": "demo-model"},
        "launch": launch,
        "health": {"deadline": deadline},
        "check": {
            "requests": [
                {
                    "name": "capital",
                    "chat": "What is the capital of China?",
                    "max_tokens": 32,
                    "contains": "Beijing",
                    "finish_reason": "stop",
                }
            ],
            "log_patterns": ["FLASH_ATTN", "FULL_AND_PIECEWISE"],
        },
        "ab": contract,
    }
    if probe is not None:
        doc["preflight"] = {"probe": {"command": probe[0], "busy": probe[1]}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")  # JSON is YAML
    return path


class DockerTcpEndpoint:
    """The local daemon's socket served on a TCP port of 127.0.0.1, as a remote GPU host's
    daemon is reached (``DOCKER_HOST=tcp://127.0.0.1:PORT``): every connection is relayed to
    ``/var/run/docker.sock``."""

    def __init__(self, socket_path: str = "/var/run/docker.sock") -> None:
        self._socket_path = socket_path
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def docker_host(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def _handler(self) -> type[socketserver.BaseRequestHandler]:
        path = self._socket_path

        class Relay(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                upstream.connect(path)
                client: socket.socket = self.request

                def pump(src: socket.socket, dst: socket.socket) -> None:
                    try:
                        while data := src.recv(65536):
                            dst.sendall(data)
                    except OSError:
                        pass
                    finally:
                        with contextlib.suppress(OSError):
                            dst.shutdown(socket.SHUT_WR)

                back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
                back.start()
                pump(client, upstream)
                back.join(timeout=60)
                upstream.close()

        return Relay

    def __enter__(self) -> DockerTcpEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def stand_in_server(env: Mapping[str, str], *, model: str = "demo-model") -> Iterator[str]:
    """The demo's stand-in ``vllm serve`` (``demo/vllm/vllm/server.py``) in a process of its
    own on 127.0.0.1, its pace from ``env`` (``VLLM_DEMO_*``); yields its URL once
    ``/v1/models`` answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    code = f"from vllm.server import serve; serve('m', '127.0.0.1', {port}, {model!r}, [])"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT / "demo" / "vllm"), **env},
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with Transport(timeout=5, min_rate=None) as transport:
            for _ in range(200):
                try:
                    if get_json(transport, f"{url}/v1/models", timeout=1)[0] == 200:
                        break
                except BuildImageError:  # not up yet
                    time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)
