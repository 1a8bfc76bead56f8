"""What a ``lock`` changed against the previous lock: pure comparison, the table people
read after ``lock``, and the ``--json`` document (``build-image/lock/1``, docs/json.md).

A distribution is *added* when only the new lock has it, *removed* when only the previous one
does, and *changed* when both have it and its file differs (version, filename, sha256, size, URL),
or where it comes from (index, index URL, group), or its override. The table calls a change of
the URLs alone *moved*: the same file with the same sha256, found through a mirror of its index
(``--index NAME=URL``), which ``lock --check`` does not count as drift either. Everything is
sorted by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.json_output import document
from core.tables import render_table
from resolver.lockfile import Lock, LockedPackage

FILE_FIELDS = ("version", "filename", "sha256", "size", "url", "index", "index_url", "group")


@dataclass(frozen=True, kw_only=True)
class ChangedPackage:
    old: LockedPackage
    new: LockedPackage
    fields: tuple[str, ...]  # which of FILE_FIELDS (and "override") differ

    @property
    def name(self) -> str:
        return str(self.new.name)


@dataclass(frozen=True, kw_only=True)
class LockChanges:
    previous: bool  # False: there was no lock to compare with
    added: tuple[LockedPackage, ...] = ()
    removed: tuple[LockedPackage, ...] = ()
    changed: tuple[ChangedPackage, ...] = ()
    inputs_changed: bool = False  # the manifest's lock inputs (lock-inputs-sha256)

    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def _fields(a: LockedPackage, b: LockedPackage) -> tuple[str, ...]:
    out = [f for f in FILE_FIELDS if getattr(a, f) != getattr(b, f)]
    if (a.override_reason, a.override_ignores) != (b.override_reason, b.override_ignores):
        out.append("override")
    return tuple(out)


def lock_changes(old: Lock | None, new: Lock) -> LockChanges:
    """``new`` against ``old`` (None: no previous lock, so every package is added)."""
    if old is None:
        return LockChanges(previous=False, added=new.packages, inputs_changed=True)
    a, b = old.by_name(), new.by_name()
    changed = []
    for name in sorted(set(a) & set(b)):
        fields = _fields(a[name], b[name])
        if fields:
            changed.append(ChangedPackage(old=a[name], new=b[name], fields=fields))
    return LockChanges(
        previous=True,
        added=tuple(b[n] for n in sorted(set(b) - set(a))),
        removed=tuple(a[n] for n in sorted(set(a) - set(b))),
        changed=tuple(changed),
        inputs_changed=old.lock_inputs_sha256 != new.lock_inputs_sha256,
    )


# ------------------------------------------------------------------------------ the table


MOVED_FIELDS = frozenset({"url", "index_url"})  # the same file, found at another URL


def _moved(c: ChangedPackage) -> bool:
    """Only the URLs differ: the same file with the same sha256 from a mirror of its index."""
    return set(c.fields) <= MOVED_FIELDS


def moved_packages(changes: LockChanges) -> list[str]:
    """``name version`` of each package whose URLs alone changed (the same file through a
    mirror of its index): information, never drift."""
    return [f"{c.name} {c.new.version}" for c in changes.changed if _moved(c)]


def render_lock_changes(changes: LockChanges) -> list[str]:
    """The "what changed" summary printed after ``lock``: one row per distribution."""
    if not changes.previous:
        return [f"no previous lock: {len(changes.added)} packages locked for the first time"]
    if changes.empty():
        note = " (the manifest's lock inputs changed)" if changes.inputs_changed else ""
        return [f"changes against the previous lock: none{note}"]
    rows: list[tuple[str, ...]] = [("change", "package", "previous", "now", "what")]
    rows += [("added", str(p.name), "-", p.version, "") for p in changes.added]
    rows += [("removed", str(p.name), p.version, "-", "") for p in changes.removed]
    rows += [
        (
            "moved" if _moved(c) else "changed",
            c.name,
            c.old.version,
            c.new.version,
            "version" if "version" in c.fields else ", ".join(c.fields),
        )
        for c in changes.changed
    ]
    moved = sum(1 for c in changes.changed if _moved(c))
    counts = (
        f"{len(changes.added)} added, {len(changes.removed)} removed, "
        f"{len(changes.changed) - moved} changed"
    )
    if moved:
        counts += f", {moved} moved (the same files at other URLs)"
    return [f"changes against the previous lock: {counts}", *render_table(rows)]


# ------------------------------------------------------------------------------ --json


def package_json(p: LockedPackage) -> dict[str, Any]:
    return {
        "filename": p.filename,
        "group": p.group,
        "index": p.index,
        "index_url": p.index_url,
        "name": str(p.name),
        "sha256": p.sha256,
        "size": p.size,
        "url": p.url,
        "version": p.version,
    }


def lock_document(
    lock: Lock, changes: LockChanges, *, stack: str, lock_dir: str, check: bool, current: bool
) -> dict[str, Any]:
    """``build-image/lock/1``: the lock written (or checked) and what changed against the
    previous lock. ``current``: the previous lock equals the fresh resolve (what ``--check``
    asks; ``resolver.lockfile.diff_locks`` is empty)."""
    return document(
        "lock",
        {
            "changes": {
                "added": [package_json(p) for p in changes.added],
                "changed": [
                    {
                        "fields": list(c.fields),
                        "name": c.name,
                        "new": package_json(c.new),
                        "old": package_json(c.old),
                    }
                    for c in changes.changed
                ],
                "removed": [package_json(p) for p in changes.removed],
            },
            "check": check,
            "current": current,
            "lock_dir": lock_dir,
            "lock_inputs_changed": changes.inputs_changed,
            "lock_inputs_sha256": lock.lock_inputs_sha256,
            "packages": len(lock.packages),
            "previous_lock": changes.previous,
            "stack": stack,
            "target": lock.target.describe(),
            "written": not check,
        },
    )
