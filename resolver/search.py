"""The dependency search of one lock: its roots, one run of ``resolver.closure`` over the
fetcher, and what it decided.

- ``search_roots``: the runtime roots (the pins, ``requirements``, the sources' runtime
  requirements files) and the build roots (``build.requirements``, the sources' build
  requirements files), their markers evaluated for the target. A root requirement on an
  overridden name is left out of the search, and kept with its requirer.
- ``run_search``: the closure of the roots, each name on its bound index only, the pins and
  the projects the sources provide fixed. It returns the ``SearchOutcome``, and the
  ``RecordingSource`` that noted every page and METADATA the search itself read (the crawl
  ahead of it is not noted): what the search record keeps.
- ``SearchOutcome``: all the lock takes from a search, whether it ran or was replayed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName
from packaging.version import Version

from resolver.closure import (
    Candidate,
    Provider,
    Req,
    Resolution,
    make_req,
    requirement_text,
    resolve,
)
from resolver.fetcher import Fetcher
from resolver.fixed_points import FixedPoints
from resolver.wheel_select import Verdict

# a pin's origin -> the parent its root requirement is recorded under
ROOT_OF = {"pin": "packages", "line-map": "rules.line_map", "override": "overrides"}


@dataclass(frozen=True)
class SearchOutcome:
    """What one search chose, and why: the lock is made of it."""

    chosen: Mapping[NormalizedName, Candidate]  # the projects the sources provide left out
    required_by: Mapping[NormalizedName, tuple[str, ...]]
    runtime: frozenset[NormalizedName]  # the names the runtime roots reach
    # overridden name -> "requirer requires name<spec>" the override's version breaks
    ignores: Mapping[NormalizedName, tuple[str, ...]] = field(default_factory=dict)
    # names a runtime root requirement (not a pin) asks for: manifest or requirements file
    roots: frozenset[NormalizedName] = frozenset()


@dataclass(frozen=True)
class Roots:
    """A search's root requirements."""

    runtime: tuple[Req, ...]
    build: tuple[Req, ...]
    # (requirer, requirement) of each root requirement on an overridden name: not searched
    ignored: tuple[tuple[str, Req], ...]


class RecordingSource:
    """The fetcher as the search's ``CandidateSource``, noting the pages and the METADATA the
    search reads (the crawl ahead of it reads the fetcher directly, and is not noted)."""

    def __init__(self, fetcher: Fetcher, fixed: FixedPoints) -> None:
        self.fetcher = fetcher
        self.fixed = fixed
        self.pages: set[tuple[str, NormalizedName]] = set()
        self.metadata: dict[str, tuple[NormalizedName, Verdict]] = {}  # file URL -> whose

    def candidates(self, name: NormalizedName) -> Iterable[Candidate]:
        fixed = self.fixed
        if name not in fixed.pins and name not in fixed.provided:
            self.pages.add((fixed.m.index_of(name), name))
        return self.fetcher.candidates(name)

    def requirements_of(self, candidate: Candidate) -> tuple[Sequence[Requirement], str | None]:
        assert candidate.verdict is not None
        self.metadata.setdefault(candidate.verdict.file.url, (candidate.name, candidate.verdict))
        return self.fetcher.requirements_of(candidate)

    def follows_deps(self, name: NormalizedName) -> bool:
        return self.fetcher.follows_deps(name)

    def prefetch(self, names: Iterable[NormalizedName]) -> None:
        self.fetcher.prefetch(names)


def search_roots(fixed: FixedPoints, environment: Mapping[str, str]) -> Roots:
    """The runtime roots, the build roots, and the root requirements on overridden names
    (left out of the search; kept with their requirer for the lock's record)."""
    m = fixed.m
    env = {**environment, "extra": ""}
    ignored: list[tuple[str, Req]] = []

    def add(into: list[Req], req: Requirement, parent: str, requirer: str, origin: str) -> None:
        if req.marker is not None and not req.marker.evaluate(env):
            return
        r = make_req(req, parent, origin)
        if r.name in m.overrides:
            ignored.append((requirer, r))
        else:
            into.append(r)

    runtime: list[Req] = []
    for name, pin in sorted(fixed.pins.items()):
        spec = SpecifierSet(f"=={pin.version}")
        runtime.append(Req(name, frozenset(), spec, ROOT_OF[pin.origin], ""))
    for req in m.requirements:
        add(runtime, req, "requirements", "requirements", "")
    build: list[Req] = []
    for req in m.build.requirements:
        add(build, req, "build.requirements", "build.requirements", "")
    for into, roots in ((runtime, fixed.sources.runtime), (build, fixed.sources.build)):
        for root in roots:
            add(into, root.requirement, root.parent, root.requirer, root.origin)
    return Roots(tuple(runtime), tuple(build), tuple(ignored))


def run_search(
    roots: Roots, fetcher: Fetcher, fixed: FixedPoints, environment: Mapping[str, str]
) -> tuple[SearchOutcome, RecordingSource]:
    """Search the closure of ``roots``; its outcome, and what the search read."""
    m = fixed.m
    fetcher.prefetch(r.name for r in (*roots.runtime, *roots.build))
    provided = fixed.provided
    pins = {
        n: Candidate(n, p.version, verdict=p.verdict, pinned=True) for n, p in fixed.pins.items()
    }
    pins.update({n: Candidate(n, p.version, pinned=True) for n, p in provided.items()})
    source = RecordingSource(fetcher, fixed)
    provider = Provider(
        source,
        environment=environment,
        python_version=Version(m.target.python_str),
        pins=pins,
        overridden=frozenset(m.overrides),
    )
    res = resolve(
        provider,
        [*roots.runtime, *roots.build],
        describe_pin={n: p.where for n, p in fixed.pins.items()},
        explain_empty=fetcher.why_empty,
        provided={n: p.where for n, p in provided.items()},
    )
    outcome = SearchOutcome(
        {n: c for n, c in res.chosen.items() if n not in provided},
        res.required_by,
        _reachable({r.name for r in roots.runtime}, res.required_by, set(res.chosen)),
        _ignores(roots, res, fixed),
        frozenset(r.name for r in roots.runtime if r.parent not in ROOT_OF.values()),
    )
    return outcome, source


def _ignores(
    roots: Roots, res: Resolution, fixed: FixedPoints
) -> dict[NormalizedName, tuple[str, ...]]:
    """Per overridden name, each requirement on it (a root's or a dependency's) that the
    override's version does not satisfy, with its requirer."""
    ignores: dict[NormalizedName, set[str]] = {}
    for requirer, req in [*roots.ignored, *(i for v in res.ignored.values() for i in v)]:
        override = fixed.m.overrides[req.name]
        if not req.allows(override.version):
            ignores.setdefault(req.name, set()).add(f"{requirer} requires {requirement_text(req)}")
    return {n: tuple(sorted(v)) for n, v in ignores.items()}


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
