"""The HTTP transport against a real HTTP/1.1 server on 127.0.0.1: retries with backoff, a
bounded timeout, redirects checked hop by hop, credentials kept to their origin, streaming,
and keep-alive across unread answers."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

from core.errors import TransportError, UsageError
from core.transport import OriginAuth, RetryPolicy, Transport, basic_auth

BODY = b"x" * 100_000


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like real servers
    failures_left: ClassVar[int] = 0
    retry_after: ClassVar[str | None] = None
    seen: ClassVar[list[tuple[str, str, str]]] = []  # (method, path, Authorization)
    connections: ClassVar[set[int]] = set()
    agents: ClassVar[list[str]] = []  # the User-Agent of every request

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self) -> None:
        type(self).connections.add(self.client_address[1])
        type(self).seen.append((self.command, self.path, self.headers.get("Authorization", "")))
        type(self).agents.append(self.headers.get("User-Agent", ""))
        length = int(self.headers.get("Content-Length", "0"))
        received = self.rfile.read(length) if length else b""
        if self.path == "/flaky" and type(self).failures_left > 0:
            type(self).failures_left -= 1
            after = type(self).retry_after
            headers = {"Retry-After": after} if after else {}
            self._send(503, b"busy", headers)
        elif self.path in ("/flaky", "/ok"):
            self._send(200, b"fine")
        elif self.path == "/big":
            self._send(200, BODY)
        elif self.path == "/slow":
            time.sleep(1.0)
            try:
                self._send(200, b"late")
            except OSError:  # the client gave up, as it should
                self.close_connection = True
        elif self.path == "/echo":
            self._send(200, received)
        elif self.path == "/not-modified":
            self._send(304)
        elif self.path == "/missing":
            self._send(404, b"no such thing" * 100)
        elif self.path.startswith("/to/"):
            self._send(302, b"", {"Location": self.path.removeprefix("/to")})
        elif self.path == "/see-other":
            self._send(303, b"", {"Location": "/echo"})
        elif self.path == "/loop":
            self._send(302, b"", {"Location": "/loop"})
        elif self.path.startswith("/away"):
            port = self.path.removeprefix("/away")
            self._send(302, b"", {"Location": f"http://127.0.0.1:{port}/ok"})
        else:
            self._send(404)

    do_GET = do_HEAD = do_POST = do_PUT = _handle

    def log_message(self, *_args: object) -> None:
        pass


def _serve() -> tuple[http.server.ThreadingHTTPServer, str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.failures_left = 0
    _Handler.retry_after = None
    _Handler.seen = []
    _Handler.agents = []
    _Handler.connections = set()
    httpd, url = _serve()
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def other_server() -> Iterator[str]:
    httpd, url = _serve()
    try:
        yield url
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_503_is_retried_with_backoff_then_succeeds(server: str) -> None:
    _Handler.failures_left = 2
    sleeps: list[float] = []
    with (
        Transport(timeout=5, sleep=sleeps.append) as http,
        http.request("GET", f"{server}/flaky", retry=RetryPolicy(attempts=4, backoff=0.5)) as r,
    ):
        assert (r.status, r.content) == (200, b"fine")
    assert sleeps == [0.5, 1.0]
    assert [p for _, p, _ in _Handler.seen] == ["/flaky"] * 3


def test_retry_after_wins_over_the_backoff_unless_the_policy_ignores_it(server: str) -> None:
    _Handler.failures_left, _Handler.retry_after = 1, "7"
    sleeps: list[float] = []
    with Transport(timeout=5, sleep=sleeps.append) as http:
        http.request("GET", f"{server}/flaky", retry=RetryPolicy(attempts=2)).close()
        _Handler.failures_left = 1
        policy = RetryPolicy(attempts=2, backoff=2.0, max_delay=30.0, retry_after=False)
        http.request("GET", f"{server}/flaky", retry=policy).close()
    assert sleeps == [7.0, 2.0]


def test_when_the_attempts_are_spent_the_last_answer_is_returned(server: str) -> None:
    _Handler.failures_left = 5
    sleeps: list[float] = []
    with (
        Transport(timeout=5, sleep=sleeps.append) as http,
        http.request("GET", f"{server}/flaky", retry=RetryPolicy(attempts=3)) as r,
    ):
        assert r.status == 503
    assert sleeps == [0.5, 1.0]  # no sleep after the last attempt


def test_a_404_is_returned_at_once(server: str) -> None:
    with (
        Transport(timeout=5, sleep=lambda s: pytest.fail(f"slept {s}")) as http,
        http.request("GET", f"{server}/missing", retry=RetryPolicy(attempts=3)) as r,
    ):
        assert r.status == 404
    assert len(_Handler.seen) == 1


def test_a_refused_connection_is_retried_then_raised() -> None:
    sleeps: list[float] = []
    with Transport(timeout=5, sleep=sleeps.append) as http, pytest.raises(TransportError) as exc:
        http.request("GET", "http://127.0.0.1:9/x", retry=RetryPolicy(attempts=2, backoff=0.1))
    assert exc.value.kind == "connect"
    assert exc.value.name == "NewConnectionError"
    assert "refused" in exc.value.detail.lower()
    assert exc.value.message.startswith("GET http://127.0.0.1:9/x: NewConnectionError: ")
    assert sleeps == [0.1]


def test_the_timeout_is_bounded(server: str) -> None:
    # /slow answers after a second: the read timeout of this request ends it first
    with Transport(timeout=5) as http, pytest.raises(TransportError) as exc:
        http.request("GET", f"{server}/slow", timeout=0.2)
    assert exc.value.kind == "timeout"
    assert exc.value.name == "ReadTimeoutError"


def test_every_hop_is_checked_and_a_refusal_stops_the_request(server: str) -> None:
    hops: list[str] = []

    def check(url: str) -> None:
        hops.append(url)
        if url == f"{server}/ok":
            raise UsageError(f"{url}: refused")

    with Transport(timeout=5) as http, pytest.raises(UsageError) as exc:
        http.request("GET", f"{server}/to/ok", check_hop=check)
    assert exc.value.message == f"{server}/ok: refused"
    assert hops == [f"{server}/to/ok", f"{server}/ok"]
    assert [p for _, p, _ in _Handler.seen] == ["/to/ok"]  # the refused hop was not requested


def test_redirects_are_followed_to_the_final_url(server: str) -> None:
    with Transport(timeout=5) as http, http.request("GET", f"{server}/to/ok") as r:
        assert (r.status, r.url, r.content) == (200, f"{server}/ok", b"fine")


def test_a_redirect_loop_is_bounded(server: str) -> None:
    with Transport(timeout=5) as http, pytest.raises(TransportError) as exc:
        http.request("GET", f"{server}/loop", max_redirects=3)
    assert exc.value.kind == "redirects"
    assert exc.value.message == f"GET {server}/loop redirected more than 3 times"
    assert len(_Handler.seen) == 4


def test_a_303_turns_a_post_into_a_get_without_the_body(server: str) -> None:
    with (
        Transport(timeout=5) as http,
        http.request("POST", f"{server}/see-other", body=b"payload") as r,
    ):
        assert (r.status, r.content) == (200, b"")
    assert [(m, p) for m, p, _ in _Handler.seen] == [("POST", "/see-other"), ("GET", "/echo")]


def test_credentials_go_to_their_origin_only(server: str, other_server: str) -> None:
    auth = OriginAuth(origin=server, headers={"Authorization": basic_auth("bot", "s3cret")})
    port = other_server.rsplit(":", 1)[1]
    with Transport(timeout=5) as http:
        http.request("GET", f"{server}/to/ok", auth=auth).close()
        http.request("GET", f"{server}/away{port}", auth=auth).close()
    assert [(p, a != "") for _, p, a in _Handler.seen] == [
        ("/to/ok", True),
        ("/ok", True),
        (f"/away{port}", True),
        ("/ok", False),  # on the other server: a redirect to another origin gets nothing
    ]
    assert _Handler.seen[0][2] == "Basic Ym90OnMzY3JldA=="


def test_query_and_body_and_user_agent(server: str) -> None:
    with (
        Transport(timeout=5, user_agent="probe/1") as http,
        http.request("PUT", f"{server}/echo", body=b"abc", query={"a": "b:c", "d": "e"}) as r,
    ):
        assert r.status == 404  # the path carries the query
    assert _Handler.seen == [("PUT", "/echo?a=b%3Ac&d=e", "")]
    assert _Handler.agents == ["probe/1"]


def test_a_caller_header_never_drops_the_user_agent(server: str) -> None:
    with Transport(timeout=5, user_agent="probe/2") as http:
        http.request("GET", f"{server}/ok", headers={"Accept": "text/html"}).close()
        http.request("GET", f"{server}/ok").close()
    assert _Handler.agents == ["probe/2", "probe/2"]


def test_streaming_reads_the_body_in_chunks(server: str) -> None:
    with (
        Transport(timeout=5) as http,
        http.request("GET", f"{server}/big", stream=True) as r,
    ):
        chunks = list(r.iter_bytes(16_384))
    assert b"".join(chunks) == BODY
    assert len(chunks) > 1


def test_unread_answers_keep_the_connection_alive(server: str) -> None:
    with Transport(timeout=5, connections=1) as http:
        for _ in range(3):
            http.request("GET", f"{server}/not-modified", stream=True).close()  # never read
            http.request("GET", f"{server}/missing", stream=True).close()  # never read
            with http.request("GET", f"{server}/ok") as r:
                assert r.content == b"fine"
    assert len(_Handler.connections) == 1


class _EventStream(http.server.BaseHTTPRequestHandler):
    """A chunked event stream whose second event waits until the client has the first."""

    protocol_version = "HTTP/1.1"
    first_read = threading.Event()
    waited: ClassVar[list[bool]] = []

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i, event in enumerate((b"data: 1\n\n", b"data: 2\n\n")):
            if i:
                type(self).waited.append(type(self).first_read.wait(timeout=10))
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


def test_an_eager_stream_hands_over_each_event_as_it_arrives() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _EventStream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/events"
        with Transport(timeout=20) as transport, transport.request("GET", url, stream=True) as resp:
            pieces = resp.iter_bytes(65536, eager=True)
            first = next(pieces)
            _EventStream.first_read.set()  # only now does the server send the second event
            rest = b"".join(pieces)
    finally:
        server.shutdown()
        server.server_close()
    assert (first, rest) == (b"data: 1\n\n", b"data: 2\n\n")
    assert _EventStream.waited == [True]  # the server did not give up waiting for the client


def test_connections_opened_together_look_their_host_up_once(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import core.transport

    lookups: list[str] = []
    getaddrinfo = socket.getaddrinfo

    def counted(host: str, *args: object, **kwargs: object) -> object:
        lookups.append(host)
        time.sleep(0.1)  # a slow resolver: the threads asking meanwhile wait for this answer
        return getaddrinfo(host, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(socket, "getaddrinfo", counted)
    monkeypatch.setattr(core.transport, "_resolved", {})
    url = server.replace("127.0.0.1", "localhost") + "/ok"
    with Transport(timeout=5, connections=8) as http, ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: http.request("GET", url).content, range(8)))
    assert answers == [b"fine"] * 8
    assert len(_Handler.connections) > 1  # several connections, one lookup
    assert [h for h in lookups if h == "localhost"] == ["localhost"]
