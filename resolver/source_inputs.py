"""What the lock takes from ``sources``: each sdist, found on its index and locked by hash,
and the requirements files of every source, read at the pinned revision.

- ``sources.<name>.sdist``: exactly one ``<project>-<version>.tar.gz`` on that index; always
  downloaded and hashed, bounded in size, and locked in the ``source`` group. Its project is
  *provided*: built in the image, so a requirement on it is checked against the sdist's
  version and never looked up on an index. Its requirements are its ``requirements_files``.
- ``requirements_files`` / ``build_requirements_files``: each requirement becomes a root of
  the runtime or the build closure, required by ``(sources.<name>:<file>)``.
- Every line read is checked against the manifest's exact versions
  (``sources.contradictions``). The git and path sources are read first (``read_trees``), so
  that refusal comes before any index is asked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from packaging.requirements import Requirement
from packaging.utils import NormalizedName
from packaging.version import Version

from core.errors import BuildImageError, ResolutionError
from core.network import NetworkConfig
from core.urls import project_url, redact
from manifest import Manifest, Source
from resolver.index_client import IndexClient, IndexEndpoint
from resolver.lockfile import SOURCE_GROUP, LockedPackage
from resolver.simple_page import IndexFile, whole_page
from resolver.target import marker_environment
from sources.contradictions import check_contradictions, source_lines
from sources.read import (
    SourceRequirements,
    git_reader,
    path_reader,
    read_source_requirements,
    sdist_reader,
)
from sources.requirements_files import FileRequirement, ReadFile
from sources.sdist import MAX_SDIST_BYTES, SDIST_SUFFIX, SdistArchive, is_sdist_of, sdist_filename


class SdistIndexes(Protocol):
    """The indexes the sdists are found on and downloaded from (``resolver.fetcher.Fetcher``):
    ``files`` lists a project's page, read once per run."""

    @property
    def client(self) -> IndexClient: ...

    @property
    def endpoints(self) -> Mapping[str, IndexEndpoint]: ...

    def files(self, index: str, name: NormalizedName) -> Sequence[IndexFile] | None: ...


@dataclass(frozen=True, kw_only=True)
class Provided:
    """A distribution built in the image from a source's sdist."""

    name: NormalizedName
    version: Version
    source: str

    @property
    def where(self) -> str:
        return f"sources.{self.source}.sdist"


@dataclass(frozen=True, kw_only=True)
class RootRequirement:
    """A requirement of a source's requirements file, as a root of the closure."""

    requirement: Requirement
    parent: str  # sources.vllm:requirements/common.txt (what required_by records)
    origin: str  # sources.vllm:requirements/common.txt:38 (what messages name)
    requirer: str  # vllm 0.28.0 (sources.vllm:requirements/common.txt), for override records


@dataclass(frozen=True, kw_only=True)
class SourceInputs:
    provided: Mapping[NormalizedName, Provided]
    sdists: tuple[LockedPackage, ...]
    runtime: tuple[RootRequirement, ...]
    build: tuple[RootRequirement, ...]


def find_sdist(
    files: Sequence[IndexFile] | None,
    source: Source,
    *,
    url: str,
) -> IndexFile:
    """The one index file that is ``source``'s sdist, or a refusal naming what was found."""
    sd = source.sdist
    assert sd is not None
    where = f"sources.{source.name}.sdist"
    if files is None:
        raise ResolutionError(
            f"{where}: {sd.project} is not on index {sd.index} ({url}: HTTP 404)",
            hint=f"an sdist is looked up on its index only; check {where}.project, or set "
            f"{where}.index to the index that publishes it",
        )
    matches = sorted((f for f in files if is_sdist_of(f.filename, sd.project, sd.version)),
                     key=lambda f: f.filename)  # fmt: skip
    usable = [f for f in matches if not f.yanked]
    if len(usable) == 1:
        return usable[0]
    if len(usable) > 1:
        shown = "\n  ".join(f.filename for f in usable)
        raise ResolutionError(
            f"{where}: index {sd.index} ({url}) lists {len(usable)} sdists of {sd.project} "
            f"{sd.version}:\n  {shown}",
            hint="the index must publish one sdist per version; ask its owner to remove one",
        )
    raise ResolutionError(
        _no_sdist_message(whole_page(files), matches, source, url=url),
        hint=f"pin {where}.version to a version the index publishes as an sdist "
        f"({SDIST_SUFFIX}), or set {where}.index to the index that has it",
    )


def _no_sdist_message(
    files: Sequence[IndexFile], matches: Sequence[IndexFile], source: Source, *, url: str
) -> str:
    """Why the index has no usable sdist of ``source``: its sdists of the version, all yanked
    (``matches``), the other sdists on the index, and how many wheels it lists (``files``
    is the whole page, so the wheels the target cannot run count too)."""
    sd = source.sdist
    assert sd is not None
    where = f"sources.{source.name}.sdist"
    wanted = sdist_filename(sd.project, sd.version)
    lines = [f"{where}: no sdist {wanted} of {sd.project} {sd.version} on index {sd.index} ({url})"]
    for f in matches:
        reason = f": {f.yanked_reason}" if f.yanked_reason else ""
        lines.append(f"  {f.filename}: yanked from the index{reason}")
    others = sorted(
        (f.filename for f in files if f.filename.endswith(SDIST_SUFFIX) and f not in matches),
    )
    lines.append(
        "  other sdists on the index: " + (", ".join(others[-8:]) if others else "none")
        + (f" (and {len(others) - 8} more)" if len(others) > 8 else "")
    )  # fmt: skip
    wheels = sum(1 for f in files if f.filename.endswith(".whl"))
    if wheels:
        lines.append(f"  and {wheels} wheel{'s' if wheels != 1 else ''}, which a source never uses")
    return "\n".join(lines)


def _has_files(source: Source) -> bool:
    return bool(source.requirements_files or source.build_requirements_files)


def _raise_all(errors: Sequence[BuildImageError]) -> None:
    if len(errors) == 1:
        raise errors[0]
    if errors:
        hints = dict.fromkeys(e.hint for e in errors if e.hint)
        raise ResolutionError(
            "\n".join(e.message for e in errors), hint="\n".join(hints) if hints else None
        )


def _check(manifest: Manifest, reads: Sequence[SourceRequirements]) -> None:
    """The lines read, against the manifest's exact versions (``sources.contradictions``)."""
    lines = [
        line
        for reqs in reads
        for part in (reqs.runtime, reqs.build)
        for line in source_lines(reqs.source, part.requirements)
    ]
    check_contradictions(manifest, lines, marker_environment(manifest.target))


def _tree_reader(
    source: Source, repo_root: Path, git_cache: Path, network: NetworkConfig | None
) -> ReadFile:
    where = f"sources.{source.name}"
    if source.git is not None:
        return git_reader(source, git_cache, where=where, network=network)
    return path_reader(source, repo_root, where=where)


def read_trees(
    manifest: Manifest,
    *,
    repo_root: Path,
    git_cache: Path,
    network: NetworkConfig | None = None,
) -> dict[str, SourceRequirements]:
    """The requirements files of every git and path source, read at the pinned revision and
    checked against the manifest's exact versions. No index is asked here (a git source is
    fetched into the git cache, through ``network``'s proxy), so a lock whose manifest
    contradicts these files is refused before any index is."""
    errors: list[BuildImageError] = []
    out: dict[str, SourceRequirements] = {}
    for source in manifest.sources:
        if source.sdist is not None or not _has_files(source):
            continue
        try:
            read = _tree_reader(source, repo_root, git_cache, network)
            out[source.name] = read_source_requirements(source, read)
        except BuildImageError as exc:
            errors.append(exc)
    _raise_all(errors)
    _check(manifest, list(out.values()))
    return out


def read_sources(
    manifest: Manifest,
    *,
    indexes: SdistIndexes,
    repo_root: Path,
    git_cache: Path,
    trees: Mapping[str, SourceRequirements] | None = None,
    network: NetworkConfig | None = None,
) -> SourceInputs:
    """Find, download and verify every sdist, and read every source's requirements files.
    ``trees``: what ``read_trees`` read already (those sources are not read again); the files
    read here are checked against the manifest's exact versions as ``read_trees`` checks.
    ``network``: the proxy a git source is fetched through."""
    provided = provided_projects(manifest)
    errors: list[BuildImageError] = []
    sdists: list[LockedPackage] = []
    runtime: list[RootRequirement] = []
    build: list[RootRequirement] = []
    fresh: list[SourceRequirements] = []
    for source in manifest.sources:
        sd = source.sdist
        if sd is None and not _has_files(source):
            continue
        known = trees.get(source.name) if trees is not None else None
        try:
            archive = None
            if sd is not None:
                archive, locked = _fetch_sdist(source, indexes)
                sdists.append(locked)
            if not _has_files(source):
                continue
            if known is not None:
                reqs = known
            else:
                read = (
                    sdist_reader(archive)
                    if archive is not None
                    else _tree_reader(source, repo_root, git_cache, network)
                )
                reqs = read_source_requirements(source, read, prime=archive)
                fresh.append(reqs)
        except BuildImageError as exc:
            errors.append(exc)
            continue
        runtime += _roots(source, reqs.runtime.requirements, reqs)
        build += _roots(source, reqs.build.requirements, reqs)
    _raise_all(errors)
    _check(manifest, fresh)
    return SourceInputs(
        provided=provided, sdists=tuple(sdists), runtime=tuple(runtime), build=tuple(build)
    )


def provided_projects(manifest: Manifest) -> dict[NormalizedName, Provided]:
    """The sdists' projects; each may be built by one source, and neither pinned nor
    overridden (the image builds it at the sdist's version)."""
    out: dict[NormalizedName, Provided] = {}
    for source in manifest.sources:
        sd = source.sdist
        if sd is None:
            continue
        where = f"sources.{source.name}.sdist"
        other = out.get(sd.project)
        if other is not None:
            raise ResolutionError(
                f"{where}: {sd.project} is already built from {other.where}",
                hint="one source builds a project; remove one of the two",
            )
        pin = manifest.packages.get(sd.project)
        if pin is not None:
            raise ResolutionError(
                f"packages.{pin.key}: {sd.project} is built in the image from {where} "
                f"({sd.version}); it cannot also be pinned as a wheel",
                hint=f"remove packages.{pin.key}",
            )
        override = manifest.overrides.get(sd.project)
        if override is not None:
            raise ResolutionError(
                f"overrides.{override.key}: {sd.project} is built in the image from {where} "
                f"({sd.version}); its version is the sdist's",
                hint=f"remove overrides.{override.key}, or change {where}.version",
            )
        out[sd.project] = Provided(name=sd.project, version=sd.version, source=source.name)
    return out


def _fetch_sdist(source: Source, indexes: SdistIndexes) -> tuple[SdistArchive, LockedPackage]:
    sd = source.sdist
    assert sd is not None
    where = f"sources.{source.name}.sdist"
    endpoint = indexes.endpoints[sd.index]
    url = redact(project_url(endpoint.url, sd.project))
    file = find_sdist(indexes.files(sd.index, sd.project), source, url=url)
    got = indexes.client.download(endpoint, file, label=where, max_size=MAX_SDIST_BYTES)
    archive = SdistArchive(got.path, filename=file.filename, sha256=got.sha256, where=where)
    locked = LockedPackage(
        name=sd.project,
        version=str(sd.version),
        index=sd.index,
        index_url=endpoint.url,
        filename=file.filename,
        url=file.url,
        sha256=got.sha256,
        size=got.size,
        kind="sdist",
        origin="source",
        required_by=(f"(sources.{source.name})",),
        group=SOURCE_GROUP,
    )
    return archive, locked


def _roots(
    source: Source, requirements: Sequence[FileRequirement], read: SourceRequirements
) -> list[RootRequirement]:
    sd = source.sdist
    out: list[RootRequirement] = []
    for item in requirements:
        parent = f"{read.where}:{item.file}"
        requirer = f"{sd.project} {sd.version} ({parent})" if sd is not None else parent
        out.append(
            RootRequirement(
                requirement=item.requirement,
                parent=parent,
                origin=f"{read.where}:{item.location}",
                requirer=requirer,
            )
        )
    return out
