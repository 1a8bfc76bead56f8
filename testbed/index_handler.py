"""How ``IndexServer`` answers one request: the HTTP server and request handler behind it.

``IndexHTTPServer`` accepts connections on 127.0.0.1 (wrapping them for TLS, the handshake
left to the handler's thread); ``IndexHandler`` answers GET and HEAD from the server's tree:
a directory as its ``index.json`` or ``index.html`` (by the Accept header), a file with an
ETag, Last-Modified, conditional 304s, a single byte range and, when the server says so, gzip.
A ``Fault`` the test registered on the server comes first: an injected status, a delay, a
dropped connection, a canned answer or redirect, or the file's answer sent slowly or cut
short. Nothing is logged, and a client that hangs up mid-answer is not an error.

The handler reads and updates its ``IndexServer`` (``server.owner``): the faults due, the
requests seen, the bytes sent, the open connections.
"""

from __future__ import annotations

import contextlib
import email.utils
import gzip as gziplib
import io
import os
import select
import socket
import ssl
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal
from urllib.parse import unquote, urlsplit

from testbed.http_rules import (
    Headers,
    Request,
    accepts_gzip,
    not_modified,
    parse_range,
    prefers_json,
)
from testbed.simple_index import JSON_CONTENT_TYPE

if TYPE_CHECKING:
    from testbed.index_server import IndexServer

__all__ = ["Fault", "IndexHTTPServer", "IndexHandler"]

_CONTENT_TYPES = {".html": "text/html", ".json": "application/json"}
_CHUNK = 1 << 16
_GZIP_NAMES = ("index.html", "index.json")  # and *.metadata
# poll() events of a peer that hung up (POLLRDHUP: it closed its end, Linux only)
_HANGUP = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)


@dataclass
class Fault:
    """One shaped answer a test registered: what it does, to which path prefix, how many times."""

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
    unframed: bool = False  # trickle: no Content-Length, the body ends at the hang-up


class IndexHTTPServer(ThreadingHTTPServer):
    """The listening socket of an ``IndexServer`` (its ``owner``), one thread a connection."""

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


class IndexHandler(BaseHTTPRequestHandler):
    """Answers the requests of one connection from its server's tree and faults."""

    server: IndexHTTPServer
    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection ends after this
    _shape: Fault | None = None  # trickle, cut or break: applied to this answer

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
        self._shape: Fault | None = None  # trickle or cut: applied to the file's body
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
            and prefers_json(self.headers.get("Accept"))
        )
        if as_json:
            self._send_file(directory / "index.json", JSON_CONTENT_TYPE, head=head, vary=True)
        elif (directory / "index.html").is_file():
            self._send_file(directory / "index.html", "text/html", head=head, vary=True)
        else:
            self._send_simple(404, b"no index here\n", head=head)

    def _send_file(self, path: Path, content_type: str, *, head: bool, vary: bool = False) -> None:
        """The file at ``path``: 304 while the client's copy is current, else 200 or 206 (a
        range), shaped by a trickle, cut or break fault when one is due."""
        try:
            fh = path.open("rb")
        except OSError:
            self._send_simple(404, b"not found\n", head=head)
            return
        with fh:
            stat = os.fstat(fh.fileno())
            etag = self.server.owner._etag(fh, stat)
            headers = self._file_headers(path, etag, stat.st_mtime, vary=vary)
            body, size = self._encoded(path, fh, stat.st_size, headers)
            if not_modified(self.headers, etag, stat.st_mtime):
                self.send_response(304)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                return
            span = self._span(size, etag, headers)
            if span is None:
                self._send_simple(416, b"", head=head, extra={"Content-Range": f"bytes */{size}"})
                return
            status, start, length = span
            length = self._send_file_head(status, content_type, length, headers)
            if head:
                return
            self._send_body(body, start, length)
            if self._shape is not None and self._shape.kind == "break":
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

    def _gzippable(self, path: Path) -> bool:
        """Pages and ``.metadata`` files, on a server with ``gzip`` on."""
        return self.server.owner.gzip and (path.name in _GZIP_NAMES or path.suffix == ".metadata")

    def _file_headers(self, path: Path, etag: str, mtime: float, *, vary: bool) -> dict[str, str]:
        """The headers of every answer about the file, a 304 too (validators, caching, Vary)."""
        owner = self.server.owner
        headers = {"ETag": etag, "Last-Modified": email.utils.formatdate(mtime, usegmt=True)}
        if owner.cache_control:
            headers["Cache-Control"] = owner.cache_control
        varies = (["Accept"] if vary else []) + (
            ["Accept-Encoding"] if self._gzippable(path) else []
        )
        if varies:
            headers["Vary"] = ", ".join(varies)
        if owner.ranges:
            headers["Accept-Ranges"] = "bytes"
        return headers

    def _encoded(
        self, path: Path, fh: IO[bytes], size: int, headers: dict[str, str]
    ) -> tuple[IO[bytes], int]:
        """The body as sent and its size: the file, or its gzip-compressed bytes when it may be
        and the request takes gzip without a Range (then ``headers`` says so, with a weak ETag
        as nginx marks a compressed variant)."""
        if (
            self._gzippable(path)
            and "Range" not in self.headers
            and accepts_gzip(self.headers.get("Accept-Encoding"))
        ):
            compressed = gziplib.compress(fh.read(), mtime=0)
            headers["Content-Encoding"] = "gzip"
            headers["ETag"] = f"W/{headers['ETag']}"
            return io.BytesIO(compressed), len(compressed)
        return fh, size

    def _span(self, size: int, etag: str, headers: dict[str, str]) -> tuple[int, int, int] | None:
        """(status, first byte, length) of the answer: 206 and the range asked for (added to
        ``headers`` as Content-Range) while an If-Range still matches, else 200 and the whole
        body; None for a range past the end (416)."""
        range_header = self.headers.get("Range")
        if_range = self.headers.get("If-Range")
        if if_range is not None and if_range not in (etag, headers["Last-Modified"]):
            range_header = None  # the file changed since: the whole of it (RFC 9110)
        if not (self.server.owner.ranges and range_header):
            return 200, 0, size
        parsed = parse_range(range_header, size)
        if parsed == "unsatisfiable":
            return None
        if parsed is None:
            return 200, 0, size
        first, last = parsed
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        return 206, first, last - first + 1

    def _send_file_head(
        self, status: int, content_type: str, length: int, headers: dict[str, str]
    ) -> int:
        """Send the status line and headers; return how many body bytes to send (fewer than
        ``length`` under a cut, which sends no Content-Length, or a break, which does)."""
        shape = self._shape
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        if shape is not None and (shape.kind == "cut" or shape.unframed):
            self.send_header("Connection", "close")  # the body ends where the socket does
            self.close_connection = True
            if shape.kind == "cut":
                length = min(length, shape.after)
        else:
            self.send_header("Content-Length", str(length))
        if shape is not None and shape.kind == "break":  # announced whole, sent in part
            self.close_connection = True
            length = min(length, shape.after)
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        return length

    def _send_body(self, body: IO[bytes], start: int, length: int) -> None:
        """``length`` bytes of ``body`` from ``start``, at a trickle's rate if one is due, until
        done, the server stops or the client hangs up."""
        owner = self.server.owner
        shape = self._shape
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

    def _send_canned(self, fault: Fault, *, head: bool) -> None:
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

    def _send_redirect(self, fault: Fault, *, head: bool) -> None:
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
