"""The host's cache of finished layer blobs: a rebuild whose layer is made of the same inputs
takes the blob made last time instead of making it again.

Layout under the cache root::

    ab/abcdef.../blob         one layer's gzip blob (read-only), under its key
    ab/abcdef.../layer.json   its record (``CachedLayer``); its mtime says when it was last used
    tmp/                      entries being added or removed
    .evict.lock               ``flock``-ed while entries are evicted

An entry is made in ``tmp/`` and renamed into place whole, and renamed out before it is
deleted: a run sees a whole entry or none (of two runs adding one key, the first one's is kept).
The cache is never trusted: ``take`` hashes the blob it placed, and a damaged entry is removed
and reported (``note``), the layer made again. After each ``put`` the entries used least
recently go until the blobs are at most ``max_bytes``. A blob is read-only, so that a layout's
blob linked to the cache is never written through by accident.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.digests import is_digest
from core.errors import ImageLayoutError
from core.fsutil import swap_lock
from images.oci.layout import canonical_json, read_json_file, shown_value
from images.oci.tarstream import CHUNK

DEFAULT_MAX_BYTES = 64 << 30  # 64 GiB of blobs
RECORD_SCHEMA = "build-image/layer-record/1"
STALE_SECONDS = 24 * 3600.0  # what a run that stopped mid-way left in tmp/ goes after a day
BLOB, RECORD = "blob", "layer.json"
HINT = "a damaged entry of the layer cache is removed, and the layer made again"

_KEY = re.compile(r"[0-9a-f]{64}")
_FIELDS = ("diff_id", "digest", "dropped", "entries", "schema", "size")
_NOFOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO never blocks


@dataclass(frozen=True, kw_only=True)
class CachedLayer:
    """What the cache keeps beside a layer's blob: the blob's digest (``sha256:<hex>``) and
    size, the diff_id (the sha256 of the tar), its number of entries, the paths dropped."""

    digest: str
    diff_id: str
    size: int
    entries: int
    dropped: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        doc = {name: getattr(self, name) for name in _FIELDS if name != "schema"}
        return {**doc, "dropped": list(self.dropped), "schema": RECORD_SCHEMA}

    @classmethod
    def from_json(cls, doc: object, *, path: Path) -> CachedLayer:
        """The record ``doc`` read from ``path``; refused, naming ``path``, unless it has
        exactly the fields ``to_json`` writes, each of its form."""
        problem = _problem(doc)
        if problem is not None:
            raise ImageLayoutError(f"layer record {path}: {problem}", hint=HINT)
        assert isinstance(doc, dict)  # _problem says so
        fields = {name: doc[name] for name in _FIELDS if name != "schema"}
        return cls(**{**fields, "dropped": tuple(doc["dropped"])})


def _problem(doc: object) -> str | None:
    """What is wrong with the record ``doc``; None when nothing is."""
    if not isinstance(doc, dict):
        return "it is not a JSON object"
    if doc.get("schema") != RECORD_SCHEMA:
        return f"its schema is {shown_value(doc.get('schema'))}, not {RECORD_SCHEMA!r}"
    if sorted(doc) != list(_FIELDS):
        return f"its keys are {shown_value(sorted(doc))}, not {list(_FIELDS)}"
    for name in ("digest", "diff_id"):
        if not isinstance(doc[name], str) or not is_digest(doc[name]):
            return f"its {name} {shown_value(doc[name])} is not a sha256 digest"
    for name in ("size", "entries"):
        if type(doc[name]) is not int or doc[name] < 0:
            return f"its {name} {shown_value(doc[name])} is not a count"
    if not isinstance(doc["dropped"], list) or not all(isinstance(p, str) for p in doc["dropped"]):
        return "its dropped is not a list of strings"
    return None


def layer_key(**parts: str | int | Sequence[str]) -> str:
    """The key of the layer that ``parts`` decide (e.g. ``chain=[diff_id, ...], clamp=epoch,
    drop=rules, compressor=name``): the sha256 (hex) of their canonical JSON. The same parts
    give the same key in any order; any other part, another key."""
    return hashlib.sha256(canonical_json(parts)).hexdigest()


@dataclass(frozen=True)
class _Entry:
    path: Path
    size: int  # of its blob
    used: int  # its record's mtime (ns): when it was added or last taken


class LayerCache:
    """The layer cache at ``root``, holding at most ``max_bytes`` of blobs (the caller reads
    any setting of it; ``DEFAULT_MAX_BYTES`` otherwise). ``note`` reports what it removed."""

    def __init__(
        self, root: Path, *, max_bytes: int, note: Callable[[str], None] | None = None
    ) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.note: Callable[[str], None] = note or (lambda _text: None)

    def entry_dir(self, key: str) -> Path:
        """Where the entry ``key`` lives: always under the root (a key is 64 hex digits)."""
        if not _KEY.fullmatch(key):
            raise ImageLayoutError(
                f"{shown_value(key)} is not a layer cache key (64 lowercase hex digits)",
                hint="a layer cache key is what layer_key() returns",
            )
        return self.root / key[:2] / key

    def take(self, key: str, dest: Path) -> CachedLayer | None:
        """The record of the entry ``key``, its blob placed at ``dest`` (where nothing may be)
        and checked there; None, and nothing at ``dest``, when there is no such entry or it is
        damaged (then removed and reported). A failure to write ``dest`` is raised."""
        entry = self.entry_dir(key)
        if not _is_dir(entry.parent) or not os.path.lexists(entry):
            return None  # put replaces what else is in a prefix's place
        if os.path.lexists(dest):
            raise FileExistsError(errno.EEXIST, "a layer is placed where nothing is", str(dest))
        layer, reason = self._record(entry)
        if layer is not None:
            try:
                reason = _place(entry / BLOB, dest, layer.size) or _check(dest, layer)
            except BaseException:
                dest.unlink(missing_ok=True)
                raise
        if layer is None or reason is not None:
            dest.unlink(missing_ok=True)
            self._drop(entry, reason or "")
            return None
        now = time.time_ns()
        with contextlib.suppress(OSError):  # a cache this run may not write is still read
            os.utime(entry / RECORD, ns=(now, now), follow_symlinks=False)
        return layer

    def _record(self, entry: Path) -> tuple[CachedLayer | None, str | None]:
        if not _is_dir(entry):
            return None, "it is not a directory"
        try:  # read_json_file would wait on a FIFO: only a regular file is opened
            if not stat.S_ISREG((entry / RECORD).lstat().st_mode):
                return None, "its record is not a regular file"
            layer = CachedLayer.from_json(
                read_json_file(entry / RECORD, what="layer record"), path=entry / RECORD
            )
        except ImageLayoutError as exc:
            return None, exc.message
        except FileNotFoundError:
            return None, "it has no record"
        except OSError as exc:
            return None, f"its record cannot be read: {exc.strerror}"
        if layer.size > self.max_bytes:
            return None, f"its record says {layer.size} bytes, more than the cache keeps"
        return layer, None

    def put(self, key: str, layer: CachedLayer, blob: Path) -> None:
        """Add the finished ``blob`` (a hard link when the filesystem allows, else a copy) and
        its record ``layer`` as the entry ``key``, unless one is there; then evict. Refused
        when ``layer`` is malformed or ``blob`` is not a regular file of ``layer.size`` bytes."""
        entry = self.entry_dir(key)
        problem = _problem(layer.to_json())
        if problem is not None:
            raise ImageLayoutError(f"layer {blob} is not cached: its record: {problem}", hint=HINT)
        if layer.size > self.max_bytes:
            self.note(
                f"note: layer {layer.digest} ({layer.size} bytes) is larger than the layer "
                f"cache {self.root} keeps ({self.max_bytes} bytes); not kept"
            )
            return
        if not os.path.lexists(entry):
            self._add(entry, layer, blob)
        self._evict(keep=entry)

    def _add(self, entry: Path, layer: CachedLayer, blob: Path) -> None:
        staging = Path(tempfile.mkdtemp(dir=self._tmp(), prefix=f"{entry.name}.", suffix=".new"))
        try:
            reason = _place(blob, staging / BLOB, layer.size)
            placed = (staging / BLOB).lstat().st_size if reason is None else -1
            if placed != layer.size:  # it shrank while it was copied
                raise ImageLayoutError(
                    f"layer {blob} is not cached: {reason or f'its blob has {placed} bytes'}",
                    hint="this is a bug of the tool: a layer's record is not its blob's",
                )
            (staging / BLOB).chmod(0o444)
            (staging / RECORD).write_bytes(canonical_json(layer.to_json()))
            now = time.time_ns()
            os.utime(staging / RECORD, ns=(now, now))
            staging.chmod(0o755)  # mkdtemp makes 0700
            if os.path.lexists(entry.parent) and not _is_dir(entry.parent):
                self._drop(entry.parent, "it is not a directory")  # a file or a link
            entry.parent.mkdir(exist_ok=True)
            try:
                staging.rename(entry)
            except OSError as exc:  # another run added it meanwhile: theirs is kept
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR):
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def _evict(self, *, keep: Path) -> None:
        """Under the eviction lock, remove damaged entries and what runs that stopped left in
        ``tmp/``, then the entries used least recently (never ``keep``) until the blobs left
        are at most ``max_bytes``."""
        with swap_lock(self.root / "evict"):  # the lock file is .evict.lock in the root
            entries, damaged = self._scan()
            for path, reason in damaged:
                self._drop(path, reason)
            now = time.time()
            for path in _children(self.root / "tmp"):
                with contextlib.suppress(OSError):
                    if now - path.lstat().st_mtime > STALE_SECONDS:
                        shutil.rmtree(path, ignore_errors=True)
            total, count, freed = sum(e.size for e in entries), 0, 0
            for e in sorted(entries, key=lambda e: (e.used, e.path.name)):
                if total <= self.max_bytes:
                    break
                if e.path != keep and self._remove(e.path):
                    total, count, freed = total - e.size, count + 1, freed + e.size
        if count:
            self.note(
                f"note: layer cache {self.root}: removed the {count} "
                f"{'entry' if count == 1 else 'entries'} used least recently ({freed} bytes) "
                f"to keep it within {self.max_bytes} bytes"
            )

    def _scan(self) -> tuple[list[_Entry], list[tuple[Path, str]]]:
        """The whole entries, and the damaged ones with what is wrong with each."""
        entries: list[_Entry] = []
        damaged: list[tuple[Path, str]] = []
        for prefix in _children(self.root):
            if re.fullmatch(r"[0-9a-f]{2}", prefix.name) and _is_dir(prefix):
                for path in _children(prefix):
                    if _KEY.fullmatch(path.name) and path.name.startswith(prefix.name):
                        found = _entry(path)
                        if isinstance(found, str):
                            damaged.append((path, found))
                        elif found is not None:
                            entries.append(found)
        return entries, damaged

    def _tmp(self) -> Path:
        directory = self.root / "tmp"
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def _remove(self, path: Path) -> bool:
        """Take ``path`` out of the cache at once (renamed into ``tmp/``), then delete it;
        False when it was gone already."""
        aside = Path(tempfile.mkdtemp(dir=self._tmp(), prefix=f"{path.name}.", suffix=".old"))
        try:
            path.rename(aside / path.name)
        except FileNotFoundError:
            return False
        finally:
            shutil.rmtree(aside, ignore_errors=True)
        return True

    def _drop(self, entry: Path, reason: str) -> None:
        """Remove the damaged ``entry`` and say why (nothing when another run removed it)."""
        try:
            if self._remove(entry):
                self.note(f"note: layer cache entry {entry}: {reason}; removed it from the cache")
        except OSError as exc:
            self.note(f"note: layer cache entry {entry}: {reason}; it cannot be removed: {exc}")


def _is_dir(path: Path) -> bool:
    """``path`` is a directory, not a symbolic link to one."""
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _children(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def _entry(path: Path) -> _Entry | str | None:
    """The entry at ``path``, or what is wrong with it; None when it is gone or unreadable."""
    if not _is_dir(path):
        return "it is not a directory" if os.path.lexists(path) else None
    try:
        blob, record = (path / BLOB).lstat(), (path / RECORD).lstat()
    except FileNotFoundError:
        return "it is not a whole entry (a blob and a record)" if os.path.lexists(path) else None
    except OSError:
        return None
    if not (stat.S_ISREG(blob.st_mode) and stat.S_ISREG(record.st_mode)):
        return "its blob or its record is not a regular file"
    return _Entry(path, size=blob.st_size, used=record.st_mtime_ns)


def _unreadable(exc: OSError) -> str:
    if isinstance(exc, FileNotFoundError):
        return "it has no blob"
    reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
    return f"its blob cannot be read: {reason}"


def _place(blob: Path, dest: Path, size: int) -> str | None:
    """Make ``dest`` (which must not exist) the file ``blob`` of ``size`` bytes: a hard link
    when the filesystem allows, else a copy. What is wrong with ``blob``, if anything; a
    failure to write ``dest`` is raised."""
    try:
        fd = os.open(blob, _NOFOLLOW)
    except OSError as exc:
        return _unreadable(exc)
    held = os.fstat(fd)
    if not stat.S_ISREG(held.st_mode):
        os.close(fd)
        return "its blob is not a regular file"
    with os.fdopen(fd, "rb") as src:
        if held.st_size != size:
            return f"its blob has {held.st_size} bytes, its record says {size}"
        with contextlib.suppress(OSError):
            os.link(blob, dest, follow_symlinks=False)
            placed = dest.lstat()
            if (placed.st_dev, placed.st_ino) == (held.st_dev, held.st_ino):
                return None
            dest.unlink()  # another file was linked: the one at blob changed since it was opened
        with dest.open("xb") as out:
            left = size
            while left > 0:
                try:
                    chunk = src.read(min(CHUNK, left))
                except OSError as exc:
                    return _unreadable(exc)
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
    return None


def _check(dest: Path, layer: CachedLayer) -> str | None:
    """What is wrong with the blob placed at ``dest``: not ``layer``'s size or sha256."""
    try:
        with os.fdopen(os.open(dest, _NOFOLLOW), "rb") as fh:
            digest, seen = hashlib.sha256(), 0
            while seen <= layer.size and (chunk := fh.read(min(CHUNK, layer.size + 1 - seen))):
                digest.update(chunk)
                seen += len(chunk)
    except OSError as exc:
        return _unreadable(exc)
    if seen != layer.size:
        return f"its blob has {seen} bytes, its record says {layer.size}"
    actual = "sha256:" + digest.hexdigest()
    if actual != layer.digest:
        return f"its blob hashes to {actual}, its record says {layer.digest}"
    return None
