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
Their bytes are never rewritten: they cost their headers (what the layers above are compared
with), not their size.

**Layers already normalized are taken from the cache** (``layer_cache``), keyed by what
determines the output: the raw diff_ids of the layer and of every layer below it, its clamp
time, the drop rules and the compressor. A hit is re-hashed as it is placed in the layout.

The config keeps the OCI image config keys only, with every ``created`` set to ``epoch``; all
JSON is canonical (``layout.canonical_json``). The archive is read in bounded memory: each
layer in place (random access into the archive file), file data in chunks, headers capped
(``tarstream``). Each own layer's sha256 is checked against the config's ``diff_ids`` before
it is rewritten. Anything damaged or hostile is refused with an ``ImageLayoutError`` naming
the archive, the layer and the entry.
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
from images.oci.archive import HINT_ARCHIVE, SavedImage, open_saved_image
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
    write_layout,
)
from images.oci.lower import LowerTree
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
    """Normalize the ``docker save`` archive of one image into the OCI layout ``out``, its
    image tagged ``tag``; ``out`` is replaced whole, or left as it was on any failure."""
    _check_arguments(epoch, tag)
    how = how or Normalizing(drop=drop)
    with contextlib.ExitStack() as stack:
        outer, saved = stack.enter_context(open_saved_image(archive))
        writer = stack.enter_context(write_layout(out))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=how.workers or os.cpu_count()))
        job = _Job(
            saved=saved,
            outer=outer,
            how=how,
            clamps=layer_clamps(saved.config.get("history"), len(saved.layers), epoch),
            writer=writer,
            pool=pool,
            files=stack,
        )
        steps = layer_steps(saved.config.get("history"), len(saved.layers))
        layers = tuple(
            replace(layer, step=step) for layer, step in zip(job.run(), steps, strict=True)
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
    """The layers of one archive, in order: each read for its headers (what the layers
    above are compared with), then kept verbatim (the base's), taken from the cache, or
    normalized."""

    saved: SavedImage
    outer: tarfile.TarFile
    how: Normalizing
    clamps: tuple[int, ...]
    writer: LayoutWriter
    pool: Executor
    files: contextlib.ExitStack
    lower: LowerTree = field(default_factory=LowerTree)

    def where(self, index: int) -> str:
        member = self.saved.layers[index]
        return f"layer {index + 1} ({member.name}) of archive {self.saved.archive}"

    def run(self) -> tuple[LayerInfo, ...]:
        where = f"archive {self.saved.archive}"
        if self.how.base is not None:
            n_base = base_prefix(self.saved.diff_ids, self.how.base.diff_ids, where)
        else:
            n_base = base_prefix(self.saved.diff_ids, self.how.base_diff_ids, where)
        return tuple(self._layer(i, verbatim=i < n_base) for i in range(len(self.saved.layers)))

    def descriptor(self, index: int, layer: LayerInfo) -> Descriptor:
        if layer.origin == "base" and self.how.base is not None:
            return self.how.base.descriptors[index]
        return Descriptor(media_type=LAYER_MEDIA_TYPE, digest=layer.digest, size=layer.size)

    def _open(self, index: int) -> tarfile.TarFile:
        """The raw layer ``index``, opened for random access (closed with the job)."""
        src = self.outer.extractfile(self.saved.layers[index])
        assert src is not None  # a regular file
        return self.files.enter_context(
            tarfile.open(fileobj=src, mode="r:", tarinfo=BoundedTarInfo)
        )

    def _layer(self, index: int, *, verbatim: bool) -> LayerInfo:
        where = self.where(index)
        with refusing_tar_errors(where, HINT_ARCHIVE):
            layer = self._open(index)
            drop = DropRules() if verbatim else self.how.drop
            held = held_entries(read_headers(layer, where), drop, where)
            if verbatim:
                info = self._verbatim(index, layer, held)
            else:
                info = self._own(index, layer, held, where)
            self.lower.apply(held.held, _hasher(layer))
        return info

    def _verbatim(self, index: int, layer: tarfile.TarFile, held: HeldLayer) -> LayerInfo:
        diff_id = self.saved.diff_ids[index]
        base = self.how.base
        if base is not None:
            desc = base.descriptors[index]
            self.writer.add_blob_link(base.store, desc.digest, size=desc.size)
            return LayerInfo(
                digest=desc.digest,
                diff_id=diff_id,
                size=desc.size,
                entries=len(held.latest),
                dropped=(),
                clamp=0,
                origin="base",
            )
        key = layer_key(kind=VERBATIM, diff_id=diff_id, compressor=self.how.compressor.ident)
        cached = self._cached(key)
        if cached is None:
            cached = self._compress_raw(index, key, len(held.latest))
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

    def _compress_raw(self, index: int, key: str, entries: int) -> CachedLayer:
        """The raw layer ``index`` compressed as it is: its diff_id must be the config's."""
        where = self.where(index)
        src = self.outer.extractfile(self.saved.layers[index])
        assert src is not None
        spool = self.writer.spool()
        with spool.open("xb") as fh:
            out = LayerTarWriter(fh, where, HINT_ARCHIVE, self.how.compressor, self.pool)
            try:
                while chunk := src.read(CHUNK):
                    out.write_raw(chunk)
            except BaseException:
                out.abandon()
                raise
            diff_id, digest, size = out.close(end=False)
        _check_diff_id(diff_id, self.saved.diff_ids[index], where)
        layer = CachedLayer(digest=digest, diff_id=diff_id, size=size, entries=entries, dropped=())
        self._keep(key, layer, spool)
        return layer

    def _own(self, index: int, layer: tarfile.TarFile, held: HeldLayer, where: str) -> LayerInfo:
        clamp = self.clamps[index]
        key = layer_key(
            normalizer=NORMALIZER,
            chain=list(self.saved.diff_ids[: index + 1]),
            clamp=clamp,
            drop=self.how.drop.ident,
            compressor=self.how.compressor.ident,
        )
        cached = self._cached(key)
        origin = "cached"
        if cached is None:
            origin = "normalized"
            src = self.outer.extractfile(self.saved.layers[index])
            assert src is not None  # a regular file
            _check_diff_id(_sha256_stream(src), self.saved.diff_ids[index], where)
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
    """The sha256 (hex) of a regular file's bytes in ``layer``."""

    def sha256(member: tarfile.TarInfo) -> str:
        return _sha256_stream(layer.extractfile(member)).removeprefix("sha256:")

    return sha256


def _sha256_stream(src: IO[bytes] | None) -> str:
    digest = hashlib.sha256()
    if src is not None:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def _check_diff_id(actual: str, expected: str, where: str) -> None:
    if actual != expected:
        raise ImageLayoutError(
            f"{where}: its sha256 is {actual}, the image config says {expected}",
            hint=HINT_ARCHIVE,
        )
