"""The manifest's exact versions against the requirements files of its sources.

A stack manifest names exact versions (``packages.<name>.version``, an ``==`` line of
``requirements`` or ``build.requirements``, ``components.mooncake.version``); a source's
requirements files (``-r`` includes followed) name versions too. When both name the same
project and the file's specifier does not allow the manifest's version (PEP 440, the full
version with its local label: ``numpy==1.26`` allows 1.26.0 only, not 1.26.4), the manifest
and the source disagree about what the image holds. The lock refuses that before any index is
asked, naming both ends, unless the manifest declares the departure under ``overrides`` with
its reason (the resolver then ignores the file's requirement and the lock records it).

Pure: the manifest and the requirements read from the sources are passed in; nothing is read
here. ``resolver.source_inputs`` reads the files and calls ``check_contradictions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from core.errors import ResolutionError
from manifest import Manifest
from manifest.fields import file_line
from sources.requirements_files import FileRequirement


@dataclass(frozen=True, kw_only=True)
class ExactVersion:
    """An exact version the manifest asks for, and where it says so."""

    name: NormalizedName
    key: str  # the project as the manifest spells it (torch-musa, torch_musa)
    version: Version
    keypath: tuple[str, ...]  # ("packages", "torchada", "version"), ("requirements", "1")
    where: str  # the manifest's file:line (stack/x.yaml:43)
    text: str  # what the manifest says: "torchada 0.1.95", "numpy==1.26.4"

    @property
    def dotted(self) -> str:
        return ".".join(self.keypath)

    @property
    def pinned(self) -> bool:
        """A pin (``packages``, ``components.mooncake``), not a requirement."""
        return self.keypath[-1] == "version"


@dataclass(frozen=True, kw_only=True)
class SourceLine:
    """A requirement line of a source's requirements file."""

    source: str  # the source's name under sources
    item: FileRequirement

    @property
    def origin(self) -> str:
        """``sources.vllm-musa:requirements/common.txt:2``, as the lock's records name it."""
        return f"sources.{self.source}:{self.item.location}"

    @property
    def text(self) -> str:
        return self.item.text or str(self.item.requirement)

    @property
    def included(self) -> str:
        """`` (included from requirements/musa.txt:2)``, or nothing for a listed file."""
        if not self.item.via:
            return ""
        return " (included from " + " via ".join(reversed(self.item.via)) + ")"


@dataclass(frozen=True, kw_only=True)
class Contradiction:
    """A file line whose specifier excludes the manifest's exact version of its project."""

    manifest: ExactVersion
    line: SourceLine

    def message(self) -> str:
        m = self.manifest
        return (
            f"{m.where}: {m.dotted}: {m.text} is not allowed by {self.line.origin}"
            f"{self.line.included}: {self.line.text}"
            + _padding_note(self.line.item.requirement.specifier, m.version)
        )

    def hint(self) -> str:
        m = self.manifest
        place = f"beside {m.dotted[: -len('.version')]}" if m.pinned else f"in place of {m.dotted}"
        return (
            f"{m.key}: follow the file (change {m.dotted} to a version `{self.line.text}` "
            f"allows), or declare the departure with its reason: overrides.{m.key}: "
            f'{{version: "{m.version}", reason: "<why, citing {self.line.item.file}>"}} {place}'
        )


def exact_of(req: Requirement) -> Version | None:
    """The one version ``req`` asks for exactly (``==X`` without a wildcard, ``===X``), or
    None for a range (a range is the resolver's to settle, not a contradiction)."""
    for spec in req.specifier:
        if spec.operator in ("==", "===") and not spec.version.endswith(".*"):
            try:
                return Version(spec.version)
            except InvalidVersion:
                return None
    return None


def _applies(req: Requirement, environment: Mapping[str, str]) -> bool:
    return req.marker is None or req.marker.evaluate({**environment, "extra": ""})


def exact_versions(manifest: Manifest, environment: Mapping[str, str]) -> tuple[ExactVersion, ...]:
    """Every exact version the manifest asks for, except on an overridden name (a declared
    departure: the resolver ignores what the files say about it, and the lock records what it
    ignored). ``environment``: the target's marker environment (a requirement whose marker
    excludes the target asks for nothing)."""
    out: list[ExactVersion] = []
    mooncake = manifest.components.mooncake
    for name, pin in manifest.packages.items():
        if name in manifest.overrides:  # the pin's departure is declared
            continue
        if mooncake is not None and name == mooncake.pin.name:
            keypath: tuple[str, ...] = ("components", "mooncake", "version")
        else:
            keypath = ("packages", pin.key, "version")
        out.append(
            ExactVersion(
                name=name,
                key=pin.key,
                version=pin.version,
                keypath=keypath,
                where=file_line(manifest.path, manifest.key_lines, keypath),
                text=f"{pin.key} {pin.version_text}",
            )
        )
    groups: tuple[tuple[tuple[str, ...], Sequence[Requirement]], ...] = (
        (("requirements",), manifest.requirements),
        (("build", "requirements"), manifest.build.requirements),
    )
    for prefix, requirements in groups:
        for i, req in enumerate(requirements):
            name = canonicalize_name(req.name)
            version = exact_of(req)
            if version is None or name in manifest.overrides or not _applies(req, environment):
                continue
            keypath = (*prefix, str(i))
            out.append(
                ExactVersion(
                    name=name,
                    key=req.name,
                    version=version,
                    keypath=keypath,
                    where=file_line(manifest.path, manifest.key_lines, keypath),
                    text=str(req),
                )
            )
    return tuple(out)


def source_lines(source: str, items: Iterable[FileRequirement]) -> tuple[SourceLine, ...]:
    return tuple(SourceLine(source=source, item=item) for item in items)


def find_contradictions(
    exact: Sequence[ExactVersion],
    lines: Sequence[SourceLine],
    environment: Mapping[str, str],
) -> tuple[Contradiction, ...]:
    """Each pair of a manifest version and a file line on the same project whose specifier
    does not allow that version (prereleases allowed: the manifest chose it), in the order of
    the manifest, then of the files. A line whose marker excludes the target is skipped."""
    by_name: dict[NormalizedName, list[SourceLine]] = {}
    for line in lines:
        if _applies(line.item.requirement, environment):
            by_name.setdefault(line.item.name, []).append(line)
    found: list[Contradiction] = []
    for m in exact:
        for line in by_name.get(m.name, ()):
            if not line.item.requirement.specifier.contains(m.version, prereleases=True):
                found.append(Contradiction(manifest=m, line=line))
    return tuple(found)


def contradiction_error(found: Sequence[Contradiction]) -> ResolutionError:
    """One refusal naming every contradiction, each with both ends, and how to settle each."""
    hints = dict.fromkeys(c.hint() for c in found)
    return ResolutionError("\n".join(c.message() for c in found), hint="\n".join(hints))


def check_contradictions(
    manifest: Manifest, lines: Sequence[SourceLine], environment: Mapping[str, str]
) -> None:
    """Refuse (``ResolutionError``) when a line of ``lines`` excludes an exact version of the
    manifest that ``overrides`` does not declare."""
    found = find_contradictions(exact_versions(manifest, environment), lines, environment)
    if found:
        raise contradiction_error(found)


def _padding_note(specifier: SpecifierSet, version: Version) -> str:
    """For ``==1.26`` against 1.26.4: PEP 440 pads ``==1.26`` to 1.26.0, it is no line."""
    specs = list(specifier)
    if len(specs) != 1 or specs[0].operator != "==" or specs[0].version.endswith(".*"):
        return ""
    try:
        asked = Version(specs[0].version)
    except InvalidVersion:
        return ""
    short = asked.release
    if (
        str(asked) != ".".join(str(n) for n in short)  # a plain release: no pre, post, local
        or len(short) >= len(version.release)
        or version.release[: len(short)] != short
    ):
        return ""
    padded = ".".join(str(n) for n in (*short, *([0] * (len(version.release) - len(short)))))
    return (
        f" (PEP 440: =={asked} is {padded} only, not the {asked} line; that would be =={asked}.*)"
    )
