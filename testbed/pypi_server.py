"""``PypiServer``: the real pypiserver 2.x (``pypi-server run``) on a free port of 127.0.0.1,
serving a directory of distributions as a simple index.

It runs without auth and without the fallback redirect, so an unknown project is a 404, and
hashes its files with sha256. ``find_pypi_server`` finds the executable: the one beside this
interpreter, else the one on PATH.
"""

from __future__ import annotations

import http.client
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import IO

from testbed.lifetime import Served

__all__ = ["PypiServer", "find_pypi_server"]


def find_pypi_server() -> Path | None:
    """The ``pypi-server`` of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "pypi-server"
    if beside.is_file():
        return beside
    found = shutil.which("pypi-server")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(eq=False)
class PypiServer(Served):
    """The real pypiserver on 127.0.0.1, serving ``packages_dir``; no auth, no fallback.
    ``executable``: ``find_pypi_server``'s by default."""

    packages_dir: Path
    _: KW_ONLY
    executable: Path | None = None
    startup_timeout: float = 20.0
    extra_args: Sequence[str] = ()

    def __post_init__(self) -> None:
        self.executable = self.executable or find_pypi_server()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("PypiServer is not running")
        return self._port

    @property
    def url(self) -> str:
        """The simple index URL, ``http://127.0.0.1:PORT/simple/``."""
        return f"http://127.0.0.1:{self.port}/simple/"

    def add(self, *paths: Path) -> None:
        """Copy distributions into the packages directory (pypiserver rescans it)."""
        self.packages_dir.mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.copyfile(path, self.packages_dir / path.name)

    def start(self) -> PypiServer:
        if self._proc is not None:
            raise RuntimeError("PypiServer already started")
        if self.executable is None:
            raise FileNotFoundError("pypi-server is not installed (pip install pypiserver)")
        self.packages_dir.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _attempt in range(3):  # the free port may be taken between probe and bind
            port = _free_port()
            log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
            cmd = [
                str(self.executable), "run",
                "--host", "127.0.0.1", "--port", str(port),
                "-a", ".", "-P", ".", "--disable-fallback",
                "--hash-algo", "sha256", "--backend", "simple-dir",
                *self.extra_args,
                str(self.packages_dir),
            ]  # fmt: skip
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            if self._wait_ready(proc, port):
                self._proc, self._log, self._port = proc, log, port
                return self
            _terminate(proc)
            log.seek(0)
            last_error = log.read().decode("utf-8", errors="replace")[-2000:]
            log.close()
        raise RuntimeError(f"pypi-server did not start: {last_error}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return True
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._port = None


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
