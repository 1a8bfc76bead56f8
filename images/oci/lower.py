"""What the layers below a layer leave, so that a layer says only what it changes.

Storage drivers write one change differently: overlay2 adds the unchanged parents of every
changed path, an opaque whiteout in every directory a step creates, and every file a step
opened for writing (a copy up); vfs adds none of these; their whiteouts have other modes.
``LowerTree`` tracks the directories and regular files the layers below leave (mode, owner,
xattrs, and for a file its size and sha256), so that a normalized layer leaves out a directory
or a regular file equal to the one below, and an opaque whiteout in a directory no layer below
has. Whiteouts are written with one mode and owner (``WHITEOUT_MODE``, root): the same digest
from either driver.

A layer is applied from its headers (``LowerTree.apply``: a file is hashed only when a layer
above has a twin of it), or as a ``LowerLayer`` whose files were hashed as it was read
(``hashed_layer``), for a layer whose bytes are gone by the time it is applied.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
WHITEOUT_MODE = 0o644
XATTRS = ("SCHILY.xattr.", "LIBARCHIVE.xattr.", "SCHILY.acl.")  # the pax keys kept

_Signature = tuple[int, int, int, tuple[tuple[str, str], ...]]


def is_whiteout(key: str) -> bool:
    return key.rpartition("/")[2].startswith(WHITEOUT)


def _signature(member: tarfile.TarInfo) -> _Signature:
    xattrs = tuple(sorted((k, v) for k, v in member.pax_headers.items() if k.startswith(XATTRS)))
    return (member.mode & 0o7777, member.uid, member.gid, xattrs)


FileHash = Callable[[tarfile.TarInfo], str]
"""The sha256 (hex) of a regular file's bytes, read from the layer that holds it."""


@dataclass(slots=True)
class _File:
    """A regular file of the layers below: its signature, its size, and its sha256: known
    already (``hashed_layer``), or asked of its layer only when a file above has the same
    signature and size (``hash``)."""

    signature: _Signature
    size: int
    member: tarfile.TarInfo | None
    read: FileHash | None
    sha256: str = ""

    def hash(self) -> str:
        if not self.sha256 and self.read is not None and self.member is not None:
            self.sha256 = self.read(self.member)
            self.member = self.read = None  # the header and its layer are no longer needed
        return self.sha256


_Change = tuple[str, _Signature | _File | None]  # a directory, a regular file, anything else


@dataclass(frozen=True)
class LowerLayer:
    """What one layer changes in a ``LowerTree``: the keys of its whiteouts (opaque ones
    included), then each other entry by key with its directory signature, its file (a
    ``_File``), or None (a link, a device: it replaces what was below and equals nothing)."""

    removed: tuple[str, ...]
    changes: tuple[_Change, ...]


def _changes(
    entries: Mapping[str, tarfile.TarInfo], file: Callable[[tarfile.TarInfo], _File]
) -> LowerLayer:
    return LowerLayer(
        removed=tuple(key for key in entries if is_whiteout(key)),
        changes=tuple(
            (key, _signature(m) if m.isdir() else file(m) if m.isreg() else None)
            for key, m in entries.items()
            if not is_whiteout(key)
        ),
    )


def hashed_layer(entries: Mapping[str, tarfile.TarInfo], sha256: FileHash) -> LowerLayer:
    """What the layer ``entries`` changes, each of its regular files hashed now by ``sha256``
    (its layer's reader): it keeps no header and needs the layer no more."""
    return _changes(entries, lambda m: _File(_signature(m), m.size, None, None, sha256(m)))


@dataclass
class LowerTree:
    """The directories and regular files of the layers applied so far, by ``entry_key``.
    A file of a layer applied by ``apply`` is hashed only when a layer above has a twin of
    it; one of a ``hashed_layer`` (a layer whose bytes do not stay, such as a base layer read
    as it streams past) was hashed once, as the layer was read. Either costs memory for its
    headers' worth, never for its bytes."""

    dirs: dict[str, _Signature] = field(default_factory=dict)
    files: dict[str, _File] = field(default_factory=dict)

    def redundant(self, entries: Mapping[str, tarfile.TarInfo], sha256: FileHash) -> set[str]:
        """The keys of ``entries`` (one layer) that change nothing over the layers below;
        ``sha256`` reads a regular file's bytes in that layer (only of a file with a twin
        below)."""
        out: set[str] = set()
        for key, member in entries.items():
            parent, _, base = key.rpartition("/")
            if base == OPAQUE:
                if parent and parent not in self.dirs:
                    out.add(key)
            elif member.isdir():
                if self.dirs.get(key) == _signature(member):
                    out.add(key)
            elif member.isreg() and not is_whiteout(key):
                below = self.files.get(key)
                same = below is not None and (below.signature, below.size) == (
                    _signature(member),
                    member.size,
                )
                if same and below is not None and below.hash() == sha256(member):
                    out.add(key)
        return out

    def apply(self, entries: Mapping[str, tarfile.TarInfo], sha256: FileHash) -> None:
        """The layer ``entries`` applied: its whiteouts remove, then its entries set. A
        regular file is hashed by ``sha256`` (its layer's reader) when a layer above asks;
        a link or a device is never taken as equal to anything."""
        self.apply_layer(_changes(entries, lambda m: _File(_signature(m), m.size, m, sha256)))

    def apply_layer(self, layer: LowerLayer) -> None:
        for key in layer.removed:
            parent, _, base = key.rpartition("/")
            if base == OPAQUE:
                self._remove_under(parent)
            else:
                gone = f"{parent}/{base[len(WHITEOUT) :]}" if parent else base[len(WHITEOUT) :]
                self.dirs.pop(gone, None)
                self.files.pop(gone, None)
                self._remove_under(gone)
        for key, change in layer.changes:
            if isinstance(change, tuple):  # a directory's signature
                self.dirs[key] = change
                self.files.pop(key, None)
                continue
            self.dirs.pop(key, None)
            if change is None:
                self.files.pop(key, None)
            else:
                self.files[key] = change

    def _remove_under(self, directory: str) -> None:
        prefix = f"{directory}/" if directory else ""
        for table in (self.dirs, self.files):
            for key in [k for k in table if k.startswith(prefix) and k != directory]:
                del table[key]
