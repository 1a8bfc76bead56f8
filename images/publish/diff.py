"""What differs between two locks or images, by distribution: pure classification and
rendering. The command reads the locks (from disk, or out of an image) and hands them here as
``DiffSide``s."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from images.publish.push import (
    BASE_DIGEST_LABEL,
    BASE_NAME_LABEL,
    DIFF_LABELS,
    REVISION_LABEL,
    TOOLING_REVISION_LABEL,
)
from resolver.lockfile import Lock


@dataclass(frozen=True, kw_only=True)
class LockDiff:
    added: tuple[tuple[str, str], ...] = ()  # (name, version)
    removed: tuple[tuple[str, str], ...] = ()
    version_changed: tuple[tuple[str, str, str], ...] = ()  # (name, old, new)
    label_changed: tuple[tuple[str, str, str], ...] = ()  # local label only
    file_changed: tuple[tuple[str, str, str], ...] = ()  # same version, other file/bytes

    def empty(self) -> bool:
        return not (
            self.added or self.removed or self.version_changed or self.label_changed
            or self.file_changed
        )  # fmt: skip


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def classify_lock_diff(a: Lock, b: Lock) -> LockDiff:
    pa, pb = a.by_name(), b.by_name()
    added, removed, changed, labels, files = [], [], [], [], []
    for name in sorted(set(pa) | set(pb)):
        x, y = pa.get(name), pb.get(name)
        if x is None and y is not None:
            added.append((str(name), y.version))
        elif y is None and x is not None:
            removed.append((str(name), x.version))
        elif x is not None and y is not None:
            if x.version != y.version:
                if _public(x.version) == _public(y.version):
                    labels.append((str(name), x.version, y.version))
                else:
                    changed.append((str(name), x.version, y.version))
            elif x.sha256 != y.sha256 or x.filename != y.filename:
                files.append((str(name), x.filename, y.filename))
    return LockDiff(
        added=tuple(added),
        removed=tuple(removed),
        version_changed=tuple(changed),
        label_changed=tuple(labels),
        file_changed=tuple(files),
    )


@dataclass(frozen=True, kw_only=True)
class DiffSide:
    name: str  # what the user gave
    lock: Lock
    image_id: str | None = None  # None: a lock on disk, not an image
    labels: Mapping[str, str] = field(default_factory=dict)
    built_from: Mapping[str, str] = field(default_factory=dict)  # source-built dist -> revision


def parse_sbom_sources(text: str) -> dict[str, str]:
    """Source-built distribution -> revision, from the image's CycloneDX SBOM (best effort)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, str] = {}
    components = doc.get("components", []) if isinstance(doc, dict) else []
    for c in components if isinstance(components, list) else []:
        for prop in c.get("properties", []) if isinstance(c, dict) else []:
            if isinstance(prop, dict) and prop.get("name") == "vllm-musa:built-from":
                out[str(c.get("name"))] = str(prop.get("value"))
    return dict(sorted(out.items()))


def _base_image(labels: Mapping[str, str]) -> str:
    name, digest = labels.get(BASE_NAME_LABEL), labels.get(BASE_DIGEST_LABEL)
    if name and digest:
        return f"{name}@{digest}" if "@" not in name else name
    return name or digest or "(not labelled)"


def _compare(title: str, a: str, b: str) -> str:
    return f"{title}: {a} (same)" if a == b else f"{title}: {a} -> {b}"


def render_diff(a: DiffSide, b: DiffSide) -> list[str]:
    d = classify_lock_diff(a.lock, b.lock)
    lines = [f"--- {a.name}", f"+++ {b.name}"]

    def section(title: str, rows: Sequence[str]) -> None:
        if rows:
            lines.append(f"{title} ({len(rows)}):")
            lines.extend(f"  {row}" for row in rows)

    section("added", [f"+ {n} {v}" for n, v in d.added])
    section("removed", [f"- {n} {v}" for n, v in d.removed])
    section("version changed", [f"~ {n} {o} -> {v}" for n, o, v in d.version_changed])
    section(
        "local label only (same public version, another build)",
        [f"~ {n} {o} -> {v}" for n, o, v in d.label_changed],
    )
    section("same version, other file", [f"~ {n} {o} -> {v}" for n, o, v in d.file_changed])
    if d.empty():
        lines.append("the locks install the same distributions at the same versions")
    if a.lock.target != b.lock.target:
        lines.append(f"target: {a.lock.target.describe()} -> {b.lock.target.describe()}")
    if a.image_id is None and b.image_id is None:
        return lines
    if a.image_id is not None and b.image_id is not None:
        section("image", _compare_images(a, b))
    else:
        image = a if a.image_id is not None else b
        section(f"image {image.name} (the other side is a lock)", _describe_image(image))
    return lines


def _label(side: DiffSide, label: str) -> str | None:
    return side.labels.get(label) or None  # an empty label says nothing


def _describe_image(side: DiffSide) -> list[str]:
    rows = [
        f"image id: {side.image_id}",
        f"base image: {_base_image(side.labels)}",
        f"revision: {_label(side, REVISION_LABEL) or '(not labelled)'}",
        f"tooling revision: {_label(side, TOOLING_REVISION_LABEL) or '(not labelled)'}",
    ]
    rows += [f"source {name}: {rev}" for name, rev in side.built_from.items()]
    return rows


def _compare_images(a: DiffSide, b: DiffSide) -> list[str]:
    rows = [
        _compare("image id", a.image_id or "", b.image_id or ""),
        _compare("base image", _base_image(a.labels), _base_image(b.labels)),
        _compare(
            "revision",
            _label(a, REVISION_LABEL) or "(not labelled)",
            _label(b, REVISION_LABEL) or "(not labelled)",
        ),
        _compare(
            "tooling revision",
            _label(a, TOOLING_REVISION_LABEL) or "(not labelled)",
            _label(b, TOOLING_REVISION_LABEL) or "(not labelled)",
        ),
    ]
    for name in sorted(set(a.built_from) | set(b.built_from)):
        rows.append(
            _compare(
                f"source {name}",
                a.built_from.get(name, "(absent)"),
                b.built_from.get(name, "(absent)"),
            )
        )
    for label in DIFF_LABELS:
        if label in (BASE_NAME_LABEL, BASE_DIGEST_LABEL, REVISION_LABEL, TOOLING_REVISION_LABEL):
            continue
        va, vb = _label(a, label), _label(b, label)
        if va != vb:
            rows.append(f"{label}: {va or '(none)'} -> {vb or '(none)'}")
    return rows
