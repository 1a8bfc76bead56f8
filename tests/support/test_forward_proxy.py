"""The "corporate network" kit: ``ForwardProxy`` in front of an ``IndexServer`` that speaks
HTTPS with a private CA under a ``.test`` name, with gzip and trickled heads; the clients
are the standard library's ``http.client`` and ``ssl``."""

from __future__ import annotations

import base64
import gzip
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from resolver.simple_page import parse_project_page
from testbed.distributions import WheelSpec, build_wheel
from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from testbed.tls import Authority, ServerCert, client_context, make_authority
from tests.support.forward_proxy import ForwardProxy

NAME = "index.corp.test"
MATE = WheelSpec(name="mate", version="0.2.7")
USER, PASSWORD = "user", "p@ss"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def cert(authority: Authority) -> ServerCert:
    return authority.issue("index", [NAME])


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(MATE, tmp_path_factory.mktemp("dists"))


@pytest.fixture
def corp(tmp_path: Path, cert: ServerCert, wheel: Path) -> Iterator[IndexServer]:
    """The corporate index: HTTPS as index.corp.test, gzip on, mate with its metadata."""
    with IndexServer(tmp_path / "corp", tls=cert, host=NAME, gzip=True) as server:
        server.add(Listing(path=wheel, metadata=True), json=True)
        server.clear_requests()
        yield server


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _tunnel(
    proxy: ForwardProxy,
    port: int,
    context: ssl.SSLContext,
    *,
    host: str = NAME,
    headers: dict[str, str] | None = None,
    timeout: float = 5,
) -> http.client.HTTPSConnection:
    """An HTTPS connection to ``host:port`` through the proxy's CONNECT (opened lazily)."""
    conn = http.client.HTTPSConnection("127.0.0.1", proxy.port, context=context, timeout=timeout)
    conn.set_tunnel(host, port, headers=headers)
    return conn


def _get(
    conn: http.client.HTTPConnection,
    target: str,
    headers: dict[str, str] | None = None,
    *,
    method: str = "GET",
) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn.request(method, target, headers=headers or {})
    resp = conn.getresponse()
    return resp.status, resp.headers, resp.read()


def _eventually(condition: Callable[[], bool], guard: float = 10.0) -> bool:
    """Wait for ``condition`` (the guard only stops a hang; no speed is asserted)."""
    deadline = time.monotonic() + guard
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ----------------------------------------------------------------------------- CONNECT


def test_https_through_connect_verifies_against_the_ca(
    corp: IndexServer, authority: Authority, wheel: Path
) -> None:
    with ForwardProxy(hosts={NAME: ("127.0.0.1", corp.port)}) as proxy:
        conn = _tunnel(proxy, corp.port, client_context(authority.ca_file))
        try:  # one tunnel, one TLS session, two requests
            page_url = corp.simple_url + "mate/"
            status, headers, body = _get(conn, urlsplit(page_url).path)
            assert (status, headers["Content-Type"]) == (200, "text/html")
            files = parse_project_page(body, "text/html", page_url)
            assert [f.url for f in files] == [f"https://{NAME}:{corp.port}/files/{wheel.name}"]
            status, _, data = _get(conn, urlsplit(files[0].url).path)
            assert (status, data) == (200, wheel.read_bytes())
        finally:
            conn.close()
        assert [(r.method, r.target, r.authorized) for r in proxy.requests] == [
            ("CONNECT", f"{NAME}:{corp.port}", True)
        ]
        assert corp.paths() == ["/simple/mate/", f"/files/{wheel.name}"]

        proxy.clear_requests()
        assert proxy.requests == []
        conn = _tunnel(proxy, corp.port, client_context())  # the system trust store
        try:
            with pytest.raises(ssl.SSLCertVerificationError) as info:
                conn.request("GET", "/simple/")
        finally:
            conn.close()
        assert info.value.verify_message == "unable to get local issuer certificate"
        assert [r.method for r in proxy.requests] == ["CONNECT"]
    assert corp.paths() == ["/simple/mate/", f"/files/{wheel.name}"]


def test_the_proxy_asks_for_basic_credentials(corp: IndexServer, authority: Authority) -> None:
    context = client_context(authority.ca_file)
    hosts = {NAME: ("127.0.0.1", corp.port)}
    with ForwardProxy(hosts=hosts, auth=(USER, PASSWORD)) as proxy:
        url = proxy.url_with(USER, PASSWORD)
        assert url == f"http://user:p%40ss@127.0.0.1:{proxy.port}"
        parts = urlsplit(url)
        assert (unquote(parts.username or ""), unquote(parts.password or "")) == (USER, PASSWORD)
        for sent in (None, {"Proxy-Authorization": _basic(USER, "wrong")}):
            conn = _tunnel(proxy, corp.port, context, headers=sent)
            try:
                with pytest.raises(OSError, match=r"^Tunnel connection failed: 407 ") as info:
                    conn.connect()
            finally:
                conn.close()
            assert str(info.value) == "Tunnel connection failed: 407 Proxy Authentication Required"

        good = {"Proxy-Authorization": _basic(USER, PASSWORD)}
        conn = _tunnel(proxy, corp.port, context, headers=good)
        try:
            assert _get(conn, "/simple/")[0] == 200
        finally:
            conn.close()
        assert [(r.method, r.authorized) for r in proxy.requests] == [
            ("CONNECT", False),
            ("CONNECT", False),
            ("CONNECT", True),
        ]
        assert "proxy-authorization" not in proxy.requests[0].headers
        assert proxy.requests[2].headers["Proxy-Authorization"] == _basic(USER, PASSWORD)

        raw = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        try:  # the 407 itself, and the connection stays open for the retry
            status, headers, body = _get(raw, f"http://{NAME}:{corp.port}/simple/")
            assert (status, headers["Proxy-Authenticate"], body) == (
                407,
                'Basic realm="proxy"',
                b"407 Proxy Authentication Required\n",
            )
            status, _, _ = _get(raw, "http://elsewhere.test/", good)
            assert status == 502
        finally:
            raw.close()
        assert [(r.method, r.authorized) for r in proxy.requests[3:]] == [
            ("GET", False),
            ("GET", True),
        ]


def test_only_mapped_hosts_are_reached(corp: IndexServer, authority: Authority) -> None:
    context = client_context(authority.ca_file)
    with ForwardProxy(hosts={NAME: ("127.0.0.1", corp.port)}) as proxy:
        for host in ("elsewhere.test", "127.0.0.1"):
            conn = _tunnel(proxy, corp.port, context, host=host)
            try:
                with pytest.raises(OSError, match=r"^Tunnel connection failed: 502 ") as info:
                    conn.connect()
            finally:
                conn.close()
            assert str(info.value) == "Tunnel connection failed: 502 Bad Gateway"
        assert [r.target for r in proxy.requests] == [
            f"elsewhere.test:{corp.port}",
            f"127.0.0.1:{corp.port}",
        ]

    with ForwardProxy(allow_loopback=True) as proxy:
        raw = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
        with (
            raw,
            context.wrap_socket(
                _connected(raw, f"127.0.0.1:{corp.port}"), server_hostname=NAME
            ) as tls,
        ):
            tls.sendall(
                f"GET /simple/ HTTP/1.1\r\nHost: {NAME}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = _read_all(tls)
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert [r.target for r in proxy.requests] == [f"127.0.0.1:{corp.port}"]


def _connected(sock: socket.socket, target: str) -> socket.socket:
    """``sock`` (to the proxy) after a successful CONNECT to ``target``."""
    sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        piece = sock.recv(1)
        assert piece, head
        head += piece
    assert head == b"HTTP/1.1 200 Connection Established\r\n\r\n"
    return sock


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while piece := sock.recv(1 << 16):
        data += piece
    return data


# ----------------------------------------------------------------------------- plain HTTP


def test_plain_http_in_absolute_form(tmp_path: Path, wheel: Path) -> None:
    with (
        IndexServer(tmp_path / "plain", host=NAME) as index,
        ForwardProxy(hosts={NAME: ("127.0.0.1", index.port)}) as proxy,
    ):
        index.add(Listing(path=wheel, metadata=True))
        index.clear_requests()
        assert index.url == f"http://{NAME}:{index.port}"
        base = index.url
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
        try:  # one client connection, kept alive across answers of every framing
            status, headers, body = _get(conn, base + "/simple/mate/", method="HEAD")
            assert (status, body, headers["Connection"]) == (200, b"", "keep-alive")
            status, headers, body = _get(conn, base + "/simple/mate/")
            assert (status, headers["Content-Length"]) == (200, str(len(body)))
            assert body == (index.root / "simple" / "mate" / "index.html").read_bytes()
            status, _, data = _get(conn, f"{base}/files/{wheel.name}")
            assert (status, data) == (200, wheel.read_bytes())
            assert _get(conn, base + "/simple/nothere/")[:3:2] == (404, b"not found\n")
            etag = headers["ETag"]
            assert _get(conn, base + "/simple/mate/", {"If-None-Match": etag})[0] == 304
            index.redirect("/simple/old/", "/simple/mate/", body_bytes=100_000)
            status, headers, body = _get(conn, base + "/simple/old/")  # a chunked body
            assert (status, headers["Transfer-Encoding"], len(body)) == (302, "chunked", 100_000)
            index.cut("/files/", after=1000)  # no Content-Length: until close
            status, headers, data = _get(conn, f"{base}/files/{wheel.name}")
            assert (status, data, headers["Connection"]) == (
                200,
                wheel.read_bytes()[:1000],
                "close",
            )
        finally:
            conn.close()
        assert [(r.method, r.target) for r in proxy.requests] == [
            ("HEAD", f"{base}/simple/mate/"),
            ("GET", f"{base}/simple/mate/"),
            ("GET", f"{base}/files/{wheel.name}"),
            ("GET", f"{base}/simple/nothere/"),
            ("GET", f"{base}/simple/mate/"),
            ("GET", f"{base}/simple/old/"),
            ("GET", f"{base}/files/{wheel.name}"),
        ]
        seen = index.requests
        assert [r.path for r in seen] == [
            "/simple/mate/",
            "/simple/mate/",
            f"/files/{wheel.name}",
            "/simple/nothere/",
            "/simple/mate/",
            "/simple/old/",
            f"/files/{wheel.name}",
        ]
        assert {r.headers["Host"] for r in seen} == {f"{NAME}:{index.port}"}
        assert {r.headers.get("Connection") for r in seen} == {"close"}

        status, _, body = _get_once(proxy, "http://elsewhere.test/simple/")
        assert (status, body) == (502, b"502 Bad Gateway\n")
        assert _get_once(proxy, "https://index.corp.test/simple/")[0] == 400  # wants CONNECT


def _get_once(proxy: ForwardProxy, url: str) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    try:
        return _get(conn, url)
    finally:
        conn.close()


# ----------------------------------------------------------------------------- gzip


def test_gzip_only_when_asked(corp: IndexServer, authority: Authority, wheel: Path) -> None:
    page = corp.root / "simple" / "mate" / "index.html"
    metadata = corp.root / "files" / f"{wheel.name}.metadata"
    with ForwardProxy(hosts={NAME: ("127.0.0.1", corp.port)}) as proxy:
        conn = _tunnel(proxy, corp.port, client_context(authority.ca_file))
        try:
            status, headers, body = _get(conn, "/simple/mate/")
            assert (status, body, headers["Content-Encoding"]) == (200, page.read_bytes(), None)
            assert headers["Vary"] == "Accept, Accept-Encoding"
            strong = headers["ETag"]
            assert strong.startswith('"')

            status, headers, body = _get(conn, "/simple/mate/", {"Accept-Encoding": "gzip"})
            assert (status, headers["Content-Encoding"]) == (200, "gzip")
            assert gzip.decompress(body) == page.read_bytes()
            assert headers["Content-Length"] == str(len(body))
            assert (headers["ETag"], headers["Vary"]) == (f"W/{strong}", "Accept, Accept-Encoding")
            weak = headers["ETag"]
            status, headers, body = _get(
                conn, "/simple/mate/", {"Accept-Encoding": "gzip", "If-None-Match": weak}
            )
            assert (status, headers["ETag"], body) == (304, weak, b"")

            for accept in ("identity", "gzip;q=0", "br, deflate", "*;q=0"):
                status, headers, body = _get(conn, "/simple/mate/", {"Accept-Encoding": accept})
                assert (headers["Content-Encoding"], body) == (None, page.read_bytes()), accept
            for accept in ("*", "br;q=1, gzip;q=0.5", "x-gzip"):
                _, headers, body = _get(conn, "/simple/mate/", {"Accept-Encoding": accept})
                assert gzip.decompress(body) == page.read_bytes(), accept

            json_accept = {
                "Accept": "application/vnd.pypi.simple.v1+json",
                "Accept-Encoding": "gzip",
            }
            _, headers, body = _get(conn, "/simple/mate/", json_accept)
            assert headers["Content-Encoding"] == "gzip"
            json_page = corp.root / "simple" / "mate" / "index.json"
            assert gzip.decompress(body) == json_page.read_bytes()

            status, headers, body = _get(
                conn, f"/files/{wheel.name}.metadata", {"Accept-Encoding": "gzip"}
            )
            assert (status, headers["Content-Encoding"], headers["Vary"]) == (
                200,
                "gzip",
                "Accept-Encoding",
            )
            assert gzip.decompress(body) == metadata.read_bytes()
            status, headers, body = _get(
                conn,
                f"/files/{wheel.name}.metadata",
                {"Accept-Encoding": "gzip", "Range": "bytes=0-9"},
            )
            assert (status, headers["Content-Encoding"], body) == (
                206,
                None,
                metadata.read_bytes()[:10],
            )

            status, headers, body = _get(conn, f"/files/{wheel.name}", {"Accept-Encoding": "gzip"})
            assert (status, headers["Content-Encoding"], headers["Vary"]) == (200, None, None)
            assert body == wheel.read_bytes()
        finally:
            conn.close()
    # http.client sends "Accept-Encoding: identity" unless told otherwise
    assert corp.encodings("/simple/mate/")[:3] == ["identity", "gzip", "gzip"]
    assert corp.encodings(lambda p: p.endswith(".metadata")) == ["gzip", "gzip"]


# ----------------------------------------------------------------------------- trickle


def test_a_trickled_head_arrives_piece_by_piece(corp: IndexServer, authority: Authority) -> None:
    (corp.root / "files" / "tiny.txt").write_bytes(b"0123456789")
    corp.trickle("/files/tiny", 400, head=True)  # 40 bytes a tenth of a second, head and all
    context = client_context(authority.ca_file)
    with (
        ForwardProxy(hosts={NAME: ("127.0.0.1", corp.port)}) as proxy,
        socket.create_connection(("127.0.0.1", proxy.port), timeout=0.5) as raw,  # per read
        context.wrap_socket(_connected(raw, f"{NAME}:{corp.port}"), server_hostname=NAME) as tls,
    ):
        tls.sendall(f"GET /files/tiny.txt HTTP/1.1\r\nHost: {NAME}\r\n\r\n".encode())
        first = tls.recv(1 << 16)  # the tunnel passes each piece on as it comes
        assert first.startswith(b"HTTP/1.1 200 OK\r\n")
        assert len(first) <= 40
        assert b"\r\n\r\n" not in first
        answer = first
        while not answer.endswith(b"\r\n\r\n0123456789"):  # no read times out on the way
            piece = tls.recv(1 << 16)
            assert piece
            answer += piece
    assert answer.count(b"\r\n\r\n") == 1
    assert b"\r\nContent-Length: 10\r\n" in answer


def test_a_trickle_ends_when_the_client_hangs_up(tmp_path: Path) -> None:
    with IndexServer(tmp_path / "index") as server:
        (server.root / "files").mkdir(parents=True)
        (server.root / "files" / "slow.bin").write_bytes(b"x" * 100)
        server.trickle("/files/", 0.1)  # a byte, then ten seconds until the next
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /files/slow.bin HTTP/1.1\r\nHost: h\r\n\r\n")
            received = b""
            while not received.endswith(b"\r\n\r\nx"):
                received += sock.recv(1 << 16)
            assert _eventually(lambda: server.open_connections == 1)
        assert _eventually(lambda: server.open_connections == 0)
        assert server.bytes_sent == {"/files/slow.bin": 1}


def test_stop_ends_trickles_and_tunnels(corp: IndexServer, authority: Authority) -> None:
    before = set(threading.enumerate())
    (corp.root / "files" / "slow.bin").write_bytes(b"x" * 100)
    corp.trickle("/files/slow", 0.1, head=True)
    proxy = ForwardProxy(hosts={NAME: ("127.0.0.1", corp.port)}).start()
    context = client_context(authority.ca_file)
    with (
        socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as raw,
        context.wrap_socket(_connected(raw, f"{NAME}:{corp.port}"), server_hostname=NAME) as tls,
    ):
        tls.sendall(f"GET /files/slow.bin HTTP/1.1\r\nHost: {NAME}\r\n\r\n".encode())
        assert tls.recv(1) == b"H"  # the head, a byte every ten seconds
        assert (proxy.open_connections, corp.open_connections) == (1, 1)
        corp.stop()
        proxy.stop()
        try:
            rest = tls.recv(1 << 16)
        except OSError:  # an SSLError too: the tunnel ended without a close_notify
            rest = b""
        assert rest == b""
    started = [t for t in threading.enumerate() if t not in before]
    for thread in started:
        thread.join(10)  # a hang guard, not a timing
    assert [t for t in started if t.is_alive()] == []
    assert (proxy.open_connections, corp.open_connections) == (0, 0)
