"""A forward HTTP proxy on 127.0.0.1 for tests: the only road to a "corporate" index.

``ForwardProxy`` resolves host names through its own ``hosts`` map and nothing else. A
``.test`` name never resolves in DNS (RFC 6761), so an index at ``index.corp.test`` is
reachable through the proxy only, as behind a corporate firewall::

    authority = make_authority(tmp_path / "ca")                     # testbed.tls
    cert = authority.issue("index", ["index.corp.test"])
    with (
        IndexServer(root, tls=cert, host="index.corp.test") as index,
        ForwardProxy(
            hosts={"index.corp.test": ("127.0.0.1", index.port)}, auth=("user", "p@ss")
        ) as proxy,
    ):
        env = {"HTTPS_PROXY": proxy.url_with("user", "p@ss"), "SSL_CERT_FILE": str(cert.ca_file)}
        ...                                          # a client locks from index.simple_url
        proxy.requests       # [ProxyRequest("CONNECT", "index.corp.test:PORT", True, {...}), ...]

It answers ``CONNECT host:port`` with ``200 Connection Established`` and then tunnels bytes
both ways (HTTPS through a proxy), passing on each side's end of stream to the other, until
both sides have closed. It forwards absolute-form plain HTTP requests (``GET
http://host:port/path HTTP/1.1``) to the target in origin form on a fresh upstream connection
(``Connection: close``, hop-by-hop and ``Proxy-*`` headers dropped) and relays the answer by
its framing (Content-Length, chunked, or until close); the client's connection is kept alive
when the answer's end is known.

A host not in ``hosts`` is a ``502 Bad Gateway`` (and so is an upstream that refuses), unless
``allow_loopback=True`` and the host is a literal loopback IP address (``127.0.0.1``,
``[::1]``). With ``auth=(user, password)`` a request without ``Proxy-Authorization: Basic``
for exactly those gets ``407`` with ``Proxy-Authenticate: Basic realm="proxy"``; the
connection stays open for the retry. Every request is recorded (``requests``), authorized or
not. One thread per client connection (daemon, at most ``max_connections``; more get a
``503``); ``stop()`` shuts the open tunnels and connections down and joins the threads.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http
import ipaddress
import selectors
import socket
import threading
import time
from collections.abc import Mapping
from typing import NamedTuple
from urllib.parse import quote, urlsplit

from testbed.http_rules import Headers
from testbed.lifetime import Served

__all__ = ["ForwardProxy", "ProxyRequest"]

_CHUNK = 1 << 16
_MAX_LINE = 1 << 16
_MAX_HEADERS = 200
# hop-by-hop headers (RFC 9110 7.6.1) and the proxy's own: never forwarded
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)


class ProxyRequest(NamedTuple):
    """One request as the proxy saw it."""

    method: str
    target: str  # "host:port" for CONNECT, the absolute URL otherwise (as sent)
    authorized: bool  # True too when the proxy asks for no credentials
    headers: Headers


class _BadMessage(ValueError):
    """The client (or the upstream) sent something that is not HTTP/1.x."""


class _Stream:
    """A socket with a read buffer: lines and counted bytes for the heads and bodies of HTTP."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._buffer = bytearray()

    def read_line(self) -> bytes:
        """One line with its line end; b"" at the end of the stream."""
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line
            if len(self._buffer) > _MAX_LINE:
                raise _BadMessage("line too long")
            data = self.sock.recv(_CHUNK)
            if not data:
                line = bytes(self._buffer)
                self._buffer.clear()
                return line
            self._buffer += data

    def read_some(self, limit: int = _CHUNK) -> bytes:
        """Up to ``limit`` bytes (buffered first); b"" at the end of the stream."""
        if self._buffer:
            data = bytes(self._buffer[:limit])
            del self._buffer[:limit]
            return data
        return self.sock.recv(min(limit, _CHUNK))

    def take_buffer(self) -> bytes:
        data = bytes(self._buffer)
        self._buffer.clear()
        return data


class _Head(NamedTuple):
    start: str  # the request or status line
    fields: list[tuple[str, str]]  # as sent, in order
    headers: Headers  # by lower-case name (the last of repeated ones)


def _read_head(stream: _Stream) -> _Head | None:
    """A message's start line and header fields; None when the stream ends before one."""
    line = stream.read_line()
    while line in (b"\r\n", b"\n"):  # RFC 9112 2.2: ignore empty lines before a request
        line = stream.read_line()
    if not line:
        return None
    start = line.decode("latin-1").strip()
    fields: list[tuple[str, str]] = []
    while True:
        line = stream.read_line()
        if not line:
            raise _BadMessage("the head ended early")
        if line in (b"\r\n", b"\n"):
            break
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise _BadMessage(f"not a header field: {line!r}")
        fields.append((name, value.strip()))
        if len(fields) > _MAX_HEADERS:
            raise _BadMessage("too many header fields")
    headers = Headers((name.lower(), value) for name, value in fields)
    return _Head(start, fields, headers)


def _tokens(value: str | None) -> set[str]:
    """The comma-separated tokens of a header such as Connection, lower-case."""
    return {t.strip().lower() for t in (value or "").split(",") if t.strip()}


def _split_authority(target: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` as (host, port)."""
    host, colon, port_text = target.rpartition(":")
    if not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _BadMessage(f"not host:port: {target!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port_text)


class ForwardProxy(Served):
    """A threaded forward HTTP proxy on 127.0.0.1 (CONNECT tunnels, absolute-form HTTP)."""

    def __init__(
        self,
        hosts: Mapping[str, tuple[str, int]] | None = None,
        *,
        auth: tuple[str, str] | None = None,
        allow_loopback: bool = False,
        port: int = 0,
        max_connections: int = 64,
        timeout: float = 30.0,
    ) -> None:
        """``hosts`` maps a host name (or ``name:port``, looked up first) to the address the
        proxy connects to for it; ``timeout`` bounds each read and an idle tunnel."""
        self.hosts: dict[str, tuple[str, int]] = {k.lower(): v for k, v in (hosts or {}).items()}
        self.auth = auth
        self.allow_loopback = allow_loopback
        self.requested_port = port  # 0: a free one
        self.max_connections = max_connections
        self.timeout = timeout
        self._lock = threading.Lock()
        self._requests: list[ProxyRequest] = []
        self._sockets: set[socket.socket] = set()  # clients and upstreams, to shut at stop()
        self._threads: set[threading.Thread] = set()
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._accepter: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ForwardProxy:
        if self._listener is not None:
            raise RuntimeError("ForwardProxy already started")
        self._stopping.clear()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", self.requested_port))
            listener.listen(128)
            listener.settimeout(0.05)  # the accept loop looks at _stopping this often
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._accepter = threading.Thread(
            target=self._accept_loop, args=(listener,), name="forward-proxy-accept", daemon=True
        )
        self._accepter.start()
        return self

    def stop(self) -> None:
        """Stop accepting, shut every open connection and tunnel down, join the threads."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        with self._lock:
            self._stopping.set()
            sockets = list(self._sockets)
        if self._accepter is not None:
            self._accepter.join(5)
            self._accepter = None
        listener.close()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        deadline = time.monotonic() + 2.0
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def port(self) -> int:
        if self._listener is None:
            raise RuntimeError("ForwardProxy is not running")
        return int(self._listener.getsockname()[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.port}"

    def url_with(self, user: str, password: str) -> str:
        """``http://USER:PASSWORD@127.0.0.1:PORT``, both percent-encoded (``p@ss``: ``p%40ss``)."""
        return f"http://{quote(user, safe='')}:{quote(password, safe='')}@127.0.0.1:{self.port}"

    def route(self, name: str, address: tuple[str, int]) -> None:
        """Send requests for host ``name`` (or ``name:port``) to ``address`` from now on."""
        with self._lock:
            self.hosts[name.lower()] = address

    # ------------------------------------------------------------------ requests seen

    @property
    def requests(self) -> list[ProxyRequest]:
        """A snapshot of the requests seen so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    @property
    def open_connections(self) -> int:
        """How many client connections the proxy holds open now."""
        with self._lock:
            return len(self._threads)

    # ------------------------------------------------------------------ connections

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:  # out of descriptors, or the listener is closing
                self._stopping.wait(0.05)
                continue
            client.settimeout(self.timeout)
            with self._lock:
                busy = len(self._threads) >= self.max_connections or self._stopping.is_set()
                if not busy:
                    thread = threading.Thread(
                        target=self._serve, args=(client,), name="forward-proxy", daemon=True
                    )
                    self._threads.add(thread)
            if busy:
                with contextlib.suppress(OSError):
                    client.sendall(_reply_bytes(503, close=True))
                client.close()
                continue
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        try:
            with client:
                if self._track(client):
                    with contextlib.suppress(OSError, _BadMessage):
                        self._serve_requests(_Stream(client))
                    self._untrack(client)
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def _serve_requests(self, stream: _Stream) -> None:
        client = stream.sock
        while not self._stopping.is_set():
            try:
                head = _read_head(stream)
            except _BadMessage:
                client.sendall(_reply_bytes(400, close=True))
                return
            if head is None:
                return
            parts = head.start.split()
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                client.sendall(_reply_bytes(400, close=True))
                return
            method, target, version = parts
            authorized = self._authorized(head.headers.get("proxy-authorization"))
            with self._lock:
                self._requests.append(ProxyRequest(method, target, authorized, head.headers))
            keep_alive = version == "HTTP/1.1" and "close" not in _tokens(
                head.headers.get("connection")
            )
            body = b"" if method == "CONNECT" else _read_body(stream, head.headers)
            if body is None:  # a chunked request body: not for this proxy
                client.sendall(_reply_bytes(411, close=True))
                return
            if not authorized:
                client.sendall(
                    _reply_bytes(
                        407,
                        close=not keep_alive,
                        extra={"Proxy-Authenticate": 'Basic realm="proxy"'},
                    )
                )
            elif method == "CONNECT":
                keep_alive = self._connect(stream, target, keep_alive=keep_alive)
            else:
                keep_alive = self._forward(client, head, body, keep_alive=keep_alive)
            if not keep_alive:
                return

    # ------------------------------------------------------------------ CONNECT

    def _connect(self, stream: _Stream, target: str, *, keep_alive: bool) -> bool:
        """Open a tunnel to ``target`` and relay it until it ends (then False); when it cannot
        be opened, answer so and return True if the connection can carry another request."""
        client = stream.sock
        try:
            host, port = _split_authority(target)
        except _BadMessage:
            client.sendall(_reply_bytes(400, close=not keep_alive))
            return keep_alive
        upstream = self._open(host, port)
        if upstream is None:
            client.sendall(_reply_bytes(502, close=not keep_alive))
            return keep_alive
        with upstream:
            if not self._track(upstream):
                return False
            try:
                client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                pending = stream.take_buffer()  # what the client sent early (a ClientHello)
                if pending:
                    upstream.sendall(pending)
                self._tunnel(client, upstream)
            finally:
                self._untrack(upstream)
        return False

    def _tunnel(self, client: socket.socket, upstream: socket.socket) -> None:
        """Relay bytes both ways; one side's end of stream becomes a shutdown of the other's
        write side; done when both have ended, on an error, when idle for ``timeout``, or
        at stop()."""
        other = {client.fileno(): upstream, upstream.fileno(): client}
        idle_since = time.monotonic()
        with selectors.DefaultSelector() as selector:
            selector.register(client, selectors.EVENT_READ, client)
            selector.register(upstream, selectors.EVENT_READ, upstream)
            sending = 2
            while sending and not self._stopping.is_set():
                events = selector.select(0.1)
                if not events:
                    if time.monotonic() - idle_since > self.timeout:
                        return
                    continue
                idle_since = time.monotonic()
                for key, _ in events:
                    source: socket.socket = key.data
                    sink = other[source.fileno()]
                    data = source.recv(_CHUNK)
                    if data:
                        sink.sendall(data)
                        continue
                    selector.unregister(source)
                    sending -= 1
                    with contextlib.suppress(OSError):
                        sink.shutdown(socket.SHUT_WR)

    # ------------------------------------------------------------------ plain HTTP

    def _forward(
        self, client: socket.socket, head: _Head, body: bytes, *, keep_alive: bool
    ) -> bool:
        """Send an absolute-form request to its target in origin form and relay the answer;
        True when the client's connection can carry another request."""
        target = head.start.split()[1]
        try:
            url = urlsplit(target)
            host, port = url.hostname, url.port or 80
        except ValueError:  # a bad port or IPv6 literal
            host, port = None, 0
        if not host or not target.lower().startswith("http://"):  # https:// wants CONNECT
            client.sendall(_reply_bytes(400, close=not keep_alive))
            return keep_alive
        upstream = self._open(host, port)
        if upstream is None:
            client.sendall(_reply_bytes(502, close=not keep_alive))
            return keep_alive
        with upstream:
            if not self._track(upstream):
                return False
            try:
                return self._exchange(client, upstream, head, body, keep_alive=keep_alive)
            finally:
                self._untrack(upstream)

    def _exchange(
        self,
        client: socket.socket,
        upstream: socket.socket,
        head: _Head,
        body: bytes,
        *,
        keep_alive: bool,
    ) -> bool:
        method, target, _ = head.start.split()
        url = urlsplit(target)
        drop = _HOP_BY_HOP | _tokens(head.headers.get("connection"))
        lines = [f"{method} {(url.path or '/') + (f'?{url.query}' if url.query else '')} HTTP/1.1"]
        if "host" not in head.headers:
            lines.append(f"Host: {url.netloc.rpartition('@')[2]}")
        lines += [f"{name}: {value}" for name, value in head.fields if name.lower() not in drop]
        lines += ["Connection: close", "", ""]
        upstream.sendall("\r\n".join(lines).encode("latin-1") + body)

        reply = _Stream(upstream)
        try:
            answer = _read_head(reply)
            while answer is not None and _status(answer) in range(100, 200):
                answer = _read_head(reply)  # 1xx interim answers: not passed on
        except _BadMessage:
            answer = None
        if answer is None:
            client.sendall(_reply_bytes(502, close=not keep_alive))
            return keep_alive
        status = _status(answer)
        framing = "close"
        if method == "HEAD" or status in (204, 304):
            framing = "none"
        elif "chunked" in _tokens(answer.headers.get("transfer-encoding")):
            framing = "chunked"
        elif (answer.headers.get("content-length") or "").strip().isdigit():
            framing = "length"
        keep_alive = keep_alive and framing != "close"
        hop = {"connection", "keep-alive", "proxy-connection"} | _tokens(
            answer.headers.get("connection")
        )
        out = [answer.start]
        out += [f"{name}: {value}" for name, value in answer.fields if name.lower() not in hop]
        out += [f"Connection: {'keep-alive' if keep_alive else 'close'}", "", ""]
        client.sendall("\r\n".join(out).encode("latin-1"))
        if framing == "length":
            return _relay(reply, client, int(answer.headers["content-length"])) and keep_alive
        if framing == "chunked":
            return _relay_chunked(reply, client) and keep_alive
        if framing == "close":
            while data := reply.read_some():
                client.sendall(data)
        return keep_alive

    # ------------------------------------------------------------------ internals

    def _authorized(self, header: str | None) -> bool:
        if self.auth is None:
            return True
        scheme, _, token = (header or "").strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, colon, password = decoded.partition(":")
        return bool(colon) and (user, password) == self.auth

    def _address(self, host: str, port: int) -> tuple[str, int] | None:
        """Where a request for ``host:port`` goes: the hosts map, else a loopback literal."""
        name = host.lower()
        with self._lock:
            mapped = self.hosts.get(f"{name}:{port}") or self.hosts.get(name)
        if mapped is not None:
            return mapped
        if self.allow_loopback:
            try:
                if ipaddress.ip_address(name).is_loopback:
                    return name, port
            except ValueError:
                pass
        return None

    def _open(self, host: str, port: int) -> socket.socket | None:
        """A connection to where ``host:port`` goes; None if unmapped or refused."""
        address = self._address(host, port)
        if address is None:
            return None
        try:
            upstream = socket.create_connection(address, timeout=min(self.timeout, 10.0))
        except OSError:
            return None
        upstream.settimeout(self.timeout)
        return upstream

    def _track(self, sock: socket.socket) -> bool:
        """Remember ``sock`` for stop(); False (and ``sock`` shut) when stopping already."""
        with self._lock:
            if self._stopping.is_set():
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                return False
            self._sockets.add(sock)
            return True

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.discard(sock)


def _status(head: _Head) -> int:
    parts = head.start.split(maxsplit=2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise _BadMessage(f"not a status line: {head.start!r}")
    return int(parts[1])


def _read_body(stream: _Stream, headers: Headers) -> bytes | None:
    """The request's body by its Content-Length (none: empty); None when it is chunked."""
    if "transfer-encoding" in headers:
        return None
    length_text = (headers.get("content-length") or "0").strip()
    if not length_text.isdigit() or int(length_text) > 1 << 26:
        raise _BadMessage(f"bad Content-Length: {length_text!r}")
    body = bytearray()
    left = int(length_text)
    while left > 0:
        data = stream.read_some(left)
        if not data:
            raise _BadMessage("the body ended early")
        body += data
        left -= len(data)
    return bytes(body)


def _relay(source: _Stream, sink: socket.socket, count: int) -> bool:
    """Pass ``count`` bytes on; False when the source ended early."""
    while count > 0:
        data = source.read_some(count)
        if not data:
            return False
        sink.sendall(data)
        count -= len(data)
    return True


def _relay_chunked(source: _Stream, sink: socket.socket) -> bool:
    """Pass a chunked body on as it is, through its last chunk and trailer section."""
    while True:
        line = source.read_line()
        if not line.endswith(b"\n"):
            return False
        sink.sendall(line)
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            return False
        if size == 0:
            while True:  # the trailer section, then the empty line
                line = source.read_line()
                if not line.endswith(b"\n"):
                    return False
                sink.sendall(line)
                if line in (b"\r\n", b"\n"):
                    return True
        if not _relay(source, sink, size + 2):  # the data and its CRLF
            return False


def _reply_bytes(status: int, *, close: bool, extra: Mapping[str, str] | None = None) -> bytes:
    """The proxy's own answer: ``status`` with a one-line text body."""
    phrase = http.HTTPStatus(status).phrase
    body = f"{status} {phrase}\n".encode()
    lines = [
        f"HTTP/1.1 {status} {phrase}",
        "Content-Type: text/plain",
        f"Content-Length: {len(body)}",
        *(f"{name}: {value}" for name, value in (extra or {}).items()),
        f"Connection: {'close' if close else 'keep-alive'}",
        "",
        "",
    ]
    return "\r\n".join(lines).encode("latin-1") + body
