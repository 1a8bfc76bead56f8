"""Every page, METADATA and wheel one lock run reads: each fetched once, on worker threads,
and mostly before anyone asks for it.

- ``page``, ``page_digest``, ``metadata`` and ``download`` return the future of one fetch
  per key, shared by every caller in the run: whoever asks first starts it.
- ``prefetch`` runs ahead of the search (the crawl): a name's page, the METADATA of its
  newest usable version, the pages of its dependencies, and so on. A guess the search never
  uses costs one request; an error surfaces only from a future someone waits on.
- The fetcher is the search's ``CandidateSource`` (``resolver.closure``); it reads
  ``FixedPoints`` and never changes them.
- Two pools: the workers, and, when ``read_ahead``, threads of their own for the pages a
  re-lock knows it will read (``ahead=True``). A fetch asked for after ``close`` is a
  cancelled future.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass
from typing import Any, TypeVar

from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from core.errors import BuildImageError
from core.urls import project_url, redact
from resolver.closure import Candidate, LazyCandidates, Tie
from resolver.core_metadata import metadata_from_wheel
from resolver.fixed_points import FixedPoints
from resolver.index_client import IndexClient, IndexEndpoint
from resolver.simple_page import IndexFile
from resolver.target import TargetTags
from resolver.wheel_metadata import CoreMetadata, check_matches_filename, parse_core_metadata
from resolver.wheel_select import Verdict, releases

T = TypeVar("T")
K = TypeVar("K")


@dataclass(frozen=True)
class VerifiedWheel:
    """A wheel downloaded and hashed, with the METADATA inside it (checked against its
    filename)."""

    sha256: str
    size: int
    metadata: CoreMetadata


@dataclass(eq=False)
class Fetcher:
    """One lock run's fetches, each once (see the module's docstring)."""

    client: IndexClient
    endpoints: Mapping[str, IndexEndpoint]
    fixed: FixedPoints
    target_tags: TargetTags
    environment: Mapping[str, str]
    _: KW_ONLY
    read_ahead: bool

    def __post_init__(self) -> None:
        self.m = self.fixed.m
        self.pool = ThreadPoolExecutor(max_workers=self.client.concurrency)
        # on a re-lock the pages asked for ahead are mostly 304s (a revalidated page is not
        # parsed again): threads of their own, beside the workers
        self.ahead_pool = (
            ThreadPoolExecutor(max_workers=self.client.read_ahead) if self.read_ahead else None
        )
        self._lock = threading.Lock()
        self._pages: dict[tuple[str, str], Future[Sequence[IndexFile] | None]] = {}
        self._digests: dict[tuple[str, str], Future[str | None]] = {}
        self._meta: dict[str, Future[CoreMetadata]] = {}
        self._meta_sha: dict[str, str] = {}  # file URL -> sha256 of the METADATA bytes read
        self._downloads: dict[str, Future[VerifiedWheel]] = {}
        self._candidates: dict[NormalizedName, LazyCandidates] = {}
        self._ties: dict[NormalizedName, list[str]] = {}
        self._crawled: set[NormalizedName] = set()
        self.closing = False

    def close(self) -> None:
        """End the run's threads; after ``cancel`` without waiting for them (a thread may
        still be connecting for up to --timeout)."""
        self.closing = True
        wait = not self.client.deadline.cancelled
        if self.ahead_pool is not None:
            self.ahead_pool.shutdown(wait=wait, cancel_futures=True)
        self.pool.shutdown(wait=wait, cancel_futures=True)

    def cancel(self) -> None:
        """Ctrl-C: every request in flight ends now."""
        self.client.cancel()

    def submit(self, fn: Callable[..., T], *args: Any, ahead: bool = False) -> Future[T]:
        """``fn(*args)`` on a worker (``ahead``: on the read-ahead threads)."""
        if self.closing:  # a late speculative callback after the run ended
            fut: Future[T] = Future()
            fut.cancel()
            return fut
        pool = self.ahead_pool if ahead and self.ahead_pool is not None else self.pool
        return pool.submit(fn, *args)

    def _once(
        self,
        table: dict[K, Future[T]],
        key: K,
        fn: Callable[..., T],
        *args: Any,
        ahead: bool = False,
    ) -> Future[T]:
        """The future of ``fn(*args)`` kept in ``table`` under ``key``: the one asked for
        before in this run, else one submitted now."""
        with self._lock:
            fut = table.get(key)
            if fut is None:
                fut = table[key] = self.submit(fn, *args, ahead=ahead)
            return fut

    # ------------------------------------------------------------------ pages

    def page(
        self, index: str, name: NormalizedName, *, ahead: bool = False
    ) -> Future[Sequence[IndexFile] | None]:
        """The files of ``name``'s page on ``index`` the target may run (a refusal reads the
        whole page); None for a 404."""
        endpoint = self.endpoints[index]
        fetch = self.client.project_files
        return self._once(
            self._pages, (index, name), fetch, endpoint, name, self.target_tags, ahead=ahead
        )

    def files(self, index: str, name: NormalizedName) -> Sequence[IndexFile] | None:
        return self.page(index, name).result()

    def page_digest(
        self, index: str, name: NormalizedName, *, ahead: bool = False
    ) -> Future[str | None]:
        """The digest of the page as the index serves it now (its body unread when the
        cached copy is current: a replayed search reads no page); None for a 404."""
        with self._lock:
            fut = self._digests.get((index, name))
            if fut is None:
                endpoint = self.endpoints[index]
                known, digest = self.client.known_digest(endpoint, name)
                if known:  # revalidated already: no thread for it
                    fut = Future()
                    fut.set_result(digest)
                else:
                    fut = self.submit(self.client.page_digest, endpoint, name, ahead=ahead)
                self._digests[(index, name)] = fut
            return fut

    # ------------------------------------------------------------------ METADATA and wheels

    def metadata(self, name: NormalizedName, verdict: Verdict) -> Future[CoreMetadata]:
        """The METADATA of ``verdict``'s file, checked against its filename."""
        # a pin's METADATA is read here: its wheel also downloads here from the start, and a
        # server without range requests serves both from one transfer (IndexClient.download)
        return self._once(self._meta, verdict.file.url, self._load_metadata, name, verdict)

    def metadata_here(self, name: NormalizedName, verdict: Verdict) -> None:
        """Read the METADATA of ``verdict``'s file on the calling thread, unless it was asked
        for before; its future then serves ``metadata`` as a worker's would."""
        fut: Future[CoreMetadata] = Future()
        with self._lock:
            if verdict.file.url in self._meta:
                return
            self._meta[verdict.file.url] = fut
        try:
            fut.set_result(self._load_metadata(name, verdict))
        except BaseException as exc:  # noqa: BLE001 - the future carries it, as a pool's would
            fut.set_exception(exc)

    def metadata_asked(self, url: str) -> Future[CoreMetadata] | None:
        """The METADATA future of the file at ``url``, if anyone asked for it in this run."""
        with self._lock:
            return self._meta.get(url)

    def metadata_sha(self, url: str) -> str | None:
        """The sha256 of the METADATA bytes read for the file at ``url``; None if unread."""
        with self._lock:
            return self._meta_sha.get(url)

    def _load_metadata(self, name: NormalizedName, verdict: Verdict) -> CoreMetadata:
        """The METADATA read, checked, and its sha256 kept for the search record."""
        index = self.fixed.index_of(name)
        data = self.client.core_metadata(self.endpoints[index], verdict.file, label=name)
        meta = _checked_metadata(verdict, data, index)
        with self._lock:
            self._meta_sha[verdict.file.url] = hashlib.sha256(data).hexdigest()
        return meta

    def download(self, name: NormalizedName, verdict: Verdict, index: str) -> Future[VerifiedWheel]:
        """``verdict``'s wheel downloaded from ``index`` and hashed."""
        return self._once(self._downloads, verdict.file.url, self._download, name, verdict, index)

    def _download(self, name: NormalizedName, verdict: Verdict, index: str) -> VerifiedWheel:
        got = self.client.download(self.endpoints[index], verdict.file, label=name)
        data = metadata_from_wheel(got.path, verdict.file.filename, label=name)
        return VerifiedWheel(got.sha256, got.size, _checked_metadata(verdict, data, index))

    # ------------------------------------------------------------------ CandidateSource

    def candidates(self, name: NormalizedName) -> Iterable[Candidate]:
        pin = self.fixed.pins.get(name)
        if pin is not None:
            return [Candidate(name, pin.version, verdict=pin.verdict, pinned=True)]
        provided = self.fixed.provided.get(name)
        if provided is not None:  # built in the image: never looked up on an index
            return [Candidate(name, provided.version, pinned=True)]
        with self._lock:
            cached = self._candidates.get(name)
        if cached is not None:
            return cached
        index = self.m.index_of(name)
        files = self.files(index, name) or []
        url = redact(project_url(self.endpoints[index].url, name))

        def made() -> Iterator[Candidate]:
            for release in releases(files, project=name, target_tags=self.target_tags):
                if release.best is not None:
                    yield Candidate(name, release.version, verdict=release.best)
                    continue
                self._ties.setdefault(name, []).append(
                    f"{release.version}: " + ", ".join(v.file.filename for v in release.tie)
                )
                tied = Tie(index=index, url=url, files=release.tie)
                yield Candidate(name, release.version, tie=tied)  # an error if the search tries it

        out = LazyCandidates(made())
        with self._lock:
            return self._candidates.setdefault(name, out)

    def requirements_of(self, candidate: Candidate) -> tuple[Sequence[Requirement], str | None]:
        assert candidate.verdict is not None
        meta = self.metadata(candidate.name, candidate.verdict).result()
        return meta.requires_dist, meta.requires_python

    def follows_deps(self, name: NormalizedName) -> bool:
        if name in self.fixed.provided:  # its requirements are its requirements files
            return False
        pin = self.fixed.pins.get(name)
        return pin.deps if pin is not None else True

    def why_empty(self, name: NormalizedName) -> str:
        index = self.m.index_of(name)
        if self.files(index, name) is None:
            return f"{name} is not on index {index} (HTTP 404)"
        ties = self._ties.get(name)
        if ties:
            return "versions skipped because two files tie: " + "; ".join(ties)
        return f"no file of {name} on index {index} runs on {self.m.target.describe()}"

    # ------------------------------------------------------------------ the crawl

    def prefetch(self, names: Iterable[NormalizedName], *, ahead: bool = False) -> None:
        """Run ahead of the search from ``names`` (the crawl: see the module's docstring)."""
        pins = self.fixed.pins
        for name in names:
            if name in self.fixed.provided:
                continue
            with self._lock:
                if name in self._crawled:
                    continue
                self._crawled.add(name)
            if name in pins:
                pin = pins[name]
                if pin.deps:
                    self.metadata(name, pin.verdict).add_done_callback(self._after_metadata)
                continue
            self.page(self.m.index_of(name), name, ahead=ahead).add_done_callback(
                functools.partial(self._after_page, name)
            )

    def _after_page(self, name: NormalizedName, fut: Future[Sequence[IndexFile] | None]) -> None:
        if fut.cancelled() or fut.exception() is not None or fut.result() is None:
            return
        try:
            candidates = self.candidates(name)
        except BuildImageError:
            return
        for cand in candidates:
            if not cand.version.is_prerelease and cand.verdict is not None:
                self.metadata(name, cand.verdict).add_done_callback(self._after_metadata)
                return

    def _after_metadata(self, fut: Future[CoreMetadata]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        env = {**self.environment, "extra": ""}
        self.prefetch(
            canonicalize_name(r.name)
            for r in fut.result().requires_dist
            if r.marker is None or r.marker.evaluate(env)
        )


def _checked_metadata(verdict: Verdict, data: bytes, index: str) -> CoreMetadata:
    """``data`` parsed and checked against the file's name and version."""
    where = f"{verdict.file.filename} on index {index}"
    meta = parse_core_metadata(data, where=where)
    assert verdict.name is not None
    assert verdict.version is not None
    check_matches_filename(meta, name=verdict.name, version=verdict.version, where=where)
    return meta
