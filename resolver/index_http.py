"""One GET to an index, and the counts of what a client's requests did.

``IndexHttp.get`` sends a GET through ``core.transport``: a timeout per connect and per read,
the command's network deadline, connection errors, 429 and 5xx retried a bounded number of times
with exponential backoff. Every redirect hop is checked (https, or http on loopback), and the
index's credentials go to the index's own origin only. A failure is reported as an
``IndexReadError`` (or a ``DeadlineError``) naming the index and the redacted URL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from typing import Literal, get_args

from core.errors import DeadlineError, IndexReadError, TransportError
from core.response import MAX_BODY
from core.transport import (
    MAX_REDIRECTS,
    RETRY_STATUSES,
    OriginAuth,
    Response,
    RetryPolicy,
    Transport,
    basic_auth,
)
from core.urls import check_fetch_url, redact
from resolver.endpoints import IndexEndpoint, auth_variable

CountKind = Literal[
    "pages", "fresh", "not_modified", "downloads", "metadata", "ranges", "parsed_cached"
]


class RequestCounts:
    """How many requests of each kind a client made in this run (``stats``: kind -> count);
    counted from any thread."""

    def __init__(self) -> None:
        self.stats: dict[str, int] = dict.fromkeys(get_args(CountKind), 0)
        self._lock = threading.Lock()

    def count(self, kind: CountKind) -> None:
        with self._lock:
            self.stats[kind] += 1


class IndexHttp:
    """GETs to the indexes on one transport, each retried by ``retry``."""

    def __init__(self, transport: Transport, retry: RetryPolicy) -> None:
        self._transport = transport
        self._retry = retry

    @contextmanager
    def get(
        self,
        index: IndexEndpoint,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
        ok: frozenset[int] = frozenset({200}),
        max_body: int = MAX_BODY,
        too_large: tuple[str, str | None] = ("", None),
    ) -> Iterator[Response]:
        """GET with timeout and bounded retries; yields a response whose status is in ``ok``
        or 404 (callers decide what a 404 means). Without ``stream`` the body is read whole,
        at most ``max_body`` bytes; ``too_large`` is the (message, hint) past that.

        Redirects are followed by the transport, every hop checked: it must be https (or
        http on loopback), and the index's credentials go to the index's own origin only,
        never to a CDN or another host a file URL or a redirect names."""
        attempts = self._retry.attempts
        auth = None
        if index.auth is not None:
            auth = OriginAuth(origin=index.url, headers={"Authorization": basic_auth(*index.auth)})
        try:
            resp = self._transport.request(
                "GET",
                url,
                headers=headers,
                auth=auth,
                check_hop=partial(check_fetch_url, index.name),
                stream=stream,
                retry=self._retry,
                max_body=max_body,
            )
        except DeadlineError as exc:
            raise DeadlineError(f"index {index.name}: {exc.message}", hint=exc.hint) from None
        except TransportError as exc:
            raise _failed(
                index, url, exc, attempts=attempts, max_body=max_body, too_large=too_large
            ) from None
        with resp:
            status = resp.status
            if status in ok or status == 404:
                yield resp
                return
        raise _refused(index, url, status, attempts=attempts)


def _failed(
    index: IndexEndpoint,
    url: str,
    exc: TransportError,
    *,
    attempts: int,
    max_body: int,
    too_large: tuple[str, str | None],
) -> IndexReadError:
    """What a GET that got no usable answer reports."""
    if exc.kind in ("certificate", "proxy-auth"):  # a setting to fix, not the network
        return IndexReadError(f"index {index.name}: {exc.message}", hint=exc.hint)
    if exc.kind == "redirects":
        return IndexReadError(
            f"index {index.name}: GET {redact(url)} redirected more than {MAX_REDIRECTS} times"
        )
    if exc.kind == "too-large":
        message, hint = too_large
        return IndexReadError(
            message or f"index {index.name}: {redact(url)} has more than {max_body} bytes",
            hint=hint,
        )
    return IndexReadError(
        f"index {index.name}: GET {redact(url)} failed after {attempts} attempts "
        f"({exc.name}: {exc.detail})",
        hint="check that the index is up and reachable; nothing was written",
    )


def _refused(index: IndexEndpoint, url: str, status: int, *, attempts: int) -> IndexReadError:
    """What a GET answered with a status its caller does not take reports."""
    if status in RETRY_STATUSES:
        return IndexReadError(
            f"index {index.name}: GET {redact(url)} failed after {attempts} attempts "
            f"(HTTP {status})",
            hint="check that the index is up and reachable; nothing was written",
        )
    hint = None
    if status in (401, 403):
        hint = f"the index wants credentials: set {auth_variable(index.name)}=user:token"
    return IndexReadError(
        f"index {index.name}: GET {redact(url)} answered HTTP {status}", hint=hint
    )
