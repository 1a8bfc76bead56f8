"""The resolver's cache: the file store (``core.file_store``), and beside it wheel metadata,
revalidatable index pages and search records.

Layout under the cache root, besides the file store's ``files/`` and ``tmp/``::

    metadata/abcdef...               a wheel's METADATA (or a download record), by a sha256 key
    pages/<sha256 of url>.page       an index page: a line of its digest, url, validators and
                                     content type, then its body as served
    pages/<sha256 of url>.rows       that page parsed, keyed by the sha256 of what it parsed
    pages/<sha256 of url>.<key>.rows that page parsed for one target (its files the target may
                                     run), keyed by the sha256 of what it parsed and the key
    searches/<slot>.json             a stack's search record (``resolver.search_record``)

None of it is trusted: a page is used only when its bytes match the digest on its head line,
and a kept parse or a search record only when its payload hashes to the sum on its first line
(the caller checks the payload as untrusted input). A search record (one per slot: the sha256
of a stack's name, target and index URLs) is written atomically after a successful lock
(``put_search``); one that does not read back whole is None, and its payload is checked by
``resolver.search_record``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from core.file_store import FileStore, check_key
from core.fsutil import atomic_write_bytes


def _str(value: object) -> str:
    if type(value) is not str:
        raise TypeError("not a string")
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _read_summed(path: Path, max_bytes: int, head_of: Callable[[bytes], bytes]) -> object | None:
    """The JSON payload of a file written as a head line and the payload, when it reads back
    whole (at most ``max_bytes``) and its head is ``head_of(payload)``; else None."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        return None
    head, newline, payload = data.partition(b"\n")
    if not newline or head != head_of(payload):
        return None
    try:
        loaded: object = orjson.loads(payload)
        return loaded
    except orjson.JSONDecodeError:  # too deep too
        return None


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _header_value(value: object) -> str | None:
    """A validator as it is sent back in a request header: no control character (a CR or
    LF planted in the cache would end the header early and add one of its own)."""
    text = _opt_str(value)
    if text is not None and _CONTROL.search(text):
        raise ValueError("a control character in a header value")
    return text


def _page_head(line: bytes) -> PageHead | None:
    m = _PAGE_HEAD.fullmatch(line)
    if m is None:
        return None
    try:
        head = json.loads(m.group(2))
        return PageHead(
            url=_str(head["url"]),
            content_type=_str(head["content_type"]),
            etag=_header_value(head.get("etag")),
            last_modified=_header_value(head.get("last_modified")),
            fresh_until=float(head.get("fresh_until", 0.0)),
            digest=m.group(1).decode(),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def usable_validator(etag: str | None, last_modified: str | None) -> tuple[str | None, str | None]:
    """The (ETag, Last-Modified) that ``If-Range`` may carry: a weak ETag may not (RFC 9110)."""
    strong = etag if etag and not etag.startswith("W/") else None
    return strong, last_modified or None


def conditional_headers(etag: str | None, last_modified: str | None) -> dict[str, str]:
    """The headers of a conditional GET for a copy kept with these validators; none: the
    request is a plain GET."""
    headers: dict[str, str] = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


_VARIANT = re.compile(r"[A-Za-z0-9_-]{1,80}")


def _parsed_head(digest: str, payload: bytes) -> bytes:
    """The first line of a parsed page: what it was parsed from, and the sum of the rest."""
    return f"parsed-page 1 {digest} {hashlib.sha256(payload).hexdigest()}".encode()


def _search_head(payload: bytes) -> bytes:
    """The first line of a search record: its format and the sum of the rest."""
    return f"search-record 1 {hashlib.sha256(payload).hexdigest()}".encode()


def page_digest(url: str, content_type: str, body: bytes) -> str:
    """The sha256 that names one version of a page: its URL, content type and bytes."""
    return hashlib.sha256(b"\0".join((url.encode(), content_type.encode(), body))).hexdigest()


@dataclass(frozen=True)
class CachedPage:
    url: str
    content_type: str
    body: bytes
    etag: str | None
    last_modified: str | None
    fresh_until: float = 0.0  # from the server's Cache-Control max-age; 0: revalidate always
    # ``page_digest`` of the page, computed when not given
    digest: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.digest:
            digest = page_digest(self.url, self.content_type, self.body)
            object.__setattr__(self, "digest", digest)

    @property
    def head(self) -> PageHead:
        """The page without its body: every field of ``PageHead`` is one of the page's."""
        return PageHead(**{f.name: getattr(self, f.name) for f in dataclasses.fields(PageHead)})


@dataclass(frozen=True)
class PageHead:
    """What the line before a cached page's body says: enough to revalidate the page and to
    know which version of it the cache holds, without reading the body."""

    url: str
    content_type: str
    etag: str | None
    last_modified: str | None
    fresh_until: float
    digest: str


_PAGE_HEAD = re.compile(rb"page 1 ([0-9a-f]{64}) (\{[^\n]*\})")


class Cache(FileStore):
    """The file store at ``root``, with the resolver's records beside it. ``note`` reports
    what the cache removed (the console's note)."""

    # metadata ----------------------------------------------------------------------
    def metadata_path(self, key: str) -> Path:
        check_key(key)
        return self.root / "metadata" / key  # one directory: no mkdir per new prefix

    def get_metadata(self, key: str, *, max_bytes: int | None = None) -> bytes | None:
        """The entry ``key``; None when absent, or larger than ``max_bytes``."""
        path = self.metadata_path(key)
        try:
            with path.open("rb") as fh:
                if max_bytes is None:
                    return fh.read()
                data = fh.read(max_bytes + 1)
        except OSError:
            return None
        return data if len(data) <= max_bytes else None

    def put_metadata(self, key: str, data: bytes) -> None:
        atomic_write_bytes(self.metadata_path(key), data)

    def drop_metadata(self, key: str) -> None:
        self.metadata_path(key).unlink(missing_ok=True)

    # pages -------------------------------------------------------------------------
    def _page_path(self, key: str) -> Path:
        return self.root / "pages" / (hashlib.sha256(key.encode()).hexdigest() + ".page")

    def get_page_head(self, url: str) -> PageHead | None:
        """The head line of the page cached for ``url``, its body unread (and so unchecked:
        ``get_page`` checks it when it is used); None when absent or unreadable."""
        try:
            with self._page_path(url).open("rb") as fh:
                line = fh.readline(1 << 16)
        except OSError:
            return None
        return _page_head(line.rstrip(b"\n")) if line.endswith(b"\n") else None

    def get_page(self, url: str, *, max_bytes: int | None = None) -> CachedPage | None:
        """The page cached for ``url``; None when absent, unreadable, not what was stored
        (its digest does not match), or (with ``max_bytes``, the largest body allowed) too
        large to be a page this run would accept."""
        path = self._page_path(url)
        limit = None if max_bytes is None else max_bytes + (1 << 16)  # the head line, too
        try:
            with path.open("rb") as fh:
                data = fh.read() if limit is None else fh.read(limit + 1)
        except OSError:
            return None
        if limit is not None and len(data) > limit:
            return None
        line, newline, body = data.partition(b"\n")
        head = _page_head(line) if newline else None
        if head is None:
            return None
        page = CachedPage(
            url=head.url,
            content_type=head.content_type,
            body=body,
            etag=head.etag,
            last_modified=head.last_modified,
            fresh_until=head.fresh_until,
        )
        return page if page.digest == head.digest else None

    def _parsed_path(self, url: str, variant: str | None) -> Path:
        if variant is None:
            return self._page_path(url).with_suffix(".rows")
        if _VARIANT.fullmatch(variant) is None:
            raise ValueError(f"not a parsed-page variant: {variant!r}")
        return self._page_path(url).with_suffix(f".{variant}.rows")

    def get_parsed(
        self, url: str, digest: str, *, max_bytes: int, variant: str | None = None
    ) -> object | None:
        """What ``put_parsed`` stored for ``url`` (and ``variant``) when it was stored for
        ``digest`` (the sha256 of the bytes it was parsed from) and reads back whole: a
        payload that does not hash to the sum stored with it, or any other file, is None.
        The caller checks the payload as untrusted input."""
        path = self._parsed_path(url, variant)
        return _read_summed(path, max_bytes, functools.partial(_parsed_head, digest))

    def put_parsed(
        self, url: str, digest: str, payload: object, *, variant: str | None = None
    ) -> None:
        """Keep ``payload`` (JSON types) beside the page of ``url``, for the bytes whose
        sha256 is ``digest``; it replaces what an earlier version of the page left. A
        ``variant`` (a target's key: letters, digits, ``_`` and ``-``) has a file of its
        own, so that the parses of one page for two targets are both kept."""
        body = orjson.dumps(payload)
        path = self._parsed_path(url, variant)
        atomic_write_bytes(path, _parsed_head(digest, body) + b"\n" + body)

    # search records ------------------------------------------------------------------
    def search_path(self, slot: str) -> Path:
        check_key(slot)
        return self.root / "searches" / f"{slot}.json"

    def get_search(self, slot: str, *, max_bytes: int) -> object | None:
        """What ``put_search`` stored for ``slot`` when it reads back whole (at most
        ``max_bytes``, and the payload hashes to the sum stored with it); else None. The
        caller checks the payload as untrusted input."""
        return _read_summed(self.search_path(slot), max_bytes, _search_head)

    def put_search(self, slot: str, payload: object) -> None:
        """Keep ``payload`` (JSON types) as the search record of ``slot``, replacing any."""
        body = orjson.dumps(payload)
        atomic_write_bytes(self.search_path(slot), _search_head(body) + b"\n" + body)

    def put_page(self, page: CachedPage, *, key: str) -> None:
        """Store ``page`` (whose ``url`` is the final one, after redirects) under ``key``,
        the URL that was asked for: one line of its digest and fields, then its bytes."""
        head = dataclasses.asdict(page.head)
        del head["digest"]  # the line names it before the fields
        line = f"page 1 {page.digest} {json.dumps(head, separators=(',', ':'))}\n"
        atomic_write_bytes(self._page_path(key), line.encode() + page.body)
