"""What the index server reads from a request, as RFC 9110 and PEP 691 say: headers looked up
case-insensitively, the ranking of Accept and Accept-Encoding, conditional requests
(If-None-Match before If-Modified-Since) and a single byte range.

Pure functions of header values: no I/O, no state.
"""

from __future__ import annotations

import contextlib
import email.utils
from email.message import Message
from typing import Literal, NamedTuple

from testbed.simple_index import JSON_CONTENT_TYPE

__all__ = [
    "Headers",
    "Request",
    "accepts_gzip",
    "not_modified",
    "parse_range",
    "prefers_json",
]

_HTML_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html", "text/*", "*/*")


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


def accepts_gzip(accept_encoding: str | None) -> bool:
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


def prefers_json(accept: str | None) -> bool:
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


def not_modified(headers: Message, etag: str, mtime: float) -> bool:
    """True when the client's copy is current (answer 304): an If-None-Match naming ``etag``
    (weak or strong) or ``*``, else an If-Modified-Since no earlier than ``mtime``."""
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


def parse_range(header: str, size: int) -> tuple[int, int] | Literal["unsatisfiable"] | None:
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
