"""What differs between two images in OCI layouts: the configs key by key, and the layers
pairwise by position, file by file.

Two layers with the same digest are the same and are not read. Of two layers that differ,
both tars are streamed (gzip or plain, each blob checked against its digest as it is read);
only each entry's metadata is kept (type, mode, owner, mtime, size, link target and the
sha256 of a file's bytes), never its bytes. A path is reported with what differs about it:
``added``, ``removed``, ``type``, ``content``, ``mode``, ``owner``, ``mtime``, ``link``.
``ImageDiff.to_json`` is the whole result; ``render_text`` the lines people read, with at most
``TEXT_FILES_PER_LAYER`` paths per layer.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import itertools
import json
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from core.errors import ImageLayoutError
from images.oci.layout import (
    HINT_DAMAGED,
    Descriptor,
    find_manifest,
    manifest_parts,
    open_blob,
    read_json_blob,
)
from images.oci.tarstream import (
    CHUNK,
    BoundedTarInfo,
    entry_key,
    forget_members,
    refusing_tar_errors,
)

TEXT_FILES_PER_LAYER = 50
MAX_LAYER_ENTRIES = 1_000_000

_TYPES = {
    tarfile.DIRTYPE: "dir",
    tarfile.SYMTYPE: "symlink",
    tarfile.LNKTYPE: "hardlink",
    tarfile.CHRTYPE: "char",
    tarfile.BLKTYPE: "block",
    tarfile.FIFOTYPE: "fifo",
}


@dataclass(frozen=True, kw_only=True)
class ConfigChange:
    """A config key whose value differs: ``created``, ``config.Env``,
    ``config.Labels[NAME]``, ``history (length)``, ``history[I].created_by``; None where it is
    absent."""

    key: str
    a: Any
    b: Any

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class FileDiff:
    """A path that differs between two layers, how, and its size on each side (None where it
    is absent)."""

    path: str
    what: tuple[str, ...]
    a_size: int | None
    b_size: int | None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "what": [*self.what]}


@dataclass(frozen=True, kw_only=True)
class LayerDiff:
    """The layers at one position (``number``, 1 for the first) that differ: a layer only
    one image has (``added`` in b, ``removed`` from a), or two with the files that differ."""

    number: int
    a_digest: str | None
    b_digest: str | None
    files: tuple[FileDiff, ...] = ()

    @property
    def status(self) -> str:
        if self.a_digest is None:
            return "added"
        return "removed" if self.b_digest is None else "changed"

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a_digest,
            "b": self.b_digest,
            "files": [f.to_json() for f in self.files],
            "layer": self.number,
            "status": self.status,
        }


@dataclass(frozen=True, kw_only=True)
class ImageSide:
    """One of the two images compared."""

    layout: Path
    tag: str
    manifest_digest: str
    config_digest: str
    layers: tuple[str, ...]  # their digests

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config_digest,
            "layers": [*self.layers],
            "layout": str(self.layout),
            "manifest": self.manifest_digest,
            "tag": self.tag,
        }


@dataclass(frozen=True, kw_only=True)
class ImageDiff:
    """What differs between image ``a`` and image ``b``; nothing when they are the same."""

    a: ImageSide
    b: ImageSide
    config: tuple[ConfigChange, ...] = ()
    layers: tuple[LayerDiff, ...] = ()

    @property
    def same(self) -> bool:
        return self.a.manifest_digest == self.b.manifest_digest

    def to_json(self) -> dict[str, Any]:
        return {
            "a": self.a.to_json(),
            "b": self.b.to_json(),
            "config": [c.to_json() for c in self.config],
            "layers": [layer.to_json() for layer in self.layers],
            "same": self.same,
        }


@dataclass(frozen=True, slots=True)
class _Entry:
    kind: str  # "file", "dir", "symlink", "hardlink", "char", "block", "fifo"
    mode: int
    uid: int
    gid: int
    mtime: int
    size: int
    sha256: str | None  # of a file's bytes
    link: str  # a link's target


def diff_images(a: Path, a_tag: str, b: Path, b_tag: str) -> ImageDiff:
    """Compare the image tagged ``a_tag`` in the layout ``a`` with ``b_tag`` in ``b``."""
    side_a, config_a, layers_a = _open_side(a, a_tag)
    side_b, config_b, layers_b = _open_side(b, b_tag)
    if side_a.manifest_digest == side_b.manifest_digest:
        return ImageDiff(a=side_a, b=side_b)
    changed: list[LayerDiff] = []
    for i, (da, db) in enumerate(itertools.zip_longest(layers_a, layers_b)):
        if da is not None and db is not None and da.digest == db.digest:
            continue
        files: tuple[FileDiff, ...] = ()
        if da is not None and db is not None:
            files = _compare(_layer_entries(a, da, i + 1), _layer_entries(b, db, i + 1))
        changed.append(
            LayerDiff(
                number=i + 1,
                a_digest=da.digest if da else None,
                b_digest=db.digest if db else None,
                files=files,
            )
        )
    return ImageDiff(
        a=side_a,
        b=side_b,
        config=tuple(_config_changes(config_a, config_b)),
        layers=tuple(changed),
    )


def _open_side(
    layout: Path, tag: str
) -> tuple[ImageSide, Mapping[str, Any], tuple[Descriptor, ...]]:
    digest, manifest = find_manifest(layout, tag)
    config_desc, layers = manifest_parts(manifest, where=f"manifest {digest} in {layout}")
    config = read_json_blob(layout, config_desc, what="config")
    if not isinstance(config, dict):
        raise ImageLayoutError(
            f"config {config_desc.digest} in {layout} is not a JSON object", hint=HINT_DAMAGED
        )
    side = ImageSide(
        layout=layout,
        tag=tag,
        manifest_digest=digest,
        config_digest=config_desc.digest,
        layers=tuple(d.digest for d in layers),
    )
    return side, config, layers


def _changed(a: Mapping[str, Any], b: Mapping[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    for key in sorted(a.keys() | b.keys()):
        if key not in a or key not in b or a[key] != b[key]:
            yield key, a.get(key), b.get(key)


def _config_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[ConfigChange]:
    """The differing keys of two configs; ``rootfs`` is left to the layers."""
    changes: list[ConfigChange] = []
    for key, va, vb in _changed(a, b):
        if key == "config" and isinstance(va, dict) and isinstance(vb, dict):
            changes += _inner_changes(va, vb)
        elif key == "history" and isinstance(va, list) and isinstance(vb, list):
            changes += _history_changes(va, vb)
        elif key != "rootfs":
            changes.append(ConfigChange(key=key, a=va, b=vb))
    return changes


def _inner_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[ConfigChange]:
    changes: list[ConfigChange] = []
    for sub, sa, sb in _changed(a, b):
        if isinstance(sa, dict) and isinstance(sb, dict):  # Labels, ExposedPorts, Volumes
            changes += [
                ConfigChange(key=f"config.{sub}[{k}]", a=x, b=y) for k, x, y in _changed(sa, sb)
            ]
        else:
            changes.append(ConfigChange(key=f"config.{sub}", a=sa, b=sb))
    return changes


def _history_changes(a: list[Any], b: list[Any]) -> list[ConfigChange]:
    changes: list[ConfigChange] = []
    if len(a) != len(b):
        changes.append(ConfigChange(key="history (length)", a=len(a), b=len(b)))
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if isinstance(x, dict) and isinstance(y, dict):
            changes += [
                ConfigChange(key=f"history[{i}].{k}", a=vx, b=vy) for k, vx, vy in _changed(x, y)
            ]
        elif x != y:
            changes.append(ConfigChange(key=f"history[{i}]", a=x, b=y))
    return changes


def _layer_entries(layout: Path, desc: Descriptor, number: int) -> dict[str, _Entry]:
    """The metadata of every entry of a layer blob, by ``entry_key`` (the last one wins)."""
    where = f"layer {number} ({desc.digest}) in {layout}"
    compressed = desc.media_type.endswith(("+gzip", ".gzip"))
    if not compressed and not desc.media_type.endswith((".tar", "+tar")):
        raise ImageLayoutError(
            f"{where}: media type {desc.media_type} is not a tar or a gzip tar",
            hint="compare images whose layers are tar or tar+gzip",
        )
    entries: dict[str, _Entry] = {}
    with (
        open_blob(layout, desc.digest, size=desc.size) as blob,
        refusing_tar_errors(where, HINT_DAMAGED),
    ):
        buffered = io.BufferedReader(blob, CHUNK)
        stream = gzip.GzipFile(fileobj=buffered, mode="rb") if compressed else buffered
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=BoundedTarInfo) as tar:
            while (member := tar.next()) is not None:
                if len(entries) >= MAX_LAYER_ENTRIES:
                    raise ImageLayoutError(
                        f"{where} has more than {MAX_LAYER_ENTRIES} entries", hint=HINT_DAMAGED
                    )
                entries[entry_key(member.name, where=where)] = _entry(tar, member, where)
                forget_members(tar)
        while stream.read(CHUNK):  # the rest of the stream: gzip's own check, then the blob's
            pass
        blob.finish()
    return entries


def _entry(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> _Entry:
    digest = None
    if member.isreg():
        reader = tar.extractfile(member)
        assert reader is not None  # a regular file
        sha = hashlib.sha256()
        while chunk := reader.read(CHUNK):
            sha.update(chunk)
        digest = sha.hexdigest()
    link = ""
    if member.issym():
        link = member.linkname
    elif member.islnk():
        link = entry_key(member.linkname, where=where)
    return _Entry(
        kind="file" if member.isreg() else _TYPES.get(member.type, repr(member.type)),
        mode=member.mode & 0o7777,
        uid=member.uid,
        gid=member.gid,
        mtime=int(member.mtime),
        size=member.size if member.isreg() else 0,
        sha256=digest,
        link=link,
    )


def _differences(a: _Entry, b: _Entry) -> tuple[str, ...]:
    checks = (
        ("type", a.kind != b.kind),
        ("content", a.kind == b.kind == "file" and (a.size, a.sha256) != (b.size, b.sha256)),
        ("mode", a.mode != b.mode),
        ("owner", (a.uid, a.gid) != (b.uid, b.gid)),
        ("mtime", a.mtime != b.mtime),
        ("link", a.link != b.link),
    )
    return tuple(name for name, differs in checks if differs)


def _compare(a: Mapping[str, _Entry], b: Mapping[str, _Entry]) -> tuple[FileDiff, ...]:
    files: list[FileDiff] = []
    for path in sorted(a.keys() | b.keys()):
        ea, eb = a.get(path), b.get(path)
        if ea is None or eb is None:
            what: tuple[str, ...] = ("added",) if ea is None else ("removed",)
        else:
            what = _differences(ea, eb)
        if what:
            files.append(
                FileDiff(
                    path=path,
                    what=what,
                    a_size=ea.size if ea else None,
                    b_size=eb.size if eb else None,
                )
            )
    return tuple(files)


def _short(digest: str | None) -> str:
    return "none" if digest is None else digest[: len("sha256:") + 12] + "…"


def _value(value: Any) -> str:
    if value is None:
        return "absent"
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 120 else text[:119] + "…"


def _sizes(f: FileDiff) -> str:
    if f.a_size is None or f.b_size is None:
        return f"{f.b_size if f.a_size is None else f.a_size} bytes"
    return f"{f.a_size} bytes" if f.a_size == f.b_size else f"{f.a_size} -> {f.b_size} bytes"


def _layer_lines(layer: LayerDiff, limit: int) -> list[str]:
    if layer.status == "added":
        return [f"layer {layer.number} ({_short(layer.b_digest)}): only in b"]
    if layer.status == "removed":
        return [f"layer {layer.number} ({_short(layer.a_digest)}): only in a"]
    head = f"layer {layer.number} ({_short(layer.a_digest)} vs {_short(layer.b_digest)})"
    if not layer.files:
        return [f"{head}: no file differs (the tars differ in order or encoding only)"]
    lines = [f"{head}: {len(layer.files)} file(s) differ"]
    lines += [f"  {f.path}: {', '.join(f.what)} ({_sizes(f)})" for f in layer.files[:limit]]
    if len(layer.files) > limit:
        lines.append(f"  ... and {len(layer.files) - limit} more")
    return lines


def render_text(diff: ImageDiff, *, limit: int = TEXT_FILES_PER_LAYER) -> list[str]:
    """The lines people read: the images, each differing config key, each differing layer
    with at most ``limit`` of its differing paths."""
    a, b = diff.a, diff.b
    if diff.same:
        return [f"same image: {a.manifest_digest} ({a.layout}:{a.tag}, {b.layout}:{b.tag})"]
    lines = [
        f"a: {a.manifest_digest} ({a.layout}:{a.tag})",
        f"b: {b.manifest_digest} ({b.layout}:{b.tag})",
    ]
    lines += [f"config {c.key}: {_value(c.a)} -> {_value(c.b)}" for c in diff.config]
    for layer in diff.layers:
        lines += _layer_lines(layer, limit)
    return lines
