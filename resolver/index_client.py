"""All HTTP of the resolver: index pages, metadata files, range reads and downloads.

``IndexClient`` is the one entry. Every GET goes through ``resolver.index_http``; pages are
read by ``resolver.index_pages``, files downloaded by ``resolver.downloads`` (each body
streamed and verified by ``resolver.download_stream``), and the METADATA of wheels read by
``resolver.core_metadata``. Every request has connect and read timeouts and ends within the
command's ``--deadline``; connection errors, 429 and 5xx are retried with exponential backoff,
then reported naming the index. Every cached file is re-hashed before it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from core.file_store import default_cache_dir
from core.network import DEFAULT_OPTIONS, NetworkOptions
from core.progress import DownloadProgress
from core.transport import Deadline, RetryPolicy, Transport
from resolver import __version__
from resolver.cache import Cache
from resolver.core_metadata import MetadataReader
from resolver.downloads import Downloaded, Downloader
from resolver.endpoints import IndexEndpoint
from resolver.index_http import IndexHttp, RequestCounts
from resolver.index_pages import MAX_PAGE_BYTES, IndexPages
from resolver.simple_page import IndexFile, ProjectPage
from resolver.target import TargetTags

USER_AGENT = f"vllm-musa-image/{__version__}"
BACKOFF = 0.5  # seconds before the second attempt, doubled before each next one


__all__ = ["Downloaded", "IndexClient", "IndexEndpoint", "open_client"]


def open_client(
    cache_dir: Path | None,
    env: Mapping[str, str],
    options: NetworkOptions,
    *,
    max_page_bytes: int = MAX_PAGE_BYTES,
    note: Callable[[str], None] | None = None,
    progress: DownloadProgress | None = None,
) -> IndexClient:
    """A client on the cache at ``cache_dir`` (default: from ``env``, see ``default_cache_dir``),
    with the command's ``options``. ``note``: where the cache reports what it removed;
    ``progress``: where downloads show their bars."""
    cache = Cache(cache_dir or default_cache_dir(env), note=note)
    cache.prepare()  # a cache that cannot be written fails before the work
    return IndexClient(cache, options, max_page_bytes=max_page_bytes, progress=progress)


class IndexClient:
    """The indexes as one run reads them, through ``cache``: project pages, page digests,
    downloads and wheel METADATA. ``stats`` counts the requests by kind."""

    def __init__(
        self,
        cache: Cache,
        options: NetworkOptions = DEFAULT_OPTIONS,
        *,
        concurrency: int = 32,  # requests in flight at once
        read_ahead: int = 32,  # more, for the pages a re-lock knows it will read (resolver.fetcher)
        max_page_bytes: int = MAX_PAGE_BYTES,  # the biggest index page read, decoded
        progress: DownloadProgress | None = None,
    ) -> None:
        self.cache = cache
        self.options = options
        self.concurrency = concurrency
        self.read_ahead = read_ahead
        self.progress = progress or DownloadProgress.off()  # bars of the downloads in flight
        self.deadline = options.deadline if options.deadline is not None else Deadline()
        # one keep-alive pool for the hundreds of small pages a closure needs, a connection
        # per thread at most; the proxies and trust store are the command's (core.network)
        self._transport = Transport(
            timeout=options.timeout,
            user_agent=USER_AGENT,
            network=options.network,
            connections=max(concurrency + read_ahead, 4),
            sleep=options.sleep,
            deadline=self.deadline,
        )
        retry = RetryPolicy(attempts=options.attempts, backoff=BACKOFF)
        http = IndexHttp(self._transport, retry)
        counts = RequestCounts()
        self.stats = counts.stats
        self._pages = IndexPages(
            http, cache, counts, max_page_bytes=max_page_bytes, refresh=options.refresh
        )
        self._downloads = Downloader(http, cache, counts, self.progress, attempts=options.attempts)
        self._metadata = MetadataReader(http, cache, counts, self._downloads)

    def close(self) -> None:
        self._transport.close()

    def cancel(self) -> None:
        """End every request in flight now and refuse new ones (Ctrl-C)."""
        self._transport.cancel()

    def project_files(
        self, index: IndexEndpoint, project: str, target_tags: TargetTags | None = None
    ) -> ProjectPage | None:
        """The files of ``project`` on ``index``; None when the index says 404. With
        ``target_tags``, only the files that target may run (``TargetTags.may_run``: every
        sdist, every file that is not a wheel, every wheel with a tag it accepts): the page's
        ``whole()`` has the rest. A find-links page is always whole."""
        return self._pages.project_files(index, project, target_tags)

    def page_digest(self, index: IndexEndpoint, project: str) -> str | None:
        """The ``page_digest`` of ``project``'s page on ``index`` as the index serves it now
        (revalidated like any page); None when the index says 404. When the cache's copy is
        current, its body is neither read nor parsed: a later ``project_files`` of the same
        page in this run reads it then, checked against this digest, with no new request."""
        return self._pages.page_digest(index, project)

    def known_digest(self, index: IndexEndpoint, project: str) -> tuple[bool, str | None]:
        """(True, what ``page_digest`` would return) when this run has already asked for the
        page; (False, None) when it has not."""
        return self._pages.known_digest(index, project)

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
        return self._downloads.download(index, file, label=label, max_size=max_size)

    def core_metadata(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        """The wheel's METADATA without downloading the wheel where possible
        (``resolver.core_metadata``)."""
        return self._metadata.core_metadata(index, file, label=label)
