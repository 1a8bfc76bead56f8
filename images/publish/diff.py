"""What differs between two locks or images, by distribution: pure classification, the
table people read (versions and file sizes from the locks) and the ``--json`` document
(``build-image/diff/1``). The command reads the locks (from disk, or out of an image) and
hands them here as ``DiffSide``s; ``differs`` decides its exit code (0 same, 1 different)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import InvalidVersion, Version

from core.json_output import document
from core.tables import human_size, render_table, signed_size
from images.builder.labels import (
    BASE_DIGEST_LABEL,
    BASE_NAME_LABEL,
    DIFF_LABELS,
    REVISION_LABEL,
    TOOLING_REVISION_LABEL,
)
from resolver.lock_report import ChangedPackage, lock_changes
from resolver.lockfile import Lock, LockedPackage


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


# ------------------------------------------------------------------------------ by distribution

# the "change" of a row, in order, and how the table's heading counts it
CHANGES = {
    "added": "added",
    "removed": "removed",
    "version": "version changed",
    "label": "local label only",
    "file": "same version, other file",
}


@dataclass(frozen=True, kw_only=True)
class DistributionRow:
    """One distribution that differs: ``a`` and ``b`` are its entries (None: absent)."""

    name: str
    change: str  # one of CHANGES
    a: LockedPackage | None
    b: LockedPackage | None


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def _change(c: ChangedPackage) -> str | None:
    """How a distribution in both locks differs (``CHANGES``): another public version, another
    local label only, or the same version with another file; None: not in what it installs."""
    if "version" in c.fields:
        return "label" if _public(c.old.version) == _public(c.new.version) else "version"
    return "file" if {"sha256", "filename"} & set(c.fields) else None


def distribution_rows(a: Lock, b: Lock) -> list[DistributionRow]:
    """Every distribution that differs between ``a`` and ``b``, by name."""
    changes = lock_changes(a, b)
    rows = [DistributionRow(name=p.name, change="added", a=None, b=p) for p in changes.added]
    rows += [DistributionRow(name=p.name, change="removed", a=p, b=None) for p in changes.removed]
    rows += [
        DistributionRow(name=c.name, change=change, a=c.old, b=c.new)
        for c in changes.changed
        if (change := _change(c))
    ]
    return sorted(rows, key=lambda r: r.name)


def lock_size(lock: Lock) -> tuple[int, int]:
    """(the sum of the files' sizes the lock records, how many files have no size)."""
    known = [p.size for p in lock.packages if p.size is not None]
    return sum(known), len(lock.packages) - len(known)


def _size(p: LockedPackage | None) -> str:
    return "-" if p is None else human_size(p.size)


def _total(lock: Lock) -> str:
    size, unknown = lock_size(lock)
    without = f", {unknown} without a size" if unknown else ""
    return f"{len(lock.packages)} distributions, {human_size(size)}{without}"


def render_distribution_table(a: Lock, b: Lock) -> list[str]:
    """The distributions that differ as a table with both sides' versions and file sizes."""
    rows = distribution_rows(a, b)
    if not rows:
        return ["the locks install the same distributions at the same versions"]
    table: list[tuple[str, ...]] = [("distribution", "change", "a", "b", "size a", "size b")]
    for r in rows:
        table.append(
            (
                r.name,
                r.change,
                r.a.version if r.a else "-",
                r.b.version if r.b else "-",
                _size(r.a),
                _size(r.b),
            )
        )
    counts = {c: sum(1 for r in rows if r.change == c) for c in CHANGES}
    summary = ", ".join(f"{n} {CHANGES[c]}" for c, n in counts.items() if n)
    heading = "1 distribution differs" if len(rows) == 1 else f"{len(rows)} distributions differ"
    return [f"{heading} ({summary}):", *render_table(table, right=(4, 5))]


# ------------------------------------------------------------------------------ images


def _image_rows(side: DiffSide) -> dict[str, str]:
    """What -> value of an image: its id, base, revisions, and the sources it was built from
    (the labels ``compare_images`` adds are compared only when they differ)."""
    rows = {
        "image id": side.image_id or "",
        "base image": _base_image(side.labels),
        "revision": _label(side, REVISION_LABEL) or "(not labelled)",
        "tooling revision": _label(side, TOOLING_REVISION_LABEL) or "(not labelled)",
    }
    return rows | {f"source {name}": rev for name, rev in side.built_from.items()}


def compare_images(a: DiffSide, b: DiffSide) -> list[tuple[str, str, str]]:
    """(what, a's value, b's value) of two images, in a fixed order: what ``diff`` compares."""
    va, vb = _image_rows(a), _image_rows(b)
    sources = [f"source {name}" for name in sorted(set(a.built_from) | set(b.built_from))]
    titles = [*list(va)[:4], *sources]
    rows = [(title, va.get(title, "(absent)"), vb.get(title, "(absent)")) for title in titles]
    for label in DIFF_LABELS:
        if label in (BASE_NAME_LABEL, BASE_DIGEST_LABEL, REVISION_LABEL, TOOLING_REVISION_LABEL):
            continue
        la, lb = _label(a, label), _label(b, label)
        if la != lb:
            rows.append((label, la or "(none)", lb or "(none)"))
    return rows


def _image_differences(a: DiffSide, b: DiffSide) -> list[str]:
    if a.image_id is None or b.image_id is None:
        return []
    return [title for title, va, vb in compare_images(a, b) if va != vb]


def differs(a: DiffSide, b: DiffSide) -> bool:
    """True when ``diff`` reports a difference (exit 1): a distribution, the target, or (two
    images) anything the image rows compare, the image ID included."""
    return bool(
        distribution_rows(a.lock, b.lock)
        or a.lock.target != b.lock.target
        or _image_differences(a, b)
    )


# ------------------------------------------------------------------------------ the text


def render_diff(a: DiffSide, b: DiffSide) -> list[str]:
    lines = [f"--- {a.name}", f"+++ {b.name}", *render_distribution_table(a.lock, b.lock)]
    lines.append(f"a: {_total(a.lock)}")
    size = signed_size(lock_size(b.lock)[0] - lock_size(a.lock)[0])
    lines.append(f"b: {_total(b.lock)} (size change: {size})")
    if a.lock.target != b.lock.target:
        lines.append(f"target: {a.lock.target.describe()} -> {b.lock.target.describe()}")
    if a.image_id is not None and b.image_id is not None:
        title, rows = "image", [_compare(t, va, vb) for t, va, vb in compare_images(a, b)]
    elif a.image_id is not None or b.image_id is not None:
        image = a if a.image_id is not None else b
        title = f"image {image.name} (the other side is a lock)"
        rows = [f"{t}: {v}" for t, v in _image_rows(image).items()]
    else:
        return lines
    return [*lines, f"{title} ({len(rows)}):", *(f"  {row}" for row in rows)]


def _label(side: DiffSide, label: str) -> str | None:
    return side.labels.get(label) or None  # an empty label says nothing


# ------------------------------------------------------------------------------ --json


def _entry(p: LockedPackage | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"filename": p.filename, "sha256": p.sha256, "size": p.size, "version": p.version}


def _side(side: DiffSide) -> dict[str, Any]:
    size, unknown = lock_size(side.lock)
    image = None
    if side.image_id is not None:
        image = {
            "base_image": _base_image(side.labels),
            "built_from": dict(side.built_from),
            "image_id": side.image_id,
            "labels": {k: v for k, v in sorted(side.labels.items()) if k in DIFF_LABELS},
            "revision": _label(side, REVISION_LABEL),
            "tooling_revision": _label(side, TOOLING_REVISION_LABEL),
        }
    return {
        "image": image,
        "name": side.name,
        "packages": len(side.lock.packages),
        "size_bytes": size,
        "target": side.lock.target.describe(),
        "without_size": unknown,
    }


def diff_document(a: DiffSide, b: DiffSide) -> dict[str, Any]:
    """``build-image/diff/1`` (docs/json.md): both sides, every distribution that differs
    with both entries, and (two images) which image rows differ."""
    return document(
        "diff",
        {
            "a": _side(a),
            "b": _side(b),
            "distributions": [
                {"a": _entry(r.a), "b": _entry(r.b), "change": r.change, "name": r.name}
                for r in distribution_rows(a.lock, b.lock)
            ],
            "image_differences": _image_differences(a, b),
            "same": not differs(a, b),
            "target_changed": a.lock.target != b.lock.target,
        },
    )
