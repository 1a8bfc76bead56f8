"""A ``docker save`` archive of one image, normalized into a reproducible OCI image layout.

Two builds of the same inputs differ in what records their own time and host: file mtimes,
owner names, the order of tar entries, log files, the config's ``created`` times. The
normalizer rewrites each layer so that only the content remains:

- entries sorted by path (``entry_key``: no leading ``./`` or ``/``), one entry per path (the
  last one of the original, as extraction would leave it), names written in that form;
- mtime clamped to ``epoch`` (never later), uid and gid kept, user and group names cleared,
  no atime or ctime; pax headers only where the format needs them, and the xattrs
  (``SCHILY.xattr.*``, e.g. ``security.capability``) and ACLs kept;
- whiteouts (with one mode and owner), symbolic links and hard links kept; a hard link always
  follows the entry carrying its data (the first of the linked paths in sorted order);
- what changes nothing over the layers below left out (``lower.LowerTree``: a directory or a
  file as it already is, an opaque whiteout in a new directory), as storage drivers differ in
  it;
- entries matching ``DropRules`` left out (``DEFAULT_DROP``: apt's and dpkg's logs, the
  ldconfig cache, debconf's ``*-old`` files, the build's empty mount points);
- gzip at level 6 with no name and mtime 0.

The config keeps the OCI image config keys only, with every ``created`` set to ``epoch``; all
JSON is canonical (``layout.canonical_json``). So the same layers and config give the same
manifest digest, whichever daemon or run produced the archive.

The archive is read in bounded memory: each layer is read in place (random access into the
archive file), file data is copied in chunks, pax and GNU long-name headers are capped at
``MAX_META_BYTES``, JSON files at ``layout.MAX_JSON_BYTES``, entries per layer at
``MAX_LAYER_ENTRIES``. Each layer's sha256 is checked against the config's ``diff_ids``.
Anything damaged or hostile is refused with an ``ImageLayoutError`` naming the archive, the
layer and the entry.
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from core.errors import ImageLayoutError
from images.oci.archive import HINT_ARCHIVE, SavedImage, open_saved_image
from images.oci.archive import docker_archive_stream as docker_archive_stream  # noqa: PLC0414
from images.oci.layout import (
    CONFIG_MEDIA_TYPE,
    LAYER_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    REF_NAME,
    Descriptor,
    LayoutWriter,
    write_layout,
)
from images.oci.lower import WHITEOUT_MODE, LowerTree, is_whiteout
from images.oci.tarstream import (
    CHUNK,
    BoundedTarInfo,
    LayerTarWriter,
    entry_key,
    refusing_tar_errors,
)

MAX_LAYER_ENTRIES = 1_000_000

_LAYER_TYPES = frozenset(
    {
        tarfile.REGTYPE,
        tarfile.AREGTYPE,
        tarfile.CONTTYPE,
        tarfile.DIRTYPE,
        tarfile.SYMTYPE,
        tarfile.LNKTYPE,
        tarfile.CHRTYPE,
        tarfile.BLKTYPE,
        tarfile.FIFOTYPE,
    }
)
_KEPT_PAX = ("SCHILY.xattr.", "LIBARCHIVE.xattr.", "SCHILY.acl.")
_CONFIG_KEYS: tuple[str, ...] = ("architecture", "author", "config", "history", "os")
_CONFIG_KEYS += ("os.features", "os.version", "variant")  # the keys of an OCI image config
_HISTORY_KEYS = ("author", "comment", "created_by", "empty_layer")
# what the classic builder writes of its own run into `config`: the build container's id,
# the parent image's id
_RUN_CONFIG_KEYS = frozenset({"Hostname", "Image"})
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_MAX_EPOCH = 8**11 - 1  # what a tar header's mtime field holds


@dataclass(frozen=True, kw_only=True)
class DropRules:
    """Which entries a normalized layer leaves out, by ``entry_key``: ``paths`` exactly;
    everything under each of ``prefixes`` (each ends with ``/``, so the directory itself
    stays); each of ``empty_dirs`` when it is a directory with nothing under it in the layer."""

    paths: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()
    empty_dirs: frozenset[str] = frozenset()

    def select(self, entries: Mapping[str, tarfile.TarInfo]) -> set[str]:
        """The keys of ``entries`` to leave out."""
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


@dataclass(frozen=True, kw_only=True)
class LayerInfo:
    """One normalized layer: its blob (gzip) digest and size, its diff_id (the sha256 of the
    tar), how many entries it holds and which paths were dropped (sorted)."""

    digest: str
    diff_id: str
    size: int
    entries: int
    dropped: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class NormalizedImage:
    """The layout written, the tag its index gives the image, and the image's digests."""

    layout: Path
    tag: str
    manifest_digest: str
    config_digest: str
    layers: tuple[LayerInfo, ...]


def rfc3339(epoch: int) -> str:
    """``epoch`` (seconds since 1970) as RFC 3339 UTC, e.g. ``2024-05-01T12:00:00Z``."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_arguments(epoch: int, tag: str) -> None:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= _MAX_EPOCH:
        raise ImageLayoutError(
            f"epoch {epoch!r} is not a number of seconds since 1970",
            hint="pass the build's SOURCE_DATE_EPOCH",
        )
    if not _TAG_RE.fullmatch(tag):
        raise ImageLayoutError(
            f"tag {tag[:80]!r} is not a valid image tag",
            hint="use up to 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'",
        )


def normalize_archive(
    archive: Path, out: Path, *, epoch: int, tag: str, drop: DropRules = DEFAULT_DROP
) -> NormalizedImage:
    """Normalize the ``docker save`` archive of one image into the OCI layout ``out``, its
    image tagged ``tag``; ``out`` is replaced whole, or left as it was on any failure."""
    _check_arguments(epoch, tag)
    with open_saved_image(archive) as (outer, saved), write_layout(out) as writer:
        job = _LayerJob(epoch=epoch, drop=drop, lower=LowerTree())
        layers = tuple(
            _normalize_layer(outer, saved, i, job, writer) for i in range(len(saved.layers))
        )
        config = normalize_config(
            saved.config,
            epoch=epoch,
            diff_ids=[layer.diff_id for layer in layers],
            where=f"config {saved.config_name} in archive {archive}",
        )
        config_desc = writer.add_json(config, CONFIG_MEDIA_TYPE)
        manifest = {
            "config": config_desc.to_json(),
            "layers": [
                Descriptor(
                    media_type=LAYER_MEDIA_TYPE, digest=layer.digest, size=layer.size
                ).to_json()
                for layer in layers
            ],
            "mediaType": MANIFEST_MEDIA_TYPE,
            "schemaVersion": 2,
        }
        manifest_desc = writer.add_json(manifest, MANIFEST_MEDIA_TYPE)
        writer.commit(
            [
                Descriptor(
                    media_type=MANIFEST_MEDIA_TYPE,
                    digest=manifest_desc.digest,
                    size=manifest_desc.size,
                    annotations={REF_NAME: tag},
                )
            ]
        )
    return NormalizedImage(
        layout=out,
        tag=tag,
        manifest_digest=manifest_desc.digest,
        config_digest=config_desc.digest,
        layers=layers,
    )


def normalize_config(
    raw: Mapping[str, Any], *, epoch: int, diff_ids: Sequence[str], where: str = "image config"
) -> dict[str, Any]:
    """The OCI image config of ``raw`` (a Docker image config): its OCI keys only, every
    ``created`` at ``epoch``, no null and no per-run keys (``Hostname``, ``Image``) in
    ``config``, history entries with their author, comment, created_by and empty_layer only,
    and ``rootfs`` listing ``diff_ids``."""
    created = rfc3339(epoch)
    out: dict[str, Any] = {k: raw[k] for k in _CONFIG_KEYS if k in raw}
    out["created"] = created
    inner = out.pop("config", None)
    if inner is not None:
        if not isinstance(inner, dict):
            raise ImageLayoutError(f"{where}: config is not a JSON object", hint=HINT_ARCHIVE)
        out["config"] = {
            k: v for k, v in inner.items() if v is not None and k not in _RUN_CONFIG_KEYS
        }
    history = out.pop("history", None)
    if history is not None:
        out["history"] = _history(history, created, where)
    out["rootfs"] = {"diff_ids": list(diff_ids), "type": "layers"}
    return out


def _history(history: object, created: str, where: str) -> list[dict[str, Any]]:
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise ImageLayoutError(f"{where}: history is not a list of JSON objects", hint=HINT_ARCHIVE)
    return [{**{k: h[k] for k in _HISTORY_KEYS if k in h}, "created": created} for h in history]


# ------------------------------------------------------------------------------ the layers


@dataclass(frozen=True, kw_only=True)
class _LayerJob:
    epoch: int
    drop: DropRules
    lower: LowerTree  # the directories and files of the layers done so far


@dataclass(frozen=True)
class _Planned:
    """One entry of a normalized layer: its path, the original header it takes its type,
    mode, owner, mtime and xattrs from, the original entry whose bytes it carries (regular
    files), and for a hard link the path it links to."""

    key: str
    source: tarfile.TarInfo
    data: tarfile.TarInfo | None
    link: str | None


def _normalize_layer(
    outer: tarfile.TarFile, saved: SavedImage, index: int, job: _LayerJob, writer: LayoutWriter
) -> LayerInfo:
    member = saved.layers[index]
    where = f"layer {index + 1} ({member.name}) of archive {saved.archive}"
    spool = writer.spool()
    with refusing_tar_errors(where, HINT_ARCHIVE):
        src = outer.extractfile(member)
        assert src is not None  # a regular file
        _check_diff_id(src, saved.diff_ids[index], where)
        src.seek(0)
        with tarfile.open(fileobj=src, mode="r:", tarinfo=BoundedTarInfo) as layer:
            members = _read_layer(layer, where)
            planned, dropped, kept = _plan(members, job, where, lambda m: _sha256(layer, m))
            written: dict[str, str] = {}
            with spool.open("xb") as fh:
                out = LayerTarWriter(fh, where, HINT_ARCHIVE)
                try:
                    for entry in planned:
                        data = layer.extractfile(entry.data) if entry.data is not None else None
                        if (sha := out.add(_header(entry, job.epoch), data)) is not None:
                            written[entry.key] = sha
                except BaseException:
                    out.abandon()
                    raise
                diff_id, digest, size = out.close()
            job.lower.apply(kept, written)
    writer.add_blob_file(spool, digest)
    return LayerInfo(
        digest=digest, diff_id=diff_id, size=size, entries=len(planned), dropped=dropped
    )


def _check_diff_id(src: IO[bytes], expected: str, where: str) -> None:
    digest = hashlib.sha256()
    while chunk := src.read(CHUNK):
        digest.update(chunk)
    actual = "sha256:" + digest.hexdigest()
    if actual != expected:
        raise ImageLayoutError(
            f"{where}: its sha256 is {actual}, the image config says {expected}",
            hint=HINT_ARCHIVE,
        )


def _read_layer(layer: tarfile.TarFile, where: str) -> list[tarfile.TarInfo]:
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


def _plan(
    members: Sequence[tarfile.TarInfo],
    job: _LayerJob,
    where: str,
    sha256: Callable[[tarfile.TarInfo], str],
) -> tuple[list[_Planned], tuple[str, ...], dict[str, tarfile.TarInfo]]:
    """The entries of the normalized layer, sorted by path; the paths dropped; and what the
    layer holds once they are (what changes nothing over the layers below,
    ``LowerTree.redundant``, is left out of the entries too, unlisted)."""
    latest = {entry_key(m.name, where=where): m for m in members}  # the last one wins
    dropped = job.drop.select(latest)
    held = {k: m for k, m in latest.items() if k not in dropped}
    redundant = job.lower.redundant(held, sha256)
    kept = {k: m for k, m in held.items() if k not in redundant}
    planned, groups = _hard_links(kept, latest, where)
    planned += [
        _Planned(key, m, m if m.isreg() else None, None)
        for key, m in kept.items()
        if not m.islnk() and key not in groups
    ]
    for target, links in groups.items():
        planned += _link_group(target, links, kept, latest[target])
    planned.sort(key=lambda p: p.key)
    return planned, tuple(sorted(dropped)), held


def _sha256(layer: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    """The sha256 (hex) of a regular file's bytes in ``layer``."""
    digest = hashlib.sha256()
    reader = layer.extractfile(member)
    if reader is not None:
        while chunk := reader.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _hard_links(
    kept: Mapping[str, tarfile.TarInfo], latest: Mapping[str, tarfile.TarInfo], where: str
) -> tuple[list[_Planned], dict[str, list[str]]]:
    """The hard links whose target is not in the layer (kept as they are), and the others
    grouped by their target."""
    outside: list[_Planned] = []
    groups: dict[str, list[str]] = {}
    for key, member in kept.items():
        if not member.islnk():
            continue
        target = entry_key(member.linkname, where=where)
        origin = latest.get(target)
        if origin is None or origin.islnk() or origin.isdir():
            outside.append(_Planned(key, member, None, target))
        else:
            groups.setdefault(target, []).append(key)
    return outside, groups


def _link_group(
    target: str,
    links: Sequence[str],
    kept: Mapping[str, tarfile.TarInfo],
    origin: tarfile.TarInfo,
) -> list[_Planned]:
    """The paths of one linked file: the first in sorted order carries the original's header
    and bytes (even when the original itself was dropped), the others link to it."""
    names = sorted([*links, target] if target in kept else links)
    carrier = names[0]
    return [
        _Planned(carrier, origin, origin if origin.isreg() else None, None),
        *(
            _Planned(name, origin if name == target else kept[name], None, carrier)
            for name in names[1:]
        ),
    ]


def _header(entry: _Planned, epoch: int) -> tarfile.TarInfo:
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
    info.mtime = min(int(source.mtime), epoch)
    if source.ischr() or source.isblk():
        info.devmajor, info.devminor = source.devmajor, source.devminor
    info.pax_headers = {
        k: v for k, v in sorted(source.pax_headers.items()) if k.startswith(_KEPT_PAX)
    }
    return info
