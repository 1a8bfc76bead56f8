"""``IndexServer``: a threaded HTTP(S) server on 127.0.0.1 serving a simple-index tree (as
``testbed.simple_index`` writes it), whose answers a test shapes::

    with IndexServer(root) as server:
        server.add(Listing(path=wheel, metadata=True), json=True)
        server.fail("/simple/torch/", status=503, times=2)   # two 503s, then the page
        server.delay("/files/", 2.0)                           # one slow answer
        server.drop("/files/", times=1)                        # close without answering
        server.require_auth("user", "token")                   # HTTP Basic, else 401
        server.replace("/files/x-1.0-py3-none-any.whl", other_bytes)  # a re-upload
        server.trickle("/files/", 10)                          # the body at 10 bytes a second
        server.trickle("/simple/", 10, head=True)              # the status line and headers too
        server.trickle("/files/", 1, unframed=True)            # no Content-Length, 1 byte a second
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

With ``tls=`` (a ``testbed.tls.ServerCert``) the server speaks HTTPS: each connection's
handshake runs in its own handler thread (a slow or failing client holds up no other, and a
failed handshake is quiet). ``host=`` is the name the server reports in its URLs (it still
listens on 127.0.0.1); the pages link to files by relative URLs, so they work under any name,
e.g. ``https://index.corp.test:PORT/simple/`` reached through a forward proxy::

    with IndexServer(root, tls=authority.issue("index", ["index.corp.test"]),
                     host="index.corp.test", gzip=True) as server:
        server.url                                 # https://index.corp.test:PORT
        server.encodings("/simple/torch/")         # the Accept-Encoding each page GET sent

With ``gzip=True`` pages (``index.html``, ``index.json``) and ``.metadata`` files are sent
gzip-compressed to a request whose Accept-Encoding takes gzip, as nginx's ``gzip on;
gzip_vary on;`` does: ``Content-Encoding: gzip``, the compressed length, a weak ETag
(``W/"<sha256>"``) and ``Vary: Accept-Encoding`` (also on the identity answers of those files);
never for a request with ``Range``, never for wheels or sdists.

The answers themselves are ``testbed.index_handler``'s; this module holds the server's state
(the tree, the faults due, the requests seen) and its life.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO
from urllib.parse import unquote, urlsplit

from testbed.http_rules import Request
from testbed.index_handler import Fault, IndexHandler, IndexHTTPServer
from testbed.lifetime import Served
from testbed.simple_index import Listing, write_find_links_page, write_simple_index
from testbed.tls import ServerCert, server_context

__all__ = ["IndexServer", "IndexServerFactory"]


class IndexServer(Served):
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
        self._faults: list[Fault] = []
        self._auth: str | None = None
        self._etags: dict[tuple[int, int, int, int], str] = {}
        self.bytes_sent: dict[str, int] = {}  # body bytes written, by decoded path
        self._connections: set[socket.socket] = set()
        self._stopping = threading.Event()
        self._httpd: IndexHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port_lock: IO[bytes] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> IndexServer:
        if self._httpd is not None:
            raise RuntimeError("IndexServer already started")
        self.root.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        context = None if self.tls is None else server_context(self.tls)
        if self.requested_port:
            self._hold_port(self.requested_port)
        try:
            httpd = IndexHTTPServer(("127.0.0.1", self.requested_port), IndexHandler)
        except OSError:
            self._release_port()
            raise
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
        self._release_port()

    def _hold_port(self, port: int) -> None:
        """Wait until no other server of this machine's processes serves the fixed ``port``
        (the demo's index, which the docker tests and the staging tests both serve)."""
        lock = Path(tempfile.gettempdir()) / f"testbed-index-port-{port}.lock"
        self._port_lock = lock.open("ab")
        fcntl.flock(self._port_lock, fcntl.LOCK_EX)

    def _release_port(self) -> None:
        held, self._port_lock = self._port_lock, None
        if held is not None:
            held.close()  # closing the file releases the lock

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
        self._add_fault(Fault("fail", path_prefix, times, status=status, retry_after=retry_after))

    def delay(self, path_prefix: str, seconds: float, times: int = 1) -> None:
        """Sleep ``seconds`` before answering the next ``times`` matching requests."""
        self._add_fault(Fault("delay", path_prefix, times, seconds=seconds))

    def drop(self, path_prefix: str, times: int = 1) -> None:
        """Close the connection without an answer for the next ``times`` matching requests."""
        self._add_fault(Fault("drop", path_prefix, times))

    def trickle(
        self,
        path_prefix: str,
        bytes_per_second: float,
        times: int = 1,
        *,
        head: bool = False,
        unframed: bool = False,
    ) -> None:
        """Send the body of the next ``times`` matching answers at ``bytes_per_second`` (until
        the client hangs up or the server stops); with ``head``, the status line and headers
        too (a server no per-read timeout catches); ``unframed``: without a Content-Length
        (``Connection: close``, the body read until the server hangs up)."""
        if bytes_per_second <= 0:
            raise ValueError(f"bytes_per_second must be > 0, not {bytes_per_second}")
        self._add_fault(
            Fault(
                "trickle", path_prefix, times, rate=bytes_per_second, head=head, unframed=unframed
            )
        )

    def cut(self, path_prefix: str, *, after: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests without a Content-Length
        (``Connection: close``) and hang up after ``after`` bytes of the body."""
        self._add_fault(Fault("cut", path_prefix, times, after=after))

    def break_off(self, path_prefix: str, *, after: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests for a whole file (without ``Range``)
        with its headers (``Content-Length`` too) and hang up after ``after`` body bytes."""
        self._add_fault(Fault("break", path_prefix, times, after=after, whole_only=True))

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
            Fault("answer", path_prefix, times, status=status, body=body, headers=headers)
        )

    def redirect(self, path_prefix: str, location: str, *, body_bytes: int, times: int = 1) -> None:
        """Answer the next ``times`` matching requests with a 302 to ``location`` whose chunked
        body is ``body_bytes`` long."""
        self._add_fault(
            Fault("redirect", path_prefix, times, location=location, body_bytes=body_bytes)
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
    # what testbed.index_handler reads and updates: the faults due, the requests seen, the
    # bytes sent, the open connections, the files of the tree and their ETags

    def _add_fault(self, fault: Fault) -> None:
        if fault.times < 1:
            raise ValueError(f"times must be >= 1, not {fault.times}")
        with self._lock:
            self._faults.append(fault)

    def _due_faults(self, url_path: str, *, ranged: bool = False) -> list[Fault]:
        """Consume and return the faults that apply to this request, in registration order."""
        due: list[Fault] = []
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
