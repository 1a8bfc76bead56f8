"""What the layers below a layer leave, so that a layer says only what it changes.

Storage drivers write one change differently. overlay2 adds the parent directories of every
changed path (unchanged but for their mtime), an opaque whiteout in every directory a step
creates, and every file a step opened for writing, even when its bytes did not change (a copy
up); vfs adds none of these; their whiteout files have other modes. ``LowerTree`` tracks the
directories and regular files the layers below leave (path -> mode, owner, xattrs, and for a
file its size and sha256), so that a normalized layer leaves out what changes nothing once
the mtimes are clamped:

- a directory entry equal (mode, owner, xattrs) to the directory below;
- a regular file equal (mode, owner, xattrs, bytes) to the file below;
- an opaque whiteout (``.wh..wh..opq``) in a directory no layer below has.

Whiteout files are written with one mode and owner (``WHITEOUT_MODE``, root). The result is
the same filesystem but for the mtimes of what was left out, with the same digest from either
driver.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
WHITEOUT_MODE = 0o644
_XATTRS = ("SCHILY.xattr.", "LIBARCHIVE.xattr.", "SCHILY.acl.")

_Signature = tuple[int, int, int, tuple[tuple[str, str], ...]]


def is_whiteout(key: str) -> bool:
    return key.rpartition("/")[2].startswith(WHITEOUT)


def _signature(member: tarfile.TarInfo) -> _Signature:
    xattrs = tuple(sorted((k, v) for k, v in member.pax_headers.items() if k.startswith(_XATTRS)))
    return (member.mode & 0o7777, member.uid, member.gid, xattrs)


FileHash = Callable[[tarfile.TarInfo], str]
"""The sha256 (hex) of a regular file's bytes, read from the layer that holds it."""


@dataclass
class _File:
    """A regular file of the layers below: its signature, its size, and its sha256, asked of
    its layer only when a file above has the same signature and size (``hash``)."""

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


@dataclass
class LowerTree:
    """The directories and regular files of the layers applied so far, by ``entry_key``.
    A file's bytes are hashed only when a layer above has a twin of it, so the layers below
    (a base image of tens of GB among them) cost their headers, not their bytes."""

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
        for key in entries:
            parent, _, base = key.rpartition("/")
            if base == OPAQUE:
                self._remove_under(parent)
            elif base.startswith(WHITEOUT):
                gone = f"{parent}/{base[len(WHITEOUT) :]}" if parent else base[len(WHITEOUT) :]
                self.dirs.pop(gone, None)
                self.files.pop(gone, None)
                self._remove_under(gone)
        for key, member in entries.items():
            if is_whiteout(key):
                continue
            if member.isdir():
                self.dirs[key] = _signature(member)
                self.files.pop(key, None)
                continue
            self.dirs.pop(key, None)
            if member.isreg():
                self.files[key] = _File(_signature(member), member.size, member, sha256)
            else:
                self.files.pop(key, None)

    def _remove_under(self, directory: str) -> None:
        prefix = f"{directory}/" if directory else ""
        for table in (self.dirs, self.files):
            for key in [k for k in table if k.startswith(prefix) and k != directory]:
                del table[key]
