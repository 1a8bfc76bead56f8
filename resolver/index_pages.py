"""Index pages: read once per run, cached on disk, revalidated, parsed into a project's files.

A cached copy is revalidated (ETag / Last-Modified); one that is still fresh
(``resolver.freshness``: the server's ``max-age``, else a tenth of the page's age, at most ten
minutes) is used without a request unless ``refresh`` is set. A page is read at most
``max_page_bytes`` bytes, decoded (``--max-page-mb``). The parse of a page the cache keeps is
kept with it, for those very bytes (and per target): a revalidated page is not parsed again. A
find-links page is read once per run, always whole.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from core.errors import IndexReadError
from core.transport import ACCEPT_COMPRESSED
from core.urls import project_url, redact
from resolver.cache import Cache, CachedPage, PageHead, conditional_headers
from resolver.endpoints import IndexEndpoint
from resolver.freshness import fresh_until as fresh_until_of
from resolver.index_http import IndexHttp, RequestCounts
from resolver.simple_page import (
    ACCEPT,
    ListedFile,
    PageParseError,
    ProjectPage,
    kept_from_cache,
    parse_find_links_page,
    parse_kept,
    rows_from_cache,
)
from resolver.target import TargetTags

MAX_PAGE_BYTES = 64 << 20  # an index page, decoded (--max-page-mb)


@dataclass(eq=False)
class IndexPages:
    """The pages of the indexes as this run reads them."""

    http: IndexHttp
    cache: Cache
    counts: RequestCounts
    _: KW_ONLY
    max_page_bytes: int
    refresh: bool  # revalidate every page, even one the server said is fresh

    def __post_init__(self) -> None:
        self._flat_pages: dict[str, ProjectPage] = {}
        # every page asked for in this run, once: the page, the head of a cached copy the
        # index said is current (``page_digest``), or None for a 404
        self._fetched: dict[str, CachedPage | PageHead | None] = {}
        # pages whose body arrived whole in this run: their parse is not kept (a parse is
        # kept when the same bytes are parsed again, after a 304, by a search that runs)
        self._arrived: set[str] = set()
        self._page_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()  # guards _arrived and _page_locks
        self._flat_lock = threading.Lock()

    # ----------------------------------------------------------------- files of a page

    def project_files(
        self, index: IndexEndpoint, project: str, target_tags: TargetTags | None = None
    ) -> ProjectPage | None:
        """The files of ``project`` on ``index`` (``IndexClient.project_files``)."""
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
        bound = 2 * self.max_page_bytes + (1 << 16)
        kept = self._keeps_parse(url, page)
        if kept:
            rows = rows_from_cache(self.cache.get_parsed(url, digest, max_bytes=bound))
            if rows is not None:
                self.counts.count("parsed_cached")
                return ProjectPage(rows, digest=digest)
        rows = self._parse(index, url, page, None)[0]
        if kept:
            self.cache.put_parsed(url, digest, rows)
        return ProjectPage(rows, digest=digest)

    def _keeps_parse(self, url: str, page: CachedPage) -> bool:
        """Whether the parse of ``page`` is read from and kept in the cache: a page the cache
        keeps, read from the cache in this run. A page that has just arrived is not kept: a
        parse pays for its keeping only when the same bytes are parsed again."""
        with self._lock:
            arrived = url in self._arrived
        return not arrived and bool(page.etag or page.last_modified or page.fresh_until)

    def _parsed_for(
        self, index: IndexEndpoint, url: str, page: CachedPage, target_tags: TargetTags
    ) -> ProjectPage:
        """``_parsed`` for one target: the parse kept is the target's own (its file in the
        cache, and its digest, are the page's bytes and the target's key)."""
        key = target_tags.key
        digest = hashlib.sha256(f"{page.digest} {key}".encode()).hexdigest()
        bound = 2 * self.max_page_bytes + (1 << 16)
        kept = self._keeps_parse(url, page)
        whole = self._whole_later(index, url, page)
        if kept:
            stored = self.cache.get_parsed(url, digest, max_bytes=bound, variant=key)
            found = kept_from_cache(stored, key)
            if found is not None:
                self.counts.count("parsed_cached")
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
        """What reads every file of ``page`` when a refusal needs them: a page the cache keeps
        is read from the cache again then (this run keeps only its head: a few hundred
        bodies are tens of MB); any other page is kept whole until then."""
        if not (page.etag or page.last_modified or page.fresh_until):

            def from_memory() -> ProjectPage:  # from the same bytes, so the same page
                return ProjectPage(self._parse(index, url, page, None)[0], digest=page.digest)

            return from_memory
        head = page.head
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
    ) -> tuple[list[ListedFile], int]:
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

    # ----------------------------------------------------------------- digests

    def page_digest(self, index: IndexEndpoint, project: str) -> str | None:
        """``IndexClient.page_digest``."""
        url = project_url(index.url, project)
        got = self._fetch(index, url, body=False)
        return None if got is None else got.digest

    def known_digest(self, index: IndexEndpoint, project: str) -> tuple[bool, str | None]:
        """``IndexClient.known_digest``."""
        url = project_url(index.url, project)
        with self._page_lock(url):
            if url not in self._fetched:
                return False, None
            got = self._fetched[url]
        return True, None if got is None else got.digest

    # ----------------------------------------------------------------- fetch and revalidate

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
                page = self.cache.get_page(url, max_bytes=self.max_page_bytes)
                if page is not None and page.digest == got.digest:
                    self._fetched[url] = page
                    return page
                # the bytes on disk are not the ones the index said are current: ask again
                got = self._request_page(index, url, None)
            else:
                cached: CachedPage | PageHead | None = (
                    self.cache.get_page(url, max_bytes=self.max_page_bytes)
                    if body
                    else self.cache.get_page_head(url)
                )
                got = self._request_page(index, url, cached)
                if isinstance(got, PageHead) and body:
                    raise AssertionError("unreachable: a whole cached page was revalidated")
            self._fetched[url] = got
            return got

    def _page_lock(self, url: str) -> threading.Lock:
        with self._lock:
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
            else self.cache.get_page(url, max_bytes=self.max_page_bytes)
        )
        if whole is None or whole.digest != cached.digest:
            return None
        whole = dataclasses.replace(whole, fresh_until=fresh_until)
        self.cache.put_page(whole, key=url)
        return whole

    def _request_page(
        self, index: IndexEndpoint, url: str, cached: CachedPage | PageHead | None
    ) -> CachedPage | PageHead | None:
        limit = self.max_page_bytes
        now = time.time()
        if cached is not None and not self.refresh and cached.fresh_until > now:
            self.counts.count("fresh")
            return cached
        headers = _page_request_headers(cached)
        self.counts.count("pages")
        too_large = (
            f"index {index.name}: the page {redact(url)} has more than {limit >> 20} MB "
            f"({limit} bytes, decoded)",
            f"raise --max-page-mb (default {MAX_PAGE_BYTES >> 20}) if the index really serves "
            "pages this big",
        )
        with self.http.get(
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
                self.counts.count("not_modified")
                fresh_until = fresh_until_of(resp.headers, now, last_modified=cached.last_modified)
                # when the bytes on disk are not the page revalidated, it is kept as it was:
                # its body is checked when it is read
                return self._still_current(url, cached, fresh_until) or cached
            page = CachedPage(
                url=resp.url,
                content_type=resp.headers.get("Content-Type", "text/html"),
                body=resp.content,
                etag=resp.headers.get("ETag"),
                last_modified=resp.headers.get("Last-Modified"),
                fresh_until=fresh_until_of(resp.headers, now, last_modified=None),
            )
        if page.etag or page.last_modified or page.fresh_until > now:
            self.cache.put_page(page, key=url)
        with self._lock:
            self._arrived.add(url)
        return page


def _page_request_headers(cached: CachedPage | PageHead | None) -> dict[str, str]:
    """Accept (a page may come compressed: its decoded bytes are parsed and checked), and the
    validators of the cached copy: a conditional GET when there is one."""
    headers = {"Accept": ACCEPT, "Accept-Encoding": ACCEPT_COMPRESSED}
    if cached is not None:
        headers.update(conditional_headers(cached.etag, cached.last_modified))
    return headers
