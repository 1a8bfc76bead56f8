"""The Debian nginx serving a simple-index tree (``testbed.simple_index``) on 127.0.0.1, as the
benches run it: a fast, real web server to measure a client against.

``nginx_config`` writes the configuration, ``start_nginx`` runs nginx in the foreground until
it listens and ``stop_nginx`` stops it. Directories answer ``index.json`` when the Accept header
asks for PEP 691 JSON and the file exists, else ``index.html``; ETags and byte ranges are on.
The tests use ``testbed.index_server`` instead, whose answers they can shape.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from pathlib import Path

from testbed.simple_index import JSON_CONTENT_TYPE

__all__ = ["NGINX", "nginx_config", "start_nginx", "stop_nginx"]

NGINX = Path("/usr/sbin/nginx")
_TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def nginx_config(root: Path, port: int, workdir: Path) -> str:
    """An nginx.conf serving ``root`` on 127.0.0.1:``port`` in the foreground.

    pid, logs and temp paths live under ``workdir``. Directories serve ``index.json`` when
    the Accept header asks for PEP 691 JSON and the file exists, else ``index.html``. ETags
    and byte ranges are on. Running as root, the workers stay root so they can read a
    ``root`` under a private temp directory.
    """
    root = root.resolve()
    workdir = workdir.resolve()
    user = "user root root;\n" if os.geteuid() == 0 else ""
    temp = "\n".join(f'    {kind}_temp_path "{workdir / "tmp" / kind}";' for kind in _TEMP_KINDS)
    return f"""\
# written by testbed.nginx.nginx_config
{user}daemon off;
worker_processes auto;
pid "{workdir / "nginx.pid"}";
error_log "{workdir / "error.log"}" warn;

events {{
    worker_connections 1024;
}}

http {{
    access_log off;
{temp}
    types {{
        text/html html;
        {JSON_CONTENT_TYPE} json;
        application/octet-stream whl metadata gz;
    }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    etag on;

    map $http_accept $pypi_index {{
        "~application/vnd\\.pypi\\.simple\\.v1\\+json" index.json;
        default index.html;
    }}

    server {{
        listen 127.0.0.1:{port};
        root "{root}";
        index $pypi_index index.html;
        location / {{
            add_header Vary Accept;
        }}
    }}
}}
"""


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited with status {proc.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port} within {timeout} s")


def start_nginx(
    root: Path, port: int, workdir: Path, *, timeout: float = 10.0
) -> subprocess.Popen[bytes]:
    """Write ``workdir/nginx.conf`` and run nginx in the foreground until it listens."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    for kind in _TEMP_KINDS:
        (workdir / "tmp" / kind).mkdir(parents=True, exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_config(root, port, workdir), "utf-8")
    log = workdir / "error.log"
    cmd = [str(NGINX), "-p", str(workdir), "-c", str(conf), "-e", str(log)]
    with (workdir / "nginx.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, proc, timeout)
    except RuntimeError as exc:
        stop_nginx(proc)
        detail = "".join(
            p.read_text("utf-8", errors="replace")[-2000:]
            for p in (workdir / "nginx.out", log)
            if p.exists()
        )
        raise RuntimeError(f"{exc}\n{detail}") from None
    return proc


def stop_nginx(proc: subprocess.Popen[bytes], *, timeout: float = 10.0) -> None:
    """Stop an nginx started by ``start_nginx`` (fast shutdown, then kill)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
