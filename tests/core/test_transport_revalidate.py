"""A burst of conditional GETs (``Transport.revalidate``) against a real HTTP/1.1 server on
127.0.0.1: each 304 is read (its head only), every other answer is left to ``request``
(its body never read), connections are kept alive and reused, and a proxy, a cancel or a
server that does not answer send the work back to ``request`` instead of failing it."""

from __future__ import annotations

import http.server
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from core.transport import Conditional, Deadline, NotModified, Transport
from tests.support.http_handlers import serving


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[tuple[int, str, str]]] = []  # (client port, path, If-None-Match)

    def do_GET(self) -> None:
        etag = self.headers.get("If-None-Match", "")
        type(self).seen.append((self.client_address[1], self.path, etag))
        if self.path == "/hang":
            time.sleep(2)
            return
        if self.path == "/moved":
            self._answer(301, {"Location": "/same"})
        elif self.path in ("/same", "/fresh", "/close") and etag == '"v1"':
            headers = {"ETag": '"v1"'}
            if self.path == "/fresh":
                headers["Cache-Control"] = "max-age=600"
            if self.path == "/close":
                headers["Connection"] = "close"
                self.close_connection = True
            self._answer(304, headers, None)
        else:
            self._answer(200, {"ETag": '"v2"'}, b"x" * 200_000)

    def _answer(self, code: int, headers: dict[str, str], body: bytes | None = b"") -> None:
        """``body`` None: no body and no Content-Length (a 304)."""
        self.send_response(code)
        for key, value in headers.items():
            self.send_header(key, value)
        if body is not None:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    with serving(_Handler) as url:
        yield url


def _asked(base: str, *paths: str) -> list[Conditional]:
    return [Conditional(f"{base}{p}", {"If-None-Match": '"v1"'}) for p in paths]


def test_each_304_is_read_and_every_other_answer_left_to_request(server: str) -> None:
    with Transport(timeout=5) as t:
        got = t.revalidate(_asked(server, "/same", "/changed", "/moved", "/fresh"), connections=1)
    assert got == [NotModified(None), None, None, NotModified("max-age=600")]
    # one request each: the redirect was not followed, the 200's body never read, and the
    # connection it left half read not used again (a new one asked for the rest)
    assert sorted(path for _, path, _ in _Handler.seen) == ["/changed", "/fresh", "/moved", "/same"]
    assert all(etag == '"v1"' for _, _, etag in _Handler.seen)


def test_connections_are_kept_alive_and_shared_by_the_requests(server: str) -> None:
    with Transport(timeout=5) as t:
        got = t.revalidate(_asked(server, *["/same"] * 12), connections=3)
    assert got == [NotModified(None)] * 12
    assert len(_Handler.seen) == 12
    assert len({port for port, _, _ in _Handler.seen}) == 3


def test_a_server_that_closes_after_each_answer_gets_a_connection_for_each(server: str) -> None:
    with Transport(timeout=5) as t:
        got = t.revalidate(_asked(server, *["/close"] * 3), connections=1)
    assert got == [NotModified(None)] * 3  # never sent on a connection the server closed
    assert len({port for port, _, _ in _Handler.seen}) == 3


def test_a_server_that_does_not_answer_leaves_its_request_to_request(server: str) -> None:
    with Transport(timeout=0.5) as t:
        got = t.revalidate(_asked(server, "/hang", "/same"), connections=2)
    assert got == [None, NotModified(None)]


def test_nothing_is_sent_through_a_proxy_or_after_a_cancel(server: str) -> None:
    with Transport(timeout=5, proxy="http://127.0.0.1:9") as t:
        assert t.revalidate(_asked(server, "/same", "/same"), connections=2) == [None, None]
    deadline = Deadline(30)
    deadline.cancel()
    with Transport(timeout=5, deadline=deadline) as t:
        assert t.revalidate(_asked(server, "/same"), connections=2) == [None]
    assert _Handler.seen == []


def test_an_http_host_gets_its_connections_at_once(server: str) -> None:
    with Transport(timeout=5) as t:
        assert (
            t.revalidate(_asked(server, *["/same"] * 40), connections=40)
            == [NotModified(None)] * 40
        )
    assert len({port for port, _, _ in _Handler.seen}) > 16  # not the 16 of an https host


def test_a_header_that_could_end_its_line_is_never_sent(server: str) -> None:
    forged = Conditional(f"{server}/same", {"If-None-Match": '"v1"\r\nX-Smuggled: 1'})
    with Transport(timeout=5) as t:
        got = t.revalidate([forged, *_asked(server, "/same")], connections=2)
    assert got == [None, NotModified(None)]  # the forged one is left to request
    assert [path for _, path, _ in _Handler.seen] == ["/same"]
