"""HTTP servers on 127.0.0.1 for tests: our own ``IndexServer`` and the real ``pypi-server``.

``IndexServer`` serves a directory tree (as ``tests.support.indexgen`` writes it) the way a simple
index does, and lets a test shape the answers::

    with IndexServer(root) as server:
        server.add(Listing(path=wheel, metadata=True), json=True)
        server.fail("/simple/torch/", status=503, times=2)   # two 503s, then the page
        server.delay("/files/", 2.0)                           # one slow answer
        server.drop("/files/", times=1)                        # close without answering
        server.require_auth("user", "token")                   # HTTP Basic, else 401
        server.replace("/files/x-1.0-py3-none-any.whl", other_bytes)  # a re-upload
        server.trickle("/files/", 10)                          # the body at 10 bytes a second
        server.trickle("/simple/", 10, head=True)              # the status line and headers too
        server.cut("/files/", after=1000)                      # no Content-Length, cut short
        server.break_off("/files/x.whl", after=1000)           # Content-Length, then hang up
        server.answer("/simple/x/", body, headers={"Content-Encoding": "gzip"})  # canned bytes
        server.redirect("/simple/x/", "/simple/y/", body_bytes=1 << 30)  # a 302 with a big body
        server.requests                                        # what the client sent

Directories serve ``index.json`` (as ``application/vnd.pypi.simple.v1+json``) when the
Accept header prefers PEP 691 JSON and the file exists, else ``index.html``. Every file has
an ETag (quoted sha256) and Last-Modified; ``If-None-Match`` / ``If-Modified-Since`` give
304; single byte ranges give 206 unless ``ranges=False``, and only while an ``If-Range`` still
matches the file's ETag or Last-Modified (else the whole file, 200). Nothing is logged.

``trickle``, ``cut``, ``answer`` and ``redirect`` shape the next answer to a path: the real
file sent slowly; the real file close-delimited (no ``Content-Length``, ``Connection: close``)
and hung up on after some bytes; a canned status, headers and body (a gzip bomb of a page);
a redirect whose chunked body is ``body_bytes`` long. ``break_off`` answers a request for the
whole file (no ``Range``) as usual, ``Content-Length`` included, and hangs up after some bytes
of the body: a connection dropped mid-download. ``bytes_sent`` counts the body bytes written
per (decoded) path, for a client that hangs up early or must not download twice.

With ``tls=`` (a ``tests.support.tls.ServerCert``) the server speaks HTTPS: each connection's
handshake runs in its own handler thread (a slow or failing client holds up no other, and a
failed handshake is quiet). ``host=`` is the name the server reports in its URLs (it still
listens on 127.0.0.1); the pages link to files by relative URLs, so they work under any name,
e.g. ``https://index.corp.test:PORT/simple/`` reached through a ``ForwardProxy``::

    with IndexServer(root, tls=authority.issue("index", ["index.corp.test"]),
                     host="index.corp.test", gzip=True) as server:
        server.url                                 # https://index.corp.test:PORT
        server.encodings("/simple/torch/")         # the Accept-Encoding each page GET sent

With ``gzip=True`` pages (``index.html``, ``index.json``) and ``.metadata`` files are sent
gzip-compressed to a request whose Accept-Encoding takes gzip, as nginx's ``gzip on;
gzip_vary on;`` does: ``Content-Encoding: gzip``, the compressed length, a weak ETag
(``W/"<sha256>"``) and ``Vary: Accept-Encoding`` (also on the identity answers of those files);
never for a request with ``Range``, never for wheels or sdists.

``PypiServer`` runs pypiserver 2.x (``pypi-server run``) without auth and without the
fallback redirect, so an unknown project is a 404.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import gzip as gziplib
import hashlib
import http.client
import io
import os
import select
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import IO, Literal, NamedTuple
from urllib.parse import unquote, urlsplit

from tests.support.indexgen import (
    JSON_CONTENT_TYPE,
    Listing,
    write_find_links_page,
    write_simple_index,
)
from tests.support.tls import ServerCert, server_context

__all__ = [
    "Headers",
    "IndexServer",
    "IndexServerFactory",
    "PypiServer",
    "Request",
    "find_pypi_server",
]

_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html", "text/*", "*/*")
_CONTENT_TYPES = {".html": "text/html", ".json": "application/json"}
_CHUNK = 1 << 16
_GZIP_NAMES = ("index.html", "index.json")  # and *.metadata
# poll() events of a peer that hung up (POLLRDHUP: it closed its end, Linux only)
_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


class Headers(dict[str, str]):
    """Request headers; keys are stored lower-case and looked up case-insensitively."""

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)


class Request(NamedTuple):
    """One request as the server saw it; ``path`` is the raw (percent-encoded) request target."""

    method: str
    path: str
    headers: Headers


@dataclass
class _Fault:
    kind: Literal["fail", "delay", "drop", "trickle", "cut", "break", "answer", "redirect"]
    prefix: str
    times: int
    status: int = 503
    seconds: float = 0.0
    retry_after: int | None = None
    rate: float = 0.0  # trickle: bytes a second
    after: int = 0  # cut: bytes sent before hanging up
    body: bytes = b""  # answer
    headers: dict[str, str] | None = None  # answer
    location: str = ""  # redirect
    body_bytes: int = 0  # redirect
    whole_only: bool = False  # applies to requests without a Range only
    head: bool = False  # trickle: the status line and headers too


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: IndexServer
    tls_context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, object]:
        """The accepted socket, wrapped server-side for TLS; the handshake is the handler's."""
        sock, address = super().get_request()
        if self.tls_context is None:
            return sock, address
        try:
            wrapped = self.tls_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        except BaseException:
            sock.close()
            raise
        return wrapped, address

    def handle_error(self, request: object, client_address: object) -> None:
        """Quiet: a client that hangs up mid-answer is what some tests do on purpose."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection ends after this
    _shape: _Fault | None = None  # trickle, cut or break: applied to this answer

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def handle_one_request(self) -> None:
        self._shape = None  # set by _answer for this request only
        super().handle_one_request()

    def handle(self) -> None:
        if isinstance(self.connection, ssl.SSLSocket):
            try:  # here, not in the accept loop: a slow client holds up no other
                self.connection.do_handshake()
            except (OSError, ValueError):  # not TLS, an untrusted certificate, a hang-up
                self.close_connection = True
                return
        super().handle()

    def finish(self) -> None:
        with contextlib.suppress(OSError):
            super().finish()
        self.server.owner._track(self.connection, add=False)

    def flush_headers(self) -> None:
        """Send the buffered status line and headers, at the trickle's rate if it says so."""
        shape = self._shape
        buffered: list[bytes] = getattr(self, "_headers_buffer", [])
        if shape is None or not shape.head or not buffered:
            super().flush_headers()
            return
        data = b"".join(buffered)
        self._headers_buffer: list[bytes] = []
        piece = _trickle_piece(shape.rate)
        for start in range(0, len(data), piece):
            self.wfile.write(data[start : start + piece])
            self.wfile.flush()
            if start + piece < len(data) and not self._pause(piece / shape.rate):
                self.close_connection = True
                raise ConnectionAbortedError("stopped while sending the head")

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False as soon as the server stops or the client hangs up."""
        owner = self.server.owner
        poller = select.poll()
        poller.register(self.connection.fileno(), _HANGUP)
        deadline = time.monotonic() + seconds
        while not owner._stopping.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return True
            if poller.poll(min(left, 0.05) * 1000):
                return False
        return False

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    # ------------------------------------------------------------------ answering

    def _answer(self, *, head: bool) -> None:
        owner = self.server.owner
        headers = Headers((k.lower(), v) for k, v in self.headers.items())
        owner._record(Request(self.command, self.path, headers))
        url_path = unquote(urlsplit(self.path).path)
        self._shape: _Fault | None = None  # trickle or cut: applied to the file's body
        for fault in owner._due_faults(url_path, ranged="range" in headers):
            if fault.kind == "delay":
                owner._stopping.wait(fault.seconds)
            elif fault.kind in ("trickle", "cut", "break"):
                self._shape = fault
            elif fault.kind == "answer":
                self._send_canned(fault, head=head)
                return
            elif fault.kind == "redirect":
                self._send_redirect(fault, head=head)
                return
            elif fault.kind == "drop":
                self.close_connection = True
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)
                return
            else:
                extra = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
                self._send_simple(fault.status, b"injected failure\n", head=head, extra=extra)
                return
        if not owner._authorized(headers.get("authorization")):
            self._send_simple(
                401, b"unauthorized\n", head=head, extra={"WWW-Authenticate": 'Basic realm="index"'}
            )
            return
        try:
            with owner._lock:  # replace() swaps files under this lock
                target = owner._resolve(url_path)
        except PermissionError:
            self._send_simple(403, b"forbidden\n", head=head)
            return
        if target is None:
            self._send_simple(404, b"not found\n", head=head)
            return
        if target.is_dir():
            if not url_path.endswith("/"):
                location = urlsplit(self.path).path + "/"
                self._send_simple(301, b"", head=head, extra={"Location": location})
                return
            self._send_directory(target, head=head)
            return
        self._send_file(
            target, _CONTENT_TYPES.get(target.suffix, "application/octet-stream"), head=head
        )

    def _send_directory(self, directory: Path, *, head: bool) -> None:
        owner = self.server.owner
        as_json = (
            owner.json
            and (directory / "index.json").is_file()
            and _prefers_json(self.headers.get("Accept"))
        )
        if as_json:
            self._send_file(directory / "index.json", JSON_CONTENT_TYPE, head=head, vary=True)
        elif (directory / "index.html").is_file():
            self._send_file(directory / "index.html", "text/html", head=head, vary=True)
        else:
            self._send_simple(404, b"no index here\n", head=head)

    def _send_file(self, path: Path, content_type: str, *, head: bool, vary: bool = False) -> None:
        owner = self.server.owner
        try:
            fh = path.open("rb")
        except OSError:
            self._send_simple(404, b"not found\n", head=head)
            return
        with fh:
            stat = os.fstat(fh.fileno())
            etag = owner._etag(fh, stat)
            size = stat.st_size
            common = {
                "ETag": etag,
                "Last-Modified": email.utils.formatdate(stat.st_mtime, usegmt=True),
            }
            if owner.cache_control:
                common["Cache-Control"] = owner.cache_control
            gzippable = owner.gzip and (path.name in _GZIP_NAMES or path.suffix == ".metadata")
            varies = (["Accept"] if vary else []) + (["Accept-Encoding"] if gzippable else [])
            if varies:
                common["Vary"] = ", ".join(varies)
            if owner.ranges:
                common["Accept-Ranges"] = "bytes"
            body: IO[bytes] = fh
            if (
                gzippable
                and "Range" not in self.headers
                and _accepts_gzip(self.headers.get("Accept-Encoding"))
            ):
                compressed = gziplib.compress(fh.read(), mtime=0)
                body, size = io.BytesIO(compressed), len(compressed)
                common["Content-Encoding"] = "gzip"
                common["ETag"] = f"W/{etag}"  # as nginx marks a compressed variant
            if _not_modified(self.headers, etag, stat.st_mtime):
                self.send_response(304)
                for key, value in common.items():
                    self.send_header(key, value)
                self.end_headers()
                return
            start, end, status = 0, size - 1, 200
            range_header = self.headers.get("Range")
            if_range = self.headers.get("If-Range")
            if if_range is not None and if_range not in (etag, common["Last-Modified"]):
                range_header = None  # the file changed since: the whole of it (RFC 9110)
            if owner.ranges and range_header:
                parsed = _parse_range(range_header, size)
                if parsed == "unsatisfiable":
                    self._send_simple(
                        416, b"", head=head, extra={"Content-Range": f"bytes */{size}"}
                    )
                    return
                if parsed is not None:
                    start, end = parsed
                    status = 206
                    common["Content-Range"] = f"bytes {start}-{end}/{size}"
            length = end - start + 1 if size else 0
            shape = self._shape
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            if shape is not None and shape.kind == "cut":  # the body ends where the socket does
                self.send_header("Connection", "close")
                self.close_connection = True
                length = min(length, shape.after)
            else:
                self.send_header("Content-Length", str(length))
            if shape is not None and shape.kind == "break":  # announced whole, sent in part
                self.close_connection = True
                length = min(length, shape.after)
            for key, value in common.items():
                self.send_header(key, value)
            self.end_headers()
            if head:
                return
            body.seek(start)
            left = length
            rate = shape.rate if shape is not None and shape.kind == "trickle" else 0.0
            piece = _trickle_piece(rate) if rate else _CHUNK
            try:
                while left > 0 and not owner._stopping.is_set():
                    chunk = body.read(min(piece, left))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    left -= len(chunk)
                    owner._sent(self.path, len(chunk))
                    if rate and left > 0 and not self._pause(len(chunk) / rate):
                        self.close_connection = True  # stopped, or the client hung up
                        break
            except OSError:  # the client hung up (a timeout test, a cancelled download)
                self.close_connection = True
            if shape is not None and shape.kind == "break":
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

    def _send_canned(self, fault: _Fault, *, head: bool) -> None:
        """``fault.status``, ``fault.headers`` and ``fault.body`` (with its Content-Length)."""
        try:
            self.send_response(fault.status)
            headers = {"Content-Length": str(len(fault.body)), **(fault.headers or {})}
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if not head:
                self.wfile.write(fault.body)
        except OSError:
            self.close_connection = True

    def _send_redirect(self, fault: _Fault, *, head: bool) -> None:
        """A 302 to ``fault.location`` with a chunked body of ``fault.body_bytes`` zeros."""
        owner = self.server.owner
        try:
            self.send_response(302)
            self.send_header("Location", fault.location)
            self.send_header("Content-Type", "text/html")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if head:
                return
            block = b"\0" * _CHUNK
            left = fault.body_bytes
            while left > 0 and not owner._stopping.is_set():
                piece = block[: min(_CHUNK, left)]
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                left -= len(piece)
                owner._sent(self.path, len(piece))
            self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client closed the connection without reading: as it should
            self.close_connection = True

    def _send_simple(
        self, status: int, body: bytes, *, head: bool, extra: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if not head:
                self.wfile.write(body)
        except OSError:
            self.close_connection = True


def _trickle_piece(rate: float) -> int:
    """Bytes written at a time at ``rate`` bytes a second: ten writes a second."""
    return max(1, int(rate / 10))


def _accepts_gzip(accept_encoding: str | None) -> bool:
    """True when ``accept_encoding`` takes gzip (``gzip``/``x-gzip`` or ``*`` with q > 0)."""
    star: float | None = None
    for part in (accept_encoding or "").split(","):
        coding, q = _token_q(part)
        if coding in ("gzip", "x-gzip"):
            return q > 0
        if coding == "*":
            star = q
    return star is not None and star > 0


def _token_q(part: str) -> tuple[str, float]:
    """``token;q=0.5`` (one element of an Accept-style list) as ("token", 0.5), q 1 when absent."""
    fields = part.split(";")
    q = 1.0
    for param in fields[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                q = 0.0
    return fields[0].strip().lower(), q


def _prefers_json(accept: str | None) -> bool:
    """True when ``accept`` ranks PEP 691 JSON above every HTML type (ties: earlier wins)."""
    if not accept:
        return False
    json_q, json_pos = 0.0, -1
    html_q, html_pos = 0.0, -1
    for pos, part in enumerate(accept.split(",")):
        media, q = _token_q(part)
        if media == JSON_CONTENT_TYPE and q > json_q:
            json_q, json_pos = q, pos
        elif media in _HTML_TYPES and q > html_q:
            html_q, html_pos = q, pos
    if json_q <= 0:
        return False
    return json_q > html_q or (json_q == html_q and json_pos < html_pos)


def _not_modified(headers: Message, etag: str, mtime: float) -> bool:
    inm = headers.get("If-None-Match")
    if inm is not None:  # RFC 9110: If-None-Match wins over If-Modified-Since
        tags = [t.strip().removeprefix("W/") for t in str(inm).split(",")]
        return "*" in tags or etag in tags
    ims = headers.get("If-Modified-Since")
    if ims is not None:
        with contextlib.suppress(TypeError, ValueError, IndexError, OverflowError):
            since = email.utils.parsedate_to_datetime(str(ims)).timestamp()
            return int(mtime) <= since
    return False


def _parse_range(header: str, size: int) -> tuple[int, int] | Literal["unsatisfiable"] | None:
    """One ``bytes=`` range as (first, last) inclusive; None means serve the whole file."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None  # other units or multiple ranges: a server may answer 200
    first_text, dash, last_text = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if first_text == "":
            suffix = int(last_text)
            if suffix <= 0:
                return "unsatisfiable"
            return max(0, size - suffix), size - 1
        first = int(first_text)
        last = int(last_text) if last_text else size - 1
    except ValueError:
        return None
    if first >= size:
        return "unsatisfiable"
    if last < first:
        return None
    return first, min(last, size - 1)


class IndexServer:
    """A threaded HTTP(S) server on 127.0.0.1 serving ``root`` like a simple index."""

    def __init__(
        self,
        root: Path,
        *,
        json: bool = True,
        ranges: bool = True,
        port: int = 0,
        tls: ServerCert | None = None,
        host: str | None = None,
        gzip: bool = False,
    ) -> None:
        self.root = root
        self.requested_port = port  # 0: a free one
        self.json = json
        self.ranges = ranges
        self.tls = tls  # HTTPS with this certificate
        self.host = host  # the name in url (default 127.0.0.1); it listens on 127.0.0.1
        self.gzip = gzip  # pages and .metadata gzip-compressed when the client takes it
        self.cache_control: str | None = None  # e.g. "max-age=600", as PyPI sends
        self._lock = threading.Lock()
        self._requests: list[Request] = []
        self._faults: list[_Fault] = []
        self._auth: str | None = None
        self._etags: dict[tuple[int, int, int, int], str] = {}
        self.bytes_sent: dict[str, int] = {}  # body bytes written, by decoded path
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> IndexServer:
        if self._httpd is not None:
            raise RuntimeError("IndexServer already started")
        self.root.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        context = None if self.tls is None else server_context(self.tls)
        httpd = _Server(("127.0.0.1", self.requested_port), _Handler)
        httpd.owner = self
        httpd.tls_context = context
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # wakes delayed answers
        httpd.shutdown()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):  # the socket's own, under a TLS socket too
                socket.socket.shutdown(conn, socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> IndexServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("IndexServer is not running")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash); ``https`` with ``tls``, and ``host``
        in place of 127.0.0.1 when given."""
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.host or '127.0.0.1'}:{self.port}"

    @property
    def simple_url(self) -> str:
        return f"{self.url}/simple/"

    @property
    def find_links_url(self) -> str:
        return f"{self.url}/find-links/"

    # ------------------------------------------------------------------ content

    def add(self, *listings: Listing | Path, json: bool = False) -> None:
        """(Re)write the simple index under ``root`` with these files added (see indexgen)."""
        with self._lock:
            write_simple_index(self.root, listings, json=json)

    def add_find_links(self, *listings: Listing | Path) -> str:
        """(Re)write ``root/find-links/index.html``; return its URL."""
        with self._lock:
            write_find_links_page(self.root, listings)
        return self.find_links_url

    def replace(self, path: str, new_bytes: bytes) -> None:
        """Swap the bytes of the file at URL path ``path`` (a re-upload under the same name).

        Its ETag changes and its Last-Modified moves forward by at least a second. The
        pages are not rewritten: call ``add()`` to advertise the new hash.
        """
        target = self._local_path(unquote(path))
        with self._lock:
            old = target.stat().st_mtime if target.exists() else 0.0
            tmp = target.with_name(f".{target.name}.replace")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(new_bytes)
            mtime = max(time.time(), old + 1.0)
            os.utime(tmp, (mtime, mtime))
            tmp.replace(target)

    # ------------------------------------------------------------------ faults

    def fail(
        self, path_prefix: str, status: int = 503, times: int = 2, *, retry_after: int | None = None
    ) -> None:
        """Answer ``status`` to the next ``times`` requests whose (decoded) path starts so."""
        self._add_fault(_Fault("fail", path_prefix, times, status=status, retry_after=retry_after))

    def delay(self, path_prefix: str, seconds: float, times: int = 1) -> None:
        """Sleep ``seconds`` before answering the next ``times`` matching requests."""
        self._add_fault(_Fault("delay", path_prefix, times, seconds=seconds))

    def drop(self, path_prefix: str, times: int = 1) -> None:
        """Close the connection without an answer for the next ``times`` matching requests."""
        self._add_fault(_Fault("drop", path_prefix, times))

    def trickle(
        self, path_prefix: str, bytes_per_second: float, times: int = 1, *, head: bool = False
    ) -> None:
        """Send the body of the next ``times`` matching answers at ``bytes_per_second`` (until
        the client hangs up or the server stops); with ``head``, the status line and headers
        too (a server no per-read timeout catches)."""
        if bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be > 0, not {bytes_per_second}")
        self._add_fault(_Fault("trickle", path_prefix, times, rate=bytes_per_second, head=head))

    def cut(self, path_prefix: str, *, after: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests without a Content-Length
        (``Connection: close``) and hang up after ``after`` bytes of the body."""
        self._add_fault(_Fault("cut", path_prefix, times, after=after))

    def break_off(self, path_prefix: str, *, after: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests for a whole file (without ``Range``)
        with its headers (``Content-Length`` too) and hang up after ``after`` body bytes."""
        self._add_fault(_Fault("break", path_prefix, times, after=after, whole_only=True))

    def answer(
        self,
        path_prefix: str,
        body: bytes,
        *,
        status: int = 200,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status``, ``headers`` and
        ``body`` as given (a Content-Length of ``body`` unless ``headers`` says otherwise)."""
        self._add_fault(
            _Fault("answer", path_prefix, times, status=status, body=body, headers=headers)
        )

    def redirect(self, path_prefix: str, location: str, *, body_bytes: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests with a 302 to ``location`` whose chunked
        body is ``body_bytes`` long."""
        self._add_fault(
            _Fault("redirect", path_prefix, times, location=location, body_bytes=body_bytes)
        )

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def require_auth(self, user: str | None, password: str | None = None) -> None:
        """Demand HTTP Basic auth with these credentials (``None`` turns it off)."""
        with self._lock:
            if user is None:
                self._auth = None
            else:
                token = base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")
                self._auth = f"Basic {token}"

    # ------------------------------------------------------------------ requests seen

    @property
    def requests(self) -> list[Request]:
        """A snapshot of the requests seen so far, oldest first."""
        with self._lock:
            return list(self._requests)

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def paths(self, method: str | None = "GET") -> list[str]:
        """The decoded paths requested (by ``method``; None for all), oldest first."""
        return [unquote(urlsplit(r.path).path) for r in self.requests if method in (None, r.method)]

    def encodings(self, path: str | Callable[[str], bool]) -> list[str | None]:
        """The Accept-Encoding (None: not sent) of each GET whose decoded path ends with
        ``path`` (or for which ``path(decoded_path)`` is true), oldest first."""
        match = path if callable(path) else lambda p: p.endswith(path)
        return [
            r.headers.get("accept-encoding")
            for r in self.requests
            if r.method == "GET" and match(unquote(urlsplit(r.path).path))
        ]

    @property
    def open_connections(self) -> int:
        """How many client connections are open on the server's side now."""
        with self._lock:
            return len(self._connections)

    # ------------------------------------------------------------------ internals

    def _add_fault(self, fault: _Fault) -> None:
        if fault.times < 1:
            raise ValueError(f"times must be >= 1, not {fault.times}")
        with self._lock:
            self._faults.append(fault)

    def _due_faults(self, url_path: str, *, ranged: bool = False) -> list[_Fault]:
        """Consume and return the faults that apply to this request, in registration order."""
        due: list[_Fault] = []
        with self._lock:
            for fault in self._faults:
                if fault.whole_only and ranged:
                    continue
                if fault.times > 0 and url_path.startswith(fault.prefix):
                    fault.times -= 1
                    due.append(fault)
                    if fault.kind != "delay":
                        break
            self._faults = [f for f in self._faults if f.times > 0]
        return due

    def _sent(self, raw_path: str, count: int) -> None:
        key = unquote(urlsplit(raw_path).path)
        with self._lock:
            self.bytes_sent[key] = self.bytes_sent.get(key, 0) + count

    def _record(self, request: Request) -> None:
        with self._lock:
            self._requests.append(request)

    def _authorized(self, header: str | None) -> bool:
        with self._lock:
            want = self._auth
        return want is None or header == want

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _local_path(self, url_path: str) -> Path:
        parts = [p for p in url_path.split("/") if p]
        if any(p in (".", "..") or "\\" in p for p in parts):
            raise PermissionError(url_path)
        return self.root.joinpath(*parts)

    def _resolve(self, url_path: str) -> Path | None:
        path = self._local_path(url_path)
        if path.name.startswith(".") and path != self.root:
            return None
        return path if path.exists() else None

    def _etag(self, fh: IO[bytes], stat: os.stat_result) -> str:
        key = (stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size)
        with self._lock:
            cached = self._etags.get(key)
        if cached is not None:
            return cached
        digest = hashlib.sha256()
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
        fh.seek(0)
        etag = f'"{digest.hexdigest()}"'
        with self._lock:
            self._etags[key] = etag
        return etag


class IndexServerFactory:
    """Starts named ``IndexServer``s under ``base`` (the ``make_index_server`` test fixture)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.servers: dict[str, IndexServer] = {}

    def __call__(
        self,
        name: str = "index",
        *,
        json: bool = True,
        ranges: bool = True,
        tls: ServerCert | None = None,
        host: str | None = None,
        gzip: bool = False,
    ) -> IndexServer:
        """A started server over the empty tree ``base/name``."""
        if name in self.servers:
            raise ValueError(f"an index server named {name!r} already exists")
        server = IndexServer(
            self.base / name, json=json, ranges=ranges, tls=tls, host=host, gzip=gzip
        ).start()
        self.servers[name] = server
        return server

    def stop_all(self) -> None:
        for server in self.servers.values():
            server.stop()


# ----------------------------------------------------------------------------- pypiserver


def find_pypi_server() -> Path | None:
    """The ``pypi-server`` of this interpreter's environment, else the one on PATH."""
    beside = Path(sys.executable).parent / "pypi-server"
    if beside.is_file():
        return beside
    found = shutil.which("pypi-server")
    return Path(found) if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PypiServer:
    """The real pypiserver on 127.0.0.1, serving ``packages_dir``; no auth, no fallback."""

    def __init__(
        self,
        packages_dir: Path,
        *,
        executable: Path | None = None,
        startup_timeout: float = 20.0,
        extra_args: Iterable[str] = (),
    ) -> None:
        self.packages_dir = packages_dir
        self.executable = executable or find_pypi_server()
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("PypiServer is not running")
        return self._port

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def url(self) -> str:
        """The simple index URL, ``http://127.0.0.1:PORT/simple/``."""
        return f"{self.root_url}simple/"

    def add(self, *paths: Path) -> None:
        """Copy distributions into the packages directory (pypiserver rescans it)."""
        self.packages_dir.mkdir(parents=True, exist_ok=True)
        for path in paths:
            shutil.copyfile(path, self.packages_dir / path.name)

    def start(self) -> PypiServer:
        if self._proc is not None:
            raise RuntimeError("PypiServer already started")
        if self.executable is None:
            raise FileNotFoundError("pypi-server is not installed (pip install pypiserver)")
        self.packages_dir.mkdir(parents=True, exist_ok=True)
        last_error = ""
        for _attempt in range(3):  # the free port may be taken between probe and bind
            port = _free_port()
            log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
            cmd = [
                str(self.executable), "run",
                "--host", "127.0.0.1", "--port", str(port),
                "-a", ".", "-P", ".", "--disable-fallback",
                "--hash-algo", "sha256", "--backend", "simple-dir",
                *self.extra_args,
                str(self.packages_dir),
            ]  # fmt: skip
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            if self._wait_ready(proc, port):
                self._proc, self._log, self._port = proc, log, port
                return self
            _terminate(proc)
            log.seek(0)
            last_error = log.read().decode("utf-8", errors="replace")[-2000:]
            log.close()
        raise RuntimeError(f"pypi-server did not start: {last_error}")

    def _wait_ready(self, proc: subprocess.Popen[bytes], port: int) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return True
            except OSError:
                pass
            finally:
                conn.close()
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _terminate(proc)
        if self._log is not None:
            self._log.close()
            self._log = None
        self._port = None

    def __enter__(self) -> PypiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
