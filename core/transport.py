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

A ``Response`` is read whole (``content``) or streamed (``iter_bytes``). Its connection goes
back to the pool for keep-alive only once its body is fully read: closing an unread response
drains a small body and closes the socket of a big one, so an unread 304 or 404 never breaks
the next request on that connection.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import urlencode, urljoin

import urllib3
import urllib3.exceptions

from core.errors import TransportError
from core.urls import redact, same_origin

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 10
DRAIN_LIMIT = 1 << 20  # read at most this much of an unwanted body to keep a connection
RETRY_AFTER_LIMIT = 30.0
USER_AGENT = "vllm-musa-image"
RETRYABLE = frozenset({"connect", "timeout", "broken"})


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


class Response:
    """One answer: ``status``, ``reason``, ``headers`` (case-insensitive), the final ``url``
    (after redirects), and the body, read whole or streamed. Close it (or use it as a context
    manager) when done."""

    def __init__(self, raw: urllib3.BaseHTTPResponse, url: str) -> None:
        self._raw = raw
        self.status: int = raw.status
        self.reason: str = raw.reason or ""
        self.headers: Mapping[str, str] = raw.headers
        self.url = url
        self._content: bytes | None = None

    @property
    def content(self) -> bytes:
        if self._content is None:
            try:
                self._content = self._raw.data
            except urllib3.exceptions.HTTPError as exc:
                raise _failure(exc, f"reading {redact(self.url)}") from None
        return self._content

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.content)

    def iter_bytes(self, size: int) -> Iterator[bytes]:
        try:
            yield from self._raw.stream(size)
        except urllib3.exceptions.HTTPError as exc:
            raise _failure(exc, f"reading {redact(self.url)}") from None

    def retry_after(self) -> float | None:
        """A numeric ``Retry-After`` in seconds (at most 30), else None."""
        value = self.headers.get("Retry-After", "")
        if value.isdigit():
            return min(float(value), RETRY_AFTER_LIMIT)
        return None

    def close(self) -> None:
        """Give the connection back for keep-alive only once the response is fully read: an
        unread body would break the next request on it (http.client's ResponseNotReady). A big
        unread body closes the socket instead."""
        raw = self._raw
        remaining = raw.length_remaining
        if remaining is not None and remaining > DRAIN_LIMIT:
            raw.close()
        else:
            try:
                raw.drain_conn()
            except urllib3.exceptions.HTTPError:
                raw.close()
        raw.release_conn()

    def __enter__(self) -> Response:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Transport:
    """A pool of keep-alive connections. Thread-safe; reuse it, and ``close`` it at the end."""

    def __init__(
        self,
        *,
        timeout: float = 30.0,
        user_agent: str = USER_AGENT,
        proxy: str | None = None,
        connections: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.timeout = timeout
        self._sleep = sleep
        self._user_agent = user_agent
        settings: dict[str, Any] = {
            "num_pools": 8,
            "maxsize": max(connections, 1),
            "block": False,
            "retries": False,  # retries and redirects are this module's own loop
            "timeout": urllib3.Timeout(connect=timeout, read=timeout),
        }
        self._pool: urllib3.PoolManager
        if proxy:
            try:
                self._pool = urllib3.ProxyManager(proxy, **settings)
            except (urllib3.exceptions.HTTPError, ValueError) as exc:
                raise TransportError(
                    f"the proxy {redact(proxy)} is not usable: {exc}",
                    kind="invalid",
                    name=type(exc).__name__,
                    detail=_short(exc),
                ) from None
        else:
            self._pool = urllib3.PoolManager(**settings)

    def close(self) -> None:
        self._pool.clear()

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
    ) -> Response:
        """Send ``method url`` (with ``query`` encoded onto it), following redirects and
        retrying per ``retry``. The caller closes the response."""
        if query:
            url = f"{url}{'&' if '?' in url else '?'}{urlencode(dict(query))}"
        attempts = max(1, retry.attempts)
        for attempt in range(attempts):
            last = attempt + 1 == attempts
            try:
                resp = self._follow(
                    method,
                    url,
                    headers=headers or {},
                    body=body,
                    auth=auth,
                    check_hop=check_hop,
                    stream=stream,
                    timeout=timeout,
                    max_redirects=max_redirects,
                )
            except TransportError as exc:
                if last or exc.kind not in RETRYABLE:
                    raise
                self._sleep(retry.delay(attempt))
                continue
            if resp.status in retry.statuses and not last:
                delay = retry.delay(attempt, resp.retry_after())
                resp.close()
                self._sleep(delay)
                continue
            return resp
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _follow(
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
    ) -> Response:
        current = url
        for _ in range(max_redirects + 1):
            if check_hop is not None:
                check_hop(current)
            sent = {"User-Agent": self._user_agent, **headers}
            if auth is not None and same_origin(current, auth.origin):
                sent.update(auth.headers)
            raw = self._send(method, current, sent, body, stream=stream, timeout=timeout)
            location = raw.headers.get("Location")
            if raw.status in REDIRECT_STATUSES and location:
                Response(raw, current).close()
                current = urljoin(current, location)
                if (raw.status == 303 and method != "HEAD") or (
                    raw.status in (301, 302) and method == "POST"
                ):
                    method, body = "GET", None
                continue
            return Response(raw, current)
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
        stream: bool,
        timeout: float | None,
    ) -> urllib3.BaseHTTPResponse:
        options: dict[str, Any] = {}
        if timeout is not None:
            options["timeout"] = urllib3.Timeout(connect=timeout, read=timeout)
        try:
            return self._pool.urlopen(
                method,
                url,
                headers=dict(headers),
                body=body,
                preload_content=not stream,
                redirect=False,
                **options,
            )
        except urllib3.exceptions.HTTPError as exc:
            raise _failure(exc, f"{method} {redact(url)}") from None


def _failure(exc: urllib3.exceptions.HTTPError, what: str) -> TransportError:
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
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
