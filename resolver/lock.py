"""Orchestration: from a manifest and an index client to a complete, verified ``Lock``.

0. The git and path sources' requirements files are read at their pinned revisions and
   checked against the manifest's exact versions (``sources.contradictions``): a line that
   excludes one, on a name ``overrides`` does not declare, is refused before any index is
   asked (an sdist's files, which come from an index, are checked as soon as they are read).
1. Every pin (``packages``, ``overrides``, plus ``line_map`` choices) is looked up on its
   bound index only and must have exactly one best wheel of its kind; every refusal is
   listed. Meanwhile each source's sdist is found, downloaded and hashed, and the sources'
   requirements files are read (``resolver.source_inputs``).
2. The closure of the roots (``requirements``, ``build.requirements``, the sources'
   requirements files) and of the pins' Requires-Dist is searched with resolvelib, each name
   on its bound index only. A project built from a source's sdist is never looked up: a
   requirement on it is checked against the sdist's version. Requirements on an overridden
   name are ignored, and the ones the override's version does not satisfy are recorded.
3. ``same_line`` and ``line_map`` are checked on the whole closure.
4. Every chosen file is downloaded and hashed (unless ``verify=False`` and the index gives a
   sha256), and its METADATA must agree with its filename.

A search whose inputs did not change is replayed rather than run: after a successful lock the
searches' inputs, the sha256 of every page they read (and of every METADATA its page does not
hash), and their outcomes are kept in the cache (``resolver.search_record``). A re-lock
revalidates every page of the record as ever, a conditional GET each from the start (a yank
or a re-upload changes a page's bytes, hence its sha256), and takes a recorded outcome
when the fingerprint of its inputs is the same and everything the search read still hashes
the same; it then reads no page body. Steps 3 and 4 run either way.

Nothing is written here but that record; the caller writes the lock only when all of this
succeeded. Ctrl-C (``KeyboardInterrupt``) cancels the client's requests in flight, so that the
worker pool ends at once instead of finishing its downloads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from core.errors import BuildImageError, MetadataError, ResolutionError
from core.urls import project_url, redact
from manifest import Manifest, WheelKind
from resolver import search_record as sr
from resolver.closure import (
    Candidate,
    LazyCandidates,
    Provider,
    Req,
    Tie,
    make_req,
    requirement_text,
    resolve,
)
from resolver.index_client import IndexClient, IndexEndpoint
from resolver.lockfile import BUILD_GROUP, Lock, LockedPackage
from resolver.search_record import ChosenRecord, Entry, MetadataRead, PageRead
from resolver.simple_page import IndexFile, ProjectPage, Row, listed, whole_page
from resolver.source_inputs import (
    RootRequirement,
    SourceInputs,
    provided_projects,
    read_sources,
    read_trees,
)
from resolver.target import TargetTags, marker_environment
from resolver.wheel_metadata import CoreMetadata, check_matches_filename, parse_core_metadata
from resolver.wheel_select import (
    Reason,
    Releases,
    TieError,
    Verdict,
    best,
    evaluate,
    version_files,
)
from sources.read import SourceRequirements
from sources.read import repo_root as find_repo_root

T = TypeVar("T")
K = TypeVar("K")


@dataclass(frozen=True, kw_only=True)
class LockResult:
    lock: Lock
    notes: tuple[str, ...] = ()
    stats: Mapping[str, int] = field(default_factory=dict)
    search: str = ""  # "search: replayed (...)" or "search: ran (why)", shown under -v


@dataclass(frozen=True)
class _Pin:
    """A fixed point: a pin's chosen file, and where in the manifest it came from."""

    name: NormalizedName
    version: Version
    index: str
    verdict: Verdict
    origin: str  # pin | line-map | override
    where: str  # packages.torch / rules.line_map.compressed-tensors / overrides.numpy
    deps: bool


_ROOT_OF = {"pin": "packages", "line-map": "rules.line_map", "override": "overrides"}
_NO_SOURCES = SourceInputs(provided={}, sdists=(), runtime=(), build=())


def line_of(version: Version | str) -> str:
    v = Version(str(version))
    return f"{v.major}.{v.minor}"


class StackLocker:
    """One lock run: owns the worker pool and the per-run memo of pages and metadata."""

    def __init__(
        self,
        manifest: Manifest,
        client: IndexClient,
        endpoints: Mapping[str, IndexEndpoint],
        *,
        verify: bool = True,
        repo_root: Path | None = None,
        hints: Iterable[NormalizedName] = (),
    ) -> None:
        self.m = manifest
        self.client = client
        self.endpoints = endpoints
        self.verify = verify
        self.repo_root = repo_root
        # names the search will likely ask for (the previous lock's): fetched from the start
        self.hints = tuple(sorted(set(hints) - set(manifest.packages)))
        self.sources = _NO_SOURCES
        self.target_tags = TargetTags(manifest.target)
        self.env = marker_environment(manifest.target)
        self.pool = ThreadPoolExecutor(max_workers=client.settings.concurrency)
        # the search record of this stack, target and indexes (resolver.search_record)
        self._slot = sr.slot_key(
            manifest.name, manifest.target.describe(), {n: e.url for n, e in endpoints.items()}
        )
        self._loaded: object = None  # the record's payload as read, when it is usable
        self._record, self._record_state = self._load_record()
        # the pages the record lists (on this run's indexes), asked for from the start
        self._record_pages = sorted(
            {(p.index, p.name) for e in self._record or () for p in e.pages if p.index in endpoints}
        )
        self._entries: list[Entry | None] = []  # this run's searches; None: not recordable
        self._outcomes: list[str | None] = []  # per search: why it ran; None: replayed
        # the hints' (or the record's) pages are asked for from the start, on threads of their
        # own: on a re-lock they are mostly 304s (a revalidated page is not parsed again)
        self.hint_pool = (
            ThreadPoolExecutor(max_workers=client.settings.read_ahead)
            if self.hints or self._record_pages
            else None
        )
        self._lock = threading.Lock()
        self._pages: dict[tuple[str, str], Future[Sequence[IndexFile] | None]] = {}
        self._digests: dict[tuple[str, str], Future[str | None]] = {}
        self._meta: dict[str, Future[CoreMetadata]] = {}
        self._meta_sha: dict[str, str] = {}  # file URL -> sha256 of the METADATA bytes read
        self._downloads: dict[str, Future[tuple[str, int, CoreMetadata]]] = {}
        self._candidates: dict[NormalizedName, LazyCandidates] = {}
        self._ties: dict[NormalizedName, list[str]] = {}
        self.pins: dict[NormalizedName, _Pin] = {}
        self.notes: list[str] = []
        self._closing = False
        self._crawled: set[NormalizedName] = set()

    def close(self) -> None:
        """End the run's threads; after ``cancel`` without waiting for them: each request
        in flight is cut off, but a thread may still be connecting for up to --timeout."""
        self._closing = True
        wait = not self.client.deadline.cancelled
        if self.hint_pool is not None:
            self.hint_pool.shutdown(wait=wait, cancel_futures=True)
        self.pool.shutdown(wait=wait, cancel_futures=True)

    def cancel(self) -> None:
        """Ctrl-C: every request in flight ends now."""
        self.client.cancel()

    def _submit(
        self, fn: Callable[..., T], *args: Any, pool: ThreadPoolExecutor | None = None
    ) -> Future[T]:
        if self._closing:  # a late speculative callback after the run ended
            fut: Future[T] = Future()
            fut.cancel()
            return fut
        return (pool or self.pool).submit(fn, *args)

    def _once(
        self,
        table: dict[K, Future[T]],
        key: K,
        fn: Callable[..., T],
        *args: Any,
        pool: ThreadPoolExecutor | None = None,
    ) -> Future[T]:
        """The future of ``fn(*args)`` kept in ``table`` under ``key``: the one asked for
        before in this run, else one submitted now."""
        with self._lock:
            fut = table.get(key)
            if fut is None:
                fut = table[key] = self._submit(fn, *args, pool=pool)
            return fut

    # ------------------------------------------------------------------ pages

    def page(
        self, index: str, name: NormalizedName, *, pool: ThreadPoolExecutor | None = None
    ) -> Future[Sequence[IndexFile] | None]:
        # the files the target may run; a refusal reads the whole page
        endpoint = self.endpoints[index]
        fetch = self.client.project_files
        return self._once(
            self._pages, (index, name), fetch, endpoint, name, self.target_tags, pool=pool
        )

    def page_digest(
        self, index: str, name: NormalizedName, *, pool: ThreadPoolExecutor | None = None
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
                    fut = self._submit(self.client.page_digest, endpoint, name, pool=pool)
                self._digests[(index, name)] = fut
            return fut

    def _read_recorded_metadata(self) -> None:
        """The METADATA of the files the record chose, read one after another on this one
        thread (from the cache, mostly) while the pages revalidate: a replay checks them
        next. One a replay does not use cost a cache read, never a wrong answer (a METADATA
        is checked on its file's hash from the page, and kept by the file's URL)."""
        assert self._record is not None
        keys = {(p.index, p.name) for e in self._record for p in e.pages}
        for entry in self._record:
            for c in entry.chosen:
                if self._closing:
                    return
                if c.row is None or c.name in self.m.packages:
                    continue
                verdict = self._recorded_verdict(c.name, c.row, keys)
                if verdict is None:
                    continue
                fut: Future[CoreMetadata] = Future()
                with self._lock:
                    if verdict.file.url in self._meta:
                        continue
                    self._meta[verdict.file.url] = fut
                try:
                    fut.set_result(self._load_metadata(c.name, verdict))
                except BaseException as exc:  # noqa: BLE001 - the future carries it, as a pool's would
                    fut.set_exception(exc)

    def files(self, index: str, name: NormalizedName) -> Sequence[IndexFile] | None:
        return self.page(index, name).result()

    # ------------------------------------------------------------------ pins

    def select_pin(
        self,
        *,
        name: NormalizedName,
        version: Version,
        index: str,
        kind: WheelKind | None,
        where: str,
    ) -> Verdict:
        files = self.files(index, name)
        url = redact(project_url(self.endpoints[index].url, name))
        if files is None:
            raise ResolutionError(
                f"{where}: {name} is not on index {index} ({url}: HTTP 404)",
                hint="a package bound to an index is looked up there only; check the name, or "
                "bind it to the index that publishes it",
            )

        def judge(among: Iterable[IndexFile]) -> list[Verdict]:
            return [
                v
                for f in among
                if (
                    v := evaluate(
                        f, project=name, target_tags=self.target_tags, version=version, kind=kind
                    )
                )
                is not None
            ]

        # the files of the pinned version hold every file that can be accepted; the others
        # (and the wheels the page was parsed without) are judged only to tell why none was
        verdicts = judge(version_files(files, project=name, version=version))
        if not any(v.accepted for v in verdicts):
            verdicts = judge(whole_page(files))
        try:
            chosen = best(verdicts)
        except TieError as tie:
            shown = "\n  ".join(v.file.filename for v in tie.files)
            raise ResolutionError(
                f"{where}: {name}=={version} on index {index} ({url}): two different files rank "
                f"equally for {self.m.target.describe()}:\n  {shown}",
                hint="the index must publish one file per tag set; remove one, or pin a build tag",
            ) from None
        if chosen is None:
            raise ResolutionError(
                self._refusal_message(
                    name=name,
                    version=version,
                    kind=kind,
                    index=index,
                    url=url,
                    verdicts=verdicts,
                    where=where,
                ),
                hint=_refusal_hint(name, version, verdicts, self.m),
            )
        return chosen

    def _refusal_message(
        self,
        *,
        name: NormalizedName,
        version: Version,
        kind: str | None,
        index: str,
        url: str,
        verdicts: Sequence[Verdict],
        where: str,
    ) -> str:
        same_public = [
            v for v in verdicts if v.version is None or v.version.public == version.public
        ]
        others = sorted(
            {
                str(v.version)
                for v in verdicts
                if v.version is not None and v.version.public != version.public
            },
            key=Version,
        )
        head = (
            f"{where}: no acceptable wheel for {name}=={version}"
            + (f" ({kind})" if kind else "")
            + f" on index {index} ({url}) for {self.m.target.describe()}"
        )
        lines = [head + (":" if same_public else "")]
        for v in sorted(same_public, key=lambda v: v.file.filename):
            lines.append(f"  {v.describe()}")
        if not same_public:
            lines.append(f"  no file of version {version} is listed")
        if others:
            shown = ", ".join(others[-8:])
            more = f" (and {len(others) - 8} older)" if len(others) > 8 else ""
            lines.append(f"  other versions on the index, not considered: {shown}{more}")
        return "\n".join(lines)

    def select_pins(self) -> None:
        m = self.m
        for name, pin in m.packages.items():  # start every page fetch at once
            self.page(pin.index, name)
            if pin.index != m.default_index:
                self.page(m.default_index, name)
        for name in m.overrides:
            if name not in m.packages:  # an override of a pin declares the pin's departure
                self.page(m.index_of(name), name)
        errors: list[BuildImageError] = []
        for name, pin in m.packages.items():
            try:
                verdict = self.select_pin(
                    name=name,
                    version=pin.version,
                    index=pin.index,
                    kind=pin.wheel,
                    where=f"packages.{pin.key}",
                )
            except BuildImageError as exc:
                errors.append(exc)
                continue
            self.pins[name] = _Pin(
                name, pin.version, pin.index, verdict, "pin", f"packages.{pin.key}", pin.deps
            )
        for name, override in m.overrides.items():
            if name in m.packages:  # the pin is the override's version: it is selected above
                continue
            where = f"overrides.{override.key}"
            index = m.index_of(name)
            try:
                verdict = self.select_pin(
                    name=name, version=override.version, index=index, kind=None, where=where
                )
            except BuildImageError as exc:
                errors.append(exc)
                continue
            self.pins[name] = _Pin(name, override.version, index, verdict, "override", where, True)
        if errors:
            raise _combine(errors)

    def note_shadowed_names(self) -> None:
        """Note each pinned name that the default index also has (its page was asked for
        with the pins', and is read once the search is done: it never holds the search)."""
        m = self.m
        for name, pin in m.packages.items():
            if pin.index != m.default_index:
                try:
                    also = self.files(m.default_index, name)
                except BuildImageError:
                    also = None
                if also is not None and listed(also):  # a page of wheels it cannot run counts
                    self.notes.append(
                        f"note: {name} is bound to index {pin.index}; index {m.default_index} also "
                        f"has a project named {name}, which this stack never uses"
                    )

    def add_line_map_pins(self, versions: Mapping[NormalizedName, Version]) -> bool:
        """Pin each line_map package by its followed package's line; True if any was added."""
        added = False
        for lm in self.m.rules.line_map:
            if lm.name in self.pins or lm.follows not in versions:
                continue
            line = line_of(versions[lm.follows])
            if line not in lm.versions:
                supported = ", ".join(sorted(lm.versions, key=Version))
                raise ResolutionError(
                    f"rules.line_map.{lm.name}: unsupported {lm.follows} line {line}; "
                    f"supported: {supported}",
                    hint=f"add a {line} entry to rules.line_map.{lm.name}.versions, or pin "
                    f"{lm.follows} to a supported line",
                )
            version = Version(lm.versions[line])
            where = f"rules.line_map.{lm.name}"
            verdict = self.select_pin(
                name=lm.name,
                version=version,
                index=self.m.default_index,
                kind=None,
                where=where,
            )
            self.pins[lm.name] = _Pin(
                lm.name, version, self.m.default_index, verdict, "line-map", where, True
            )
            added = True
        return added

    # ------------------------------------------------------------------ CandidateSource

    def candidates(self, name: NormalizedName) -> Iterable[Candidate]:
        pin = self.pins.get(name)
        if pin is not None:
            return [Candidate(name, pin.version, verdict=pin.verdict, pinned=True)]
        provided = self.sources.provided.get(name)
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
            for release in Releases(files, project=name, target_tags=self.target_tags):
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

    def follows_deps(self, name: NormalizedName) -> bool:
        if name in self.sources.provided:  # its requirements are its requirements files
            return False
        pin = self.pins.get(name)
        return pin.deps if pin is not None else True

    def prefetch(
        self, names: Iterable[NormalizedName], *, pool: ThreadPoolExecutor | None = None
    ) -> None:
        """Run ahead of the search: fetch each name's page, then the metadata of its newest
        usable version, then the pages of that version's dependencies, and so on. The search
        then mostly finds what it asks for already fetched; a guess that turns out unused
        costs one request and is never an error (errors surface only when the search asks)."""
        for name in names:
            if name in self.sources.provided:
                continue
            with self._lock:
                if name in self._crawled:
                    continue
                self._crawled.add(name)
            if name in self.pins:
                pin = self.pins[name]
                if pin.deps:
                    self._metadata_future(name, pin.verdict).add_done_callback(self._after_metadata)
                continue
            self.page(self.m.index_of(name), name, pool=pool).add_done_callback(
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
                self._metadata_future(name, cand.verdict).add_done_callback(self._after_metadata)
                return

    def _after_metadata(self, fut: Future[CoreMetadata]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            return
        env = {**self.env, "extra": ""}
        self.prefetch(
            canonicalize_name(r.name)
            for r in fut.result().requires_dist
            if r.marker is None or r.marker.evaluate(env)
        )

    def _metadata_future(self, name: NormalizedName, verdict: Verdict) -> Future[CoreMetadata]:
        # a pin's METADATA is read here: its wheel also downloads here from the start, and a
        # server without range requests serves both from one transfer (IndexClient.download)
        return self._once(self._meta, verdict.file.url, self._load_metadata, name, verdict)

    def _index_of(self, name: NormalizedName) -> str:
        return self.m.index_of(name) if name not in self.pins else self.pins[name].index

    def _load_metadata(self, name: NormalizedName, verdict: Verdict) -> CoreMetadata:
        index = self._index_of(name)
        data = self.client.core_metadata(self.endpoints[index], verdict.file, label=name)
        return self._checked_metadata(name, verdict, data)

    def _checked_metadata(
        self, name: NormalizedName, verdict: Verdict, data: bytes
    ) -> CoreMetadata:
        """``data`` parsed, checked against the file's name and version, and its sha256 kept
        for the search record."""
        index = self._index_of(name)
        where = f"{verdict.file.filename} on index {index}"
        meta = parse_core_metadata(data, where=where)
        assert verdict.name is not None
        assert verdict.version is not None
        check_matches_filename(meta, name=verdict.name, version=verdict.version, where=where)
        with self._lock:
            self._meta_sha[verdict.file.url] = hashlib.sha256(data).hexdigest()
        return meta

    def requirements_of(self, candidate: Candidate) -> tuple[Sequence[Requirement], str | None]:
        assert candidate.verdict is not None
        meta = self._metadata_future(candidate.name, candidate.verdict).result()
        return meta.requires_dist, meta.requires_python

    def why_empty(self, name: NormalizedName) -> str:
        index = self.m.index_of(name)
        if self.files(index, name) is None:
            return f"{name} is not on index {index} (HTTP 404)"
        ties = self._ties.get(name)
        if ties:
            return "versions skipped because two files tie: " + "; ".join(ties)
        return f"no file of {name} on index {index} runs on {self.m.target.describe()}"

    # ------------------------------------------------------------------ the run

    def _source_roots(self) -> tuple[Path, Path]:
        root = self.repo_root if self.repo_root is not None else find_repo_root(self.m.path)
        return root, self.client.cache.root / "git"

    def read_sources(self, trees: Mapping[str, SourceRequirements]) -> SourceInputs:
        root, git_cache = self._source_roots()
        return read_sources(
            self.m,
            files=self.files,
            client=self.client,
            endpoints=self.endpoints,
            repo_root=root,
            git_cache=git_cache,
            trees=trees,
        )

    def run(self) -> LockResult:
        provided_projects(self.m)  # a project built from an sdist is neither pinned nor overridden
        # the git and path sources' requirements files first, checked against the manifest's
        # exact versions: a contradiction is refused before any index is asked
        root, git_cache = self._source_roots()
        trees = read_trees(self.m, repo_root=root, git_cache=git_cache)
        # a re-lock revalidates the pages it will read from the start, beside the search: the
        # ones its search record lists (no crawl: a replayed search reads no more), else the
        # previous lock's names, crawled
        if self._record_pages:  # a conditional GET each, on the read-ahead threads
            for index, name in self._record_pages:
                self.page_digest(index, name, pool=self.hint_pool)
            self._submit(self._read_recorded_metadata, pool=self.hint_pool)
        else:
            self.prefetch(self.hints, pool=self.hint_pool)
        sources = None
        if any(s.sdist or s.requirements_files or s.build_requirements_files
               for s in self.m.sources):  # fmt: skip
            sources = self._submit(self.read_sources, trees)  # an sdist downloads meanwhile
        errors: list[BuildImageError] = []
        try:
            self.select_pins()
        except BuildImageError as exc:
            errors.append(exc)
        if sources is not None:
            try:
                self.sources = sources.result()
            except BuildImageError as exc:
                errors.append(exc)
        if errors:
            raise _combine(errors)
        if self._record_pages:  # a replay reads the pins' METADATA again: start it now
            for pin in self.pins.values():
                if pin.deps:
                    self._metadata_future(pin.name, pin.verdict)
        pinned_versions = {n: p.version for n, p in self.pins.items()}
        self.add_line_map_pins(pinned_versions)
        if self.verify:  # the big vendor wheels download while the search runs
            for pin in self.pins.values():
                self._download_future(pin.name, pin.verdict, pin.index)
        if not self._record_pages:  # else a search that runs crawls from its roots (the pins')
            self.prefetch(self.pins)
        resolution = self._search()
        chosen_versions = {n: c.version for n, c in resolution.chosen.items()}
        if self.add_line_map_pins(chosen_versions):
            resolution = self._search()
        self._check_rules({n: c.version for n, c in resolution.chosen.items()})
        self.note_shadowed_names()
        result = self._finish(resolution)
        self._save_record()
        return dataclasses.replace(result, search=self._search_line())

    def _roots(self) -> tuple[list[Req], list[Req], list[tuple[str, Req]]]:
        """The runtime roots, the build roots, and the root requirements on overridden names
        (left out of the search; kept with their requirer for the lock's record)."""
        env = {**self.env, "extra": ""}
        ignored: list[tuple[str, Req]] = []

        def add(into: list[Req], req: Requirement, parent: str, requirer: str, origin: str) -> None:
            if req.marker is not None and not req.marker.evaluate(env):
                return
            r = make_req(req, parent, origin)
            if r.name in self.m.overrides:
                ignored.append((requirer, r))
            else:
                into.append(r)

        runtime: list[Req] = []
        for name, pin in sorted(self.pins.items()):
            spec = SpecifierSet(f"=={pin.version}")
            runtime.append(Req(name, frozenset(), spec, _ROOT_OF[pin.origin], ""))
        for req in self.m.requirements:
            add(runtime, req, "requirements", "requirements", "")
        build: list[Req] = []
        for req in self.m.build.requirements:
            add(build, req, "build.requirements", "build.requirements", "")
        groups: tuple[tuple[list[Req], tuple[RootRequirement, ...]], ...] = (
            (runtime, self.sources.runtime),
            (build, self.sources.build),
        )
        for into, roots in groups:
            for root in roots:
                add(into, root.requirement, root.parent, root.requirer, root.origin)
        return runtime, build, ignored

    def _search(self) -> _Search:
        runtime, build, ignored_roots = self._roots()
        fingerprint = sr.fingerprint(self._search_inputs(runtime, build, ignored_roots))
        replayed = self._replay(fingerprint)
        if replayed is not None:
            return replayed
        self.prefetch(r.name for r in (*runtime, *build))
        provided = self.sources.provided
        pins = {
            n: Candidate(n, p.version, verdict=p.verdict, pinned=True) for n, p in self.pins.items()
        }
        pins.update({n: Candidate(n, p.version, pinned=True) for n, p in provided.items()})
        watch = _Watch(self)
        provider = Provider(
            watch,
            environment=self.env,
            python_version=Version(self.m.target.python_str),
            pins=pins,
            overridden=frozenset(self.m.overrides),
        )
        describe = {n: p.where for n, p in self.pins.items()}
        res = resolve(
            provider,
            [*runtime, *build],
            describe_pin=describe,
            explain_empty=self.why_empty,
            provided={n: p.where for n, p in provided.items()},
        )
        runtime_names = _reachable({r.name for r in runtime}, res.required_by, set(res.chosen))
        ignores: dict[NormalizedName, set[str]] = {}
        for requirer, req in [*ignored_roots, *(i for v in res.ignored.values() for i in v)]:
            override = self.m.overrides[req.name]
            if not req.allows(override.version):
                ignores.setdefault(req.name, set()).add(
                    f"{requirer} requires {requirement_text(req)}"
                )
        search = _Search(
            {n: c for n, c in res.chosen.items() if n not in provided},
            res.required_by,
            runtime_names,
            {n: tuple(sorted(v)) for n, v in ignores.items()},
            frozenset(r.name for r in runtime if r.parent not in _ROOT_OF.values()),
        )
        self._entries.append(self._entry(fingerprint, watch, search))
        return search

    # ------------------------------------------------------------------ the search record

    def _load_record(self) -> tuple[tuple[Entry, ...] | None, str]:
        """The entries of this slot's record, and why there are none ("no record", "the
        record is unusable"): a record is untrusted input, and any problem is only that."""
        cache = self.client.cache
        raw = cache.get_search(self._slot, max_bytes=sr.MAX_RECORD_BYTES)
        if raw is None:
            found = cache.search_path(self._slot).exists()
            return None, "the record is unusable" if found else "no record"
        entries = sr.decode(raw)
        if entries is None:
            return None, "the record is unusable"
        self._loaded = raw
        return entries, ""

    def _search_inputs(
        self, runtime: Sequence[Req], build: Sequence[Req], ignored: Sequence[tuple[str, Req]]
    ) -> object:
        """Everything the search reads besides the pages and METADATA, as JSON types."""

        def req(r: Req) -> list[object]:
            return [r.name, sorted(r.extras), str(r.specifier), r.parent, r.origin]

        def row(f: IndexFile) -> list[object]:
            meta = None if f.metadata_hashes is None else dict(f.metadata_hashes)
            return [f.url, f.filename, dict(f.hashes), meta, f.requires_python, f.yanked]

        m = self.m
        return {
            "target": [list(m.target.python), m.target.arch, list(m.target.glibc)],
            "environment": self.env,
            "python": m.target.python_str,
            "default_index": m.default_index,
            "runtime": [req(r) for r in runtime],
            "build": [req(r) for r in build],
            "ignored": [[who, *req(r)] for who, r in ignored],
            "pins": {
                n: [str(p.version), p.index, p.origin, p.deps, p.verdict.kind, row(p.verdict.file)]
                for n, p in sorted(self.pins.items())
            },
            "provided": {n: str(p.version) for n, p in sorted(self.sources.provided.items())},
            "overrides": {n: [str(o.version), o.index] for n, o in sorted(m.overrides.items())},
        }

    def _replay(self, fingerprint: str) -> _Search | None:
        """The recorded outcome of a search of these inputs, when every page and METADATA it
        read is unchanged in this run; else None (and why, for the -v line)."""
        if self._record is None:
            self._outcomes.append(self._record_state)
            return None
        entry = next((e for e in self._record if e.fingerprint == fingerprint), None)
        if entry is None:
            self._outcomes.append("inputs changed")
            return None
        why = self._changed(entry)
        search = self._replayed(entry) if why is None else None
        if search is None:
            self._outcomes.append(why or "the record is unusable")
            return None
        self._entries.append(entry)
        self._outcomes.append(None)
        return search

    def _changed(self, entry: Entry) -> str | None:
        """What changed of what ``entry`` read, in words; None when nothing did."""
        if any(p.index not in self.endpoints for p in entry.pages):
            return "the record is unusable"
        asked = [(p, self.page_digest(p.index, p.name)) for p in entry.pages]  # in flight
        changed = 0
        for p, fut in asked:
            try:
                digest = fut.result()
            except BuildImageError:  # the search, if it runs, says it
                changed += 1
                continue
            changed += digest != p.digest
        if changed:
            return f"{changed} page{'s' if changed != 1 else ''} changed"
        keys = {(p.index, p.name) for p in entry.pages}
        loading: list[tuple[MetadataRead, Verdict, Future[CoreMetadata]]] = []
        for m in entry.metadata:
            verdict = self._recorded_verdict(m.name, m.row, keys)
            if verdict is None:
                return "the record is unusable"
            if (verdict.file.metadata_hashes or {}).get("sha256") == m.sha256:
                continue  # the page gives that sha256 now (a record made before said not)
            loading.append((m, verdict, self._metadata_future(m.name, verdict)))
        differ = 0
        for m, verdict, meta in loading:
            try:
                meta.result()
            except BuildImageError:
                differ += 1
                continue
            with self._lock:
                differ += self._meta_sha.get(verdict.file.url) != m.sha256
        if differ:
            return f"the METADATA of {differ} file{'s' if differ != 1 else ''} changed"
        return None

    def _recorded_verdict(
        self, name: NormalizedName, row: Row | None, keys: set[tuple[str, NormalizedName]]
    ) -> Verdict | None:
        """The verdict on the file a record names: a pin's (``row`` None), or the file of
        ``row`` of the name's page. The page it is on is the one recorded (the same digest)
        and was parsed by the same code (the fingerprint), so its rows are not read again.
        None when the file is not one the record could name."""
        if row is None:
            pin = self.pins.get(name)
            return None if pin is None else pin.verdict
        if name in self.pins or name in self.sources.provided:
            return None
        if (self.m.index_of(name), name) not in keys:
            return None
        verdict = evaluate(IndexFile.from_row(row), project=name, target_tags=self.target_tags)
        if verdict is None or not verdict.accepted or verdict.version is None:
            return None
        return verdict

    def _replayed(self, entry: Entry) -> _Search | None:
        """The ``_Search`` ``entry`` records, with its files as the record keeps them."""
        keys = {(p.index, p.name) for p in entry.pages}
        chosen: dict[NormalizedName, Candidate] = {}
        for c in entry.chosen:
            version = Version(c.version)
            if c.row is None:
                pin = self.pins.get(c.name)
                if pin is None or pin.version != version:
                    return None
                chosen[c.name] = Candidate(c.name, pin.version, verdict=pin.verdict, pinned=True)
                continue
            verdict = self._recorded_verdict(c.name, c.row, keys)
            if verdict is None or verdict.version != version:
                return None
            chosen[c.name] = Candidate(c.name, version, verdict=verdict)
        if len(chosen) != len(entry.chosen):
            return None
        return _Search(
            chosen,
            dict(entry.required_by),
            entry.runtime,
            dict(entry.ignores),
            entry.roots,
        )

    def _entry(self, fingerprint: str, watch: _Watch, search: _Search) -> Entry | None:
        """What a search that ran read and chose, for the record; None when something it
        read cannot be told by a digest (a find-links page)."""
        pages: list[PageRead] = []
        found: dict[tuple[str, str], ProjectPage] = {}
        for index, name in sorted(watch.pages):
            files = self.files(index, name)
            if files is None:
                pages.append(PageRead(index, name, None))
                continue
            if not isinstance(files, ProjectPage) or files.digest is None:
                return None
            found[(index, name)] = files
            pages.append(PageRead(index, name, files.digest))
        where: dict[tuple[str, str], dict[str, list[int]]] = {}

        def pos_of(name: NormalizedName, file: IndexFile) -> int | None:
            key = (self.m.index_of(name), name)
            files = found.get(key)
            if files is None:
                return None
            table = where.get(key)
            if table is None:
                table = where[key] = {}
                for i, r in enumerate(files.rows):
                    table.setdefault(r[1], []).append(i)
            return next((i for i in table.get(file.url, ()) if files[i] is file), None)

        metadata: list[MetadataRead] = []
        for url, (name, verdict) in sorted(watch.metadata.items()):
            pin = self.pins.get(name)
            pos = -1 if pin is not None and pin.verdict is verdict else pos_of(name, verdict.file)
            with self._lock:
                sha = self._meta_sha.get(url)
            if pos is None or sha is None:
                return None
            if (verdict.file.metadata_hashes or {}).get("sha256") == sha:
                continue  # the page gives that sha256: the page's digest covers it
            row = None if pos == -1 else found[(self.m.index_of(name), name)].rows[pos]
            metadata.append(MetadataRead(name, pos, row, sha))
        chosen: list[ChosenRecord] = []
        for name, cand in sorted(search.chosen.items()):
            if cand.pinned:
                chosen.append(ChosenRecord(name, str(cand.version), -1, None))
                continue
            assert cand.verdict is not None
            pos = pos_of(name, cand.verdict.file)
            if pos is None:
                return None
            row = found[(self.m.index_of(name), name)].rows[pos]
            chosen.append(ChosenRecord(name, str(cand.version), pos, row))
        return Entry(
            fingerprint=fingerprint,
            pages=tuple(pages),
            metadata=tuple(metadata),
            chosen=tuple(chosen),
            required_by=search.required_by,
            runtime=search.runtime,
            ignores=search.ignores,
            roots=search.roots,
        )

    def _save_record(self) -> None:
        """Keep this run's searches as the slot's record (unless one is not recordable, or
        the record already says exactly this)."""
        entries = [e for e in self._entries if e is not None]
        if not entries or len(entries) != len(self._entries):
            return
        payload = sr.encode(entries)
        if payload == self._loaded:
            return
        # a record that cannot be written costs the next re-lock its search, nothing else
        with contextlib.suppress(OSError):
            self.client.cache.put_search(self._slot, payload)

    def _search_line(self) -> str:
        ran = [why for why in self._outcomes if why is not None]
        if ran:
            return f"search: ran ({ran[0]})"
        n = len({(p.index, p.name) for e in self._entries if e is not None for p in e.pages})
        if n == 0:
            return "search: replayed (it read no index page)"
        pages = "page it read is" if n == 1 else "pages it read are"
        return f"search: replayed (the {n} {pages} unchanged)"

    def _check_rules(self, versions: Mapping[NormalizedName, Version]) -> None:
        """Both rules hold on the final closure, and name only packages that are in it (a rule
        about an absent package is a typo or a stale rule, never silently nothing)."""
        for i, group in enumerate(self.m.rules.same_line):
            missing = [n for n in group if n not in versions]
            if missing:
                raise ResolutionError(
                    f"rules.same_line.{i}: {', '.join(missing)} "
                    f"{'is' if len(missing) == 1 else 'are'} not in the lock, so the rule "
                    "would check nothing",
                    hint="fix the name, or remove the rule",
                )
        for lm in self.m.rules.line_map:
            where = f"rules.line_map.{lm.name}"
            if lm.follows not in versions:
                raise ResolutionError(
                    f"{where}: follows {lm.follows}, which is not in the lock",
                    hint="fix the name in follows, or remove the rule",
                )
            line = line_of(versions[lm.follows])
            want = lm.versions.get(line)
            got = versions.get(lm.name)
            if want is None or got is None or str(got) != want:
                raise ResolutionError(
                    f"{where}: {lm.follows} resolved to line {line}, which maps to "
                    f"{lm.name} {want or '(no entry)'}, but the lock would have "
                    f"{lm.name} {got or '(none)'}",
                    hint=f"pin {lm.follows} so that its line is decided by the manifest",
                )
        for group in self.m.rules.same_line:
            present = [(n, versions[n]) for n in group if n in versions]
            lines = {line_of(v) for _, v in present}
            if len(lines) > 1:
                shown = ", ".join(f"{n} {v} (line {line_of(v)})" for n, v in present)
                raise ResolutionError(
                    f"rules.same_line: {', '.join(group)} must share major.minor, but the lock "
                    f"would have {shown}",
                    hint="pin them to builds of the same line",
                )

    # ------------------------------------------------------------------ verification

    def _download_future(
        self, name: NormalizedName, verdict: Verdict, index: str
    ) -> Future[tuple[str, int, CoreMetadata]]:
        return self._once(self._downloads, verdict.file.url, self._download, name, verdict, index)

    def _download(
        self, name: NormalizedName, verdict: Verdict, index: str
    ) -> tuple[str, int, CoreMetadata]:
        from resolver.index_client import metadata_from_wheel

        got = self.client.download(self.endpoints[index], verdict.file, label=name)
        where = f"{verdict.file.filename} on index {index}"
        meta = parse_core_metadata(
            metadata_from_wheel(got.path, verdict.file.filename, label=name), where=where
        )
        assert verdict.name is not None
        assert verdict.version is not None
        check_matches_filename(meta, name=verdict.name, version=verdict.version, where=where)
        return got.sha256, got.size, meta

    def _check_same_metadata(
        self, name: NormalizedName, index: str, file: IndexFile, in_wheel: CoreMetadata
    ) -> None:
        """The metadata the search used (PEP 658 file or range read) must be the wheel's own."""
        with self._lock:
            used = self._meta.get(file.url)
        if used is None:
            return
        seen = used.result()
        if (seen.requires_dist, seen.requires_python) != (
            in_wheel.requires_dist,
            in_wheel.requires_python,
        ):
            raise MetadataError(
                f"{name}: the metadata index {index} serves for {file.filename} differs from the "
                "METADATA inside the wheel (Requires-Dist or Requires-Python)",
                hint="the index's PEP 658 metadata file is stale or forged; report it to the "
                "index owner",
            )

    def _check_requires_python(
        self, name: NormalizedName, index: str, file: IndexFile, meta: CoreMetadata
    ) -> None:
        """The search checks Requires-Python of what it follows; this covers every locked file
        (a pin with ``deps: false`` included), from the METADATA the file itself carries."""
        if meta.requires_python is None:
            return
        if not SpecifierSet(meta.requires_python).contains(self.m.target.python_str, True):
            raise ResolutionError(
                f"{name}: {file.filename} on index {index} says Requires-Python "
                f"{meta.requires_python} in its METADATA, which excludes the target "
                f"CPython {self.m.target.python_str}",
                hint="pin a version of it built for the target",
            )

    def _finish(self, search: _Search) -> LockResult:
        m = self.m
        jobs: dict[NormalizedName, Future[tuple[str, int, CoreMetadata]] | None] = {}
        for name, cand in search.chosen.items():
            assert cand.verdict is not None
            index = self.pins[name].index if name in self.pins else m.index_of(name)
            file = cand.verdict.file
            if self.verify or "sha256" not in file.hashes:
                jobs[name] = self._download_future(name, cand.verdict, index)
            else:
                jobs[name] = None
                self._metadata_future(name, cand.verdict)  # already there unless deps: false
        errors: list[BuildImageError] = []
        packages: list[LockedPackage] = []
        for name in sorted(search.chosen):
            cand = search.chosen[name]
            assert cand.verdict is not None
            file = cand.verdict.file
            index = self.pins[name].index if name in self.pins else m.index_of(name)
            job = jobs[name]
            try:
                if job is not None:
                    sha, size, in_wheel = job.result()
                    self._check_same_metadata(name, index, file, in_wheel)
                    meta = in_wheel
                else:
                    meta = self._metadata_future(name, cand.verdict).result()
                    sha, size = file.hashes["sha256"], file.size  # type: ignore[assignment]
                self._check_requires_python(name, index, file, meta)
            except BuildImageError as exc:
                errors.append(exc)
                continue
            pin = self.pins.get(name)
            if pin is not None:
                origin = pin.origin
            elif name in search.runtime:
                origin = "requirement" if name in search.roots else "dependency"
            else:
                origin = "build"
            override = m.overrides.get(name)
            packages.append(
                LockedPackage(
                    name=name,
                    version=str(cand.version),
                    index=index,
                    index_url=self.endpoints[index].url,
                    filename=file.filename,
                    url=file.url,
                    sha256=sha,
                    size=size,
                    kind=cand.verdict.kind or "other",
                    origin=origin,
                    required_by=search.required_by.get(name, ()),
                    group="runtime" if name in search.runtime else BUILD_GROUP,
                    override_reason=override.reason if override else None,
                    override_ignores=search.ignores.get(name, ()) if override else (),
                )
            )
        if errors:
            raise _combine(errors)
        for name, override in sorted(m.overrides.items()):
            if not search.ignores.get(name):
                self.notes.append(
                    f"note: overrides.{override.key} overrides nothing (every requirement on "
                    f"{name} accepts {override.version_text}); remove it"
                )
        packages += self.sources.sdists
        lock = Lock(
            stack=m.name,
            target=m.target,
            lock_inputs_sha256=m.lock_inputs_sha256,
            packages=tuple(sorted(packages, key=lambda p: (p.name, p.group))),
        )
        return LockResult(lock=lock, notes=tuple(self.notes), stats=dict(self.client.stats))


class _Watch:
    """The locker as the search's ``CandidateSource``, noting the pages and the METADATA the
    search reads (the crawl ahead of it reads the locker directly, and is not noted)."""

    def __init__(self, locker: StackLocker) -> None:
        self.locker = locker
        self.pages: set[tuple[str, NormalizedName]] = set()
        self.metadata: dict[str, tuple[NormalizedName, Verdict]] = {}  # file URL -> whose

    def candidates(self, name: NormalizedName) -> Iterable[Candidate]:
        lk = self.locker
        if name not in lk.pins and name not in lk.sources.provided:
            self.pages.add((lk.m.index_of(name), name))
        return lk.candidates(name)

    def requirements_of(self, candidate: Candidate) -> tuple[Sequence[Requirement], str | None]:
        assert candidate.verdict is not None
        self.metadata.setdefault(candidate.verdict.file.url, (candidate.name, candidate.verdict))
        return self.locker.requirements_of(candidate)

    def follows_deps(self, name: NormalizedName) -> bool:
        return self.locker.follows_deps(name)

    def prefetch(self, names: Iterable[NormalizedName]) -> None:
        self.locker.prefetch(names)


@dataclass(frozen=True)
class _Search:
    chosen: Mapping[NormalizedName, Candidate]
    required_by: Mapping[NormalizedName, tuple[str, ...]]
    runtime: frozenset[NormalizedName]
    # overridden name -> "requirer requires name<spec>" the override's version breaks
    ignores: Mapping[NormalizedName, tuple[str, ...]] = field(default_factory=dict)
    # names a runtime root requirement (not a pin) asks for: manifest or requirements file
    roots: frozenset[NormalizedName] = frozenset()


def _reachable(
    roots: set[NormalizedName],
    required_by: Mapping[NormalizedName, tuple[str, ...]],
    chosen: set[NormalizedName],
) -> frozenset[NormalizedName]:
    children: dict[str, set[NormalizedName]] = {}
    for child, parents in required_by.items():
        for parent in parents:
            children.setdefault(parent, set()).add(child)
    seen: set[NormalizedName] = set()
    todo = [r for r in roots if r in chosen]
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(children.get(n, ()))
    return frozenset(seen)


def _combine(errors: list[BuildImageError]) -> BuildImageError:
    if len(errors) == 1:
        return errors[0]
    first = errors[0]
    text = "\n".join(e.message for e in errors)
    hints = [e.hint for e in errors if e.hint]
    combined = (
        type(first)(text, hint="\n".join(dict.fromkeys(hints)) if hints else None)
        if all(type(e) is type(first) for e in errors)
        else ResolutionError(text, hint="\n".join(dict.fromkeys(hints)) if hints else None)
    )
    return combined


def _refusal_hint(
    name: NormalizedName, version: Version, verdicts: Sequence[Verdict], m: Manifest
) -> str:
    reasons = {
        v.reason
        for v in verdicts
        if v.reason is not None and (v.version is None or v.version.public == version.public)
    }
    labels = sorted({str(v.version) for v in verdicts if v.reason is Reason.OTHER_LOCAL_LABEL})
    parts: list[str] = []
    if Reason.OTHER_LOCAL_LABEL in reasons and labels:
        parts.append(
            f"this version exists only as {', '.join(labels)}; a local label is a different build, "
            "so pin it explicitly if it is the one you want"
        )
    if Reason.WRONG_PYTHON_TAG in reasons:
        parts.append(f"the index has no {m.target.cp_tag} build of {name} {version}")
    parts.append(f"`build_image.py explain {m.path} {name}` lists every file with its reason")
    return "; ".join(parts)


def lock_stack(
    manifest: Manifest,
    client: IndexClient,
    endpoints: Mapping[str, IndexEndpoint],
    *,
    verify: bool = True,
    repo_root: Path | None = None,
    hints: Iterable[NormalizedName] = (),
) -> LockResult:
    """Lock ``manifest``. ``repo_root``: where its path sources are (default: the git top
    level around the manifest, else the directory two levels up). ``hints``: names the search
    will likely need (the previous lock's), whose pages are fetched from the start; a hint
    the search never needs costs one request and is never an error."""
    locker = StackLocker(
        manifest, client, endpoints, verify=verify, repo_root=repo_root, hints=hints
    )
    try:
        return locker.run()
    except KeyboardInterrupt:
        locker.cancel()  # every request in flight ends now: the workers stop within moments
        raise
    finally:
        locker.close()
