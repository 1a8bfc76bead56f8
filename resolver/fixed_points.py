"""The fixed points of a lock: each pin's one file, chosen on the index it is bound to.

A pin (``packages``, ``overrides``, a ``rules.line_map`` choice) names one version of one
project on one index. ``PinChooser`` takes there the one best wheel of its kind for the
target, or refuses it with the reason of every file it saw (every pin's refusal at once).
``FixedPoints`` holds what the search does not choose: the pins, and the projects built in
the image from a source's sdist; the locker fills it, everything else only reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from packaging.utils import NormalizedName
from packaging.version import Version

from core.errors import BuildImageError, ResolutionError
from core.urls import project_url, redact
from manifest import Manifest, WheelKind
from resolver.index_client import IndexEndpoint
from resolver.simple_page import IndexFile, listed, whole_page
from resolver.source_inputs import Provided, SourceInputs
from resolver.target import TargetTags
from resolver.wheel_select import Reason, TieError, Verdict, best, judge, version_files

NO_SOURCES = SourceInputs(provided={}, sdists=(), runtime=(), build=())


def line_of(version: Version | str) -> str:
    v = Version(str(version))
    return f"{v.major}.{v.minor}"


@dataclass(frozen=True)
class Pin:
    """A fixed point: a pin's chosen file, and where in the manifest it came from."""

    name: NormalizedName
    version: Version
    index: str
    verdict: Verdict
    origin: str  # pin | line-map | override
    where: str  # packages.torch / rules.line_map.compressed-tensors / overrides.numpy
    deps: bool


class FixedPoints:
    """The names of one lock run that the search does not choose: the pins, and the projects
    the sources' sdists provide (built in the image, never looked up on an index)."""

    def __init__(self, manifest: Manifest) -> None:
        self.m = manifest
        self.pins: dict[NormalizedName, Pin] = {}
        self.sources: SourceInputs = NO_SOURCES

    @property
    def provided(self) -> Mapping[NormalizedName, Provided]:
        return self.sources.provided

    def index_of(self, name: NormalizedName) -> str:
        """The index ``name`` is read from: its pin's, else the one the manifest binds it to."""
        return self.m.index_of(name) if name not in self.pins else self.pins[name].index


class Pages(Protocol):
    """The pages of the run, each fetched once (``resolver.fetcher.Fetcher``)."""

    def page(self, index: str, name: NormalizedName) -> Future[Sequence[IndexFile] | None]: ...

    def files(self, index: str, name: NormalizedName) -> Sequence[IndexFile] | None: ...


@dataclass(eq=False)
class PinChooser:
    """Chooses each pin's file into ``fixed.pins``, reading the pages from ``pages``."""

    m: Manifest
    pages: Pages
    endpoints: Mapping[str, IndexEndpoint]
    target_tags: TargetTags
    fixed: FixedPoints

    def fix(
        self,
        name: NormalizedName,
        version: Version,
        index: str,
        *,
        where: str,
        origin: str,
        kind: WheelKind | None = None,
        deps: bool = True,
    ) -> None:
        """Choose the file of one pin into ``fixed.pins``, or refuse it."""
        verdict = self._select(name=name, version=version, index=index, kind=kind, where=where)
        self.fixed.pins[name] = Pin(name, version, index, verdict, origin, where, deps)

    def _select(
        self,
        *,
        name: NormalizedName,
        version: Version,
        index: str,
        kind: WheelKind | None,
        where: str,
    ) -> Verdict:
        files = self.pages.files(index, name)
        url = redact(project_url(self.endpoints[index].url, name))
        if files is None:
            raise ResolutionError(
                f"{where}: {name} is not on index {index} ({url}: HTTP 404)",
                hint="a package bound to an index is looked up there only; check the name, or "
                "bind it to the index that publishes it",
            )

        judged = functools.partial(
            judge, project=name, target_tags=self.target_tags, version=version, kind=kind
        )
        # the files of the pinned version hold every file that can be accepted; the others
        # (and the wheels the page was parsed without) are judged only to tell why none was
        verdicts = judged(version_files(files, project=name, version=version))
        if not any(v.accepted for v in verdicts):
            verdicts = judged(whole_page(files))
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
                _refusal_message(
                    self.m,
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

    def select_pins(self) -> list[BuildImageError]:
        """Choose the file of every ``packages`` and ``overrides`` pin; the refusals, one per
        pin refused (the pins chosen are in ``fixed.pins`` either way)."""
        m = self.m
        for name, pin in m.packages.items():  # start every page fetch at once
            self.pages.page(pin.index, name)
            if pin.index != m.default_index:
                self.pages.page(m.default_index, name)
        for name in m.overrides:
            if name not in m.packages:  # an override of a pin declares the pin's departure
                self.pages.page(m.index_of(name), name)
        errors: list[BuildImageError] = []
        for name, pin in m.packages.items():
            where = f"packages.{pin.key}"
            try:
                self.fix(
                    name,
                    pin.version,
                    pin.index,
                    where=where,
                    origin="pin",
                    kind=pin.wheel,
                    deps=pin.deps,
                )
            except BuildImageError as exc:
                errors.append(exc)
        for name, override in m.overrides.items():
            if name in m.packages:  # the pin is the override's version: it is selected above
                continue
            where = f"overrides.{override.key}"
            try:
                self.fix(name, override.version, m.index_of(name), where=where, origin="override")
            except BuildImageError as exc:
                errors.append(exc)
        return errors

    def shadowed_name_notes(self) -> list[str]:
        """A note for each pinned name that the default index also has (its page was asked
        for with the pins', and is read once the search is done: it never holds the search)."""
        m = self.m
        notes: list[str] = []
        for name, pin in m.packages.items():
            if pin.index != m.default_index:
                try:
                    also = self.pages.files(m.default_index, name)
                except BuildImageError:
                    also = None
                if also is not None and listed(also):  # a page of wheels it cannot run counts
                    notes.append(
                        f"note: {name} is bound to index {pin.index}; index {m.default_index} also "
                        f"has a project named {name}, which this stack never uses"
                    )
        return notes

    def add_line_map_pins(self, versions: Mapping[NormalizedName, Version]) -> bool:
        """Pin each line_map package by its followed package's line; True if any was added."""
        added = False
        pins = self.fixed.pins
        for lm in self.m.rules.line_map:
            if lm.name in pins or lm.follows not in versions:
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
            self.fix(lm.name, version, self.m.default_index, where=where, origin="line-map")
            added = True
        return added


def _refusal_message(
    m: Manifest,
    *,
    name: NormalizedName,
    version: Version,
    kind: str | None,
    index: str,
    url: str,
    verdicts: Sequence[Verdict],
    where: str,
) -> str:
    same_public = [v for v in verdicts if v.version is None or v.version.public == version.public]
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
        + f" on index {index} ({url}) for {m.target.describe()}"
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
