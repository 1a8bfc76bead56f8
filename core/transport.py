"""The one HTTP client of the tool, on urllib3: every other module speaks HTTP through it.

A ``Transport`` is a set of keep-alive connection pools (urllib3's) with a User-Agent, a
timeout per connect and per read, the host's proxies and trust store (``core.network``), and
the command's time bounds (``core.deadline``: its network budget, stalls and Ctrl-C). It is
thread-safe: the resolver fetches many pages at once through one transport from a pool of
threads.

``Transport.request`` follows redirects itself rather than in urllib3: every URL it is about
to request (the first one too) goes through the caller's ``check_hop``, which raises to refuse
it, and the caller's credentials (``OriginAuth``) go to their own origin only, never to another
host or scheme a redirect names. Connection failures, timeouts, stalls and the
``RetryPolicy.statuses`` (429, 5xx) are retried a bounded number of times with exponential
backoff (a numeric ``Retry-After`` wins when the policy allows); when the attempts are spent,
the last answer is returned, or the last failure raised as ``TransportError``. An untrusted
certificate or a proxy that refuses the credentials is never retried. Every other answer is
returned as it is: what a status means is the caller's business.

Each request goes through the proxy ``NetworkConfig.proxy_for`` names (https through an HTTP
CONNECT tunnel), or directly. Every https connection of a transport shares one TLS context,
with the trust store of its ``NetworkConfig``.

The answers are ``core.response.Response``: bounded in memory, decoded a piece at a time.
"""

from __future__ import annotations

import base64
import functools
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urljoin

if TYPE_CHECKING:
    import urllib3

from core.closing import Closing
from core.deadline import (
    DEADLINE_HINT,
    DEFAULT_DEADLINE,
    Deadline,
    RequestWatch,
)
from core.errors import EnvironmentFailureError, TransportError
from core.network import CERT_HINT, DIRECT, NetworkConfig, Proxy
from core.response import MAX_BODY, Response, failure, short
from core.urls import redact, same_origin

__all__ = [
    "ACCEPT_COMPRESSED",
    "DEADLINE_HINT",
    "DEFAULT_DEADLINE",
    "MIN_RATE",
    "Deadline",
    "OriginAuth",
    "Response",
    "RetryPolicy",
    "Transport",
    "basic_auth",
]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
USER_AGENT = "vllm-musa-image"
RETRYABLE = frozenset({"connect", "timeout", "broken"})
MIN_RATE = 1024.0  # bytes a second, over --timeout seconds: a slower transfer is a stall
ACCEPT_COMPRESSED = "gzip, deflate"  # what Response decodes
IDENTITY = "identity"  # for bytes a hash covers as served (wheels, range reads)


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


@dataclass(frozen=True, kw_only=True)
class _Request:
    """A request as each attempt sends it: ``Transport.request``'s arguments, the query on the
    URL and the default timeout filled in."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None
    auth: OriginAuth | None
    check_hop: Callable[[str], None] | None
    stream: bool
    timeout: float
    max_redirects: int
    max_body: int


# ------------------------------------------------------------------------------ connections

# The request in flight in this thread, and how long its head may take: the connection
# classes below hand themselves to it, so that the deadline can shut their socket down, and
# mark when the request is sent.
_current = threading.local()


class _Attached:
    """A connection that tells the current request's watch about itself before it connects
    and before it sends, and connects to the addresses ``_addresses`` keeps for its host
    (mixed in ahead of urllib3's connection classes)."""

    _dns_host: str
    port: int

    def connect(self) -> None:
        _expect_head(self)
        super().connect()  # type: ignore[misc]
        watch: RequestWatch | None = getattr(_current, "watch", None)
        if watch is not None:
            watch.hold(self)

    def request(self, *args: Any, **kwargs: Any) -> None:
        _expect_head(self)
        super().request(*args, **kwargs)  # type: ignore[misc]

    def _new_conn(self) -> socket.socket:
        """urllib3's connect, to each address of the host in turn until one answers."""
        import urllib3.exceptions

        name = self._dns_host
        try:
            addresses = _addresses(name, self.port)
        except socket.gaierror as exc:
            raise urllib3.exceptions.NameResolutionError(name, self, exc) from exc  # type: ignore[arg-type]
        failed: urllib3.exceptions.NewConnectionError | None = None
        try:
            for address in addresses:
                self._dns_host = address
                try:
                    sock: socket.socket = super()._new_conn()  # type: ignore[misc]
                    return sock
                except urllib3.exceptions.NewConnectionError as exc:
                    failed = exc
        finally:
            self._dns_host = name
        assert failed is not None  # getaddrinfo returns at least one address or raises
        raise failed


_ADDRESS_TTL = 60.0  # seconds a host's addresses are reused
_resolved: dict[tuple[str, int], tuple[float, tuple[str, ...]]] = {}
_resolving: dict[tuple[str, int], threading.Lock] = {}
_resolving_lock = threading.Lock()


def _addresses(host: str, port: int) -> tuple[str, ...]:
    """The addresses of ``host``, looked up once for all the connections a minute opens: a
    lock opens tens of connections to an index at once, and a burst of tens of DNS queries
    loses some to a resolver that drops packets (glibc then waits 5 s to ask again). The
    threads that ask together wait for one lookup."""
    key = (host, port)
    with _resolving_lock:
        lock = _resolving.setdefault(key, threading.Lock())
    with lock:
        now = time.monotonic()
        found = _resolved.get(key)
        if found is not None and now - found[0] < _ADDRESS_TTL:
            return found[1]
        import urllib3.util.connection

        family = urllib3.util.connection.allowed_gai_family()
        infos = socket.getaddrinfo(host.strip("[]"), port, family, socket.SOCK_STREAM)
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
        _resolved[key] = (now, addresses)
        return addresses


def _expect_head(conn: object) -> None:
    watch: RequestWatch | None = getattr(_current, "watch", None)
    if watch is None:
        return
    watch.attach(conn)
    head: float | None = getattr(_current, "head", None)
    if head is not None:
        watch.expect_head(head)


@functools.cache
def _pool_classes() -> dict[str, type]:
    """urllib3's pools, with connections that hand their socket to the request's watch."""
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


def tls_context(network: NetworkConfig) -> ssl.SSLContext:
    """A client context with urllib3's defaults (TLS 1.2 at least, no compression, no session
    tickets, certificates required and host names checked) and the trust store of
    ``network``: the files it names, else the system's CA certificates."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, names checked
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_SSLv2 | ssl.OP_NO_SSLv3 | ssl.OP_NO_COMPRESSION | ssl.OP_NO_TICKET
    if sys.version_info >= (3, 13):  # as urllib3 does on these versions
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN | ssl.VERIFY_X509_STRICT
    context.post_handshake_auth = True
    trust = network.trust
    if trust.cafile is None and trust.capath is None:
        context.load_default_certs()
        return context
    try:
        context.load_verify_locations(
            cafile=None if trust.cafile is None else str(trust.cafile),
            capath=None if trust.capath is None else str(trust.capath),
        )
    except (ssl.SSLError, OSError) as exc:
        raise EnvironmentFailureError(
            f"{trust.describe()}: the CA certificates cannot be loaded ({short(exc)})",
            hint=CERT_HINT,
        ) from None
    return context


# ------------------------------------------------------------------------------ the client


class Transport(Closing):
    """Keep-alive connection pools, direct and through proxies. Thread-safe; reuse it, and
    ``close`` it at the end.

    ``network``: the proxies and trust store (default: direct, the system's CA
    certificates). ``deadline``: the command's network budget (default:
    ``DEFAULT_DEADLINE`` seconds for this transport alone). ``min_rate``: bytes a second a
    body must bring over ``timeout`` seconds, and a head must arrive within ``timeout`` of
    its request, else the request stalled (None: neither bound, for a stream of events that
    may pause). ``sleep``: the backoff between attempts (default: a wait that the deadline
    bounds and ``cancel`` ends)."""

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        network: NetworkConfig = DIRECT,
        connections: int = 4,
        min_rate: float | None = MIN_RATE,
        sleep: Callable[[float], None] | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        self.timeout = timeout
        self.network = network
        self.min_rate = min_rate
        self.deadline = deadline if deadline is not None else Deadline()
        self._sleep = sleep
        self._user_agent = user_agent
        self._connections = max(connections, 1)
        self._lock = threading.Lock()
        self._pools: dict[str, urllib3.PoolManager] = {}  # "" direct, else a proxy's URL
        self._tls: ssl.SSLContext | None = None

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.clear()

    @property
    def user_agent(self) -> str:
        return self._user_agent

    def tls_context(self) -> ssl.SSLContext:
        """The context every https connection of this transport uses, made once."""
        with self._lock:
            if self._tls is None:
                self._tls = tls_context(self.network)
            return self._tls

    def _pool(self, proxy: Proxy | None, *, https: bool) -> urllib3.PoolManager:
        """The pools of requests sent through ``proxy`` (None: directly). The TLS context is
        made for the first https request (or an https proxy), never for plain http."""
        key = "" if proxy is None else proxy.url
        pool = self._pools.get(key)
        if pool is None:
            pool = self._new_pool(key, proxy)
        if https and "ssl_context" not in pool.connection_pool_kw:
            pool.connection_pool_kw["ssl_context"] = self.tls_context()  # for new pools
        return pool

    def _new_pool(self, key: str, proxy: Proxy | None) -> urllib3.PoolManager:
        import urllib3

        context = None
        if proxy is not None and proxy.url.startswith("https:"):
            context = self.tls_context()
        with self._lock:
            pool = self._pools.get(key)
            if pool is not None:
                return pool
            settings: dict[str, Any] = {
                "num_pools": 8,
                "maxsize": self._connections,
                "block": False,
                "retries": False,  # retries and redirects are this module's own loop
            }
            if proxy is None:
                pool = urllib3.PoolManager(**settings)
            else:
                headers = {}
                if proxy.credentials is not None:
                    headers["Proxy-Authorization"] = basic_auth(*proxy.credentials)
                pool = urllib3.ProxyManager(
                    proxy.url, proxy_headers=headers, proxy_ssl_context=context, **settings
                )
            # connections that hand their socket to the request's deadline
            pool.pool_classes_by_scheme = _pool_classes()
            self._pools[key] = pool
            return pool

    def cancel(self) -> None:
        """End every request in flight on this transport's deadline, and refuse new ones."""
        self.deadline.cancel()

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
        req = _Request(
            method=method,
            url=url,
            headers=headers or {},
            body=body,
            auth=auth,
            check_hop=check_hop,
            stream=stream,
            timeout=self.timeout if timeout is None else timeout,
            max_redirects=max_redirects,
            max_body=max_body,
        )
        attempts = max(1, retry.attempts)
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                resp = self._attempt(req)
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

    def _attempt(self, req: _Request) -> Response:
        """One attempt, redirects included, under one watch of the deadline."""
        watch = self.deadline.begin(req.method, req.url)
        _current.watch = watch
        try:
            resp = self._follow(req, watch)
            if not req.stream:
                with resp:  # read whole now, and the connection goes back to the pool
                    _ = resp.content
        except BaseException:
            self.deadline.end(watch)
            raise
        finally:
            _current.watch = None
            _current.head = None
        return resp

    def _follow(self, req: _Request, watch: RequestWatch) -> Response:
        method, current, body, auth = req.method, req.url, req.body, req.auth
        for _ in range(req.max_redirects + 1):
            if req.check_hop is not None:
                req.check_hop(current)
            sent = {"User-Agent": self._user_agent, **req.headers}
            if auth is not None and same_origin(current, auth.origin):
                sent.update(auth.headers)
            raw = self._send(method, current, sent, body, timeout=req.timeout, watch=watch)
            location = raw.headers.get("Location")
            if raw.status in REDIRECT_STATUSES and location:
                Response(raw, current).discard()  # its body is never read
                current = urljoin(current, location)
                if (raw.status == 303 and method != "HEAD") or (
                    raw.status in (301, 302) and method == "POST"
                ):
                    method, body = "GET", None
                continue
            watch.expect_body(req.timeout, self.min_rate)
            return Response(
                raw,
                current,
                method=method,
                deadline=self.deadline,
                watch=watch,
                max_body=req.max_body,
                eager=self.min_rate is not None,
            )
        raise TransportError(
            f"{method} {redact(req.url)} redirected more than {req.max_redirects} times",
            kind="redirects",
            name="TooManyRedirects",
            detail=f"more than {req.max_redirects} redirects",
        )

    def _send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout: float,
        watch: RequestWatch,
    ) -> urllib3.BaseHTTPResponse:
        """One request of an attempt, through the proxy the network names for ``url``."""
        seconds = timeout
        left = self.deadline.left()
        if left is not None:
            seconds = max(min(seconds, left), 0.001)
        proxy = self.network.proxy_for(url)
        pool = self._pool(proxy, https=url[:6].lower() == "https:")
        _current.head = seconds if self.min_rate is not None else None
        import urllib3
        import urllib3.exceptions

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
            what = f"{method} {redact(url)}"
            raise self.deadline.cut_off(watch, method, url) or failure(
                exc, what, url=url, proxy=proxy, network=self.network
            ) from None
