"""A second Docker daemon with a data root, an exec root, a socket and a bridge of its own,
and another storage driver (vfs): nothing of the first daemon's layers, BuildKit cache or
images is shared with it. Its bridge is made here (``BRIDGE``, no NAT: builds reach the
network with ``--network host``), because ``dockerd --bridge=none`` deletes the host's
``docker0``, the first daemon's. The base image is copied into it from the first daemon."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DOCKERD = shutil.which("dockerd", path="/usr/sbin:/usr/bin") or "/usr/sbin/dockerd"
STORAGE_DRIVER = "vfs"
BRIDGE = "bi-test0"  # made and removed by second_daemon
BRIDGE_ADDRESS = "172.31.254.1/24"
_START_SECONDS = 60


@contextmanager
def second_daemon(root: Path, *, docker: str, base_image: str) -> Iterator[str]:
    """Start the daemon under ``root``, copy ``base_image`` into it; yields its DOCKER_HOST.
    Stopped and its files removed when the block ends."""
    sock = root / "docker.sock"
    log = root / "dockerd.log"
    root.mkdir(parents=True, exist_ok=True)
    argv = [
        DOCKERD,
        f"--data-root={root / 'data'}",
        f"--exec-root={root / 'exec'}",
        f"--pidfile={root / 'docker.pid'}",
        f"--host=unix://{sock}",
        f"--storage-driver={STORAGE_DRIVER}",
        f"--bridge={BRIDGE}",
        "--iptables=false",
        "--ip-masq=false",
    ]
    _ip("link", "add", "name", BRIDGE, "type", "bridge")
    daemon = None
    try:
        _ip("addr", "add", BRIDGE_ADDRESS, "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        with log.open("wb") as out:
            daemon = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        host = f"unix://{sock}"
        _wait(docker, host, daemon, log)
        saved = subprocess.run(
            [docker, "save", base_image], capture_output=True, check=True, timeout=300
        )
        subprocess.run(
            [docker, "--host", host, "load"],
            input=saved.stdout,
            capture_output=True,
            check=True,
            timeout=300,
        )
        yield host
    finally:
        if daemon is not None:
            _stop(daemon)
        subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, check=False)
        _remove_in_the_background(root)


def _remove_in_the_background(root: Path) -> None:
    """Delete ``root`` in a process of its own, at idle I/O priority: a vfs data root holds a
    full copy of every layer, and deleting it takes longer than the build that wrote it; the
    tests after this one need none of it."""
    script = 'ionice -c 3 nice -n 19 rm -rf -- "$1" </dev/null >/dev/null 2>&1 &'
    subprocess.run(["sh", "-c", script, "sh", str(root)], check=False, timeout=30)


def _ip(*argv: str) -> None:
    subprocess.run(["ip", *argv], capture_output=True, check=True, timeout=30)


def _stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=60)
    except subprocess.TimeoutExpired:
        daemon.kill()
        daemon.wait()


def _wait(docker: str, host: str, daemon: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"the second dockerd exited: {log.read_text()[-2000:]}")
        done = subprocess.run(
            [docker, "--host", host, "version", "--format", "{{.Server.Version}}"],
            capture_output=True,
            check=False,
            env={**os.environ, "DOCKER_HOST": host},
        )
        if done.returncode == 0:
            return
        time.sleep(0.5)
    raise RuntimeError(f"the second dockerd did not answer in {_START_SECONDS} s")
