"""testbed.nginx: the Debian nginx serves a simple-index tree (skipped without nginx)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from resolver.simple_page import ACCEPT, JSON_CONTENT_TYPE, parse_project_page
from testbed.distributions import build_wheel, read_wheel_metadata
from testbed.nginx import NGINX, nginx_config, start_nginx, stop_nginx
from testbed.simple_index import Listing, write_simple_index
from tests.testbed.common import TORCH, http_get, sha256_of


@pytest.mark.skipif(not NGINX.exists(), reason=f"{NGINX} is not installed (apt-get install nginx)")
def test_nginx_serves_the_tree(tmp_path: Path) -> None:
    torch = build_wheel(TORCH, tmp_path / "dists")
    root = tmp_path / "index"
    write_simple_index(root, [Listing(path=torch, metadata=True)], json=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert f"listen 127.0.0.1:{port};" in nginx_config(root, port, tmp_path / "nginx")
    proc = start_nginx(root, port, tmp_path / "nginx")
    try:
        url = f"http://127.0.0.1:{port}/simple/torch/"
        status, headers, body = http_get(url, {"Accept": ACCEPT})
        assert (status, headers["Content-Type"]) == (200, JSON_CONTENT_TYPE)
        files = parse_project_page(body, headers["Content-Type"], url)
        assert [f.hashes["sha256"] for f in files] == [sha256_of(torch)]
        assert http_get(url, {"Accept": "text/html"})[1]["Content-Type"] == "text/html"
        status, headers, body = http_get(files[0].url, {"Range": "bytes=-10"})
        assert (status, body) == (206, torch.read_bytes()[-10:])
        assert headers["ETag"]
        assert http_get(files[0].metadata_url)[2] == read_wheel_metadata(torch)
    finally:
        stop_nginx(proc)
    assert proc.returncode is not None
