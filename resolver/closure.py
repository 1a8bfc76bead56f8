"""The dependency search, driven by resolvelib (as pip does), through its public API only.

The provider knows nothing about HTTP: it asks a ``CandidateSource`` (``resolver.fetcher``)
for the candidate versions of a name and for the dependencies of a candidate. Pinned names
have exactly one candidate; every other name comes from its bound index, newest first. The
provider narrows each round's names to pin to the one it ranks first.

A version whose best files tie is a candidate carrying its ``Tie``: the search stops with an
error naming it as soon as it tries that version, rather than taking an older version in
silence. A tie in a version the search never tries is not an error.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version
from resolvelib import (
    AbstractProvider,
    BaseReporter,
    ResolutionImpossible,
    ResolutionTooDeep,
    Resolver,
)

from core.errors import ResolutionError
from resolver.wheel_select import Verdict

PYTHON = "<python>"  # the virtual identifier that carries Requires-Python


@dataclass(frozen=True)
class Req:
    """A requirement as the search sees it: one name (with extras), one specifier, who asked."""

    name: NormalizedName
    extras: frozenset[str]
    specifier: SpecifierSet
    parent: str  # "packages" / "requirements" / "name==version" of the requiring candidate
    text: str
    # where a root requirement is written, for messages ("sources.vllm:requirements/common.txt:38")
    origin: str = field(default="", compare=False)
    # computed once: resolvelib compares the identifier hundreds of thousands of times, and
    # ranks every name left to pin by ``exact`` (``==`` or ``===``, no wildcard) every round
    key: str = field(init=False, compare=False, repr=False)
    exact: bool = field(init=False, compare=False, repr=False)
    # memo of specifier.contains(version) by id() of the Version (candidates share theirs for
    # the whole run), the object kept beside the answer so a reused id never gives a stale one
    _memo: dict[int, tuple[Version, bool]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _key(self.name, self.extras))
        object.__setattr__(
            self,
            "exact",
            any(s.operator in ("==", "===") and "*" not in s.version for s in self.specifier),
        )

    def allows(self, version: Version) -> bool:
        hit = self._memo.get(id(version))
        if hit is not None and hit[0] is version:
            return hit[1]
        answer = self.specifier.contains(version, prereleases=True)
        self._memo[id(version)] = (version, answer)
        return answer


@dataclass(frozen=True, kw_only=True)
class Tie:
    """The best files of one version rank equally for the target, and are different files."""

    index: str
    url: str  # the project page, redacted
    files: tuple[Verdict, ...]


@dataclass(frozen=True)
class Candidate:
    name: NormalizedName
    version: Version
    extras: frozenset[str] = frozenset()
    verdict: Verdict | None = field(default=None, compare=False)
    pinned: bool = field(default=False, compare=False)
    key: str = field(init=False, compare=False, repr=False)
    tie: Tie | None = field(default=None, compare=False)  # then ``verdict`` is None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", _key(self.name, self.extras))

    def __str__(self) -> str:
        return f"{self.key}=={self.version}"


def _key(name: str, extras: frozenset[str]) -> str:
    return f"{name}[{','.join(sorted(extras))}]" if extras else name


class LazyCandidates(Iterable[Candidate]):
    """Candidates made one at a time from ``source`` as they are asked for, each made once
    and kept (thread-safe: the search and the crawl ahead of it read the same list). The
    search mostly needs the newest few of a project's versions; the rest are never made."""

    def __init__(self, source: Iterable[Candidate]) -> None:
        self._source = iter(source)
        self._made: list[Candidate] = []
        self._done = False
        self._lock = threading.Lock()

    def __iter__(self) -> Iterator[Candidate]:
        i = 0
        while True:
            with self._lock:
                if i >= len(self._made) and not self._done:
                    nxt = next(self._source, None)
                    if nxt is None:
                        self._done = True
                    else:
                        self._made.append(nxt)
                if i >= len(self._made):
                    return
                cand = self._made[i]
            yield cand
            i += 1


class CandidateSource(Protocol):
    def candidates(self, name: NormalizedName) -> Iterable[Candidate]:
        """Every usable version of ``name`` on its bound index, newest first (made lazily:
        a version's files are judged when the iteration reaches it)."""

    def requirements_of(self, candidate: Candidate) -> tuple[Sequence[Requirement], str | None]:
        """The candidate's Requires-Dist and Requires-Python (from its METADATA)."""

    def follows_deps(self, name: NormalizedName) -> bool:
        """False for a pinned package with ``deps: false``."""

    def prefetch(self, names: Iterable[NormalizedName]) -> None:
        """A hint that these names will be asked for soon."""


def make_req(req: Requirement, parent: str, origin: str = "") -> Req:
    return Req(
        name=canonicalize_name(req.name),
        extras=frozenset(canonicalize_name(e) for e in req.extras),
        specifier=req.specifier,
        parent=parent,
        text=str(req),
        origin=origin,
    )


def requirement_text(req: Req) -> str:
    """``name[extras]specifier`` of a requirement, without its marker (which held)."""
    return f"{req.key}{req.specifier}"


class Provider(AbstractProvider[Req, Candidate, str]):
    def __init__(
        self,
        source: CandidateSource,
        *,
        environment: Mapping[str, str],
        python_version: Version,
        pins: Mapping[NormalizedName, Candidate],
        overridden: frozenset[NormalizedName] = frozenset(),
    ) -> None:
        self.source = source
        self.environment = dict(environment)
        self.python_version = python_version
        self.pins = pins
        # requirements on these names are ignored (overrides); each candidate's ignored ones
        # are kept by (key, version), and only the chosen candidates' count in the end
        self.overridden = overridden
        self.ignored: dict[tuple[str, Version], list[Req]] = {}
        # name -> who first asked for it ("(requirements)" or "transformers==5.5.3"), so a
        # failure can be told as the chain of requirements that led to it
        self.introduced_by: dict[str, str] = {}

    def chain(self, candidate: Candidate) -> str:
        """``requirements -> transformers==5.5.3 -> huggingface-hub==1.1.0`` for a candidate."""
        steps = [str(candidate)]
        seen = {candidate.name}
        parent = self.introduced_by.get(candidate.name)
        while parent is not None and len(steps) < 12:
            if parent.startswith("("):
                steps.append(parent.strip("()"))
                break
            steps.append(parent)
            name = parent.split("[", 1)[0].split("==", 1)[0]
            if name in seen:
                break
            seen.add(NormalizedName(name))
            parent = self.introduced_by.get(name)
        return " -> ".join(reversed(steps))

    # -- identity ---------------------------------------------------------------------
    def identify(self, requirement_or_candidate: Req | Candidate) -> str:
        return requirement_or_candidate.key

    def get_preference(
        self,
        identifier: str,
        resolutions: Mapping[str, Candidate],
        candidates: Mapping[str, Iterator[Candidate]],
        information: Mapping[str, Iterator[Any]],
        backtrack_causes: Sequence[Any],
    ) -> tuple[int, int, int, str]:
        causes = frozenset(c.requirement.key for c in backtrack_causes)
        return self.rank(identifier, information[identifier], causes)

    def narrow_requirement_selection(
        self,
        identifiers: Iterable[str],
        resolutions: Mapping[str, Candidate],
        candidates: Mapping[str, Iterator[Candidate]],
        information: Mapping[str, Iterator[Any]],
        backtrack_causes: Sequence[Any],
    ) -> list[str]:
        """The one name the search pins next: the one of the smallest ``rank``, as
        ``get_preference`` ranks it. Ranks are distinct (each ends with its identifier), so
        resolvelib, handed one name, pins the name it would have picked by
        ``get_preference``, and the backtrack causes are read once a round, not once a name."""
        causes = frozenset(c.requirement.key for c in backtrack_causes)
        return [min(identifiers, key=lambda i: self.rank(i, information[i], causes))]

    def rank(
        self, identifier: str, information: Iterable[Any], causes: frozenset[str]
    ) -> tuple[int, int, int, str]:
        """The search pins the name of the smallest rank first: Requires-Python, then
        pinned names and exact requirements, then the causes of the last conflict (the
        requirements that caused the last backtrack), then by name (so the order, and the
        closure, never depend on dict order)."""
        name = identifier.split("[", 1)[0]
        exact = any(info.requirement.exact for info in information)
        return (
            0 if identifier == PYTHON else 1,
            0 if (name in self.pins or exact) else 1,
            0 if identifier in causes else 1,
            identifier,
        )

    # -- candidates ---------------------------------------------------------------------
    def find_matches(
        self,
        identifier: str,
        requirements: Mapping[str, Iterator[Req]],
        incompatibilities: Mapping[str, Iterator[Candidate]],
    ) -> list[Candidate] | Callable[[], Iterator[Candidate]]:
        """The candidates, newest first; for an index name a factory that makes them as
        the search reads them (it mostly takes the first)."""
        reqs = list(requirements[identifier])
        bad = {c.version for c in incompatibilities[identifier]}
        if identifier == PYTHON:
            me = Candidate(NormalizedName(PYTHON), self.python_version)
            ok = all(r.specifier.contains(self.python_version, prereleases=True) for r in reqs)
            return [me] if ok and me.version not in bad else []
        name = NormalizedName(identifier.split("[", 1)[0])
        extras = reqs[0].extras if reqs else frozenset()
        allow_pre = any(r.specifier.prereleases for r in reqs)
        source = self.source.candidates(name)

        def matches() -> Iterator[Candidate]:
            for cand in source:
                if cand.version in bad:
                    continue
                if not (allow_pre or cand.pinned or not cand.version.is_prerelease):
                    continue
                if all(r.allows(cand.version) for r in reqs):
                    yield dataclasses.replace(cand, extras=extras) if extras else cand

        return matches

    def is_satisfied_by(self, requirement: Req, candidate: Candidate) -> bool:
        """Asked of every requirement of every pinned name, every round (N x N times for N
        names): the answer ``Req.allows`` remembers is read here, without calling it."""
        if requirement.key != candidate.key:
            return False
        version = candidate.version
        hit = requirement._memo.get(id(version))
        if hit is not None and hit[0] is version:
            return hit[1]
        return requirement.allows(version)

    def get_dependencies(self, candidate: Candidate) -> list[Req]:
        if candidate.name == PYTHON:
            return []
        if candidate.tie is not None:
            raise ResolutionError(
                _tie_message(candidate, candidate.tie, self), hint=_tie_hint(candidate)
            )
        parent = f"{candidate.name}=={candidate.version}"
        if candidate.extras:
            # an extras candidate depends on its base at the same version, plus the extras' deps
            base = Req(
                candidate.name, frozenset(), SpecifierSet(f"=={candidate.version}"), parent, ""
            )
            deps = [base]
            if not self.source.follows_deps(candidate.name):
                return deps
            reqs, _ = self.source.requirements_of(candidate)
            for r in reqs:
                if (
                    r.marker is not None
                    and self._marker_any_extra(r.marker, candidate.extras)
                    and not self._marker_true(r.marker, "")
                ):
                    deps.append(make_req(r, f"{candidate.key}=={candidate.version}"))
            deps = self._without_overridden(candidate, deps)
            self.source.prefetch(d.name for d in deps)
            return deps
        if not self.source.follows_deps(candidate.name):
            return []
        reqs, requires_python = self.source.requirements_of(candidate)
        deps = [
            make_req(r, parent) for r in reqs if r.marker is None or self._marker_true(r.marker, "")
        ]
        deps = self._without_overridden(candidate, deps)
        if requires_python:
            deps.append(
                Req(NormalizedName(PYTHON), frozenset(), SpecifierSet(requires_python), parent, "")
            )
        for d in deps:
            self.introduced_by.setdefault(d.name, parent)
        self.source.prefetch(d.name for d in deps if d.name != PYTHON)
        return deps

    def _without_overridden(self, candidate: Candidate, deps: list[Req]) -> list[Req]:
        """``deps`` without the requirements on overridden names (kept as ignored)."""
        if not self.overridden:
            return deps
        kept: list[Req] = []
        for d in deps:
            if d.name in self.overridden and d.name != candidate.name:
                self.ignored.setdefault((candidate.key, candidate.version), []).append(d)
            else:
                kept.append(d)
        return kept

    def _marker_true(self, marker: Marker, extra: str) -> bool:
        return marker.evaluate({**self.environment, "extra": extra})

    def _marker_any_extra(self, marker: Marker, extras: frozenset[str]) -> bool:
        return any(self._marker_true(marker, e) for e in extras)


@dataclass(frozen=True)
class Resolution:
    chosen: Mapping[NormalizedName, Candidate]
    # name -> sorted names of the packages or roots that required it
    required_by: Mapping[NormalizedName, tuple[str, ...]]
    # overridden name -> (the chosen candidate "name version", its ignored requirement)
    ignored: Mapping[NormalizedName, tuple[tuple[str, Req], ...]] = field(default_factory=dict)


def resolve(
    provider: Provider,
    roots: Sequence[Req],
    *,
    describe_pin: Mapping[NormalizedName, str],
    explain_empty: Callable[[NormalizedName], str],
    provided: Mapping[NormalizedName, str] | None = None,
) -> Resolution:
    """Run the search; a failure is explained as the chains of requirements that clash.

    ``describe_pin``: where each pinned name is pinned (``packages.torch``); ``provided``:
    the pinned names that are built in the image, and from where (``sources.vllm.sdist``)."""
    resolver: Resolver[Req, Candidate, str] = Resolver(provider, BaseReporter())
    for root in roots:
        provider.introduced_by.setdefault(root.name, f"({root.origin or root.parent})")
    try:
        result = resolver.resolve(roots, max_rounds=20000)
    except ResolutionImpossible as exc:
        raise ResolutionError(
            _explain_impossible(exc.causes, provider, describe_pin, explain_empty, provided or {}),
            hint=_override_hint(exc.causes, provider.pins),
        ) from None
    except ResolutionTooDeep:
        raise ResolutionError(
            "the dependency search gave up after 20000 rounds of backtracking",
            hint="pin more of the closure in requirements to narrow the search",
        ) from None
    chosen: dict[NormalizedName, Candidate] = {}
    for key, cand in result.mapping.items():
        if key == PYTHON or cand.extras:
            continue
        chosen[cand.name] = cand
    parents: dict[NormalizedName, set[str]] = {n: set() for n in chosen}
    for key, crit in result.criteria.items():
        if key == PYTHON:
            continue
        base = NormalizedName(key.split("[", 1)[0])
        for info in crit.information:
            if info.parent is None:
                parents[base].add(f"({info.requirement.parent})")
            elif info.parent.name != base:
                parents[base].add(str(info.parent.name))
    ignored: dict[NormalizedName, list[tuple[str, Req]]] = {}
    for cand in result.mapping.values():
        for req in provider.ignored.get((cand.key, cand.version), ()):
            ignored.setdefault(req.name, []).append((f"{cand.name} {cand.version}", req))
    return Resolution(
        chosen=chosen,
        required_by={n: tuple(sorted(p)) for n, p in parents.items()},
        ignored={n: tuple(v) for n, v in ignored.items()},
    )


_PIN_ROOTS = ("packages", "rules.line_map", "overrides")


def _tie_message(candidate: Candidate, tie: Tie, provider: Provider) -> str:
    files = "\n  ".join(
        f"{v.file.filename} (sha256 {v.file.hashes.get('sha256', 'not given by the index')})"
        for v in tie.files
    )
    return (
        f"{candidate.name} {candidate.version} on index {tie.index} ({tie.url}): two different "
        f"files rank equally for the target, so neither is chosen (and no older version is "
        f"taken instead); the search reached it by {provider.chain(candidate)}:\n  {files}"
    )


def _tie_hint(candidate: Candidate) -> str:
    return (
        "the index must publish one file per tag set for a version: ask its owner to remove "
        "one; to lock an older version on purpose, exclude this one in requirements "
        f"({candidate.name}!={candidate.version}, or ,!={candidate.version} added to a "
        f"requirement on {candidate.name})"
    )


def _explain_impossible(
    causes: Iterable[Any],
    provider: Provider,
    describe_pin: Mapping[NormalizedName, str],
    explain_empty: Callable[[NormalizedName], str],
    provided: Mapping[NormalizedName, str],
) -> str:
    lines: list[str] = []
    by_name: dict[str, list[Any]] = {}
    for cause in causes:
        by_name.setdefault(cause.requirement.key, []).append(cause)
    for key, infos in sorted(by_name.items()):
        name = NormalizedName(key.split("[", 1)[0])
        if key == PYTHON:
            for info in infos:
                lines.append(
                    f"{provider.chain(info.parent)} requires Python {info.requirement.specifier}, "
                    f"but the target is CPython {provider.python_version}"
                )
            continue
        pin = provider.pins.get(name)
        asks = []
        for info in infos:
            req = info.requirement
            if info.parent is None and pin is not None and req.parent in _PIN_ROOTS:
                continue  # the pin itself: named once, below
            who = (
                provider.chain(info.parent)
                if info.parent is not None
                else req.origin or f"the manifest's {req.parent}"
            )
            spec = str(req.specifier) or " (any version)"
            ask = f"{who} requires {key}{spec}"
            if ask not in asks:
                asks.append(ask)
        if pin is not None and name in provided:
            lines.append(
                f"{'; '.join(asks)}; but {name} is built in the image at {pin.version} "
                f"({provided[name]}), never taken from an index"
            )
        elif pin is not None:
            where = describe_pin.get(name, "the manifest")
            lines.append(
                f"{'; '.join(asks)}; but {where} pins {name} {pin.version} "
                f"(the full version, local label included, must satisfy every requirement)"
            )
        else:
            available = [str(c.version) for c in provider.source.candidates(name) if c.tie is None][
                :8
            ]
            if available:
                lines.append(
                    f"{'; '.join(asks)}; no version satisfies all of them "
                    f"(newest usable: {', '.join(available)})"
                )
            else:
                lines.append(f"{'; '.join(asks)}; but {explain_empty(name)}")
    return "the dependencies cannot be satisfied together:\n  " + "\n  ".join(lines)


def _override_hint(causes: Iterable[Any], pinned: Mapping[NormalizedName, Any]) -> str | None:
    """One possible fix of a conflict: an override, with its reason, of the package whose
    version is in dispute or of a package that requires it (neither pinned nor built in the
    image: those versions are the manifest's)."""
    requirers: set[str] = set()
    disputed: set[str] = set()
    for cause in causes:
        req = cause.requirement
        if req.key == PYTHON:
            continue
        disputed.add(req.name)
        if cause.parent is not None:
            requirers.add(cause.parent.name)
    names = [n for n in sorted(requirers) if n not in pinned]
    names += [n for n in sorted(disputed) if n not in pinned and n not in names]
    if not names:
        return None
    example, others = names[0], names[1:]
    return (
        "if the stack must have these versions anyway, one possible fix is an override with "
        f'its reason: overrides: {{{example}: {{version: "...", reason: "..."}}}}'
        + (f" (or of {', '.join(others)})" if others else "")
        + "; every requirement on an overridden package is ignored, and each one its version "
        "does not satisfy is recorded in the lock"
    )
