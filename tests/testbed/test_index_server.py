"""testbed.index_server: content negotiation, validators and ranges, fault injection, the
requests seen, and a clean stop."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import http.client
import socket
from pathlib import Path

import pytest

from resolver.simple_page import ACCEPT, JSON_CONTENT_TYPE, parse_project_page
from testbed.distributions import build_wheel, read_wheel_metadata
from testbed.index_server import IndexServer, IndexServerFactory
from testbed.simple_index import Listing
from tests.testbed.common import MATE, TORCH, http_get, sha256_of


def test_server_negotiates_json_and_html(
    make_index_server: IndexServerFactory, tmp_path: Path
) -> None:
    torch = build_wheel(TORCH, tmp_path)
    server = make_index_server("vendor")
    server.add(torch, json=True)
    url = server.simple_url + "torch/"

    status, headers, body = http_get(url, {"Accept": ACCEPT})
    assert status == 200
    assert headers["Content-Type"] == JSON_CONTENT_TYPE
    assert parse_project_page(body, headers["Content-Type"], url)[0].filename == torch.name

    for accept in (None, "text/html", f"text/html, {JSON_CONTENT_TYPE};q=0.5"):
        status, headers, body = http_get(url, {"Accept": accept} if accept else {})
        assert (status, headers["Content-Type"]) == (200, "text/html"), accept
        assert body.startswith(b"<!DOCTYPE html>")

    html_only = make_index_server("html-only", json=False)
    html_only.add(torch, json=True)
    status, headers, _ = http_get(html_only.simple_url + "torch/", {"Accept": ACCEPT})
    assert headers["Content-Type"] == "text/html"

    status, headers, _ = http_get(server.url + "/simple/torch")
    assert (status, headers["Location"]) == (301, "/simple/torch/")
    assert http_get(server.simple_url + "nothere/")[0] == 404
    assert http_get(server.url + "/simple/../listings.json")[0] in (403, 404)
    status, headers, body = http_get(server.url + f"/files/{torch.name}.metadata")
    assert status == 404  # not published
    server.add(Listing(path=torch, metadata=True))
    status, headers, body = http_get(
        server.url + "/files/" + torch.name.replace("+", "%2B") + ".metadata"
    )
    assert (status, headers["Content-Type"]) == (200, "application/octet-stream")
    assert body == read_wheel_metadata(torch)


def test_server_etag_last_modified_and_replace(index_server: IndexServer, tmp_path: Path) -> None:
    mate = build_wheel(MATE, tmp_path)
    index_server.add(mate)
    url = f"{index_server.url}/files/{mate.name}"
    status, headers, body = http_get(url)
    assert status == 200
    assert body == mate.read_bytes()
    etag = headers["ETag"]
    assert etag == f'"{sha256_of(mate)}"'
    modified = headers["Last-Modified"]
    assert http_get(url, {"If-None-Match": etag})[0] == 304
    assert http_get(url, {"If-None-Match": '"other", ' + etag})[0] == 304
    assert http_get(url, {"If-None-Match": '"other"'})[0] == 200
    assert http_get(url, {"If-Modified-Since": modified})[0] == 304
    assert http_get(url, {"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})[0] == 200
    status, headers, body = http_get(url, method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", str(mate.stat().st_size))

    index_server.replace(f"/files/{mate.name}", b"new bytes")
    status, headers, body = http_get(url, {"If-None-Match": etag})
    assert (status, body) == (200, b"new bytes")
    assert headers["ETag"] == f'"{hashlib.sha256(b"new bytes").hexdigest()}"'
    new_time = email.utils.parsedate_to_datetime(headers["Last-Modified"])
    assert new_time > email.utils.parsedate_to_datetime(modified)
    assert http_get(url, {"If-Modified-Since": modified})[0] == 200
    # the page still advertises the old hash until the tree is rewritten
    page = parse_project_page(
        http_get(index_server.simple_url + "mate/")[2],
        "text/html",
        index_server.simple_url + "mate/",
    )
    assert page[0].hashes["sha256"] == sha256_of(mate)
    index_server.add()
    page = parse_project_page(
        http_get(index_server.simple_url + "mate/")[2],
        "text/html",
        index_server.simple_url + "mate/",
    )
    assert page[0].hashes["sha256"] == hashlib.sha256(b"new bytes").hexdigest()


def test_server_ranges(make_index_server: IndexServerFactory, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    server = make_index_server("ranged")
    (server.root / "files").mkdir(parents=True)
    (server.root / "files" / "blob.bin").write_bytes(data)
    url = f"{server.url}/files/blob.bin"
    size = len(data)
    cases = {
        "bytes=0-9": (0, 9),
        "bytes=1000-": (1000, size - 1),
        "bytes=-5": (size - 5, size - 1),
        "bytes=1020-5000": (1020, size - 1),
        "bytes=-5000": (0, size - 1),
    }
    for header, (first, last) in cases.items():
        status, headers, body = http_get(url, {"Range": header})
        assert status == 206, header
        assert headers["Content-Range"] == f"bytes {first}-{last}/{size}", header
        assert headers["Accept-Ranges"] == "bytes"
        assert body == data[first : last + 1], header
    status, headers, _ = http_get(url, {"Range": f"bytes={size}-"})
    assert (status, headers["Content-Range"]) == (416, f"bytes */{size}")
    assert http_get(url, {"Range": "bytes=0-1,5-6"})[0] == 200  # multiple ranges: whole file

    server.ranges = False
    status, headers, body = http_get(url, {"Range": "bytes=0-9"})
    assert (status, body, headers["Accept-Ranges"]) == (200, data, None)


def test_server_fault_injection(index_server: IndexServer, tmp_path: Path) -> None:
    mate = build_wheel(MATE, tmp_path)
    index_server.add(mate)
    page = index_server.simple_url + "mate/"

    index_server.fail("/simple/mate/", status=503, times=2, retry_after=1)
    first = http_get(page)
    assert (first[0], first[1]["Retry-After"]) == (503, "1")
    assert http_get(page)[0] == 503
    assert http_get(page)[0] == 200
    index_server.fail(f"/files/{mate.name}", status=500, times=1)
    assert http_get(page)[0] == 200  # other paths are not affected
    assert http_get(f"{index_server.url}/files/{mate.name}")[0] == 500

    index_server.delay("/simple/", 2.0)
    with pytest.raises(TimeoutError):  # the client's read timeout, not the delay, ends it
        http_get(page, timeout=0.2)
    assert http_get(page)[0] == 200  # the delay was for one request

    index_server.drop("/simple/")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        http_get(page)
    assert http_get(page)[0] == 200

    index_server.require_auth("user", "s3cret")
    status, headers, _ = http_get(page)
    assert (status, headers["WWW-Authenticate"]) == (401, 'Basic realm="index"')
    good = "Basic " + base64.b64encode(b"user:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"user:wrong").decode()
    assert http_get(page, {"Authorization": bad})[0] == 401
    assert http_get(page, {"Authorization": good})[0] == 200
    index_server.require_auth(None)
    assert http_get(page)[0] == 200


def test_server_records_requests(index_server: IndexServer, tmp_path: Path) -> None:
    torch = build_wheel(TORCH, tmp_path)
    index_server.add(torch)
    index_server.clear_requests()
    quoted = torch.name.replace("+", "%2B")
    http_get(f"{index_server.url}/files/{quoted}", {"Range": "bytes=-10", "X-Test": "1"})
    http_get(index_server.simple_url + "torch/", method="HEAD")
    seen = index_server.requests
    assert [(r.method, r.path) for r in seen] == [
        ("GET", f"/files/{quoted}"),
        ("HEAD", "/simple/torch/"),
    ]
    headers = seen[0].headers
    assert (headers["range"], headers["Range"], headers.get("X-TEST")) == (
        "bytes=-10",
        "bytes=-10",
        "1",
    )
    assert "x-test" in headers
    assert index_server.paths(None) == [f"/files/{torch.name}", "/simple/torch/"]
    index_server.clear_requests()
    assert index_server.requests == []


def test_server_stops_and_frees_its_port(tmp_path: Path) -> None:
    with IndexServer(tmp_path / "root") as server:
        port = server.port
        assert http_get(server.url + "/nothing")[0] == 404
        with socket.create_connection(("127.0.0.1", port)):  # an idle keep-alive client
            pass
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass
