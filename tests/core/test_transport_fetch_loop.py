"""The fetch loop of a transport (``Transport(fetch_loop=True)``) against a real HTTP/1.1
server on 127.0.0.1: plain GETs read whole are answered on the loop's one thread over
keep-alive connections, and everything it does not take (no length, chunked, too big, a
refused connection, a URL urllib3 would rewrite) goes through urllib3 with the same result
and the same errors as a transport without the loop."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

from core.errors import TransportError
from core.transport import Deadline, RetryPolicy, Transport
from tests.support.http_handlers import serving


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # (client port, path, the request's headers as (name, value) pairs)
    seen: ClassVar[list[tuple[int, str, list[tuple[str, str]]]]] = []

    def do_GET(self) -> None:
        type(self).seen.append((self.client_address[1], self.path, list(self.headers.items())))
        path = self.path.partition("?")[0]
        if path == "/hang":
            time.sleep(3)
            return
        if path == "/chunked":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"chun", b"ked"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        if path == "/unframed":  # no length: the body ends with the connection
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(b"until the end")
            self.close_connection = True
            return
        if path == "/moved":
            self._answer(301, b"", {"Location": "/page/a"})
            return
        if path == "/big":
            self._answer(200, b"x" * 5000)
            return
        if path == "/drop":  # answers, then closes without saying so
            self._answer(200, b"dropped")
            self.close_connection = True
            return
        self._answer(200, f"body of {self.path}".encode())

    def _answer(self, code: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.seen = []
    with serving(_Handler) as url:
        yield url


def _get(t: Transport, url: str, **kwargs: Any) -> tuple[int, str, bytes]:
    with t.request("GET", url, **kwargs) as resp:
        return resp.status, resp.url, resp.content


def test_plain_gets_are_read_on_the_loop_over_one_kept_alive_connection(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t:
        got = [_get(t, f"{server}/page/{i}") for i in range(5)]
        assert t.looped == 5
    assert got == [(200, f"{server}/page/{i}", f"body of /page/{i}".encode()) for i in range(5)]
    assert len({port for port, _, _ in _Handler.seen}) == 1  # one connection, kept alive


def test_the_server_sees_the_headers_urllib3_sends(server: str) -> None:
    asked = {"Accept": "application/json", "If-None-Match": '"v1"'}
    for loop in (False, True):
        with Transport(timeout=5, fetch_loop=loop) as t:
            assert _get(t, f"{server}/page/h?x=1", headers=asked)[0] == 200
            assert t.looped == (1 if loop else 0)
    without, with_loop = (sorted(headers) for _, _, headers in _Handler.seen)
    assert with_loop == without
    assert ("Accept-Encoding", "identity") in with_loop


def test_answers_the_loop_does_not_take_go_through_urllib3_whole(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t:
        assert _get(t, f"{server}/chunked") == (200, f"{server}/chunked", b"chunked")
        assert _get(t, f"{server}/unframed") == (200, f"{server}/unframed", b"until the end")
        assert t.looped == 0
    # each was sent twice: once on the loop, which handed it back on reading its head
    assert [path for _, path, _ in _Handler.seen] == ["/chunked"] * 2 + ["/unframed"] * 2


def test_urls_urllib3_would_rewrite_are_left_to_it(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t:
        for path in ("/page/a%2fb", "/page/./c", "/page/d e"):
            assert _get(t, f"{server}{path}")[0] == 200
        assert t.looped == 0
    assert [path for _, path, _ in _Handler.seen] == ["/page/a%2Fb", "/page/c", "/page/d%20e"]


def test_a_redirect_is_read_on_the_loop_and_followed(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t:
        assert _get(t, f"{server}/moved") == (200, f"{server}/page/a", b"body of /page/a")
        assert t.looped == 2


def test_a_body_past_the_limit_is_refused_as_without_the_loop(server: str) -> None:
    for loop in (False, True):
        with Transport(timeout=5, fetch_loop=loop) as t, pytest.raises(TransportError) as exc:
            t.request("GET", f"{server}/big", max_body=4096)
        assert exc.value.kind == "too-large"
        assert exc.value.message == f"GET {server}/big: the body has more than 4096 bytes"


def test_a_connection_the_server_closed_at_rest_is_replaced(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t:
        assert _get(t, f"{server}/drop")[2] == b"dropped"
        time.sleep(0.2)  # the server's close reaches the client
        assert _get(t, f"{server}/page/after")[2] == b"body of /page/after"
        assert t.looped == 2
    first, second = (port for port, _, _ in _Handler.seen)
    assert first != second


def test_a_refused_connection_fails_as_without_the_loop() -> None:
    sleeps: list[float] = []
    with (
        Transport(timeout=5, sleep=sleeps.append, fetch_loop=True) as t,
        pytest.raises(TransportError) as exc,
    ):
        t.request("GET", "http://127.0.0.1:9/x", retry=RetryPolicy(attempts=2, backoff=0.1))
    assert exc.value.kind == "connect"
    assert exc.value.name == "NewConnectionError"
    assert exc.value.message.startswith("GET http://127.0.0.1:9/x: NewConnectionError: ")
    assert sleeps == [0.1]


def test_a_read_that_makes_no_progress_times_out_once(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t, pytest.raises(TransportError) as exc:
        t.request("GET", f"{server}/hang", timeout=0.2)
    assert (exc.value.kind, exc.value.name) == ("timeout", "ReadTimeoutError")
    assert exc.value.message == f"GET {server}/hang: ReadTimeoutError: read timeout=0.2"
    assert [path for _, path, _ in _Handler.seen] == ["/hang"]  # not sent again to urllib3


def test_a_cancel_ends_a_request_waiting_on_the_loop(server: str) -> None:
    deadline = Deadline(None)
    with Transport(timeout=5, deadline=deadline, fetch_loop=True) as t:
        threading.Timer(0.2, deadline.cancel).start()
        with pytest.raises(TransportError) as exc:
            t.request("GET", f"{server}/hang")
    assert exc.value.kind == "cancelled"
    assert exc.value.message == f"GET {server}/hang: cancelled"


def test_many_threads_share_the_loop_within_the_connection_cap(server: str) -> None:
    got: dict[int, bytes] = {}

    def one(i: int) -> None:
        got[i] = _get(t, f"{server}/page/{i}")[2]

    with Transport(timeout=5, connections=4, fetch_loop=True) as t:
        threads = [threading.Thread(target=one, args=(i,)) for i in range(40)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert t.looped == 40
    assert got == {i: f"body of /page/{i}".encode() for i in range(40)}
    assert len({port for port, _, _ in _Handler.seen}) <= 4


def test_the_loop_thread_ends_when_the_transport_closes(server: str) -> None:
    with Transport(timeout=5, fetch_loop=True) as t:
        _get(t, f"{server}/page/x")
        assert "fetch" in {thread.name for thread in threading.enumerate()}
    assert "fetch" not in {thread.name for thread in threading.enumerate()}
