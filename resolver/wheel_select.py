"""Decide, for one index file, whether the target can use it, and pick the best wheel.

Pure: every refused file gets a ``Reason`` and a sentence naming the file; the best file is
the one whose tags rank highest for the target, and a tie between two different files is
an error rather than a coin toss.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from manifest import WheelKind
from resolver.simple_page import IndexFile, ProjectPage
from resolver.target import TargetTags, wheel_parts

_SDIST_SUFFIXES = (".tar.gz", ".zip", ".tar.bz2", ".tgz", ".tar.xz", ".tar")
_CP_ABI_RE = re.compile(r"^cp(\d)(\d+)[dmu]*$")


class Reason(enum.Enum):
    """Why a file was refused; the value is what the tables show."""

    NOT_A_WHEEL = "not a wheel"
    SDIST = "sdist"
    OTHER_VERSION = "other version"
    OTHER_LOCAL_LABEL = "other local label"
    WRONG_PYTHON_TAG = "wrong Python tag"
    WRONG_ABI = "wrong ABI"
    WRONG_PLATFORM = "wrong platform"
    WRONG_KIND = "wrong kind"
    REQUIRES_PYTHON = "Requires-Python"
    YANKED = "yanked"
    UNSAFE_FILENAME = "unsafe filename"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The evaluation of one file: accepted with a rank, or refused with a reason."""

    file: IndexFile
    name: NormalizedName | None
    version: Version | None
    reason: Reason | None = None
    detail: str = ""
    rank: int | None = None  # lower is better; set when accepted
    kind: str | None = None  # native | abi3 | pure | other
    build: tuple[int, str] | tuple[()] = ()

    @property
    def accepted(self) -> bool:
        return self.reason is None

    def describe(self) -> str:
        if self.accepted:
            return f"{self.file.filename}: accepted ({self.kind}, tag rank {self.rank})"
        assert self.reason is not None
        return f"{self.file.filename}: {self.reason.value}: {self.detail}"


@dataclass(frozen=True)
class ParsedFile:
    """A file's identity from its name: a wheel, an sdist, or neither."""

    name: NormalizedName | None
    version: Version | None
    tags: frozenset[Tag] | None  # None when not a wheel
    build: tuple[int, str] | tuple[()]
    error: Reason | None
    detail: str = ""


def parse_filename(filename: str) -> ParsedFile:
    if filename.endswith(".whl"):
        try:
            name, version, build, wheel_tags = parse_wheel_filename(filename)
        except InvalidWheelFilename as exc:
            return ParsedFile(
                None, None, None, (), Reason.NOT_A_WHEEL, f"invalid wheel filename: {exc}"
            )
        return ParsedFile(name, version, wheel_tags, build, None)
    if filename.endswith(_SDIST_SUFFIXES):
        try:
            name, version = parse_sdist_filename(filename)
        except InvalidSdistFilename:
            return ParsedFile(
                None, None, None, (), Reason.SDIST, "a source archive; only wheels are locked"
            )
        return ParsedFile(
            name, version, None, (), Reason.SDIST, "a source distribution; only wheels are locked"
        )
    suffix = filename.rsplit(".", 1)[-1] if "." in filename else filename
    return ParsedFile(
        None, None, None, (), Reason.NOT_A_WHEEL, f"a .{suffix} file; only wheels are locked"
    )


def _stem(filename: str) -> NormalizedName:
    """The project a filename plausibly belongs to when it cannot be parsed."""
    return canonicalize_name(re.split(r"[-_.]\d", filename, maxsplit=1)[0])


def wheel_kind(tag: Tag, cp_tag: str) -> str:
    if tag.abi == cp_tag and tag.interpreter == cp_tag:
        return "native"
    if tag.abi == "abi3":
        return "abi3"
    if tag.abi == "none" and tag.platform == "any" and tag.interpreter.startswith("py"):
        return "pure"
    return "other"


def _tag_mismatch(wheel_tags: frozenset[Tag], target_tags: TargetTags) -> tuple[Reason, str]:
    shown = ", ".join(sorted(str(t) for t in wheel_tags))
    target = target_tags.target
    py_ok = [t for t in wheel_tags if (t.interpreter, t.abi) in target_tags.python_abi_pairs]
    if py_ok:
        plats = ", ".join(sorted({t.platform for t in py_ok}))
        return (
            Reason.WRONG_PLATFORM,
            f"platform {plats} does not run on linux {target.arch} with glibc "
            f"{target.glibc_str} (tags {shown})",
        )
    accepted_interpreters = target_tags.interpreters
    for t in sorted(wheel_tags, key=str):
        m = _CP_ABI_RE.match(t.abi)
        if m and (int(m.group(1)), int(m.group(2))) != target.python:
            return (
                Reason.WRONG_PYTHON_TAG,
                f"built for CPython {m.group(1)}.{m.group(2)} ({t.interpreter}-{t.abi}); "
                f"the target is CPython {target.python_str} ({target.cp_tag})",
            )
        if t.abi == "abi3" and t.interpreter not in accepted_interpreters:
            return (
                Reason.WRONG_PYTHON_TAG,
                f"{t.interpreter}-abi3 needs a newer CPython than the target "
                f"{target.python_str} ({target.cp_tag})",
            )
        if t.interpreter not in accepted_interpreters:
            return (
                Reason.WRONG_PYTHON_TAG,
                f"Python tag {t.interpreter} is not accepted by CPython {target.python_str} "
                f"(tags {shown})",
            )
    return (
        Reason.WRONG_ABI,
        f"ABI {', '.join(sorted({t.abi for t in wheel_tags}))} is not {target.cp_tag}, "
        f"abi3 or none (tags {shown})",
    )


def python_satisfies(requires_python: str, target_python: str) -> bool | None:
    """True/False, or None when the specifier itself is invalid (fail closed upstream)."""
    try:
        spec = SpecifierSet(requires_python)
    except InvalidSpecifier:
        return None
    return spec.contains(target_python, prereleases=True)


def evaluate(
    file: IndexFile,
    *,
    project: NormalizedName,
    target_tags: TargetTags,
    version: Version | None = None,
    kind: WheelKind | None = None,
) -> Verdict | None:
    """Judge one file for ``project`` (and, for a pin, an exact ``version`` and ``kind``).

    Returns None for a file of another project (a find-links page lists many).
    """
    parsed = parse_filename(file.filename)
    if file.problem is not None:  # a name that could be read as a path: never used
        return _unsafe_name(file, parsed, project)
    if parsed.name is not None and parsed.name != project:
        return None
    if parsed.error is not None:
        # a file we cannot name: keep it only if it plausibly belongs to the project
        unnamed = parsed.name is None and parsed.error is Reason.NOT_A_WHEEL
        if unnamed and _stem(file.filename) != project:
            return None
        return _refused(file, parsed, parsed.error, parsed.detail)
    assert parsed.tags is not None
    assert parsed.version is not None
    if version is not None and parsed.version != version:
        return _other_version(file, parsed, parsed.version, version)
    return _judge_wheel(file, parsed, parsed.tags, target_tags, kind)


def judge(
    files: Iterable[IndexFile],
    *,
    project: NormalizedName,
    target_tags: TargetTags,
    version: Version | None = None,
    kind: WheelKind | None = None,
) -> list[Verdict]:
    """``evaluate`` of every file of ``project`` among ``files``."""
    verdicts = (
        evaluate(f, project=project, target_tags=target_tags, version=version, kind=kind)
        for f in files
    )
    return [v for v in verdicts if v is not None]


def _refused(file: IndexFile, parsed: ParsedFile, reason: Reason, detail: str) -> Verdict:
    return Verdict(
        file=file,
        name=parsed.name,
        version=parsed.version,
        build=parsed.build,
        reason=reason,
        detail=detail,
    )


def _unsafe_name(file: IndexFile, parsed: ParsedFile, project: NormalizedName) -> Verdict | None:
    """The refusal of a file of ``project`` whose name is not a plain file name; None for a
    file of another project."""
    named = parsed.name or _stem(file.filename)
    if named != project:
        return None
    return Verdict(
        file=file,
        name=parsed.name,
        version=parsed.version,
        reason=Reason.UNSAFE_FILENAME,
        detail=f"the name {file.problem}; a filename is data, never a path, so this file "
        "is never used",
    )


def _other_version(file: IndexFile, parsed: ParsedFile, found: Version, pinned: Version) -> Verdict:
    """The refusal of a wheel of another version than the pinned one."""
    if found.public == pinned.public:
        label = found.local or "(none)"
        want = pinned.local or "(none)"
        return _refused(
            file,
            parsed,
            Reason.OTHER_LOCAL_LABEL,
            f"local label +{label} is not the pinned +{want} ({pinned})".replace(
                "+(none)", "(none)"
            ),
        )
    return _refused(
        file, parsed, Reason.OTHER_VERSION, f"version {found} is not the pinned {pinned}"
    )


def _judge_wheel(
    file: IndexFile,
    parsed: ParsedFile,
    wheel_tags: frozenset[Tag],
    target_tags: TargetTags,
    kind: WheelKind | None,
) -> Verdict:
    """A wheel of the wanted version: accepted with the rank of its best tag of the kind
    wanted (or its best kind), or refused for its tags, its kind, Requires-Python or a yank."""
    ranks = {t: target_tags.rank[t] for t in wheel_tags if t in target_tags.rank}
    if not ranks:
        reason, detail = _tag_mismatch(wheel_tags, target_tags)
        return _refused(file, parsed, reason, detail)
    by_kind: dict[str, int] = {}
    for tag, rank in ranks.items():
        k = wheel_kind(tag, target_tags.target.cp_tag)
        by_kind[k] = min(rank, by_kind.get(k, rank))
    best_kind = min(by_kind, key=lambda k: by_kind[k])
    if kind is not None and kind not in by_kind:
        shown = ", ".join(sorted(str(t) for t in ranks))
        return _refused(
            file,
            parsed,
            Reason.WRONG_KIND,
            f"a {best_kind} wheel ({shown}); the manifest requires {kind} "
            f"({_KIND_WORDS[kind].format(cp=target_tags.target.cp_tag)})",
        )
    refusal = _listing_refusal(file, target_tags)
    if refusal is not None:
        return _refused(file, parsed, *refusal)
    chosen_kind = kind or best_kind
    return Verdict(
        file=file,
        name=parsed.name,
        version=parsed.version,
        build=parsed.build,
        rank=by_kind[chosen_kind],
        kind=chosen_kind,
    )


def _listing_refusal(file: IndexFile, target_tags: TargetTags) -> tuple[Reason, str] | None:
    """Why the index's listing of a wheel refuses it (its Requires-Python, a yank), if it
    does."""
    if file.requires_python is not None:
        ok = python_satisfies(file.requires_python, target_tags.target.python_str)
        if ok is None:
            return Reason.REQUIRES_PYTHON, f"invalid Requires-Python {file.requires_python!r}"
        if not ok:
            return (
                Reason.REQUIRES_PYTHON,
                f"Requires-Python {file.requires_python} excludes {target_tags.target.python_str}",
            )
    if file.yanked:
        why = f": {file.yanked_reason}" if file.yanked_reason else ""
        return Reason.YANKED, f"yanked from the index{why}"
    return None


_KIND_WORDS: dict[str, str] = {
    "native": "{cp}-{cp}",
    "abi3": "cpNN-abi3",
    "pure": "py3-none-any",
}


class TieError(Exception):
    def __init__(self, files: Sequence[Verdict]) -> None:
        super().__init__("tie")
        self.files = files


def best(verdicts: Iterable[Verdict]) -> Verdict | None:
    """The accepted file with the best rank; a tie between different files raises TieError.

    Files with the same name listed twice (same filename) count once when their hashes agree.
    """
    accepted = [v for v in verdicts if v.accepted]
    if not accepted:
        return None
    top = min(v.rank for v in accepted if v.rank is not None)
    leaders: dict[str, Verdict] = {}
    for v in accepted:
        if v.rank != top:
            continue
        prior = leaders.get(v.file.filename)
        if prior is not None and _same_bytes(prior.file, v.file):
            continue
        if prior is not None:
            raise TieError([prior, v])
        leaders[v.file.filename] = v
    if len(leaders) > 1:
        raise TieError(sorted(leaders.values(), key=lambda v: v.file.filename))
    return next(iter(leaders.values()))


def _same_bytes(a: IndexFile, b: IndexFile) -> bool:
    ha, hb = a.hashes.get("sha256"), b.hashes.get("sha256")
    return ha is not None and ha == hb


# ----------------------------------------------------------------------------- releases
#
# A page lists thousands of files and the search mostly needs the newest release: files are
# grouped by release from their names, and a release is judged only when the search reaches
# it. The cheap steps only set aside files ``evaluate`` would refuse, so the outcome is the same.


def release_groups(
    files: Sequence[IndexFile], *, project: NormalizedName
) -> dict[Version, list[int]]:
    """The positions in ``files`` of the wheels of ``project`` by their version, in page
    order; only names are read. Every file left out is one ``evaluate`` refuses or skips."""
    if isinstance(files, ProjectPage):
        named: Iterable[tuple[str, str | None]] = ((r[0], r[9]) for r in files.rows)
    else:
        named = ((f.filename, f.problem) for f in files)
    versions: dict[str, Version | None] = {}
    names: dict[str, bool] = {}
    out: dict[Version, list[int]] = {}
    for i, (filename, problem) in enumerate(named):
        if problem is not None:
            continue
        parts = wheel_parts(filename)
        if parts is None:
            continue
        mine = names.get(parts[0])
        if mine is None:
            mine = names[parts[0]] = canonicalize_name(parts[0]) == project
        if not mine:
            continue
        raw = parts[1]
        if raw in versions:
            v = versions[raw]
        else:
            try:
                v = Version(raw)
            except InvalidVersion:
                v = None
            versions[raw] = v
        if v is not None:
            out.setdefault(v, []).append(i)
    return out


def version_files(
    files: Sequence[IndexFile], *, project: NormalizedName, version: Version
) -> list[IndexFile]:
    """The files of ``release_groups`` for one version (every file it could accept)."""
    return [files[i] for i in release_groups(files, project=project).get(version, ())]


@dataclass(frozen=True, kw_only=True)
class Release:
    """One version the target can use: its best file, or the files that tie for best."""

    version: Version
    best: Verdict | None  # None when ``tie`` is set
    tie: tuple[Verdict, ...] = ()


def releases(
    files: Sequence[IndexFile], *, project: NormalizedName, target_tags: TargetTags
) -> Iterator[Release]:
    """The releases of ``project`` that have a file the target can use, newest first, each
    judged when the iteration reaches it."""
    groups = release_groups(files, project=project)
    page = files if isinstance(files, ProjectPage) else None
    for version in sorted(groups, reverse=True):
        accepted: list[Verdict] = []
        for i in groups[version]:
            filename = page.filename(i) if page is not None else files[i].filename
            if not target_tags.may_run(filename):  # evaluate would refuse it for its tags
                continue
            v = evaluate(files[i], project=project, target_tags=target_tags)
            if v is not None and v.accepted and v.version is not None:
                accepted.append(v)
        if not accepted:
            continue
        shown = accepted[0].version  # the version as the first usable file spells it
        assert shown is not None
        try:
            release = Release(version=shown, best=best(accepted))
        except TieError as tie:
            release = Release(version=shown, best=None, tie=tuple(tie.files))
        yield release
