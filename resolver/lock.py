"""Orchestration: from a manifest and an index client to a complete, verified ``Lock``.

0. The git and path sources' requirements files are read at their pinned revisions; a line
   that excludes one of the manifest's exact versions (on a name ``overrides`` does not
   declare) is refused before any index is asked (``sources.contradictions``).
1. Every pin (``packages``, ``overrides``, ``line_map`` choices) must have exactly one best
   wheel of its kind on its bound index (``resolver.fixed_points``); meanwhile each source's
   sdist is downloaded and hashed and its requirements read (``resolver.source_inputs``).
2. The closure of the roots and of the pins' Requires-Dist is searched with resolvelib, each
   name on its bound index only (``resolver.search``); a project built from an sdist is never
   looked up. ``resolver.fetcher`` fetches ahead of the search.
3. ``same_line`` and ``line_map`` are checked on the whole closure.
4. Every chosen file is downloaded and hashed (unless ``verify=False`` and the index gives a
   sha256), and its METADATA must agree with its filename.

A search whose inputs and pages did not change is replayed rather than run
(``resolver.search_replay``): every page of its record is revalidated from the start, and a
replay reads no page body. Steps 3 and 4 run either way. Nothing is written here but that
record; the caller writes the lock. Ctrl-C cancels the requests in flight.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName
from packaging.version import Version

from core.errors import BuildImageError, MetadataError, ResolutionError
from manifest import Manifest
from resolver import search_record
from resolver.closure import Candidate
from resolver.fetcher import Fetcher, VerifiedWheel
from resolver.fixed_points import FixedPoints, PinChooser, line_of
from resolver.index_client import IndexClient, IndexEndpoint
from resolver.lockfile import BUILD_GROUP, Lock, LockedPackage
from resolver.search import SearchOutcome, search_roots
from resolver.search_replay import SearchReplay, load_record
from resolver.simple_page import IndexFile
from resolver.source_inputs import provided_projects, read_sources, read_trees
from resolver.target import TargetTags, marker_environment
from resolver.wheel_metadata import CoreMetadata
from sources.read import SourceRequirements
from sources.read import repo_root as find_repo_root

__all__ = ["LockResult", "StackLocker", "line_of", "lock_stack"]


@dataclass(frozen=True, kw_only=True)
class LockResult:
    lock: Lock
    notes: tuple[str, ...] = ()
    stats: Mapping[str, int] = field(default_factory=dict)
    search: str = ""  # "search: replayed (...)" or "search: ran (why)", shown under -v


class StackLocker:
    """One lock run, step by step (see the module's docstring): the order of the steps, the
    rules, and the downloads' checks that make the ``LockResult``."""

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
        self.target_tags = TargetTags(manifest.target)
        self.env = marker_environment(manifest.target)
        self.fixed = FixedPoints(manifest)
        # the search record of this stack, target and indexes (resolver.search_record)
        slot = search_record.slot_key(
            manifest.name, manifest.target.describe(), {n: e.url for n, e in endpoints.items()}
        )
        previous = load_record(client.cache, slot)
        # the hints' (or the record's) pages are asked for from the start, on threads of their own
        self.fetcher = Fetcher(
            client,
            endpoints,
            self.fixed,
            self.target_tags,
            self.env,
            read_ahead=bool(self.hints or previous.pages(endpoints)),
        )
        self.searches = SearchReplay(previous, slot=slot, fetcher=self.fetcher)
        self.chooser = PinChooser(manifest, self.fetcher, endpoints, self.target_tags, self.fixed)
        self.notes: list[str] = []

    # ------------------------------------------------------------------ the run

    def run(self) -> LockResult:
        provided_projects(self.m)  # a project built from an sdist is neither pinned nor overridden
        # the git and path sources' requirements files first: a contradiction is refused
        # before any index is asked
        trees = read_trees(self.m, **self._source_places())
        # a re-lock asks for the pages it will read from the start, beside the search
        self.searches.start(self.hints)
        self._fix_points(trees)
        self._start_pins()
        search = self._search()
        if self.chooser.add_line_map_pins({n: c.version for n, c in search.chosen.items()}):
            search = self._search()
        _check_rules(self.m, {n: c.version for n, c in search.chosen.items()})
        self.notes += self.chooser.shadowed_name_notes()
        result = self._finish(search)
        return dataclasses.replace(result, search=self.searches.finish())

    def _source_places(self) -> dict[str, Any]:
        root = self.repo_root if self.repo_root is not None else find_repo_root(self.m.path)
        git_cache = self.client.cache.root / "git"
        return {"repo_root": root, "git_cache": git_cache, "network": self.client.options.network}

    def _fix_points(self, trees: Mapping[str, SourceRequirements]) -> None:
        """Choose the pins' files and read the sources (an sdist downloads meanwhile); every
        refusal of either at once."""
        sources = None
        if any(s.sdist or s.requirements_files or s.build_requirements_files
               for s in self.m.sources):  # fmt: skip
            read = functools.partial(
                read_sources, self.m, indexes=self.fetcher, trees=trees, **self._source_places()
            )
            sources = self.fetcher.submit(read)
        errors: list[BuildImageError] = []
        refused = self.chooser.select_pins()
        if refused:
            errors.append(_combine(refused))
        if sources is not None:
            try:
                self.fixed.sources = sources.result()
            except BuildImageError as exc:
                errors.append(exc)
        if errors:
            raise _combine(errors)

    def _start_pins(self) -> None:
        """Add the line_map pins the manifest's pins decide, and start what the pins need:
        their downloads, and their METADATA or their crawl (``SearchReplay.start_pins``)."""
        pins = self.fixed.pins
        self.chooser.add_line_map_pins({n: p.version for n, p in pins.items()})
        if self.verify:  # the big vendor wheels download while the search runs
            for pin in pins.values():
                self.fetcher.download(pin.name, pin.verdict, pin.index)
        self.searches.start_pins()

    def _search(self) -> SearchOutcome:
        """The outcome of a search of the current roots (``SearchReplay.search``)."""
        return self.searches.search(search_roots(self.fixed, self.env))

    # ------------------------------------------------------------------ verification

    def _finish(self, search: SearchOutcome) -> LockResult:
        m = self.m
        jobs = self._start_files(search)
        errors: list[BuildImageError] = []
        packages: list[LockedPackage] = []
        for name in sorted(search.chosen):
            cand = search.chosen[name]
            index = self.fixed.index_of(name)
            try:
                sha, size = self._checked_file(name, index, cand, jobs[name])
            except BuildImageError as exc:
                errors.append(exc)
                continue
            packages.append(self._locked_package(search, name, index, sha, size))
        if errors:
            raise _combine(errors)
        for name, override in sorted(m.overrides.items()):
            if not search.ignores.get(name):
                self.notes.append(
                    f"note: overrides.{override.key} overrides nothing (every requirement on "
                    f"{name} accepts {override.version_text}); remove it"
                )
        packages += self.fixed.sources.sdists
        lock = Lock(
            stack=m.name,
            target=m.target,
            lock_inputs_sha256=m.lock_inputs_sha256,
            packages=tuple(sorted(packages, key=lambda p: (p.name, p.group))),
        )
        return LockResult(lock=lock, notes=tuple(self.notes), stats=dict(self.client.stats))

    def _start_files(
        self, search: SearchOutcome
    ) -> dict[NormalizedName, Future[VerifiedWheel] | None]:
        """Start the download of every chosen file that is verified (all, unless
        ``verify=False`` and the index gives its sha256); None for the others."""
        jobs: dict[NormalizedName, Future[VerifiedWheel] | None] = {}
        for name, cand in search.chosen.items():
            assert cand.verdict is not None
            index = self.fixed.index_of(name)
            file = cand.verdict.file
            if self.verify or "sha256" not in file.hashes:
                jobs[name] = self.fetcher.download(name, cand.verdict, index)
            else:
                jobs[name] = None
                self.fetcher.metadata(name, cand.verdict)  # already there unless deps: false
        return jobs

    def _checked_file(
        self,
        name: NormalizedName,
        index: str,
        cand: Candidate,
        job: Future[VerifiedWheel] | None,
    ) -> tuple[str, int | None]:
        """The sha256 and size of ``cand``'s file, its METADATA checked (the wheel's own
        against the one the search used, when downloaded) and its Requires-Python too."""
        assert cand.verdict is not None
        file = cand.verdict.file
        size: int | None
        if job is not None:
            wheel = job.result()
            self._check_same_metadata(name, index, file, wheel.metadata)
            sha, size, meta = wheel.sha256, wheel.size, wheel.metadata
        else:
            meta = self.fetcher.metadata(name, cand.verdict).result()
            sha, size = file.hashes["sha256"], file.size
        self._check_requires_python(name, index, file, meta)
        return sha, size

    def _locked_package(
        self, search: SearchOutcome, name: NormalizedName, index: str, sha: str, size: int | None
    ) -> LockedPackage:
        """The lock's entry for the file chosen for ``name``, of sha256 ``sha``."""
        cand = search.chosen[name]
        assert cand.verdict is not None
        file = cand.verdict.file
        pin = self.fixed.pins.get(name)
        if pin is not None:
            origin = pin.origin
        elif name in search.runtime:
            origin = "requirement" if name in search.roots else "dependency"
        else:
            origin = "build"
        override = self.m.overrides.get(name)
        return LockedPackage(
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

    def _check_same_metadata(
        self, name: NormalizedName, index: str, file: IndexFile, in_wheel: CoreMetadata
    ) -> None:
        """The metadata the search used (PEP 658 file or range read) must be the wheel's own."""
        used = self.fetcher.metadata_asked(file.url)
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


def _check_rules(m: Manifest, versions: Mapping[NormalizedName, Version]) -> None:
    """Both rules hold on the final closure, and name only packages that are in it (a rule
    about an absent package is a typo or a stale rule, never silently nothing)."""
    for i, group in enumerate(m.rules.same_line):
        missing = [n for n in group if n not in versions]
        if missing:
            raise ResolutionError(
                f"rules.same_line.{i}: {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not in the lock, so the rule "
                "would check nothing",
                hint="fix the name, or remove the rule",
            )
    for lm in m.rules.line_map:
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
    for group in m.rules.same_line:
        present = [(n, versions[n]) for n in group if n in versions]
        lines = {line_of(v) for _, v in present}
        if len(lines) > 1:
            shown = ", ".join(f"{n} {v} (line {line_of(v)})" for n, v in present)
            raise ResolutionError(
                f"rules.same_line: {', '.join(group)} must share major.minor, but the lock "
                f"would have {shown}",
                hint="pin them to builds of the same line",
            )


def _combine(errors: list[BuildImageError]) -> BuildImageError:
    if len(errors) == 1:
        return errors[0]
    kind = type(errors[0]) if all(type(e) is type(errors[0]) for e in errors) else ResolutionError
    hints = [e.hint for e in errors if e.hint]
    text = "\n".join(e.message for e in errors)
    return kind(text, hint="\n".join(dict.fromkeys(hints)) if hints else None)


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
    # A lock makes hundreds of thousands of objects and almost no cycles: reference counting
    # frees them, and the cyclic collector, which would walk them all a few hundred times
    # (6-8% of a cold lock here, bench/README.md), waits until the lock is done. Its peak
    # memory is the same either way (80 MB for the bench's 255 distributions).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return locker.run()
    except KeyboardInterrupt:
        locker.fetcher.cancel()  # every request in flight ends now: the workers stop at once
        raise
    finally:
        locker.fetcher.close()
        if collecting:
            gc.enable()
