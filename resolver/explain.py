"""``explain`` (every file of a package, accepted or refused) and ``why`` (requirement chains)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

from core.errors import ResolutionError, UsageError
from core.urls import project_url, redact
from manifest import Manifest
from resolver.index_client import IndexClient, IndexEndpoint
from resolver.lockfile import Lock
from resolver.target import TargetTags
from resolver.wheel_select import Verdict, judge


@dataclass(frozen=True)
class ExplainReport:
    name: NormalizedName
    index: str
    url: str
    wanted: str  # what was asked for: "==2.11.0.post2+musa5.2.0 (native)" or "any version"
    selected: str | None  # the filename the lock (or the pin) uses
    verdicts: tuple[Verdict, ...]
    # overrides.<name>: its reason, and (from the lock) the requirements it ignores
    override_reason: str | None = None
    override_ignores: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        override = None
        if self.override_reason is not None:
            override = {"reason": self.override_reason, "ignores": list(self.override_ignores)}
        return {
            "package": self.name,
            "index": self.index,
            "url": self.url,
            "wanted": self.wanted,
            "selected": self.selected,
            "override": override,
            "files": [
                {
                    "filename": v.file.filename,
                    "accepted": v.accepted,
                    "reason": v.reason.value if v.reason else None,
                    "detail": v.detail,
                    "kind": v.kind,
                    "rank": v.rank,
                    "selected": v.file.filename == self.selected,
                }
                for v in self.verdicts
            ],
        }


def explain_package(
    manifest: Manifest,
    client: IndexClient,
    endpoints: Mapping[str, IndexEndpoint],
    package: str,
    *,
    lock: Lock | None,
) -> ExplainReport:
    name = canonicalize_name(package)
    pin = manifest.packages.get(name)
    override = manifest.overrides.get(name)
    source = next((s for s in manifest.sources if s.sdist and s.sdist.project == name), None)
    index = manifest.index_of(name)
    target_tags = TargetTags(manifest.target)
    version: Version | None = None
    kind = None
    wanted = "any version (closure member)"
    locked = lock.by_name().get(name) if lock else None
    if pin is not None:
        version, kind = pin.version, pin.wheel
        wanted = f"=={pin.version} ({pin.wheel}), pinned at packages.{pin.key}"
    elif override is not None:
        version = override.version
        wanted = f"=={override.version}, overridden at overrides.{override.key}"
    elif source is not None and source.sdist is not None:
        sd = source.sdist
        index, version = sd.index, sd.version
        wanted = (
            f"the sdist of {sd.project} {sd.version}, built in the image "
            f"(sources.{source.name}.sdist)"
        )
    elif locked is not None:
        version = Version(locked.version)
        wanted = f"=={locked.version}, as locked"
    url = redact(project_url(endpoints[index].url, name))
    page = client.project_files(endpoints[index], name, target_tags)
    if page is None:
        raise ResolutionError(f"{name} is not on index {index} ({url}: HTTP 404)")
    files = page.whole()  # every file, the ones the target cannot run too
    verdicts = tuple(
        sorted(
            judge(files, project=name, target_tags=target_tags, version=version, kind=kind),
            key=lambda v: (not v.accepted, v.rank or 0, v.file.filename),
        )
    )
    if not verdicts:
        raise UsageError(f"index {index} lists no file of {name}")
    selected = locked.filename if locked else None
    return ExplainReport(
        name,
        index,
        url,
        wanted,
        selected,
        verdicts,
        override_reason=override.reason if override else None,
        override_ignores=locked.override_ignores if override and locked else (),
    )


def render_explain_table(report: ExplainReport) -> str:
    lines = [
        f"{report.name} on index {report.index} ({report.url})",
        f"wanted: {report.wanted}",
        *_override_lines(report.override_reason, report.override_ignores),
        "",
    ]
    rows = [("FILE", "VERDICT", "DETAIL")]
    for v in report.verdicts:
        mark = (
            "selected"
            if v.file.filename == report.selected
            else ("accepted" if v.accepted else v.reason.value if v.reason else "")
        )
        detail = f"{v.kind} wheel, tag rank {v.rank}" if v.accepted else v.detail
        rows.append((v.file.filename, mark, detail))
    width0 = max(len(r[0]) for r in rows)
    width1 = max(len(r[1]) for r in rows)
    lines += [f"{a:<{width0}}  {b:<{width1}}  {c}".rstrip() for a, b, c in rows]
    return "\n".join(lines)


def _override_lines(reason: str | None, ignores: tuple[str, ...]) -> list[str]:
    if reason is None:
        return []
    return [f"override: {reason}", *(f"  ignores: {i}" for i in ignores or ("nothing",))]


def why_chains(lock: Lock, package: str) -> list[str]:
    """Every chain from a manifest root to ``package``, shortest first; for an overridden
    package, then its reason and the requirements it ignores."""
    name = canonicalize_name(package)
    by_name = lock.by_name()
    if name not in by_name:
        raise UsageError(f"{name} is not in the lock for {lock.stack}")
    chains: list[list[str]] = []

    def walk(node: str, path: list[str]) -> None:
        if len(chains) >= 20:
            return
        pkg = by_name.get(NormalizedName(node))
        if pkg is None:
            return
        for parent in pkg.required_by:
            if parent.startswith("("):
                chains.append([parent.strip("()"), *path])
            elif parent not in path:
                walk(parent, [parent, *path])

    walk(name, [name])
    chains.sort(key=lambda c: (len(c), c))
    out = []
    for chain in chains:
        root, *rest = chain
        steps = [f"{n} {by_name[NormalizedName(n)].version}" for n in rest]
        out.append(f"{root}: " + " -> ".join(steps))
    pkg = by_name[name]
    return out + _override_lines(pkg.override_reason, pkg.override_ignores)
