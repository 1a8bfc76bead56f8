"""A ``docker save`` archive of one image, normalized into a reproducible OCI image layout.

Two builds of the same inputs differ in what records their own time and host: file mtimes,
owner names, the order of tar entries, log files, the config's ``created`` times. The
normalizer rewrites each of the image's own layers so that only the content remains
(``layer_plan``):

- entries sorted by path (``entry_key``: no leading ``./`` or ``/``), one entry per path (the
  last one of the original, as extraction would leave it), names written in that form;
- mtime clamped to the layer's time (``layer_times``: its stage's, never later than
  ``epoch``), uid and gid kept, user and group names cleared, no atime or ctime; pax headers
  only where the format needs them, and the xattrs and ACLs kept;
- whiteouts (with one mode and owner), symbolic links and hard links kept; a hard link always
  follows the entry carrying its data;
- what changes nothing over the layers below left out (``lower.LowerTree``), as storage
  drivers differ in it;
- entries matching ``DropRules`` left out (apt's and dpkg's logs, the ldconfig cache,
  debconf's ``*-old`` files, the build's empty mount points);
- gzip in blocks compressed on every core (``compress``), the same bytes whatever the count.

**The base image's layers are kept verbatim.** When the base's diff_ids are the first of the
image's, those layers keep the base's own blobs (``BaseLayers``: the digests and sizes its
registry serves, fetched once into the host's store), or, for a base known only to the local
daemon, the raw layer compressed once, as it is, and kept in the layer cache by its diff_id.
Their bytes are never rewritten: they cost their headers and a hash of each of their files
(what the layers above are compared with), not their size in scratch space.

**Layers already normalized are taken from the cache** (``layer_cache``), keyed by what
determines the output: the raw diff_ids of the layer and of every layer below it, its clamp
time, the drop rules and the compressor. A hit is re-hashed as it is placed in the layout.

The config keeps the OCI image config keys only, with every ``created`` set to ``epoch``; all
JSON is canonical (``layout.canonical_json``).

**The archive is read as the daemon streams it** (``save_stream``: once, in its own order,
each layer known by its sha256 among the image's diff_ids), never written whole:

- an own layer is spooled (uncompressed, in the layout's staging directory) and kept until the
  image is written, as the layers above it are compared with it;
- a base layer is spooled too, one at a time, and read as soon as it is whole: its headers, a
  sha256 of each of its regular files (``lower.hashed_layer``), and for a local base whose blob
  the layer cache lacks, its blob compressed from the spool; then the spool is deleted. Base
  layers arrive in any order, so what the layers above need of each (its changes and their
  hashes, no file data) waits until all have arrived and is applied in order before the first
  own layer is normalized. Memory is proportional to the base's entry count, not its bytes.

The scratch space is then the own layers uncompressed, their normalized blobs, and one base
layer. File data is read in chunks, headers capped (``tarstream``). Anything damaged or hostile
is refused with an ``ImageLayoutError`` naming the archive, the layer and the entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tarfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from core.errors import ImageLayoutError
from images.oci.archive import HINT_ARCHIVE, open_saved_image
from images.oci.archive import docker_archive_stream as docker_archive_stream  # noqa: PLC0414
from images.oci.base_layers import BaseLayers
from images.oci.compress import DEFAULT_COMPRESSOR, Compressor
from images.oci.layer_cache import CachedLayer, LayerCache, layer_key
from images.oci.layer_plan import (
    DEFAULT_DROP as DEFAULT_DROP,  # noqa: PLC0414
)
from images.oci.layer_plan import (
    DropRules,
    HeldLayer,
    held_entries,
    plan_layer,
    read_headers,
)
from images.oci.layer_plan import tar_header as tar_header  # noqa: PLC0414
from images.oci.layer_times import layer_clamps, layer_steps
from images.oci.layout import (
    CONFIG_MEDIA_TYPE,
    LAYER_MEDIA_TYPE,
    MANIFEST_MEDIA_TYPE,
    REF_NAME,
    Descriptor,
    LayoutWriter,
    check_digest,
    write_layout,
)
from images.oci.lower import LowerLayer, LowerTree, hashed_layer
from images.oci.save_stream import ArrivedLayer, StreamTimes, read_saved_stream
from images.oci.tarstream import CHUNK, BoundedTarInfo, LayerTarWriter, refusing_tar_errors

__all__ = ["DEFAULT_DROP", "DropRules", "docker_archive_stream"]

_CONFIG_KEYS: tuple[str, ...] = ("architecture", "author", "config", "history", "os")
_CONFIG_KEYS += ("os.features", "os.version", "variant")  # the keys of an OCI image config
_HISTORY_KEYS = ("author", "comment", "created_by", "empty_layer")
# what the classic builder writes of its own run into `config`: the build container's id,
# the parent image's id
_RUN_CONFIG_KEYS = frozenset({"Hostname", "Image"})
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_MAX_EPOCH = 8**11 - 1  # what a tar header's mtime field holds
VERBATIM = "verbatim"  # the layer cache's kind for a local base's layer compressed as it is
# the rules a normalized layer is written by (layer_plan, lower, tarstream): part of every
# cache key, so that a change of the rules never takes a layer normalized by the old ones
NORMALIZER = 2


@dataclass(frozen=True, kw_only=True)
class LayerInfo:
    """One layer of the normalized image: its blob (gzip) digest and size, its diff_id (the
    sha256 of the tar), how many entries it holds, which paths were dropped (sorted), the
    time its mtimes are clamped to, and where its blob came from: ``normalized`` (written
    now), ``cached`` (normalized before, taken from the layer cache) or ``base`` (the base
    image's, verbatim)."""

    digest: str
    diff_id: str
    size: int
    entries: int
    dropped: tuple[str, ...]
    clamp: int = 0
    origin: str = "normalized"
    step: str = ""  # the build step that wrote it, as the image's history says


@dataclass(frozen=True, kw_only=True)
class NormalizedImage:
    """The layout written, the tag its index gives the image, and the image's digests."""

    layout: Path
    tag: str
    manifest_digest: str
    config_digest: str
    layers: tuple[LayerInfo, ...]
    compressor: str = DEFAULT_COMPRESSOR.ident


@dataclass(frozen=True, kw_only=True)
class Normalizing:
    """How layers are normalized beyond the build's time: the drop rules, the compressor,
    the layer cache (None: none), the base image's layers kept verbatim (``base``: its blobs
    from its registry; else ``base_diff_ids``: a local base, each layer compressed as it is),
    and the threads that compress (None: one per core)."""

    drop: DropRules = DEFAULT_DROP
    compressor: Compressor = DEFAULT_COMPRESSOR
    cache: LayerCache | None = None
    base: BaseLayers | None = None
    base_diff_ids: tuple[str, ...] = ()
    workers: int | None = None


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


def base_prefix(image_diff_ids: Sequence[str], base_diff_ids: Sequence[str], where: str) -> int:
    """How many of the image's first layers are the base's: all of the base's, or refused."""
    n = len(base_diff_ids)
    if tuple(image_diff_ids[:n]) != tuple(base_diff_ids):
        raise ImageLayoutError(
            f"{where}: the image's first {n} layer(s) are not its base image's (the base's "
            f"diff_ids {', '.join(d[7:19] for d in base_diff_ids) or 'none'}; the image's "
            f"{', '.join(d[7:19] for d in image_diff_ids[:n]) or 'none'})",
            hint="the daemon built on another image than the base named: pull the base by "
            "its pinned digest and build again",
        )
    return n


def normalize_archive(
    archive: Path,
    out: Path,
    *,
    epoch: int,
    tag: str,
    drop: DropRules = DEFAULT_DROP,
    how: Normalizing | None = None,
) -> NormalizedImage:
    """Normalize the ``docker save`` archive file ``archive`` of one image into the OCI layout
    ``out``, its image tagged ``tag``; ``out`` is replaced whole, or left as it was on any
    failure. The image's diff_ids are read in place first (``open_saved_image``), then the
    file is read in order as a daemon streams it (``normalize_stream``)."""
    _check_arguments(epoch, tag)
    with open_saved_image(archive) as (_, saved):
        diff_ids = saved.diff_ids
    with archive.open("rb") as stream:
        return normalize_stream(
            stream,
            out,
            archive=str(archive),
            diff_ids=diff_ids,
            epoch=epoch,
            tag=tag,
            how=how or Normalizing(drop=drop),
        )


def normalize_stream(
    stream: IO[bytes],
    out: Path,
    *,
    archive: str,
    diff_ids: Sequence[str],
    epoch: int,
    tag: str,
    how: Normalizing | None = None,
    times: StreamTimes | None = None,
) -> NormalizedImage:
    """Normalize the ``docker save`` archive read from ``stream`` (in order, once; named
    ``archive`` in messages) of the image whose layers have ``diff_ids`` into the OCI layout
    ``out``, as ``normalize_archive``. ``times`` receives when the stream ended and how long
    the work on the layers that arrived meanwhile took."""
    _check_arguments(epoch, tag)
    how = how or Normalizing()
    where = f"archive {archive}"
    for i, diff_id in enumerate(diff_ids):
        check_digest(diff_id, where=f"{where}: the diff_id of layer {i + 1}")
    base_ids = how.base.diff_ids if how.base is not None else how.base_diff_ids
    n_base = base_prefix(diff_ids, base_ids, where)
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(write_layout(out))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=how.workers or os.cpu_count()))
        job = _Job(
            archive=archive,
            diff_ids=tuple(diff_ids),
            n_base=n_base,
            how=how,
            writer=writer,
            pool=pool,
            files=stack,
        )
        saved = read_saved_stream(
            stream,
            archive=archive,
            diff_ids=diff_ids,
            spool=writer.spool,
            on_layer=job.arrived,
            times=times,
        )
        history = saved.config.get("history")
        clamps = layer_clamps(history, len(saved.diff_ids), epoch)
        steps = layer_steps(history, len(saved.diff_ids))
        layers = tuple(
            replace(layer, step=step) for layer, step in zip(job.finish(clamps), steps, strict=True)
        )
        config = normalize_config(
            saved.config,
            epoch=epoch,
            diff_ids=[layer.diff_id for layer in layers],
            where=f"config {saved.config_name} in {where}",
        )
        config_desc = writer.add_json(config, CONFIG_MEDIA_TYPE)
        manifest = {
            "config": config_desc.to_json(),
            "layers": [job.descriptor(i, layer).to_json() for i, layer in enumerate(layers)],
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
        compressor=how.compressor.ident,
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


@dataclass
class _Job:
    """The layers of one archive. As they arrive: a base layer read (its headers, its files
    hashed), kept verbatim, then its spool deleted; an own layer's spool kept. Once all have
    arrived (``finish``), in order: the base layers' changes applied, then each own layer taken
    from the cache or normalized, and applied in turn (what the layers above are compared
    with)."""

    archive: str
    diff_ids: tuple[str, ...]
    n_base: int
    how: Normalizing
    writer: LayoutWriter
    pool: Executor
    files: contextlib.ExitStack
    lower: LowerTree = field(default_factory=LowerTree)
    names: dict[int, str] = field(default_factory=dict)  # the member that carried each layer
    base: dict[int, tuple[LayerInfo, LowerLayer]] = field(default_factory=dict)
    own: dict[str, ArrivedLayer] = field(default_factory=dict)  # spooled, by diff_id

    def where(self, index: int) -> str:
        return f"layer {index + 1} ({self.names[index]}) of archive {self.archive}"

    def arrived(self, layer: ArrivedLayer) -> None:
        """``layer`` read whole: a base layer's work done now, an own layer's spool kept."""
        indices = [i for i, d in enumerate(self.diff_ids) if d == layer.diff_id]
        for i in indices:
            self.names[i] = layer.name
        base = [i for i in indices if i < self.n_base]
        if base:
            self._read_base(layer, base)
        if len(base) < len(indices):
            self.own[layer.diff_id] = layer
        else:
            layer.spool.unlink()

    def _read_base(self, layer: ArrivedLayer, indices: list[int]) -> None:
        where = self.where(indices[0])
        with (
            refusing_tar_errors(where, HINT_ARCHIVE),
            tarfile.open(layer.spool, mode="r:", tarinfo=BoundedTarInfo) as tar,
        ):
            held = held_entries(read_headers(tar, where), DropRules(), where)
            changes = hashed_layer(held.held, _hasher(tar))
            for index in indices:
                self.base[index] = (self._verbatim(index, layer, len(held.latest)), changes)

    def finish(self, clamps: tuple[int, ...]) -> tuple[LayerInfo, ...]:
        """Every layer's blob in the layout, in order: what the manifest lists."""
        infos: list[LayerInfo] = []
        for index in range(self.n_base):
            info, changes = self.base.pop(index)
            self.lower.apply_layer(changes)
            infos.append(info)
        for index in range(self.n_base, len(self.diff_ids)):
            infos.append(self._own_layer(index, clamps[index]))
        return tuple(infos)

    def descriptor(self, index: int, layer: LayerInfo) -> Descriptor:
        if layer.origin == "base" and self.how.base is not None:
            return self.how.base.descriptors[index]
        return Descriptor(media_type=LAYER_MEDIA_TYPE, digest=layer.digest, size=layer.size)

    def _verbatim(self, index: int, layer: ArrivedLayer, entries: int) -> LayerInfo:
        diff_id = self.diff_ids[index]
        base = self.how.base
        if base is not None:
            desc = base.descriptors[index]
            self.writer.add_blob_link(base.store, desc.digest, size=desc.size)
            return LayerInfo(
                digest=desc.digest,
                diff_id=diff_id,
                size=desc.size,
                entries=entries,
                dropped=(),
                clamp=0,
                origin="base",
            )
        key = layer_key(kind=VERBATIM, diff_id=diff_id, compressor=self.how.compressor.ident)
        cached = self._cached(key)
        if cached is None:
            cached = self._compress_raw(index, layer, key, entries)
        return LayerInfo(
            digest=cached.digest,
            diff_id=diff_id,
            size=cached.size,
            entries=cached.entries,
            dropped=(),
            clamp=0,
            origin="base",
        )

    def _cached(self, key: str) -> CachedLayer | None:
        if self.how.cache is None:
            return None
        spool = self.writer.spool()
        found = self.how.cache.take(key, spool)
        if found is not None:
            self.writer.add_blob_file(spool, found.digest)
        return found

    def _keep(self, key: str, layer: CachedLayer, spool: Path) -> None:
        """The blob at ``spool`` into the cache (when there is one) and into the layout."""
        if self.how.cache is not None:
            self.how.cache.put(key, layer, spool)
        self.writer.add_blob_file(spool, layer.digest)

    def _compress_raw(self, index: int, layer: ArrivedLayer, key: str, entries: int) -> CachedLayer:
        """The raw layer ``index`` compressed as it is: its diff_id must be the config's."""
        where = self.where(index)
        spool = self.writer.spool()
        with layer.spool.open("rb") as src, spool.open("xb") as fh:
            out = LayerTarWriter(fh, where, HINT_ARCHIVE, self.how.compressor, self.pool)
            try:
                while chunk := src.read(CHUNK):
                    out.write_raw(chunk)
            except BaseException:
                out.abandon()
                raise
            diff_id, digest, size = out.close(end=False)
        _check_diff_id(diff_id, self.diff_ids[index], where)
        cached = CachedLayer(digest=digest, diff_id=diff_id, size=size, entries=entries, dropped=())
        self._keep(key, cached, spool)
        return cached

    def _own_layer(self, index: int, clamp: int) -> LayerInfo:
        """The own layer ``index`` from its spool (open until the job ends: the layers above
        may hash its files), taken from the cache or normalized, then applied."""
        where = self.where(index)
        with refusing_tar_errors(where, HINT_ARCHIVE):
            spool = self.own[self.diff_ids[index]].spool
            tar = tarfile.open(spool, mode="r:", tarinfo=BoundedTarInfo)  # noqa: SIM115 (closed with the job)
            self.files.enter_context(tar)
            held = held_entries(read_headers(tar, where), self.how.drop, where)
            info = self._own(index, tar, held, clamp, where)
            self.lower.apply(held.held, _hasher(tar))
        return info

    def _own(
        self, index: int, layer: tarfile.TarFile, held: HeldLayer, clamp: int, where: str
    ) -> LayerInfo:
        key = layer_key(
            normalizer=NORMALIZER,
            chain=list(self.diff_ids[: index + 1]),
            clamp=clamp,
            drop=self.how.drop.ident,
            compressor=self.how.compressor.ident,
        )
        cached = self._cached(key)
        origin = "cached"
        if cached is None:
            origin = "normalized"
            cached, spool = self._write(layer, held, clamp, where)
            self._keep(key, cached, spool)
        return LayerInfo(
            digest=cached.digest,
            diff_id=cached.diff_id,
            size=cached.size,
            entries=cached.entries,
            dropped=cached.dropped,
            clamp=clamp,
            origin=origin,
        )

    def _write(
        self, layer: tarfile.TarFile, held: HeldLayer, clamp: int, where: str
    ) -> tuple[CachedLayer, Path]:
        """The layer normalized into a spool file of the layout: what it is, and where."""
        planned = plan_layer(held, self.lower, where, _hasher(layer))
        spool = self.writer.spool()
        with spool.open("xb") as fh:
            out = LayerTarWriter(fh, where, HINT_ARCHIVE, self.how.compressor, self.pool)
            try:
                for entry in planned:
                    data = layer.extractfile(entry.data) if entry.data is not None else None
                    out.add(tar_header(entry, clamp), data)
            except BaseException:
                out.abandon()
                raise
            diff_id, digest, size = out.close()
        result = CachedLayer(
            digest=digest, diff_id=diff_id, size=size, entries=len(planned), dropped=held.dropped
        )
        return result, spool


def _hasher(layer: tarfile.TarFile) -> Callable[[tarfile.TarInfo], str]:
    """The sha256 (hex) of a regular file's bytes in ``layer`` (a layer file opened for
    random access), read where its header puts them: a file is never sparse in a layer
    (``read_headers``), and whoever reads ``layer`` seeks first."""
    src = layer.fileobj
    assert src is not None  # open for reading

    def sha256(member: tarfile.TarInfo) -> str:
        digest = hashlib.sha256()
        src.seek(member.offset_data)
        left = member.size
        while left:
            chunk = src.read(min(CHUNK, left))
            if not chunk:
                raise tarfile.ReadError(f"entry {member.name[:200]!r}: unexpected end of data")
            digest.update(chunk)
            left -= len(chunk)
        return digest.hexdigest()

    return sha256


def _check_diff_id(actual: str, expected: str, where: str) -> None:
    if actual != expected:
        raise ImageLayoutError(
            f"{where}: its sha256 is {actual}, the image config says {expected}",
            hint=HINT_ARCHIVE,
        )
