"""testbed.pypi_server: the real pypiserver serves the wheels put in its directory."""

from __future__ import annotations

from pathlib import Path

from resolver.simple_page import parse_project_page
from testbed.distributions import build_wheel
from testbed.pypi_server import PypiServer
from tests.testbed.common import TORCH, http_get, sha256_of


def test_pypi_server_serves_uploaded_wheels(pypi_server: PypiServer, tmp_path: Path) -> None:
    torch = build_wheel(TORCH, tmp_path)
    pypi_server.add(torch)
    url = pypi_server.url + "torch/"
    status, headers, body = http_get(url)
    assert status == 200
    files = parse_project_page(body, headers["Content-Type"], url)
    assert [(f.filename, dict(f.hashes)) for f in files] == [
        (torch.name, {"sha256": sha256_of(torch)})
    ]
    status, _, data = http_get(files[0].url)
    assert (status, data) == (200, torch.read_bytes())
    assert http_get(pypi_server.url + "not-a-project/")[0] == 404
