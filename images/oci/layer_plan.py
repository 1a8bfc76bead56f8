"""One layer's normalized entries, planned from its headers alone.

``read_headers`` reads every entry header of a layer (refusing a type a layer cannot hold, a
sparse file, or more than ``MAX_LAYER_ENTRIES``); ``held_entries`` keeps one entry per path
(the last, as extraction leaves it) less what ``DropRules`` drops; ``plan_layer`` then leaves
out what changes nothing over the layers below (``lower.LowerTree``) and orders the rest by
path, a hard link always after the entry carrying its data; ``tar_header`` is the header an
entry is written with (mtime clamped, owner names cleared, only xattrs and ACLs kept in pax).
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.errors import ImageLayoutError
from images.oci.archive import HINT_ARCHIVE
from images.oci.lower import WHITEOUT_MODE, XATTRS, FileHash, LowerTree, is_whiteout
from images.oci.tarstream import entry_key

MAX_LAYER_ENTRIES = 1_000_000

# files (a sparse one is refused apart), directories, links, devices, FIFOs
_LAYER_TYPES = frozenset(tarfile.REGULAR_TYPES) | {tarfile.DIRTYPE, tarfile.SYMTYPE}
_LAYER_TYPES |= {tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE}


@dataclass(frozen=True, kw_only=True)
class DropRules:
    """Which entries a normalized layer leaves out, by ``entry_key``: ``paths`` exactly;
    everything under each of ``prefixes`` (each ends with ``/``, so the directory itself
    stays); each of ``empty_dirs`` when it is a directory with nothing under it in the layer."""

    paths: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    empty_dirs: frozenset[str] = frozenset()

    @property
    def ident(self) -> str:
        """The rules as one string (a sha256 of their canonical form), for cache keys."""
        doc = {
            "empty_dirs": sorted(self.empty_dirs),
            "paths": sorted(self.paths),
            "prefixes": list(self.prefixes),
        }
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def select(self, entries: Mapping[str, tarfile.TarInfo]) -> set[str]:
        out = {k for k in entries if k in self.paths or k.startswith(self.prefixes)}
        empty = {k for k in self.empty_dirs if k in entries and entries[k].isdir()}
        if empty:
            for key in entries:
                empty -= {d for d in empty if key.startswith(d + "/")}
        return out | empty


DEFAULT_DROP = DropRules(
    paths=frozenset(
        {
            "var/log/dpkg.log",
            "var/log/alternatives.log",
            "var/cache/ldconfig/aux-cache",
            "var/cache/debconf/config.dat-old",
            "var/cache/debconf/templates.dat-old",
        }
    ),
    prefixes=("var/log/apt/",),
    empty_dirs=frozenset({"tmp/wheelhouse", "tmp/build", "tmp/sbom", "tmp/tools", "tmp/crates"}),
)


@dataclass(frozen=True)
class PlannedEntry:
    """One entry of a normalized layer: its path, the original header it takes its type,
    mode, owner, mtime and xattrs from, the original entry whose bytes it carries (regular
    files), and for a hard link the path it links to."""

    key: str
    source: tarfile.TarInfo
    data: tarfile.TarInfo | None
    link: str | None


@dataclass(frozen=True, kw_only=True)
class HeldLayer:
    """A layer's entries once read: by path (the last entry of each), less those dropped;
    and the paths dropped, sorted."""

    latest: Mapping[str, tarfile.TarInfo]
    held: Mapping[str, tarfile.TarInfo]
    dropped: tuple[str, ...]


def read_headers(layer: tarfile.TarFile, where: str) -> list[tarfile.TarInfo]:
    """Every entry header of ``layer``; refused at a type a layer cannot hold, a sparse
    file, or beyond ``MAX_LAYER_ENTRIES``."""
    members: list[tarfile.TarInfo] = []
    while (member := layer.next()) is not None:
        if len(members) >= MAX_LAYER_ENTRIES:
            raise ImageLayoutError(
                f"{where} has more than {MAX_LAYER_ENTRIES} entries", hint=HINT_ARCHIVE
            )
        if member.type not in _LAYER_TYPES:
            raise ImageLayoutError(
                f"{where}: entry {member.name[:200]!r} has tar type {member.type!r}, which a "
                "layer cannot hold",
                hint=HINT_ARCHIVE,
            )
        if member.issparse():
            raise ImageLayoutError(
                f"{where}: entry {member.name[:200]!r} is a sparse file, which a layer cannot hold",
                hint=HINT_ARCHIVE,
            )
        members.append(member)
    return members


def held_entries(members: Sequence[tarfile.TarInfo], drop: DropRules, where: str) -> HeldLayer:
    """One entry per path (the last one of the original wins), less what ``drop`` selects."""
    latest = {entry_key(m.name, where=where): m for m in members}
    dropped = drop.select(latest)
    held = {k: m for k, m in latest.items() if k not in dropped}
    return HeldLayer(latest=latest, held=held, dropped=tuple(sorted(dropped)))


def plan_layer(
    layer: HeldLayer, lower: LowerTree, where: str, sha256: FileHash
) -> list[PlannedEntry]:
    """The entries of the normalized layer, sorted by path: what the layer holds less what
    changes nothing over the layers below (``LowerTree.redundant``)."""
    redundant = lower.redundant(layer.held, sha256)
    kept = {k: m for k, m in layer.held.items() if k not in redundant}
    planned, groups = _hard_links(kept, layer.latest, where)
    planned += [
        PlannedEntry(key, m, m if m.isreg() else None, None)
        for key, m in kept.items()
        if not m.islnk() and key not in groups
    ]
    for target, links in groups.items():
        planned += _link_group(target, links, kept, layer.latest[target])
    planned.sort(key=lambda p: p.key)
    return planned


def _hard_links(
    kept: Mapping[str, tarfile.TarInfo], latest: Mapping[str, tarfile.TarInfo], where: str
) -> tuple[list[PlannedEntry], dict[str, list[str]]]:
    """The hard links whose target is not in the layer (kept as they are), and the others
    grouped by their target."""
    outside: list[PlannedEntry] = []
    groups: dict[str, list[str]] = {}
    for key, member in kept.items():
        if not member.islnk():
            continue
        target = entry_key(member.linkname, where=where)
        origin = latest.get(target)
        if origin is None or origin.islnk() or origin.isdir():
            outside.append(PlannedEntry(key, member, None, target))
        else:
            groups.setdefault(target, []).append(key)
    return outside, groups


def _link_group(
    target: str,
    links: Sequence[str],
    kept: Mapping[str, tarfile.TarInfo],
    origin: tarfile.TarInfo,
) -> list[PlannedEntry]:
    """The paths of one linked file: the first in sorted order carries the original's header
    and bytes (even when the original itself was dropped), the others link to it."""
    names = sorted([*links, target] if target in kept else links)
    carrier = names[0]
    return [
        PlannedEntry(carrier, origin, origin if origin.isreg() else None, None),
        *(
            PlannedEntry(name, origin if name == target else kept[name], None, carrier)
            for name in names[1:]
        ),
    ]


def tar_header(entry: PlannedEntry, clamp: int) -> tarfile.TarInfo:
    """The header ``entry`` is written with: its mtime at most ``clamp``."""
    source = entry.source
    info = tarfile.TarInfo(entry.key or ".")
    if entry.link is not None:
        info.type, info.linkname = tarfile.LNKTYPE, entry.link
    elif source.isreg():
        info.type, info.size = tarfile.REGTYPE, source.size
    else:
        info.type = source.type
        info.linkname = source.linkname if source.issym() else ""
    info.mode = source.mode & 0o7777
    info.uid, info.gid = source.uid, source.gid
    if is_whiteout(entry.key):
        info.mode, info.uid, info.gid = WHITEOUT_MODE, 0, 0
    info.uname = info.gname = ""
    info.mtime = min(int(source.mtime), clamp)
    if source.ischr() or source.isblk():
        info.devmajor, info.devminor = source.devmajor, source.devminor
    info.pax_headers = {k: v for k, v in sorted(source.pax_headers.items()) if k.startswith(XATTRS)}
    return info
