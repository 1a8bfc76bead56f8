"""The one HTTP client of the tool, on urllib3: every other module speaks HTTP through it.

A ``Transport`` is a connection pool with a User-Agent and a timeout per request. Nothing is
taken from the environment (no proxy variables, no .netrc): a proxy is passed on purpose or
there is none.

``Transport.request`` follows redirects itself rather than in urllib3: every URL it is about
to request (the first one too) goes through the caller's ``check_hop``, which raises to refuse
it, and the caller's credentials (``OriginAuth``) go to their own origin only, never to another
host or scheme a redirect names. Connection failures and the ``RetryPolicy.statuses`` (429,
5xx) are retried a bounded number of times with exponential backoff (a numeric
``Retry-After`` wins when the policy allows); when the attempts are spent, the last answer is
returned, or the last failure raised as ``TransportError``. Every other answer is returned as
it is: what a status means is the caller's business.

Bounds in time. A timeout per read does not bound a request: a server that sends one byte a
second never lets a read time out. So every request also runs against a ``Deadline``, the
network budget of one command (``--deadline``), shared by all of its transports. The budget is
spent while at least one request is in flight (connecting, waiting, reading a body, or backing
off between attempts), not while the command does other work (Docker pushing an image, say).
When it is spent, a watchdog thread shuts down the socket of every request in flight, each of
them fails with ``DeadlineError`` naming its URL, and every later request fails at once.
``Deadline.cancel`` does the same at once, for Ctrl-C: the workers of a thread pool end within
moments instead of finishing their downloads. Each connect and each read also has ``timeout``.

Bounds in memory. ``Response.content`` reads a body whole, but never more than ``max_body``
bytes (``TransportError`` of kind ``too-large`` past it); ``Response.read(n)`` streams it. A
``Content-Encoding`` (gzip, deflate) is decoded here, incrementally and never more than the
bytes asked for, so a small compressed body cannot inflate in memory; other encodings are
refused. A redirect's body is never read: its connection is closed. Closing a response whose
body was not read drains a small body of known length (so that the connection can be kept
alive) and closes the socket of any other.

Bursts. ``Transport.revalidate`` sends many conditional GETs at once from the calling thread
(non-blocking sockets, up to N connections per host, each kept alive, TLS with the
transport's one context) and reads only the head of each answer. Only a 304 is taken from a
burst; every other answer, a proxy, a failure or the end of the time allowed leaves that
request to ``request``, so a burst never decides an error. A re-lock revalidates a few
hundred index pages this way in one or two round trips.

The fetch loop. A transport made with ``fetch_loop=True`` (the index client's) sends each GET
it reads whole from one thread of its own, on non-blocking keep-alive sockets, instead of on
the calling thread through urllib3; the caller waits for its answer. It takes only the plain
case (an http(s) URL urllib3 would send unchanged, headers without control characters, an
answer framed by its ``Content-Length`` within the body limit) and hands everything else back
untouched, to go through urllib3 as ever: a refused or failed connect, a certificate urllib3
refuses, an answer chunked, unframed or too big, a broken connection. Only a read that makes
no progress for the timeout fails in the loop (``ReadTimeoutError``), and the deadline and a
cancel end its requests as any other. Redirects, retries, credentials and decoding stay in
``request``. Hundreds of small pages cost a few socket calls each on one thread, where urllib3
costs each calling thread about a third of a millisecond of CPU and a handful of GIL hand-offs.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import math
import re
import selectors
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin, urlsplit

if TYPE_CHECKING:
    import urllib3

from core.errors import BuildImageError, DeadlineError, TransportError, UsageError
from core.urls import redact, same_origin

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
DRAIN_LIMIT = 1 << 20  # read at most this much of an unwanted body to keep a connection
RETRY_AFTER_LIMIT = 30.0
USER_AGENT = "vllm-musa-image"
RETRYABLE = frozenset({"connect", "timeout", "broken"})
MAX_BODY = 64 << 20  # what Response.content reads at most, unless the request says otherwise
DEFAULT_DEADLINE = 3600.0  # seconds of network time for one command (--deadline)
DEADLINE_HINT = (
    "--deadline bounds the seconds a command spends on the network in all (default "
    f"{DEFAULT_DEADLINE:g}); raise it for a slow link or big files. --timeout bounds each "
    "connect and each read"
)
_READ = 1 << 20  # the most Response.content asks for at a time
_RAW_CHUNK = 64 * 1024  # compressed bytes read at a time to decode
_IDLE_EXIT = 1.0  # the watchdog thread ends after this long with nothing in flight


def basic_auth(username: str, password: str) -> str:
    """The ``Authorization`` value of HTTP Basic authentication."""
    token = base64.b64encode(f"{username}:{password}".encode()).decode("ascii")
    return f"Basic {token}"


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """``attempts`` in all; after a failed attempt ``n`` (0-based) the delay is
    ``backoff * 2**n`` (at most ``max_delay``), or the answer's numeric ``Retry-After`` (at
    most 30 s) when ``retry_after`` is set."""

    attempts: int = 1
    backoff: float = 0.5
    max_delay: float | None = None
    statuses: frozenset[int] = RETRY_STATUSES
    retry_after: bool = True

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None and self.retry_after:
            return retry_after
        delay: float = self.backoff * 2.0**attempt
        return delay if self.max_delay is None else min(delay, self.max_delay)


NO_RETRY = RetryPolicy()


@dataclass(frozen=True, kw_only=True)
class OriginAuth:
    """Headers (``Authorization``) that are sent to one origin (scheme, host, port) only."""

    origin: str  # a URL of that origin
    headers: Mapping[str, str] = field(repr=False)


# ------------------------------------------------------------------------------ the deadline


class Deadline:
    """The network budget of one command: ``seconds`` of time with at least one request in
    flight (None: no budget, only ``cancel``). Thread-safe: share one between the transports
    of a command. ``flag`` names the setting in messages."""

    def __init__(
        self,
        seconds: float | None = DEFAULT_DEADLINE,
        *,
        flag: str = "--deadline",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            raise UsageError(
                f"{flag} {seconds:g}: a deadline is a positive number of seconds",
                hint=f"the default is {flag} {DEFAULT_DEADLINE:g}",
            )
        self.seconds = seconds
        self.flag = flag
        self._clock = clock
        self._cond = threading.Condition()  # an RLock underneath: methods nest
        self._left = seconds
        self._since: float | None = None  # when the current stretch of busy time began
        self._watches: set[_Watch] = set()
        self._state = ""  # "" | "expired" | "cancelled"
        self._watching = False  # a watchdog thread runs

    def describe(self) -> str:
        return self.flag if self.seconds is None else f"{self.flag} {self.seconds:g}"

    def forked(self) -> None:
        """In a forked child: the budget left, with nothing in flight and no watchdog (a
        fork copies no thread, and a lock held at the fork would stay held)."""
        self._cond = threading.Condition()
        self._watches = set()
        self._since = None
        self._watching = False

    def left(self) -> float | None:
        """Seconds of budget left (None: unbounded)."""
        with self._cond:
            return self._left_now()

    def cancel(self) -> None:
        """Stop every request in flight now and refuse every later one (Ctrl-C)."""
        with self._cond:
            if not self._state:
                self._state = "cancelled"
            self._fire_all()
            self._cond.notify_all()

    def error(self, method: str, url: str) -> DeadlineError:
        return DeadlineError(
            f"{method} {redact(url)} did not finish within the network deadline of this "
            f"command ({self.describe()})",
            hint=DEADLINE_HINT,
        )

    # -- for Transport and Response

    def begin(self, method: str, url: str) -> _Watch:
        """A request starts (refused when the budget is spent or cancelled)."""
        with self._cond:
            self._refuse(method, url)
            first = not self._watches
            if first and self._left is not None:
                self._since = self._clock()
            watch = _Watch()
            self._watches.add(watch)
            if self._left is not None and not self._watching:
                self._watching = True
                threading.Thread(target=self._watchdog, name="deadline", daemon=True).start()
            elif first:
                # only an idle watchdog needs waking: a busy one waits out the budget left,
                # which only shrinks while requests are in flight (a wake-up per request
                # would hand the GIL to it hundreds of times a lock)
                self._cond.notify_all()
            return watch

    def end(self, watch: _Watch) -> None:
        """The request of ``watch`` is over (idempotent)."""
        with self._cond:
            if watch not in self._watches:
                return
            self._watches.discard(watch)
            if not self._watches and self._since is not None and self._left is not None:
                self._left -= self._clock() - self._since
                self._since = None

    def pause(
        self, seconds: float, method: str, url: str, sleep: Callable[[float], None] | None
    ) -> None:
        """Back off ``seconds`` before the next attempt, as network time; refused at once when
        the budget ends first. ``sleep`` None: a wait that ``cancel`` ends."""
        left = self.left()
        if left is not None and seconds >= left:
            raise DeadlineError(
                f"{method} {redact(url)} failed, and the network deadline of this command "
                f"({self.describe()}) ends before its next attempt",
                hint=DEADLINE_HINT,
            )
        watch = self.begin(method, url)
        try:
            if sleep is not None:
                sleep(seconds)
            else:
                with self._cond:
                    self._cond.wait_for(lambda: bool(self._state), timeout=seconds)
            with self._cond:
                self._refuse(method, url)
        finally:
            self.end(watch)

    def failure(
        self, watch: _Watch | None, exc: BaseException, what: str, method: str, url: str
    ) -> BuildImageError:
        """What a failed read or request means: the deadline (or a cancel) cut it off, or
        the network failed (``TransportError``)."""
        with self._cond:
            state = (watch.fired if watch is not None else "") or self._state
            left = self._left_now()
        if state == "cancelled":
            return _cancelled(method, url)
        if state == "expired" or (left is not None and left <= 0):
            return self.error(method, url)
        return _failure(exc, what)

    def check(self, watch: _Watch | None, method: str, url: str) -> None:
        """Raise when ``watch`` was cut off (a shut-down socket can read as a clean end)."""
        state = watch.fired if watch is not None else ""
        if state == "cancelled":
            raise _cancelled(method, url)
        if state == "expired":
            raise self.error(method, url)

    # -- internals (under self._cond)

    def _left_now(self) -> float | None:
        if self._left is None:
            return None
        if self._since is None:
            return self._left
        return self._left - (self._clock() - self._since)

    def _refuse(self, method: str, url: str) -> None:
        if self._state == "cancelled":
            raise _cancelled(method, url)
        left = self._left_now()
        if self._state == "expired" or (left is not None and left <= 0):
            raise self.error(method, url)

    def _fire_all(self) -> None:
        for watch in list(self._watches):
            watch.fire(self._state)

    def _watchdog(self) -> None:
        with self._cond:
            while not self._state:
                if not self._watches:
                    self._cond.wait(_IDLE_EXIT)
                    if not self._watches:
                        break
                    continue
                left = self._left_now()
                assert left is not None
                if left <= 0:
                    self._state = "expired"
                    self._fire_all()
                    break
                self._cond.wait(left)
            self._watching = False


class _Watch:
    """One request in flight: the connection it uses, and whether it was cut off."""

    __slots__ = ("conn", "fired")

    def __init__(self) -> None:
        self.conn: object | None = None
        self.fired = ""  # "" | "expired" | "cancelled"

    def attach(self, conn: object) -> None:
        self.conn = conn
        if self.fired:
            _shutdown(conn)

    def fire(self, state: str) -> None:
        self.fired = state
        conn = self.conn
        if conn is not None:
            _shutdown(conn)


def _shutdown(conn: object) -> None:
    """End every blocking read on ``conn``'s socket, from any thread (TLS included)."""
    sock = getattr(conn, "sock", None)
    raw = sock if isinstance(sock, socket.socket) else getattr(sock, "socket", None)
    if isinstance(raw, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(raw, socket.SHUT_RDWR)


def _cancelled(method: str, url: str) -> TransportError:
    return TransportError(
        f"{method} {redact(url)}: cancelled", kind="cancelled", name="Cancelled", detail="cancelled"
    )


# The request in flight in this thread: the connection classes below hand themselves to it,
# so that its deadline can shut their socket down.
_current = threading.local()


def _attach(conn: object) -> None:
    watch: _Watch | None = getattr(_current, "watch", None)
    if watch is not None:
        watch.attach(conn)


class _Attached:
    """A connection that tells the current request's watch about itself before it connects
    and before it sends (mixed in ahead of urllib3's connection classes)."""

    def connect(self) -> None:
        _attach(self)
        super().connect()  # type: ignore[misc]

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach(self)
        super().request(*args, **kwargs)  # type: ignore[misc]


@functools.cache
def _pool_classes() -> dict[str, type]:
    """urllib3's pools, with connections that hand their socket to the request's deadline.
    Made (and urllib3 imported, about 40 ms) when a transport first needs urllib3: a lock
    whose every request goes through the fetch loop never does."""
    import urllib3
    import urllib3.connection

    class _HTTPConnection(_Attached, urllib3.connection.HTTPConnection):
        pass

    class _HTTPSConnection(_Attached, urllib3.connection.HTTPSConnection):
        pass

    class _HTTPPool(urllib3.HTTPConnectionPool):
        ConnectionCls = _HTTPConnection

    class _HTTPSPool(urllib3.HTTPSConnectionPool):
        ConnectionCls = _HTTPSConnection

    return {"http": _HTTPPool, "https": _HTTPSPool}


# ------------------------------------------------------------------------------ responses


class _Decoder:
    """gzip or deflate, decoded a bounded piece at a time."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._obj = self._new()
        self._tail = b""
        self._started = False

    def _new(self) -> Any:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)

    @property
    def has_tail(self) -> bool:
        return bool(self._tail)

    @property
    def complete(self) -> bool:
        return bool(self._obj.eof)

    def decompress(self, data: bytes, amt: int) -> bytes:
        data = self._tail + data if self._tail else data
        try:
            out: bytes = self._obj.decompress(data, amt)
        except zlib.error:
            if self._started or self._gzip:
                raise
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate without its zlib header
            out = self._obj.decompress(data, amt)
        self._started = True
        self._tail = self._obj.unconsumed_tail
        if self._obj.eof:
            rest = self._obj.unused_data
            if self._gzip and rest:  # another gzip member follows
                self._obj = self._new()
                self._tail = rest
        return out

    def flush(self) -> bytes:
        out: bytes = self._obj.flush()
        return out


class Response:
    """One answer: ``status``, ``reason``, ``headers`` (case-insensitive), the final ``url``
    (after redirects), and the body, read whole (``content``, at most ``max_body`` bytes) or
    streamed (``read``). Close it (or use it as a context manager) when done."""

    def __init__(
        self,
        raw: urllib3.BaseHTTPResponse | _Whole,
        url: str,
        *,
        method: str = "GET",
        deadline: Deadline | None = None,
        watch: _Watch | None = None,
        max_body: int = MAX_BODY,
    ) -> None:
        self._raw = raw
        self.status: int = raw.status
        self.reason: str = raw.reason or ""
        self.headers: Mapping[str, str] = raw.headers
        self.url = url
        self._method = method
        self._deadline = deadline or Deadline(None)
        self._watch = watch
        self._max_body = max_body
        self._content: bytes | None = None
        self._decoder: _Decoder | None = None
        self._decoder_ready = False
        self._pending = b""
        self._eof = False
        self._broken = False
        self._closed = False

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = self.read_all(self._max_body)
        return self._content

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.content)

    def read_all(self, limit: int) -> bytes:
        """The whole (decoded) body; ``TransportError`` kind ``too-large`` past ``limit``
        bytes, found out before more than ``limit + 1`` bytes are held."""
        announced = self.headers.get("Content-Length", "")
        if not self.encoding and announced.isdigit() and int(announced) > limit:
            raise self._too_large(limit)
        parts: list[bytes] = []
        size = 0
        while chunk := self.read(min(_READ, limit - size + 1)):
            size += len(chunk)
            if size > limit:
                raise self._too_large(limit)
            parts.append(chunk)
        return b"".join(parts)

    @property
    def encoding(self) -> str:
        """The ``Content-Encoding`` ("" for none or identity)."""
        value = self.headers.get("Content-Encoding", "").strip().lower()
        return "" if value == "identity" else value

    def read(self, amt: int, *, eager: bool = False) -> bytes:
        """Up to ``amt`` bytes of the (decoded) body; b"" at its end. ``eager``: return as
        soon as some bytes have arrived (a stream of events), instead of waiting for ``amt``."""
        if amt <= 0 or self._eof:
            return b""
        if self._pending:
            out, self._pending = self._pending[:amt], self._pending[amt:]
            return out
        decoder = self._get_decoder()
        if decoder is None:
            out = self._raw_read(amt, eager=eager)
        else:
            out = self._decode(decoder, amt, eager=eager)
        if not out:
            self._deadline.check(self._watch, self._method, self.url)
            if decoder is not None and not decoder.complete:
                self._broken = True
                raise TransportError(
                    f"reading {redact(self.url)}: the {self.encoding} body ends before its end",
                    kind="broken",
                    name="DecodeError",
                    detail=f"truncated {self.encoding} body",
                )
            self._eof = True
            if self._watch is not None:
                self._deadline.end(self._watch)
        return out

    def iter_bytes(self, size: int, *, eager: bool = False) -> Iterator[bytes]:
        """The body in pieces of at most ``size`` bytes; ``eager``: each piece as soon as it
        arrives (Server-Sent Events: one event is not held back until ``size`` bytes came)."""
        while chunk := self.read(size, eager=eager):
            yield chunk

    def retry_after(self) -> float | None:
        """A numeric ``Retry-After`` in seconds (at most 30), else None."""
        value = self.headers.get("Retry-After", "")
        if value.isdigit():
            return min(float(value), RETRY_AFTER_LIMIT)
        return None

    def close(self) -> None:
        """Give the connection back for keep-alive only once the response is fully read: an
        unread body would break the next request on it (http.client's ResponseNotReady). An
        unread body that is big, or of unknown length, closes the socket instead."""
        if self._closed:
            return
        self._closed = True
        raw = self._raw
        if isinstance(raw, _Whole):  # read whole by the fetch loop: nothing to give back
            if self._watch is not None:
                self._deadline.end(self._watch)
            return
        import urllib3.exceptions  # loaded already: raw is urllib3's

        try:
            remaining = raw.length_remaining
            if not self._eof and (self._broken or remaining is None or remaining > DRAIN_LIMIT):
                raw.close()
            else:
                try:
                    raw.drain_conn()
                except (urllib3.exceptions.HTTPError, OSError):
                    raw.close()
            raw.release_conn()
        finally:
            if self._watch is not None:
                self._deadline.end(self._watch)

    def discard(self) -> None:
        """Close without reading (a redirect): the connection is closed, not drained."""
        self._closed = True
        self._raw.close()
        self._raw.release_conn()

    def __enter__(self) -> Response:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals

    def _get_decoder(self) -> _Decoder | None:
        if not self._decoder_ready:
            self._decoder_ready = True
            encoding = self.encoding
            if encoding in ("gzip", "x-gzip", "deflate"):
                self._decoder = _Decoder(encoding)
            elif encoding:
                self._broken = True
                raise TransportError(
                    f"reading {redact(self.url)}: the server sent Content-Encoding {encoding}, "
                    "which this tool does not decode (it asks for none)",
                    kind="invalid",
                    name="UnsupportedEncoding",
                    detail=f"Content-Encoding {encoding}",
                )
        return self._decoder

    def _raw_read(self, amt: int, *, eager: bool = False) -> bytes:
        if isinstance(self._raw, _Whole):
            return self._raw.read(amt)
        import urllib3.exceptions  # loaded already: raw is urllib3's

        try:
            if eager:
                return self._raw.read1(amt, decode_content=False)
            return self._raw.read(amt, decode_content=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._broken = True
            raise self._deadline.failure(
                self._watch, exc, f"reading {redact(self.url)}", self._method, self.url
            ) from None

    def _decode(self, decoder: _Decoder, amt: int, *, eager: bool = False) -> bytes:
        try:
            while True:
                if decoder.has_tail:
                    out = decoder.decompress(b"", amt)
                else:
                    raw = self._raw_read(_RAW_CHUNK, eager=eager)
                    if not raw:
                        out = decoder.flush()
                        if len(out) > amt:
                            out, self._pending = out[:amt], out[amt:]
                        return out
                    out = decoder.decompress(raw, amt)
                if out:
                    return out
        except zlib.error as exc:
            self._broken = True
            raise TransportError(
                f"reading {redact(self.url)}: the {self.encoding} body does not decode: {exc}",
                kind="broken",
                name="DecodeError",
                detail=_short(exc),
            ) from None

    def _too_large(self, limit: int) -> TransportError:
        self._broken = True
        return TransportError(
            f"{self._method} {redact(self.url)}: the body has more than {limit} bytes",
            kind="too-large",
            name="BodyTooLarge",
            detail=f"more than {limit} bytes",
        )


# ------------------------------------------------------------------------------ revalidation


@dataclass(frozen=True)
class Conditional:
    """One conditional GET of a burst (``Transport.revalidate``): its URL and headers (the
    validators, Accept, and any credentials of the URL's own origin)."""

    url: str
    headers: Mapping[str, str]


@dataclass(frozen=True)
class NotModified:
    """A 304 answer of a burst, with its ``Cache-Control`` (None when absent)."""

    cache_control: str | None


_HEAD_LIMIT = 64 << 10  # the status line and headers of one answer, at most


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _plain_headers(headers: Mapping[str, str]) -> bool:
    """No name or value holds a control character (CR or LF would end the line early: a
    validator read back from a tampered cache must not add headers of its own)."""
    return not any(_CONTROL.search(k) or _CONTROL.search(v) for k, v in headers.items())


class _Burst:
    """The connections of one burst: each sends its host's requests one after another,
    reading only the head of each answer. Everything but a 304 ends that connection (its
    body is never read) and is left to ``Transport.request``; a connection that ends while
    its host has requests left is replaced, at most once per request.

    An http host gets all its connections (up to ``per_host``) at once: a TCP connection
    costs next to nothing. An https host gets ``START_TLS``, and only when its first answer
    took longer than ``FAR`` (a distant index, where round trips are the cost) as many more
    as its requests need: a new TLS connection costs milliseconds of CPU, more than the
    round trips it would save on a near index."""

    START_TLS = 16
    FAR = 0.02  # seconds from a request sent to its answer's head

    def __init__(self, transport: Transport, requests: list[Conditional], per_host: int) -> None:
        self.t = transport
        self.results: list[NotModified | None] = [None] * len(requests)
        self.queues: dict[tuple[str, str, int], list[int]] = {}
        self.requests = requests
        self.lines: dict[int, list[str]] = {}  # each request's request line and Host header
        for i, req in enumerate(requests):
            parts = urlsplit(req.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                continue
            port = parts.port or (443 if parts.scheme == "https" else 80)
            self.queues.setdefault((parts.scheme, parts.hostname, port), []).append(i)
            target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rpartition("@")[2]
            self.lines[i] = [f"GET {target} HTTP/1.1", f"Host: {host}"]
        self.per_host = per_host
        self.opened: dict[tuple[str, str, int], int] = {}
        self.live: dict[tuple[str, str, int], int] = {}  # connections open now
        self.far: set[tuple[str, str, int]] = set()  # hosts that got their more connections
        # connections a host may have opened in all: its first ones, and one more per request
        self.limit = {key: per_host + len(queue) for key, queue in self.queues.items()}
        self.selector = selectors.DefaultSelector()
        self.socks: list[socket.socket] = []

    def run(self, seconds: float, watch: _Watch) -> list[NotModified | None]:
        try:
            for key, queue in self.queues.items():
                queue.reverse()  # pop() takes them in order
                try:
                    found = socket.getaddrinfo(key[1], key[2], type=socket.SOCK_STREAM)
                except OSError:
                    continue  # no such host: Transport.request says so
                start = self.START_TLS if key[0] == "https" else self.per_host
                for _ in range(min(start, self.per_host, len(queue))):
                    self._open(key, queue, found[0])
            end = time.monotonic() + seconds
            while self.selector.get_map():
                if watch.fired or time.monotonic() > end:
                    break  # what is left goes through Transport.request, which says why
                for ready, events in self.selector.select(timeout=0.05):
                    self._step(ready.fileobj, ready.data, events)
            return self.results
        finally:
            for sock in self.socks:
                with contextlib.suppress(OSError):
                    sock.close()
            self.selector.close()

    def _open(self, key: tuple[str, str, int], queue: list[int], found: Any) -> None:
        opened = self.opened.get(key, 0)
        if opened >= self.limit[key]:
            return
        self.opened[key] = opened + 1
        family, kind, proto, _, address = found
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:
            return
        self.socks.append(sock)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        state = {"key": key, "queue": queue, "found": found, "phase": "connect", "out": b""}
        state.update(buf=b"", i=-1, open=True)
        try:
            sock.connect(address)
        except BlockingIOError:
            pass
        except OSError:
            return
        self.selector.register(sock, selectors.EVENT_WRITE, state)
        self.live[key] = self.live.get(key, 0) + 1

    def _widen(self, state: dict[str, Any]) -> None:
        """Open the rest of a far host's connections, once, at its first answer."""
        key = state["key"]
        if key in self.far or time.monotonic() - state["sent"] <= self.FAR:
            return
        self.far.add(key)
        queue = state["queue"]
        live = self.live.get(key, 0)
        more = min(self.per_host - live, len(queue))
        for _ in range(max(0, more)):
            self._open(key, queue, state["found"])

    def _drop(self, sock: Any, state: dict[str, Any]) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(sock)
        with contextlib.suppress(OSError):
            sock.close()
        if state.pop("open", False):  # once per connection, however often it is dropped
            self.live[state["key"]] -= 1
        if state["queue"]:
            self._open(state["key"], state["queue"], state["found"])

    def _step(self, sock: Any, state: dict[str, Any], events: int) -> None:
        try:
            phase = state["phase"]
            if phase == "connect":
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self._drop(sock, state)
                    return
                if state["key"][0] == "https":
                    tls = self.t.tls_context().wrap_socket(
                        sock, server_hostname=state["key"][1], do_handshake_on_connect=False
                    )
                    self.selector.unregister(sock)
                    self.socks.append(tls)
                    sock = tls
                    state["phase"] = "handshake"
                    self.selector.register(sock, selectors.EVENT_WRITE, state)
                    self._handshake(sock, state)
                    return
                self._next(sock, state)
                return
            if phase == "handshake":
                self._handshake(sock, state)
                return
            if phase == "send":
                self._send(sock, state)
                return
            if phase == "read":
                self._read(sock, state)
                return
        except (OSError, ValueError):
            self._drop(sock, state)

    def _handshake(self, sock: Any, state: dict[str, Any]) -> None:
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self.selector.modify(sock, selectors.EVENT_READ, state)
            return
        except ssl.SSLWantWriteError:
            self.selector.modify(sock, selectors.EVENT_WRITE, state)
            return
        self._next(sock, state)

    def _next(self, sock: Any, state: dict[str, Any]) -> None:
        queue: list[int] = state["queue"]
        if not queue:
            self._drop(sock, state)
            return
        i = queue.pop()
        sent = {
            "User-Agent": self.t.user_agent,
            "Accept-Encoding": "identity",
            **self.requests[i].headers,
        }
        lines = [*self.lines[i], *(f"{k}: {v}" for k, v in sent.items())]
        state.update(i=i, phase="send", out=("\r\n".join(lines) + "\r\n\r\n").encode(), buf=b"")
        state["sent"] = time.monotonic()
        self.selector.modify(sock, selectors.EVENT_WRITE, state)
        self._send(sock, state)
        return

    def _send(self, sock: Any, state: dict[str, Any]) -> None:
        try:
            n = sock.send(state["out"])
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        state["out"] = state["out"][n:]
        if not state["out"]:
            state["phase"] = "read"
            self.selector.modify(sock, selectors.EVENT_READ, state)

    def _read(self, sock: Any, state: dict[str, Any]) -> None:
        try:
            data = sock.recv(_HEAD_LIMIT)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        if not data:
            self._drop(sock, state)
            return
        buf = state["buf"] + data
        head, sep, rest = buf.partition(b"\r\n\r\n")
        if not sep:
            if len(buf) > _HEAD_LIMIT:
                self._drop(sock, state)
                return
            state["buf"] = buf
            return
        lines = head.decode("latin-1").split("\r\n")
        version, _, status = lines[0].partition(" ")
        if not status.startswith("304") or version not in ("HTTP/1.1", "HTTP/1.0"):
            self._drop(sock, state)
            return  # anything else is asked again, whole
        fields: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                fields[name.strip().lower()] = value.strip()
        self.results[state["i"]] = NotModified(fields.get("cache-control"))
        self._widen(state)
        close = fields.get("connection", "").lower() == "close" or version == "HTTP/1.0"
        if close or rest:
            self._drop(sock, state)
            return
        self._next(sock, state)
        return


# ------------------------------------------------------------------------------ the fetch loop

# a request target urllib3 would send as it is: RFC 3986 characters, upper-case escapes, no
# dot segments (urllib3 encodes, normalizes and removes those, so they go through it)
_PLAIN_TARGET = re.compile(r"/(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/?]|%[0-9A-F]{2})*")
_DOT_SEGMENT = re.compile(r"/\.\.?(?:/|\?|$)")
_PLAIN_HOST = re.compile(r"[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]")
_RECV = 256 << 10


class _Headers(Mapping[str, str]):
    """The header fields of an answer the fetch loop read: names without case, a field sent
    more than once joined with ", " (as urllib3's ``HTTPHeaderDict`` gives it)."""

    def __init__(self) -> None:
        self._fields: dict[str, tuple[str, list[str]]] = {}

    def add(self, name: str, value: str) -> None:
        got = self._fields.setdefault(name.lower(), (name, []))
        got[1].append(value)

    def get_all(self, name: str) -> list[str]:
        got = self._fields.get(name.lower())
        return [] if got is None else list(got[1])

    def __getitem__(self, name: str) -> str:
        return ", ".join(self._fields[name.lower()][1])

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._fields.values())

    def __len__(self) -> int:
        return len(self._fields)


class ReadTimeoutError(TimeoutError):
    """A read of the fetch loop made no progress for its timeout."""


class _Whole:
    """An answer the fetch loop read whole: the parts of urllib3's response that
    ``Response`` uses, over bytes in memory."""

    def __init__(self, status: int, reason: str, headers: Any, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self._body = memoryview(body)
        self._at = 0

    @property
    def length_remaining(self) -> int:
        return len(self._body) - self._at

    def read(self, amt: int, decode_content: bool = False) -> bytes:
        out = bytes(self._body[self._at : self._at + amt])
        self._at += len(out)
        return out

    read1 = read

    def drain_conn(self) -> None:
        self._at = len(self._body)

    def close(self) -> None:
        self._at = len(self._body)

    def release_conn(self) -> None:
        pass


class _Job:
    """One GET handed to the fetch loop, and what became of it: a ``_Whole``, an error, or
    None (left to urllib3)."""

    __slots__ = (
        "done",
        "error",
        "key",
        "limit",
        "request",
        "result",
        "seconds",
        "tried",
        "url",
        "watch",
    )

    def __init__(
        self,
        url: str,
        key: tuple[str, str, int],
        request: bytes,
        *,
        seconds: float,
        watch: _Watch,
        limit: int,
    ) -> None:
        self.url = url
        self.key = key
        self.request = request
        self.seconds = seconds
        self.watch = watch
        self.limit = limit
        self.done = threading.Event()
        self.result: _Whole | None = None
        self.error: BaseException | None = None
        self.tried = 0  # connections it was sent on


class _Conn:
    """One connection of the loop: its socket, its phase, and the job it serves."""

    __slots__ = (
        "buf",
        "events",
        "got",
        "head",
        "job",
        "key",
        "length",
        "out",
        "phase",
        "reused",
        "since",
        "sock",
    )

    def __init__(self, sock: Any, key: tuple[str, str, int]) -> None:
        self.sock = sock
        self.key = key
        self.phase = "connect"  # connect | handshake | send | head | body | idle
        self.job: _Job | None = None
        self.out = b""
        self.buf = bytearray()
        self.head: tuple[int, str, Any, bool] | None = None
        self.length = 0
        self.since = time.monotonic()  # the last progress of its job
        self.reused = False
        self.got = False  # a byte of the current answer arrived
        self.events = 0  # what the selector watches it for


class _FetchLoop:
    """One thread that sends plain GETs on non-blocking keep-alive sockets and reads each
    answer whole, for the threads that asked (each waits for its own).

    It takes only the plain case: an http(s) URL urllib3 would send as it is, headers without
    control characters, an answer framed by its ``Content-Length`` within the body limit.
    Anything else (a refused or failed connect, a TLS failure, an answer with no length,
    chunked or too big, a broken connection) is handed back untouched and goes through
    urllib3 as ever, so errors read as they always have; only a read that makes no progress
    for the timeout is an error of its own (``ReadTimeoutError``), and a request the deadline
    or a cancel cut off fails as any other. A reused connection the server had closed is
    tried once more on a new one.

    A lock makes hundreds of small requests: on urllib3, each costs its thread about a third
    of a millisecond of CPU, and the threads hand the GIL to each other around every socket
    call. Here a request is a few socket calls on one thread."""

    IDLE_EXIT = 2.0  # seconds with nothing to do before the thread ends

    def __init__(self, transport: Transport, per_host: int) -> None:
        self.t = transport
        self.per_host = max(1, per_host)
        self._lock = threading.Lock()
        self._inbox: list[_Job] = []
        self._thread: threading.Thread | None = None
        self._closing = False
        self._asleep = False  # the loop thread waits in select (a new job must wake it)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._addresses: dict[tuple[str, int], Any] = {}
        self.answered = 0  # answers read whole here (not handed back)
        # loop-thread state
        self._sel: selectors.BaseSelector | None = None
        self._conns: set[_Conn] = set()
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._waiting: dict[tuple[str, str, int], list[_Job]] = {}
        self._live: dict[tuple[str, str, int], int] = {}

    @staticmethod
    def job_for(
        url: str, headers: Mapping[str, str], seconds: float, watch: _Watch, limit: int
    ) -> _Job | None:
        """The job of a GET the loop can send, or None for one that goes through urllib3."""
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or "@" in parts.netloc or parts.fragment:
            return None
        host = parts.netloc
        bare = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            return None
        if not _PLAIN_HOST.fullmatch(bare) or not parts.hostname:
            return None
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if not _PLAIN_TARGET.fullmatch(target) or _DOT_SEGMENT.search(target):
            return None
        if not _plain_headers(headers):
            return None
        default = 443 if scheme == "https" else 80
        name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
        sent = {"Host": name if port == default else f"{name}:{port}"}
        if not any(k.lower() == "accept-encoding" for k in headers):
            sent["Accept-Encoding"] = "identity"
        sent.update(headers)
        lines = [f"GET {target} HTTP/1.1", *(f"{k}: {v}" for k, v in sent.items()), "", ""]
        try:
            data = "\r\n".join(lines).encode("latin-1")
        except UnicodeEncodeError:
            return None
        key = (scheme, parts.hostname, port)
        return _Job(url, key, data, seconds=seconds, watch=watch, limit=limit)

    def fetch(self, job: _Job) -> _Whole | None:
        """Send ``job`` on the loop and wait for it: its answer, None (urllib3's to send), or
        the error it raised."""
        with self._lock:
            if self._closing:
                return None
            self._inbox.append(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="fetch", daemon=True)
                self._thread.start()
            wake, self._asleep = self._asleep, False
        if wake:
            with contextlib.suppress(OSError):
                self._wake_w.send(b"\0")
        while not job.done.wait(1.0):
            if not self._running():  # the loop ended without it: urllib3's to send
                return None
        if job.error is not None:
            raise job.error
        return job.result

    def _running(self) -> bool:
        with self._lock:
            return self._thread is not None

    def close(self) -> None:
        with self._lock:
            self._closing = True
            thread = self._thread
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")
        if thread is not None:
            thread.join(5.0)
        for sock in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()

    # -- the loop thread

    def _run(self) -> None:
        sel = self._sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        idle_since = time.monotonic()
        jobs: list[_Job] = []
        try:
            while True:
                with self._lock:
                    jobs, self._inbox = self._inbox, []
                    closing = self._closing
                busy = (
                    jobs
                    or any(c.job is not None for c in self._conns)
                    or any(self._waiting.values())
                )
                if closing or (not busy and time.monotonic() - idle_since > self.IDLE_EXIT):
                    break
                if busy:
                    idle_since = time.monotonic()
                while jobs:
                    self._dispatch(jobs.pop(0))
                with self._lock:
                    pause = 0.0 if self._inbox else 0.05
                    self._asleep = pause > 0
                ready_now = sel.select(timeout=pause)
                with self._lock:
                    self._asleep = False
                for ready, events in ready_now:
                    conn = ready.data
                    if conn is None:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                        continue
                    self._step(conn, events)
                self._expire()
        finally:
            # every job not answered yet is urllib3's to send (the waiting first, so that
            # closing a connection starts none of them)
            for waiting in self._waiting.values():
                jobs += waiting
            self._waiting.clear()
            for conn in list(self._conns):
                if conn.job is not None:
                    jobs.append(conn.job)
                    conn.job = None
                self._close(conn)
            self._idle.clear()
            sel.close()
            with self._lock:
                self._thread = None
                jobs += self._inbox
                self._inbox = []
            for job in jobs:
                job.done.set()

    def _dispatch(self, job: _Job) -> None:
        if job.watch.fired:
            self._fail(job, OSError("cut off"))
            return
        idle = self._idle.get(job.key)
        while idle:
            conn = idle.pop()
            if conn in self._conns:
                conn.reused = True
                self._send(conn, job)
                return
        if self._live.get(job.key, 0) < self.per_host:
            self._open(job)
            return
        self._waiting.setdefault(job.key, []).append(job)

    def _open(self, job: _Job) -> None:
        key = job.key
        found = self._addresses.get(key[1:])
        try:
            if found is None:
                found = socket.getaddrinfo(key[1], key[2], type=socket.SOCK_STREAM)[0]
                self._addresses[key[1:]] = found
            family, kind, proto, _, address = found
            sock = socket.socket(family, kind, proto)
        except OSError:
            job.done.set()  # urllib3 says what is wrong
            return
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, key)
        conn.job = job
        conn.events = selectors.EVENT_WRITE
        self._conns.add(conn)
        self._live[key] = self._live.get(key, 0) + 1
        try:
            sock.connect(address)
        except BlockingIOError:
            pass
        except OSError:
            self._hand_back(conn)
            return
        assert self._sel is not None
        self._sel.register(sock, selectors.EVENT_WRITE, conn)

    def _send(self, conn: _Conn, job: _Job) -> None:
        conn.job = job
        job.tried += 1
        conn.phase = "send"
        conn.out = job.request
        conn.buf = bytearray()
        conn.head = None
        conn.got = False
        conn.since = time.monotonic()
        self._write(conn)  # a request fits the socket's buffer: no wait to be writable

    def _watch_for(self, conn: _Conn, events: int) -> None:
        """Watch ``conn`` for ``events`` (a system call only when that changes)."""
        if conn.events == events:
            return
        assert self._sel is not None
        try:
            self._sel.modify(conn.sock, events, conn)
        except KeyError:
            self._sel.register(conn.sock, events, conn)
        conn.events = events

    def _step(self, conn: _Conn, events: int) -> None:
        try:
            if conn.phase == "connect":
                if conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    self._hand_back(conn)
                    return
                if conn.key[0] == "https":
                    assert self._sel is not None
                    self._sel.unregister(conn.sock)
                    conn.sock = self.t.tls_context().wrap_socket(
                        conn.sock, server_hostname=conn.key[1], do_handshake_on_connect=False
                    )
                    conn.phase = "handshake"
                    self._sel.register(conn.sock, selectors.EVENT_WRITE, conn)
                    conn.events = selectors.EVENT_WRITE
                    self._handshake(conn)
                    return
                job = conn.job
                assert job is not None
                self._send(conn, job)
            elif conn.phase == "handshake":
                self._handshake(conn)
            elif conn.phase == "send":
                self._write(conn)
            elif conn.phase == "idle":
                self._close(conn)  # the server ended a connection at rest
            else:
                self._read(conn)
        except (OSError, ValueError):
            self._broken(conn)

    def _handshake(self, conn: _Conn) -> None:
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            self._watch_for(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch_for(conn, selectors.EVENT_WRITE)
            return
        except (OSError, ValueError):
            self._hand_back(conn)  # urllib3 says what is wrong with the certificate
            return
        job = conn.job
        assert job is not None
        self._send(conn, job)

    def _write(self, conn: _Conn) -> None:
        try:
            n = conn.sock.send(conn.out)
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            n = 0
        conn.out = conn.out[n:]
        if conn.out:
            self._watch_for(conn, selectors.EVENT_WRITE)
            return
        conn.phase = "head"
        self._watch_for(conn, selectors.EVENT_READ)

    def _read(self, conn: _Conn) -> None:
        job = conn.job
        assert job is not None
        while True:
            try:
                data = conn.sock.recv(_RECV)
            except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            if not data:
                self._broken(conn)
                return
            conn.got = True
            conn.since = time.monotonic()
            conn.buf += data
            if conn.head is None and not self._parse_head(conn):
                if conn.job is None:
                    return  # handed back
                continue  # more of the head may be read already (TLS)
            if len(conn.buf) >= conn.length:
                self._finish(conn)
                return

    def _parse_head(self, conn: _Conn) -> bool:
        """Read the head once it is all there; False while it is not (or when the answer
        was handed back)."""
        end = conn.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(conn.buf) > _HEAD_LIMIT:
                self._hand_back(conn)
            return False
        job = conn.job
        assert job is not None
        lines = bytes(conn.buf[:end]).decode("latin-1").split("\r\n")
        del conn.buf[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code, _, reason = rest.partition(" ")
        headers = _Headers()
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                self._hand_back(conn)
                return False
            headers.add(name, value.strip())
        lengths = set(headers.get_all("Content-Length"))
        bodiless = code in ("204", "304")  # no body, whatever the length says
        if (
            version not in ("HTTP/1.1", "HTTP/1.0")
            or not (len(code) == 3 and code.isdigit())
            or code[0] == "1"
            or "Transfer-Encoding" in headers
            or (len(lengths) != 1 and not bodiless)
        ):
            self._hand_back(conn)
            return False
        length = "0" if bodiless else lengths.pop()
        if not length.isdigit() or int(length) > job.limit:
            self._hand_back(conn)
            return False
        close = version == "HTTP/1.0" or "close" in headers.get("Connection", "").lower()
        conn.length = int(length)
        conn.head = (int(code), reason, headers, close)
        conn.phase = "body"
        return True

    def _finish(self, conn: _Conn) -> None:
        job, head = conn.job, conn.head
        assert job is not None
        assert head is not None
        status, reason, headers, close = head
        extra = len(conn.buf) > conn.length
        job.result = _Whole(status, reason, headers, bytes(conn.buf[: conn.length]))
        self.answered += 1
        job.done.set()
        conn.job, conn.head, conn.buf = None, None, bytearray()
        if close or extra:
            self._close(conn)
        else:
            conn.phase = "idle"
            self._idle.setdefault(conn.key, []).append(conn)
            self._watch_for(conn, selectors.EVENT_READ)
        self._next(conn.key)

    def _next(self, key: tuple[str, str, int]) -> None:
        waiting = self._waiting.get(key)
        while waiting and (self._idle.get(key) or self._live.get(key, 0) < self.per_host):
            self._dispatch(waiting.pop(0))

    def _broken(self, conn: _Conn) -> None:
        """The connection ended or failed before its answer was whole: a reused one that had
        sent nothing back is tried once on a new connection, anything else goes to urllib3."""
        job = conn.job
        if job is not None and conn.reused and not conn.got and job.tried < 2:
            conn.job = None
            self._close(conn)
            self._dispatch(job)
            return
        self._hand_back(conn)

    def _hand_back(self, conn: _Conn) -> None:
        job = conn.job
        conn.job = None
        self._close(conn)
        if job is not None:
            job.done.set()

    def _fail(self, job: _Job, exc: BaseException) -> None:
        what = f"GET {redact(job.url)}"
        job.error = self.t.deadline.failure(job.watch, exc, what, "GET", job.url)
        job.done.set()

    def _close(self, conn: _Conn) -> None:
        if conn not in self._conns:
            return
        self._conns.discard(conn)
        self._live[conn.key] -= 1
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
        assert self._sel is not None
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()
        self._next(conn.key)

    def _expire(self) -> None:
        """Fail the jobs the deadline or a cancel cut off, and those whose answer made no
        progress for their timeout."""
        now = time.monotonic()
        for conn in list(self._conns):
            job = conn.job
            if job is None:
                continue
            if job.watch.fired:
                conn.job = None
                self._close(conn)
                self._fail(job, OSError("cut off"))
            elif now - conn.since > job.seconds:
                conn.job = None
                self._close(conn)
                if conn.phase in ("connect", "handshake"):
                    job.done.set()  # urllib3 says why it cannot connect
                else:
                    self._fail(job, ReadTimeoutError(f"read timeout={job.seconds:g}"))
        for waiting in self._waiting.values():
            for job in [j for j in waiting if j.watch.fired]:
                waiting.remove(job)
                self._fail(job, OSError("cut off"))


# ------------------------------------------------------------------------------ the transport


class Transport:
    """A pool of keep-alive connections. Thread-safe; reuse it, and ``close`` it at the end.

    ``deadline``: the command's network budget (default: ``DEFAULT_DEADLINE`` seconds for this
    transport alone). ``sleep``: the backoff between attempts (default: a wait that the
    deadline bounds and ``cancel`` ends)."""

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        proxy: str | None = None,
        connections: int = 4,
        sleep: Callable[[float], None] | None = None,
        deadline: Deadline | None = None,
        fetch_loop: bool = False,
    ) -> None:
        self.timeout = timeout
        self.deadline = deadline if deadline is not None else Deadline()
        self._sleep = sleep
        self._user_agent = user_agent
        self._connections = max(connections, 1)
        self._proxy = proxy
        self._pool_made: urllib3.PoolManager | None = None
        self._tls_lock = threading.Lock()
        self._tls_context: ssl.SSLContext | None = None
        if proxy:
            self._make_pool()  # a proxy that is no URL is refused now
        self._loop: _FetchLoop | None = None
        if fetch_loop and not proxy:
            self._loop = _FetchLoop(self, max(connections, 1))

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
        if self._pool_made is not None:
            self._pool_made.clear()

    @property
    def _pool(self) -> urllib3.PoolManager:
        """urllib3's pool, made at its first use (``_pool_classes``)."""
        pool = self._pool_made
        return pool if pool is not None else self._make_pool()

    def _make_pool(self) -> urllib3.PoolManager:
        import urllib3
        import urllib3.exceptions

        with self._tls_lock:
            if self._pool_made is not None:
                return self._pool_made
            settings: dict[str, Any] = {
                "num_pools": 8,
                "maxsize": self._connections,
                "block": False,
                "retries": False,  # retries and redirects are this module's own loop
                "timeout": urllib3.Timeout(connect=self.timeout, read=self.timeout),
            }
            if self._tls_context is not None:
                settings["ssl_context"] = self._tls_context
            pool: urllib3.PoolManager
            if self._proxy:
                try:
                    pool = urllib3.ProxyManager(self._proxy, **settings)
                except (urllib3.exceptions.HTTPError, ValueError) as exc:
                    raise TransportError(
                        f"the proxy {redact(self._proxy)} is not usable: {exc}",
                        kind="invalid",
                        name=type(exc).__name__,
                        detail=_short(exc),
                    ) from None
            else:
                pool = urllib3.PoolManager(**settings)
            # connections that hand their socket to the request's deadline
            pool.pool_classes_by_scheme = _pool_classes()
            self._pool_made = pool
            return pool

    @property
    def user_agent(self) -> str:
        return self._user_agent

    @property
    def looped(self) -> int:
        """How many answers the fetch loop has read whole (0 without one)."""
        return 0 if self._loop is None else self._loop.answered

    def revalidate(
        self, requests: list[Conditional], *, connections: int
    ) -> list[NotModified | None]:
        """Send every conditional GET of ``requests`` at once from this thread, on up to
        ``connections`` connections per host, and read only the head of each answer: each
        a ``NotModified``, or None for an answer that is not a 304 (another status, a
        redirect, a connection that broke, the deadline or a cancel): that one is asked
        again through ``request``, which follows, retries and reports as always. Through a
        proxy, every one is None. A few hundred pages revalidate in the time of a round
        trip or two, at a few tens of microseconds of CPU each."""
        if not requests or self._proxy:
            return [None] * len(requests)
        sendable = [_plain_headers(r.headers) for r in requests]
        if not all(sendable):  # a value that could end its line early: never sent from here
            kept = [r for r, ok in zip(requests, sendable, strict=True) if ok]
            answers = iter(self.revalidate(kept, connections=connections))
            return [next(answers) if ok else None for ok in sendable]
        if any(r.url[:6].lower() == "https:" for r in requests):
            self._share_tls_context()
        seconds = self.timeout
        left = self.deadline.left()
        if left is not None:
            seconds = max(min(seconds, left), 0.001)
        try:
            watch = self.deadline.begin("GET", requests[0].url)
        except BuildImageError:
            return [None] * len(requests)
        try:
            return _Burst(self, requests, max(1, connections)).run(seconds, watch)
        finally:
            self.deadline.end(watch)

    def tls_context(self) -> ssl.SSLContext:
        """The context every https connection of this transport uses."""
        self._share_tls_context()
        assert self._tls_context is not None
        return self._tls_context

    def _share_tls_context(self) -> None:
        """One TLS context for every connection of this transport, made at its first https
        request, with urllib3's defaults (``urllib3.util.ssl_.create_urllib3_context``: TLS
        1.2 at least, no compression, no session tickets, certificates required and host
        names checked) and the system's CA certificates. Left to itself, urllib3 makes a
        context for each new connection and loads the CA certificates into it again, about
        25 ms of CPU each: a lock that opens tens of connections to an index spent most of
        its CPU there. Made here, not by urllib3, so that an https request on the fetch loop
        does not import urllib3."""
        with self._tls_lock:
            if self._tls_context is not None:
                return
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, names checked
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.options |= (
                ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3 | ssl.OP_NO_COMPRESSION | ssl.OP_NO_TICKET
            )
            if sys.version_info >= (3, 13):  # as urllib3 does on these versions
                context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT
            context.post_handshake_auth = True
            context.load_default_certs()
            self._tls_context = context
            if self._pool_made is not None:
                self._pool_made.connection_pool_kw["ssl_context"] = context

    def cancel(self) -> None:
        """End every request in flight on this transport's deadline, and refuse new ones."""
        self.deadline.cancel()

    def __enter__(self) -> Transport:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        body: bytes | None = None,
        query: Mapping[str, str] | None = None,
        auth: OriginAuth | None = None,
        check_hop: Callable[[str], None] | None = None,
        stream: bool = False,
        retry: RetryPolicy = NO_RETRY,
        timeout: float | None = None,
        max_redirects: int = MAX_REDIRECTS,
        max_body: int = MAX_BODY,
    ) -> Response:
        """Send ``method url`` (with ``query`` encoded onto it), following redirects and
        retrying per ``retry``. Without ``stream`` the body is read now (at most ``max_body``
        bytes). The caller closes the response."""
        if query:
            url = f"{url}{'&' if '?' in url else '?'}{urlencode(dict(query))}"
        attempts = max(1, retry.attempts)
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                resp = self._attempt(
                    method,
                    url,
                    headers=headers or {},
                    body=body,
                    auth=auth,
                    check_hop=check_hop,
                    stream=stream,
                    timeout=timeout,
                    max_redirects=max_redirects,
                    max_body=max_body,
                )
            except TransportError as exc:
                if last or exc.kind not in RETRYABLE:
                    raise
                self.deadline.pause(retry.delay(attempt), method, url, self._sleep)
                continue
            if resp.status in retry.statuses and not last:
                delay = retry.delay(attempt, resp.retry_after())
                resp.close()
                self.deadline.pause(delay, method, url, self._sleep)
                continue
            return resp
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None,
        auth: OriginAuth | None,
        check_hop: Callable[[str], None] | None,
        stream: bool,
        timeout: float | None,
        max_redirects: int,
        max_body: int,
    ) -> Response:
        """One attempt, redirects included, under one watch of the deadline."""
        watch = self.deadline.begin(method, url)
        _current.watch = watch
        try:
            resp = self._follow(
                method,
                url,
                watch=watch,
                headers=headers,
                body=body,
                auth=auth,
                check_hop=check_hop,
                timeout=timeout,
                max_redirects=max_redirects,
                max_body=max_body,
                whole=not stream,
            )
            if not stream:
                with resp:  # read whole now, and the connection goes back to the pool
                    _ = resp.content
        except BaseException:
            self.deadline.end(watch)
            raise
        finally:
            _current.watch = None
        return resp

    def _follow(
        self,
        method: str,
        url: str,
        *,
        watch: _Watch,
        headers: Mapping[str, str],
        body: bytes | None,
        auth: OriginAuth | None,
        check_hop: Callable[[str], None] | None,
        timeout: float | None,
        max_redirects: int,
        max_body: int,
        whole: bool = False,
    ) -> Response:
        current = url
        for _ in range(max_redirects + 1):
            if check_hop is not None:
                check_hop(current)
            sent = {"User-Agent": self._user_agent, **headers}
            if auth is not None and same_origin(current, auth.origin):
                sent.update(auth.headers)
            raw = self._send(
                method,
                current,
                sent,
                body,
                timeout=timeout,
                watch=watch,
                whole=whole,
                limit=max_body,
            )
            location = raw.headers.get("Location")
            if raw.status in REDIRECT_STATUSES and location:
                Response(raw, current).discard()  # its body is never read
                current = urljoin(current, location)
                if (raw.status == 303 and method != "HEAD") or (
                    raw.status in (301, 302) and method == "POST"
                ):
                    method, body = "GET", None
                continue
            return Response(
                raw,
                current,
                method=method,
                deadline=self.deadline,
                watch=watch,
                max_body=max_body,
            )
        raise TransportError(
            f"{method} {redact(url)} redirected more than {max_redirects} times",
            kind="redirects",
            name="TooManyRedirects",
            detail=f"more than {max_redirects} redirects",
        )

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout: float | None,
        watch: _Watch,
        whole: bool = False,
        limit: int = MAX_BODY,
    ) -> urllib3.BaseHTTPResponse | _Whole:
        """One request of an attempt. A GET read whole goes to the fetch loop when this
        transport has one and the loop takes it; everything else, and whatever the loop
        hands back, goes through urllib3."""
        seconds = self.timeout if timeout is None else timeout
        left = self.deadline.left()
        if left is not None:
            seconds = max(min(seconds, left), 0.001)
        if self._loop is not None and whole and method == "GET" and body is None:
            job = _FetchLoop.job_for(url, headers, seconds, watch, limit)
            got = None if job is None else self._loop.fetch(job)
            if got is not None:
                return got
        if self._tls_context is None and url[:6].lower() == "https:":
            self._share_tls_context()
        import urllib3
        import urllib3.exceptions

        pool = self._pool
        try:
            return pool.urlopen(
                method,
                url,
                headers=dict(headers),
                body=body,
                preload_content=False,
                decode_content=False,  # Response decodes, bounded
                redirect=False,
                timeout=urllib3.Timeout(connect=seconds, read=seconds),
            )
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self.deadline.failure(
                watch, exc, f"{method} {redact(url)}", method, url
            ) from None


def _failure(exc: BaseException, what: str) -> TransportError:
    import urllib3.exceptions  # the failure of a urllib3 request, or a timeout

    if isinstance(exc, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        kind = "timeout"
    elif isinstance(
        exc,
        (
            urllib3.exceptions.ConnectTimeoutError,  # NewConnectionError too: refused, no DNS
            urllib3.exceptions.ProxyError,
            urllib3.exceptions.SSLError,
        ),
    ):
        kind = "connect"
    elif isinstance(exc, urllib3.exceptions.LocationValueError):
        kind = "invalid"
    else:
        kind = "broken"
    name, detail = type(exc).__name__, _short(exc)
    return TransportError(f"{what}: {name}: {detail}", kind=kind, name=name, detail=detail)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) < 200 else text[:200] + "..."
