"""All HTTP of the resolver: index pages, metadata files, range reads and downloads.

Every request has a timeout per connect and per read, and ends within the command's network
deadline (``--deadline``, ``core.transport.Deadline``); connection errors, 429 and 5xx are
retried a bounded number of times with exponential backoff, then reported naming the index.
Pages are cached on disk and revalidated (ETag / Last-Modified).

Bounds. A page is read at most ``NetworkSettings.max_page_bytes`` bytes, decoded
(``--max-page-mb``, 64 MB by default: the biggest project pages on PyPI are a few MB). A PEP
658 metadata file, and a METADATA read out of a wheel, at most ``MAX_METADATA_BYTES``; the range
reads of one wheel's METADATA at most ``MAX_RANGE_BYTES`` in all. A download stops at the first
byte past the index's ``size``, the response's ``Content-Length`` or the caller's ``max_size``.

Downloads are streamed into the cache's staging directory, hashed while streaming, and adopted
into the content-addressed store only once verified: the index's hashes match or, for a file
the index gives no sha256 for, the bytes are a complete archive (a wheel's zip directory reads,
an sdist's gzip stream reaches its end), so that a response cut short is never kept. For such
a file a download record (the sha256 of the bytes from that URL, their size, ETag and
Last-Modified, which later runs revalidate) is written once the file is adopted; a record whose
file is missing, does not hash to its name or is not a complete archive is removed, and the
file fetched again. Every cached file is re-hashed before it is used (``resolver.cache``). A
server that ignores range requests gets the wheel downloaded once: streamed into the cache
like any download (never held in memory), and METADATA read from the file.

A download of a file with an advertised sha256 that breaks off resumes: the next request asks
for the rest (``Range: bytes=N-``, ``If-Range`` on the validator the bytes came with), in this
run while ``--retries`` allow, else in the next one from the ``.part`` the cache keeps. The
bytes kept are hashed again with the rest, so the whole file is verified as always; one that
does not verify is downloaded once more from zero. A 200 (ranges ignored, or the file changed),
a 416 or a 206 that does not continue those bytes starts over from zero. Each download reports
its bytes to ``progress`` (bars on a terminal, ``core.progress``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import threading
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from core.errors import (
    BuildImageError,
    DeadlineError,
    HashMismatchError,
    IndexReadError,
    MetadataError,
    TransportError,
)
from core.network import DIRECT, NetworkConfig
from core.progress import Bar, DownloadProgress
from core.response import MAX_BODY
from core.transport import (
    ACCEPT_COMPRESSED,
    DEFAULT_DEADLINE,
    IDENTITY,
    MAX_REDIRECTS,
    RETRY_STATUSES,
    Deadline,
    OriginAuth,
    Response,
    RetryPolicy,
    Transport,
    basic_auth,
)
from core.urls import check_fetch_url, project_url, redact
from resolver import __version__
from resolver.cache import (
    Cache,
    CachedPage,
    PageHead,
    Part,
    PartOrigin,
    default_cache_dir,
    usable_validator,
)
from resolver.endpoints import IndexEndpoint, auth_variable
from resolver.simple_page import (
    ACCEPT,
    IndexFile,
    PageParseError,
    ProjectPage,
    Row,
    kept_from_cache,
    parse_find_links_page,
    parse_kept,
    rows_from_cache,
)
from resolver.target import TargetTags
from resolver.wheel_metadata import MAX_METADATA_BYTES, metadata_from_zip
from sources.sdist import MAX_UNPACKED_BYTES

CHUNK = 1 << 20
USER_AGENT = f"vllm-musa-image/{__version__}"
MAX_PAGE_BYTES = 64 << 20  # an index page, decoded (--max-page-mb)
MAX_RANGE_BYTES = 64 << 20  # the range reads of one wheel's METADATA, in all
MAX_RECORD_BYTES = 64 << 10  # a download record
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Downloaded:
    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class NetworkSettings:
    timeout: float = 30.0
    attempts: int = 4
    backoff: float = 0.5
    concurrency: int = 32  # requests in flight at once
    read_ahead: int = 32  # more, for the pages a re-lock knows it will read (resolver.lock)
    refresh: bool = False  # revalidate every page, even one the server said is still fresh
    network: NetworkConfig = DIRECT  # proxies and trust store (core.network)
    max_page_bytes: int = MAX_PAGE_BYTES  # the biggest index page read, decoded
    deadline: float | None = DEFAULT_DEADLINE  # the network budget when no Deadline is given


@dataclass(frozen=True)
class _Record:
    """What an earlier run downloaded from a URL the index gives no sha256 for."""

    sha256: str
    size: int
    etag: str | None
    last_modified: str | None
    path: Path


__all__ = ["Downloaded", "IndexClient", "IndexEndpoint", "NetworkSettings", "open_client"]


def open_client(
    cache_dir: Path | None,
    env: Mapping[str, str],
    *,
    timeout: float = 30.0,
    retries: int = 3,
    refresh: bool = False,
    deadline: Deadline | None = None,
    network: NetworkConfig = DIRECT,
    max_page_bytes: int = MAX_PAGE_BYTES,
    note: Callable[[str], None] | None = None,
    progress: DownloadProgress | None = None,
) -> IndexClient:
    """A client on the cache at ``cache_dir`` (default: from ``env``, see ``default_cache_dir``).
    ``deadline``: the command's network budget; ``note``: where the cache reports what it
    removed; ``progress``: where downloads show their bars."""
    root = cache_dir or default_cache_dir(env)
    settings = NetworkSettings(
        timeout=timeout,
        attempts=max(1, retries + 1),
        refresh=refresh,
        network=network,
        max_page_bytes=max_page_bytes,
    )
    cache = Cache(root, note=note)
    cache.prepare()  # a cache that cannot be written fails before the work
    return IndexClient(cache, settings, deadline=deadline, progress=progress)


class IndexClient:
    def __init__(
        self,
        cache: Cache,
        settings: NetworkSettings | None = None,
        *,
        sleep: Callable[[float], None] | None = None,
        deadline: Deadline | None = None,
        progress: DownloadProgress | None = None,
    ) -> None:
        self.cache = cache
        self.settings = settings or NetworkSettings()
        self.progress = progress or DownloadProgress.off()  # bars of the downloads in flight
        self.deadline = deadline if deadline is not None else Deadline(self.settings.deadline)
        self._sleep = sleep
        self._transport = self._new_transport()
        self._retry = RetryPolicy(attempts=self.settings.attempts, backoff=self.settings.backoff)
        self._flat_pages: dict[str, ProjectPage] = {}
        # every page asked for in this run, once: the page, the head of a cached copy the
        # index said is current (``page_digest``), or None for a 404
        self._fetched: dict[str, CachedPage | PageHead | None] = {}
        # pages whose body arrived whole in this run: their parse is not kept (a parse is
        # kept when the same bytes are parsed again, after a 304, by a search that runs)
        self._arrived: set[str] = set()
        self._page_locks: dict[str, threading.Lock] = {}
        self._flat_lock = threading.Lock()
        # held while a whole file streams from a URL: a second stream of it waits, then reuses
        self._streaming: dict[str, threading.RLock] = {}
        self._whole: set[str] = set()  # sha256 of cached files found complete archives
        self._done: dict[str, Downloaded] = {}  # URL -> its bytes, fetched in this run
        self.stats = {
            "pages": 0,
            "fresh": 0,
            "not_modified": 0,
            "downloads": 0,
            "metadata": 0,
            "ranges": 0,
            "parsed_cached": 0,
        }
        self._stats_lock = threading.Lock()

    def _new_transport(self) -> Transport:
        # one keep-alive pool for the hundreds of small pages a closure needs, a connection
        # per thread at most; the proxies and trust store are the command's (core.network)
        return Transport(
            timeout=self.settings.timeout,
            user_agent=USER_AGENT,
            network=self.settings.network,
            connections=max(self.settings.concurrency + self.settings.read_ahead, 4),
            sleep=self._sleep,
            deadline=self.deadline,
        )

    def close(self) -> None:
        self._transport.close()

    def cancel(self) -> None:
        """End every request in flight now and refuse new ones (Ctrl-C)."""
        self._transport.cancel()

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    def _stream_lock(self, url: str) -> threading.RLock:
        with self._stats_lock:
            return self._streaming.setdefault(url, threading.RLock())

    # ----------------------------------------------------------------- requests

    @contextmanager
    def _request(
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
        attempts = self.settings.attempts
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
            if exc.kind in ("certificate", "proxy-auth"):  # a setting to fix, not the network
                raise IndexReadError(f"index {index.name}: {exc.message}", hint=exc.hint) from None
            if exc.kind == "redirects":
                raise IndexReadError(
                    f"index {index.name}: GET {redact(url)} redirected more than "
                    f"{MAX_REDIRECTS} times"
                ) from None
            if exc.kind == "too-large":
                message, hint = too_large
                raise IndexReadError(
                    message or f"index {index.name}: {redact(url)} has more than {max_body} bytes",
                    hint=hint,
                ) from None
            raise IndexReadError(
                f"index {index.name}: GET {redact(url)} failed after {attempts} attempts "
                f"({exc.name}: {exc.detail})",
                hint="check that the index is up and reachable; nothing was written",
            ) from None
        with resp:
            status = resp.status
            if status in ok or status == 404:
                yield resp
                return
        if status in RETRY_STATUSES:
            raise IndexReadError(
                f"index {index.name}: GET {redact(url)} failed after {attempts} attempts "
                f"(HTTP {status})",
                hint="check that the index is up and reachable; nothing was written",
            )
        hint = None
        if status in (401, 403):
            hint = f"the index wants credentials: set {auth_variable(index.name)}=user:token"
        raise IndexReadError(
            f"index {index.name}: GET {redact(url)} answered HTTP {status}", hint=hint
        )

    # ----------------------------------------------------------------- pages

    def project_files(
        self, index: IndexEndpoint, project: str, target_tags: TargetTags | None = None
    ) -> ProjectPage | None:
        """The files of ``project`` on ``index``; None when the index says 404. With
        ``target_tags``, only the files that target may run (``TargetTags.may_run``: every
        sdist, every file that is not a wheel, every wheel with a tag it accepts): the page's
        ``whole()`` has the rest. A find-links page is always whole."""
        if index.format == "find-links":
            return self._flat_files(index)
        url = project_url(index.url, project)
        page = self._get_page(index, url)
        if page is None:
            return None
        if target_tags is None:
            return self._parsed(index, url, page)
        return self._parsed_for(index, url, page, target_tags)

    def _parsed(self, index: IndexEndpoint, url: str, page: CachedPage) -> ProjectPage:
        """The files of ``page``: its parse kept in the cache for these very bytes (a
        revalidated page is not parsed again), else parsed now and kept."""
        digest = page.digest
        bound = 2 * self.settings.max_page_bytes + (1 << 16)
        kept = self._keeps_parse(url, page)
        if kept:
            rows = rows_from_cache(self.cache.get_parsed(url, digest, max_bytes=bound))
            if rows is not None:
                self._count("parsed_cached")
                return ProjectPage(rows, digest=digest)
        rows = self._parse(index, url, page, None)[0]
        if kept:
            self.cache.put_parsed(url, digest, rows)
        return ProjectPage(rows, digest=digest)

    def _keeps_parse(self, url: str, page: CachedPage) -> bool:
        """Whether the parse of ``page`` is read from and kept in the cache: a page the cache
        keeps (it has validators or a freshness), read from the cache in this run. A page
        that has just arrived is parsed and not kept: a re-lock whose pages are unchanged
        replays its search and parses nothing, so a parse pays for its keeping only when
        the same bytes are parsed again (a re-lock whose search runs)."""
        with self._stats_lock:
            arrived = url in self._arrived
        return not arrived and bool(page.etag or page.last_modified or page.fresh_until)

    def _parsed_for(
        self, index: IndexEndpoint, url: str, page: CachedPage, target_tags: TargetTags
    ) -> ProjectPage:
        """``_parsed`` for one target: the parse kept is the target's own (its file in the
        cache, and its digest, are the page's bytes and the target's key)."""
        key = target_tags.key
        digest = hashlib.sha256(f"{page.digest} {key}".encode()).hexdigest()
        bound = 2 * self.settings.max_page_bytes + (1 << 16)
        kept = self._keeps_parse(url, page)
        whole = self._whole_later(index, url, page)
        if kept:
            stored = self.cache.get_parsed(url, digest, max_bytes=bound, variant=key)
            found = kept_from_cache(stored, key)
            if found is not None:
                self._count("parsed_cached")
                return ProjectPage(
                    found[0], target=key, dropped=found[1], whole=whole, digest=page.digest
                )
        rows, dropped = self._parse(index, url, page, target_tags.may_run)
        if kept:
            payload = {"target": key, "dropped": dropped, "rows": rows}
            self.cache.put_parsed(url, digest, payload, variant=key)
        return ProjectPage(rows, target=key, dropped=dropped, whole=whole, digest=page.digest)

    def _whole_later(
        self, index: IndexEndpoint, url: str, page: CachedPage
    ) -> Callable[[], ProjectPage]:
        """What reads every file of ``page`` when a refusal needs them. A page the cache keeps
        is read again from the cache then (checked against its digest), and this run keeps
        only its head: the bodies of a few hundred pages are tens of MB. Any other page is
        kept whole until then."""
        if not (page.etag or page.last_modified or page.fresh_until):

            def from_memory() -> ProjectPage:  # from the same bytes, so the same page
                return ProjectPage(self._parse(index, url, page, None)[0], digest=page.digest)

            return from_memory
        head = PageHead(
            url=page.url,
            content_type=page.content_type,
            etag=page.etag,
            last_modified=page.last_modified,
            fresh_until=page.fresh_until,
            digest=page.digest,
        )
        with self._page_lock(url):
            if self._fetched.get(url) is page:
                self._fetched[url] = head

        def from_cache() -> ProjectPage:  # the same bytes while the cache holds them
            again = self._get_page(index, url)
            if again is None:
                return ProjectPage([], digest=head.digest)
            return ProjectPage(self._parse(index, url, again, None)[0], digest=again.digest)

        return from_cache

    def _parse(
        self,
        index: IndexEndpoint,
        url: str,
        page: CachedPage,
        keep: Callable[[str], bool] | None,
    ) -> tuple[list[Row], int]:
        try:
            return parse_kept(page.body, page.content_type, page.url, keep=keep)
        except PageParseError as exc:
            raise IndexReadError(f"index {index.name}: {redact(url)}: {exc}") from None

    def _flat_files(self, index: IndexEndpoint) -> ProjectPage:
        with self._flat_lock:
            if index.url in self._flat_pages:
                return self._flat_pages[index.url]
            page = self._get_page(index, index.url)
            if page is None:
                raise IndexReadError(
                    f"index {index.name}: find-links page {redact(index.url)} is 404"
                )
            try:
                files = parse_find_links_page(page.body, page.content_type, page.url)
            except PageParseError as exc:
                raise IndexReadError(f"index {index.name}: {redact(index.url)}: {exc}") from None
            self._flat_pages[index.url] = files
            return files

    def page_digest(self, index: IndexEndpoint, project: str) -> str | None:
        """The ``page_digest`` of ``project``'s page on ``index`` as the index serves it now
        (revalidated like any page); None when the index says 404. When the cache's copy is
        current, its body is neither read nor parsed: a later ``project_files`` of the same
        page in this run reads it then, checked against this digest, with no new request."""
        url = project_url(index.url, project)
        got = self._fetch(index, url, body=False)
        return None if got is None else got.digest

    def known_digest(self, index: IndexEndpoint, project: str) -> tuple[bool, str | None]:
        """(True, what ``page_digest`` would return) when this run has already asked for the
        page; (False, None) when it has not."""
        url = project_url(index.url, project)
        with self._page_lock(url):
            if url not in self._fetched:
                return False, None
            got = self._fetched[url]
        return True, None if got is None else got.digest

    def _get_page(self, index: IndexEndpoint, url: str) -> CachedPage | None:
        got = self._fetch(index, url, body=True)
        assert got is None or isinstance(got, CachedPage)
        return got

    def _fetch(self, index: IndexEndpoint, url: str, *, body: bool) -> CachedPage | PageHead | None:
        """The page at ``url``, asked for once per run (``_fetched``): the whole page, or
        with ``body=False`` maybe only the head of the cached copy the index said is
        current."""
        with self._page_lock(url):
            if url in self._fetched:
                got = self._fetched[url]
                if got is None or isinstance(got, CachedPage) or not body:
                    return got
                page = self.cache.get_page(url, max_bytes=self.settings.max_page_bytes)
                if page is not None and page.digest == got.digest:
                    self._fetched[url] = page
                    return page
                # the bytes on disk are not the ones the index said are current: ask again
                got = self._request_page(index, url, None)
            else:
                cached: CachedPage | PageHead | None = (
                    self.cache.get_page(url, max_bytes=self.settings.max_page_bytes)
                    if body
                    else self.cache.get_page_head(url)
                )
                got = self._request_page(index, url, cached)
                if isinstance(got, PageHead) and body:
                    raise AssertionError("unreachable: a whole cached page was revalidated")
            self._fetched[url] = got
            return got

    def _page_lock(self, url: str) -> threading.Lock:
        with self._stats_lock:
            lock = self._page_locks.get(url)
            if lock is None:
                lock = self._page_locks[url] = threading.Lock()
            return lock

    def _still_current(
        self, url: str, cached: CachedPage | PageHead, fresh_until: float
    ) -> CachedPage | PageHead | None:
        """``cached``, which the index has just said is current; when the index now says it
        stays fresh for longer, the whole page with that freshness, rewritten in the cache.
        None when the bytes on disk are not that page any more."""
        if fresh_until <= cached.fresh_until:
            return cached
        whole = (
            cached
            if isinstance(cached, CachedPage)
            else self.cache.get_page(url, max_bytes=self.settings.max_page_bytes)
        )
        if whole is None or whole.digest != cached.digest:
            return None
        whole = dataclasses.replace(whole, fresh_until=fresh_until)
        self.cache.put_page(whole, key=url)
        return whole

    def _request_page(
        self, index: IndexEndpoint, url: str, cached: CachedPage | PageHead | None
    ) -> CachedPage | PageHead | None:
        limit = self.settings.max_page_bytes
        now = time.time()
        if cached is not None and not self.settings.refresh and cached.fresh_until > now:
            self._count("fresh")
            return cached
        headers = _page_request_headers(cached)
        self._count("pages")
        too_large = (
            f"index {index.name}: the page {redact(url)} has more than {limit >> 20} MB "
            f"({limit} bytes, decoded)",
            f"raise --max-page-mb (default {MAX_PAGE_BYTES >> 20}) if the index really serves "
            "pages this big",
        )
        with self._request(
            index,
            url,
            headers=headers,
            ok=frozenset({200, 304}),
            max_body=limit,
            too_large=too_large,
        ) as resp:
            if resp.status == 404:
                return None
            if resp.status == 304:
                if cached is None:
                    raise IndexReadError(
                        f"index {index.name}: {redact(url)} answered 304 to a plain GET"
                    )
                self._count("not_modified")
                fresh_until = _fresh_until(resp.headers.get("Cache-Control"), now)
                # when the bytes on disk are not the page revalidated, it is kept as it was:
                # its body is checked when it is read
                return self._still_current(url, cached, fresh_until) or cached
            page = CachedPage(
                url=resp.url,
                content_type=resp.headers.get("Content-Type", "text/html"),
                body=resp.content,
                etag=resp.headers.get("ETag"),
                last_modified=resp.headers.get("Last-Modified"),
                fresh_until=_fresh_until(resp.headers.get("Cache-Control"), now),
            )
        if page.etag or page.last_modified or page.fresh_until > now:
            self.cache.put_page(page, key=url)
        with self._stats_lock:
            self._arrived.add(url)
        return page

    # ----------------------------------------------------------------- downloads

    def download(
        self, index: IndexEndpoint, file: IndexFile, *, label: str, max_size: int | None = None
    ) -> Downloaded:
        """The verified bytes of ``file`` in the cache; downloads only when missing or changed.

        ``label`` names the package for messages. The index's hashes, when given, must match.
        ``max_size``: a file the index says is larger, or that grows larger while streaming,
        is refused before it is read whole. A download of a file with an advertised sha256
        that breaks off resumes from the bytes already received (``Range``, ``If-Range``), in
        this run while attempts are left (``--retries``), else in the next one
        (``resolver.cache``); the whole file is hashed at the end either way.
        """
        if max_size is not None and file.size is not None and file.size > max_size:
            raise IndexReadError(_too_large(label, index, file, file.size, max_size))
        with self._stream_lock(file.url):
            done = self._done.get(file.url)
            if done is not None:  # downloaded or revalidated earlier in this run
                return done
            expected = file.hashes.get("sha256")
            if expected:
                path = self.cache.verified_file(expected)
                if path is not None:
                    return Downloaded(expected, path.stat().st_size, path)
            record_key = _key("download-record", file.url)
            record = None if expected else self._record(record_key, file)
            headers: dict[str, str] = {}
            if record is not None:
                if record.etag:
                    headers["If-None-Match"] = record.etag
                if record.last_modified:
                    headers["If-Modified-Since"] = record.last_modified
            with (
                self.cache.download_part(file.url, sha256=expected) as part,
                self.progress.bar(file.filename, total=file.size) as bar,
            ):
                got = self._download_into(
                    index,
                    file,
                    part=part,
                    bar=bar,
                    headers=headers,
                    record=record,
                    label=label,
                    max_size=max_size,
                )
            self._done[file.url] = got
            return got

    def _download_into(
        self,
        index: IndexEndpoint,
        file: IndexFile,
        *,
        part: Part,
        bar: Bar,
        headers: Mapping[str, str],
        record: _Record | None,
        label: str,
        max_size: int | None,
    ) -> Downloaded:
        """The requests of one download: the first, a resume after each break while attempts
        are left, and one clean restart from zero when resumed bytes cannot be used. What
        breaks off (the connection, the server, the deadline) is kept for the next run; bytes
        found wrong never are."""
        attempts_left = self.settings.attempts
        restart_left = 1
        part.keep = True
        while True:
            attempts_left -= 1
            offset = _usable_offset(part, max_size)
            sent = {**headers, "Accept-Encoding": IDENTITY, **_resume_headers(part, offset)}
            ok = frozenset({200, 206, 304, 416} if offset else {200, 304})
            with self._request(index, file.url, headers=sent, stream=True, ok=ok) as resp:
                if resp.status == 404:
                    part.restart()
                    raise IndexReadError(
                        f"{label}: index {index.name} lists {file.filename}, "
                        f"but {redact(file.url)} is 404"
                    )
                if resp.status == 304:
                    if record is None:
                        raise IndexReadError(
                            f"{label}: index {index.name}: {redact(file.url)} answered 304 (not "
                            "modified) to a request that named no cached copy"
                        )
                    return Downloaded(record.sha256, record.size, record.path)
                if offset and (resp.status == 416 or not _resumes_at(resp, offset)):
                    resp.discard()  # its body is not the rest of these bytes
                    part.restart()
                    if restart_left <= 0:
                        raise IndexReadError(
                            f"{label}: index {index.name}: {redact(file.url)} answered HTTP "
                            f"{resp.status} to a request for its bytes from {offset} on",
                            hint="run the command again",
                        )
                    restart_left -= 1
                    attempts_left += 1
                    continue
                if resp.status == 200:  # the whole file: a first request, or Range ignored
                    offset = 0
                    part.restart()
                    part.record(_origin(file, resp))
                try:
                    return self._stream(
                        index, file, resp, part, bar, offset=offset, label=label, max_size=max_size
                    )
                except HashMismatchError:
                    part.restart()
                    if not offset or restart_left <= 0:
                        raise
                    restart_left -= 1
                    attempts_left += 1
                    self.cache.note(
                        f"note: {label}: the {offset} bytes kept from an earlier download of "
                        f"{file.filename} do not complete it to its sha256; downloading it again"
                    )
                    continue
                except _BrokeOff as exc:
                    kept = part.resume_from()
                    if kept and exc.got > 0 and attempts_left > 0 and not exc.cancelled:
                        continue  # resumed now, from where it broke off
                    raise _broke_off(label, index, file, exc, kept=kept) from None
                except DeadlineError:
                    raise  # kept: the next run resumes it
                except BuildImageError:
                    part.restart()  # too large, not a complete archive: never resumed
                    raise

    def _receive(
        self,
        index: IndexEndpoint,
        file: IndexFile,
        resp: Response,
        *,
        label: str,
        max_size: int | None,
    ) -> Downloaded:
        """Stream the body of ``resp`` (a 200 for ``file``) into the cache, as a download
        does (``_stream``), kept for a resume when it breaks off."""
        with (
            self.cache.download_part(file.url, sha256=file.hashes.get("sha256")) as part,
            self.progress.bar(file.filename, total=file.size) as bar,
        ):
            part.restart()
            part.record(_origin(file, resp))
            try:
                return self._stream(
                    index, file, resp, part, bar, offset=0, label=label, max_size=max_size
                )
            except (_BrokeOff, DeadlineError) as exc:
                part.keep = True  # the download of this file resumes from it
                if isinstance(exc, DeadlineError):
                    raise
                raise _broke_off(label, index, file, exc, kept=part.resume_from()) from None

    def _stream(
        self,
        index: IndexEndpoint,
        file: IndexFile,
        resp: Response,
        part: Part,
        bar: Bar,
        *,
        offset: int,
        label: str,
        max_size: int | None,
    ) -> Downloaded:
        """Stream the body of ``resp`` into ``part`` after its first ``offset`` bytes (a 200
        when 0, else a 206 for the rest): hashed with those bytes while it arrives, stopped at
        the first byte past a bound, adopted only once the whole file is verified."""
        self._count("downloads")
        length = _content_length(resp)
        announced = None if length is None else offset + length
        told = "Content-Length" if not offset else "Content-Range"
        if announced is not None:
            if max_size is not None and announced > max_size:
                raise IndexReadError(_too_large(label, index, file, announced, max_size))
            if file.size is not None and announced != file.size:
                raise HashMismatchError(
                    f"{label}: index {index.name} gives size {file.size} for {file.filename}, "
                    f"but the server announces {announced} bytes ({told})",
                    hint=_OTHER_BYTES,
                )
        bounds = [n for n in (max_size, file.size, announced) if n is not None]
        cap = min(bounds) if bounds else None
        algos = {a: hashlib.new(a) for a in file.hashes if a in hashlib.algorithms_guaranteed}
        algos.setdefault("sha256", hashlib.sha256())
        out = part.fh
        size = start = _rehash(out, offset, algos.values())  # the bytes kept from before
        bar.restart(done=size, total=cap)
        try:
            while chunk := resp.read(CHUNK if cap is None else min(CHUNK, cap - size + 1)):
                size += len(chunk)
                if cap is not None and size > cap:
                    raise _overflow(label, index, file, size, max_size)
                out.write(chunk)
                for h in algos.values():
                    h.update(chunk)
                bar.advance(len(chunk))
        except DeadlineError as exc:
            raise DeadlineError(
                f"{label}: index {index.name}: {exc.message}", hint=exc.hint
            ) from None
        except TransportError as exc:
            out.flush()
            raise _BrokeOff(
                got=size - start, detail=exc.detail, cancelled=exc.kind == "cancelled"
            ) from None
        out.flush()
        for algo, want in sorted(file.hashes.items()):
            if algo in algos and algos[algo].hexdigest() != want:
                raise HashMismatchError(
                    f"{label}: index {index.name} gives {algo}={want} for {file.filename}, "
                    f"but the downloaded bytes hash to {algos[algo].hexdigest()}",
                    hint=_OTHER_BYTES,
                )
        if file.size is not None and file.size != size:
            raise HashMismatchError(
                f"{label}: index {index.name} gives size {file.size} for {file.filename}, "
                f"but {size} bytes arrived"
            )
        sha = algos["sha256"].hexdigest()
        unhashed = "sha256" not in file.hashes
        if unhashed and not complete_archive(part.path, file.filename):
            told = "no Content-Length" if length is None else f"Content-Length {length}"
            raise IndexReadError(
                f"{label}: index {index.name}: the {size} bytes that arrived for "
                f"{file.filename} ({told}) are not a complete {_kind(file.filename)}; "
                "nothing was kept",
                hint="the server cut the download short; run the command again",
            )
        path = self.cache.adopt_file(part.path, sha)
        if unhashed:  # what the next run revalidates instead of downloading again
            record = {
                "sha256": sha,
                "size": size,
                "etag": resp.headers.get("ETag"),
                "last_modified": resp.headers.get("Last-Modified"),
            }
            self.cache.put_metadata(_key("download-record", file.url), json.dumps(record).encode())
        return Downloaded(sha, size, path)

    def _record(self, key: str, file: IndexFile) -> _Record | None:
        """The download record of ``file`` when its bytes are still in the cache, whole; a
        record that is not is removed (and the file fetched again)."""
        raw = self.cache.get_metadata(key, max_bytes=MAX_RECORD_BYTES)
        fields = _parse_record(raw) if raw is not None else None
        if fields is None:
            if raw is not None:
                self.cache.drop_metadata(key)
            return None
        sha, size, etag, last_modified = fields
        path = self.cache.verified_file(sha)  # bytes that do not hash to the name are removed
        if path is not None:
            try:
                whole = path.stat().st_size == size and self._complete(path, file)
            except FileNotFoundError:  # another thread found it incomplete and removed it
                whole, path = False, None
            if not whole and path is not None:
                self.cache.evict(sha, f"is not a complete copy of {file.filename}")
            path = path if whole else None
        if path is None:
            self.cache.drop_metadata(key)
            return None
        return _Record(sha, size, etag, last_modified, path)

    def _complete(self, path: Path, file: IndexFile) -> bool:
        """``complete_archive``, once per verified file and run."""
        with self._stats_lock:
            if path.name in self._whole:
                return True
        if not complete_archive(path, file.filename):
            return False
        with self._stats_lock:
            self._whole.add(path.name)
        return True

    def _have_downloaded(self, file: IndexFile) -> bool:
        # under the URL's stream lock, as a download's check of the record is: two checks
        # at once of a record found broken would both remove its file, one after the other
        # has read it
        with self._stream_lock(file.url):
            if file.url in self._done:
                return True
            return self._record(_key("download-record", file.url), file) is not None

    # ----------------------------------------------------------------- metadata

    def core_metadata(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        """The wheel's METADATA without downloading the wheel where possible.

        PEP 658/714 metadata file (hash verified), else HTTP range reads into the zip,
        else the whole wheel.
        """
        sha = file.hashes.get("sha256")
        # keyed by the URL and the advertised hash together: an index that lies about a hash
        # cannot plant metadata that another index's file with that hash would then read.
        # A file without a hash may be re-uploaded under its URL: its metadata is not kept.
        key = _key("metadata", file.url, sha) if sha else None
        cached = self._cached_metadata(key, file) if key else None
        if cached is not None:
            return cached
        path = self.cache.verified_file(sha) if sha else None
        if path is not None:
            data = metadata_from_wheel(path, file.filename, label=label)
        elif not sha and self._have_downloaded(file):
            # downloaded before: one conditional request says whether those bytes still stand
            got = self.download(index, file, label=label)
            data = metadata_from_wheel(got.path, file.filename, label=label)
        elif file.metadata_hashes is not None:
            data = self._metadata_file(index, file, label=label)
        else:
            data = self._metadata_by_range(index, file, label=label)
        if key is not None:
            self.cache.put_metadata(key, data)
        return data

    def _cached_metadata(self, key: str, file: IndexFile) -> bytes | None:
        """A METADATA kept by an earlier run; checked against the index's hash of the metadata
        file when it gives one."""
        data = self.cache.get_metadata(key, max_bytes=MAX_METADATA_BYTES)
        if data is None:
            return None
        want = (file.metadata_hashes or {}).get("sha256")
        if want and hashlib.sha256(data).hexdigest() != want:
            self.cache.drop_metadata(key)
            self.cache.note(
                f"note: the cached METADATA of {file.filename} does not have the sha256 its "
                "index gives for its metadata file; removed it from the cache"
            )
            return None
        return data

    def _metadata_file(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        assert file.metadata_hashes is not None
        url = file.metadata_url
        self._count("metadata")
        too_large = (
            f"{label}: index {index.name}: the metadata file of {file.filename} "
            f"({redact(url)}) has more than the {MAX_METADATA_BYTES} bytes a METADATA may have",
            "no real wheel has a METADATA this big; do not use this file",
        )
        with self._request(
            index,
            url,
            headers={"Accept-Encoding": ACCEPT_COMPRESSED},  # its hash covers the decoded bytes
            max_body=MAX_METADATA_BYTES,
            too_large=too_large,
        ) as resp:
            if resp.status == 404:
                return self._metadata_by_range(index, file, label=label)
            data = resp.content
        for algo, want in file.metadata_hashes.items():
            if (
                algo in hashlib.algorithms_guaranteed
                and hashlib.new(algo, data).hexdigest() != want
            ):
                raise HashMismatchError(
                    f"{label}: index {index.name}: the metadata file of {file.filename} does not "
                    f"match its advertised {algo}={want}"
                )
        return data

    def _metadata_by_range(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        self._count("ranges")
        headers = {"Range": f"bytes=-{_RangeReader.TAIL}", "Accept-Encoding": IDENTITY}
        with self._request(
            index, file.url, headers=headers, stream=True, ok=frozenset({200, 206})
        ) as resp:
            if resp.status == 404:
                raise IndexReadError(f"index {index.name}: {redact(file.url)} is 404")
            if resp.status == 200:  # the server ignores ranges: this is the whole wheel
                lock = self._stream_lock(file.url)
                if not lock.acquire(blocking=False):
                    resp.discard()  # it is downloading already: wait for that, read the file
                    got = self.download(index, file, label=label)
                    return metadata_from_wheel(got.path, file.filename, label=label)
                try:  # streamed into the cache, so the download needs no second transfer
                    got = self._receive(index, file, resp, label=label, max_size=None)
                finally:
                    lock.release()
                return metadata_from_wheel(got.path, file.filename, label=label)
            reader = _RangeReader(self, index, file, resp, label=label)
        try:
            with zipfile.ZipFile(reader) as zf:
                return metadata_from_zip(zf, file.filename, label=label)
        except zipfile.BadZipFile as exc:
            raise IndexReadError(
                f"{label}: {file.filename} on index {index.name} is not a zip: {exc}"
            ) from None


class _RangeReader(io.RawIOBase):
    """A seekable read-only view of a remote file, backed by HTTP range requests; at most
    ``MAX_RANGE_BYTES`` are fetched in all."""

    TAIL = 64 * 1024

    def __init__(
        self,
        client: IndexClient,
        index: IndexEndpoint,
        file: IndexFile,
        tail: Response,
        *,
        label: str,
    ) -> None:
        super().__init__()
        self._client, self._index, self._file, self._label = client, index, file, label
        self._fetched = 0
        data = self._body(tail, self.TAIL)
        total = tail.headers.get("Content-Range", "").rsplit("/", 1)[-1]
        self.size = int(total) if total.isdigit() else 0
        self._chunks: dict[int, bytes] = {max(0, self.size - len(data)): data}
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _find(self, start: int, end: int) -> bytes | None:
        for off, data in self._chunks.items():
            if off <= start and end <= off + len(data):
                return data[start - off : end - off]
        return None

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self._pos
        end = min(self.size, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._find(self._pos, end)
        if data is None:
            fetch_end = min(self.size, max(end, self._pos + self.TAIL)) - 1
            self._chunks[self._pos] = self._get(self._pos, fetch_end)
            data = self._find(self._pos, end) or b""
        self._pos += len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _get(self, first: int, last: int) -> bytes:
        index, file = self._index, self._file
        if self._fetched + (last - first + 1) > MAX_RANGE_BYTES:
            raise IndexReadError(
                f"{self._label}: reading the METADATA of {file.filename} on index {index.name} "
                f"takes more than {MAX_RANGE_BYTES} bytes of range requests",
                hint="the wheel's zip directory is implausibly big; do not use this file",
            )
        headers = {"Range": f"bytes={first}-{last}", "Accept-Encoding": IDENTITY}
        with self._client._request(
            index, file.url, headers=headers, stream=True, ok=frozenset({200, 206})
        ) as resp:
            if resp.status == 404:
                raise IndexReadError(f"index {index.name}: {redact(file.url)} is 404")
            if resp.status != 206:
                raise IndexReadError(
                    f"{self._label}: index {index.name}: {redact(file.url)} stopped answering "
                    f"range requests (HTTP {resp.status})",
                    hint="run the command again",
                )
            return self._body(resp, last - first + 1)

    def _body(self, resp: Response, length: int) -> bytes:
        """A range answer's bytes: at most ``length``, unencoded."""
        index, file = self._index, self._file
        if resp.encoding:
            raise IndexReadError(
                f"{self._label}: index {index.name}: {redact(file.url)} answered a range request "
                f"with Content-Encoding {resp.encoding}"
            )
        try:
            data = resp.read_all(length)
        except DeadlineError as exc:
            raise DeadlineError(f"index {index.name}: {exc.message}", hint=exc.hint) from None
        except TransportError as exc:
            if exc.kind == "too-large":
                raise IndexReadError(
                    f"{self._label}: index {index.name}: {redact(file.url)} answered a range "
                    f"request for {length} bytes with more"
                ) from None
            raise IndexReadError(
                f"{self._label}: index {index.name}: a range read of {file.filename} "
                f"({redact(file.url)}) broke off ({exc.detail})",
                hint="run the command again; nothing was written",
            ) from None
        self._fetched += len(data)
        return data


def metadata_from_wheel(path: Path, filename: str, *, label: str = "") -> bytes:
    """The METADATA of the wheel file at ``path`` (read incrementally, bounded)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return metadata_from_zip(zf, filename, label=label or filename)
    except zipfile.BadZipFile as exc:
        raise MetadataError(
            f"{label or filename}: {filename} is not a valid wheel (zip): {exc}"
        ) from None


def complete_archive(path: Path, filename: str) -> bool:
    """The bytes at ``path`` are a whole archive of ``filename``'s kind: a wheel's (or zip's)
    central directory reads and follows every member's data (a file cut short has none); a
    ``.tar.gz``'s gzip stream reaches its end. Other kinds are not checked."""
    name = filename.lower()
    if name.endswith((".whl", ".zip")):
        try:
            with zipfile.ZipFile(path) as zf:
                start = getattr(zf, "start_dir", None)
                if start is None:
                    return True
                return all(i.header_offset + i.compress_size <= start for i in zf.infolist())
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return False
    if name.endswith((".tar.gz", ".tgz")):
        return _gzip_complete(path)
    return True


def _gzip_complete(path: Path) -> bool:
    obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
    unpacked = 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                data = chunk
                while data:
                    unpacked += len(obj.decompress(data, CHUNK))
                    if unpacked > MAX_UNPACKED_BYTES:
                        return False
                    data = obj.unconsumed_tail
                    if obj.eof and obj.unused_data:  # another gzip member
                        data, obj = obj.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
    except (zlib.error, OSError):
        return False
    return bool(obj.eof)


_OTHER_BYTES = (
    "the index serves other bytes than it advertises; do not use them until the index owner "
    "explains the change"
)


def _parse_record(raw: bytes) -> tuple[str, int, str | None, str | None] | None:
    """(sha256, size, etag, last_modified) of a download record; None when it is not one."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    sha, size = data.get("sha256"), data.get("size")
    etag, last_modified = data.get("etag"), data.get("last_modified")
    if not (isinstance(sha, str) and _SHA256_HEX.fullmatch(sha) and type(size) is int):
        return None
    if not all(isinstance(v, (str, type(None))) for v in (etag, last_modified)):
        return None
    return sha, size, etag, last_modified


class _BrokeOff(Exception):  # a signal inside the download loop, never shown
    """The body of a download broke off after ``got`` bytes of this response."""

    def __init__(self, *, got: int, detail: str, cancelled: bool) -> None:
        super().__init__(detail)
        self.got, self.detail, self.cancelled = got, detail, cancelled


def _broke_off(
    label: str, index: IndexEndpoint, file: IndexFile, exc: _BrokeOff, *, kept: int
) -> IndexReadError:
    return IndexReadError(
        f"{label}: index {index.name}: download of {file.filename} broke off after {exc.got} "
        f"bytes ({exc.detail})",
        hint=f"run the command again: it resumes from the {kept} bytes kept in the cache"
        if kept
        else "run the command again; nothing was written",
    )


def _origin(file: IndexFile, resp: Response) -> PartOrigin:
    etag, last_modified = usable_validator(
        resp.headers.get("ETag"), resp.headers.get("Last-Modified")
    )
    return PartOrigin(
        url=file.url,
        sha256=file.hashes.get("sha256", ""),
        etag=etag,
        last_modified=last_modified,
    )


def _usable_offset(part: Part, max_size: int | None) -> int:
    """The bytes of ``part`` a download may resume after (bytes past the cap are dropped)."""
    offset = part.resume_from()
    if max_size is not None and offset > max_size:
        part.restart()
        return 0
    return offset


def _resume_headers(part: Part, offset: int) -> dict[str, str]:
    """``Range`` for the bytes after ``offset``, ``If-Range`` on what they came from."""
    if not offset or part.origin is None or part.origin.validator is None:
        return {}
    return {"Range": f"bytes={offset}-", "If-Range": part.origin.validator}


def _rehash(out: BinaryIO, offset: int, hashes: Iterable[Any]) -> int:
    """Feed the first ``offset`` bytes of ``out`` to ``hashes``; leave ``out`` positioned
    (and cut) after them; return how many there were."""
    out.seek(0)
    size = 0
    while size < offset and (chunk := out.read(min(CHUNK, offset - size))):
        size += len(chunk)
        for h in hashes:
            h.update(chunk)
    out.seek(size)
    out.truncate(size)
    return size


def _resumes_at(resp: Response, offset: int) -> bool:
    """``resp`` is a 206 whose body is the file's bytes from ``offset`` to its end."""
    if resp.status != 206:
        return resp.status == 200
    match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+)\s*", resp.headers.get("Content-Range", ""))
    if match is None:
        return False
    first, last, total = (int(g) for g in match.groups())
    return first == offset and last + 1 == total and not resp.encoding


def _content_length(resp: Response) -> int | None:
    """The ``Content-Length`` of an unencoded body (None: not given, or of encoded bytes)."""
    value = resp.headers.get("Content-Length", "")
    return int(value) if value.isdigit() and not resp.encoding else None


def _kind(filename: str) -> str:
    return "zip" if filename.lower().endswith((".whl", ".zip")) else "archive"


def _overflow(
    label: str, index: IndexEndpoint, file: IndexFile, size: int, max_size: int | None
) -> BuildImageError:
    if max_size is not None and size > max_size:
        return IndexReadError(_too_large(label, index, file, size, max_size))
    if file.size is not None and size > file.size:
        return HashMismatchError(
            f"{label}: index {index.name} gives size {file.size} for {file.filename}, but the "
            f"server sent more (stopped at byte {size})",
            hint=_OTHER_BYTES,
        )
    return IndexReadError(
        f"{label}: index {index.name}: {redact(file.url)} sent more bytes than its Content-Length"
    )


def _too_large(label: str, index: IndexEndpoint, file: IndexFile, size: int, limit: int) -> str:
    return (
        f"{label}: {file.filename} on index {index.name} has {size} bytes or more, more than "
        f"the {limit} this file may have"
    )


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _page_request_headers(cached: CachedPage | PageHead | None) -> dict[str, str]:
    """Accept (a page may come compressed: its decoded bytes are parsed and checked), and the
    validators of the cached copy: a conditional GET when there is one."""
    headers = {"Accept": ACCEPT, "Accept-Encoding": ACCEPT_COMPRESSED}
    if cached is not None:
        if cached.etag:
            headers["If-None-Match"] = cached.etag
        if cached.last_modified:
            headers["If-Modified-Since"] = cached.last_modified
    return headers


def _fresh_until(cache_control: str | None, now: float) -> float:
    """``now + max-age`` when the server allows reuse without revalidation, else 0."""
    if not cache_control:
        return 0.0
    directives = [d.strip().lower() for d in cache_control.split(",")]
    if any(d in ("no-cache", "no-store") for d in directives):
        return 0.0
    for d in directives:
        if d.startswith("max-age="):
            value = d.removeprefix("max-age=")
            if value.isdigit():
                return now + min(int(value), 24 * 3600)
    return 0.0
