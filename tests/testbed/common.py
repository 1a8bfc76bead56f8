"""What the tests of the test bed share: three sample wheels, a file's sha256, a bare HTTP GET."""

from __future__ import annotations

import hashlib
import http.client
from pathlib import Path
from urllib.parse import urlsplit

from testbed.distributions import WheelSpec

TORCH = WheelSpec(
    name="torch",
    version="2.11.0.post2+musa5.2.0",
    tags="cp312-cp312-linux_x86_64",
    requires_dist=("filelock", "numpy>=1.26; extra == 'numpy'"),
    requires_python=">=3.10",
)


TILELANG = WheelSpec(
    name="tilelang_musa",
    version="0.1.12+musa.2",
    tags="cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64",
)


MATE = WheelSpec(
    name="Mate",
    version="0.2.7",
    entry_points={"console_scripts": {"mate-hello": "mate:hello"}},
    modules={"mate/__init__.py": "def hello() -> None:\n    print('hi')\n"},
)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def http_get(
    url: str, headers: dict[str, str] | None = None, *, method: str = "GET", timeout: float = 5
) -> tuple[int, http.client.HTTPMessage, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request(
            method, parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {}
        )
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()
