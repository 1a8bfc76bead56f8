"""A ``docker save`` archive of one image, normalized into a reproducible OCI image layout
(docs/design.md, "Reproducible images", says what and why).

Each of the image's own layers is rewritten so that only its content remains (``layer_plan``,
``lower``, ``layer_times``), gzipped in blocks on every core (``compress``), or taken from the
layer cache (``layer_cache``). The base image's layers are kept verbatim: its registry's blobs
(``BaseLayers``), or for a base known only to the local daemon the raw layer compressed once
and cached by its diff_id. The config keeps the OCI image config keys only, every ``created``
at ``epoch``.

The archive is read as the daemon streams it (``save_stream``): an own layer is spooled and kept
until the image is written (the layers above are compared with it); a base layer is read as it
arrives (its headers, a sha256 of each regular file, its blob for a local base the cache lacks)
and deleted, and what the layers above need of it waits until all base layers have arrived.
Anything damaged or hostile is refused with an ``ImageLayoutError`` naming the archive, the
layer and the entry.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tarfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from core.errors import ImageLayoutError
from images.oci.archive import HINT_ARCHIVE
from images.oci.base_layers import BaseLayers
from images.oci.compress import DEFAULT_COMPRESSOR, Compressor
from images.oci.layer_cache import CachedLayer, LayerCache, layer_key
from images.oci.layer_plan import (
    DEFAULT_DROP,
    DropRules,
    held_entries,
    plan_layer,
    read_headers,
    tar_header,
)
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
    """One layer of the normalized image (``CachedLayer``'s fields), the time its mtimes are
    clamped to, and where its blob came from: ``normalized`` (written now), ``cached`` (from the
    layer cache) or ``base`` (the base image's, verbatim)."""

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
    from its registry; else ``base_diff_ids``: a local base, each layer compressed as it is)."""

    drop: DropRules = DEFAULT_DROP
    compressor: Compressor = DEFAULT_COMPRESSOR
    cache: LayerCache | None = None
    base: BaseLayers | None = None
    base_diff_ids: tuple[str, ...] = ()


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
    ``out``, its image tagged ``tag``; ``out`` is replaced whole, or left as it was on any
    failure. ``times`` receives when the stream ended and how long the work on the layers that
    arrived meanwhile took."""
    _check_arguments(epoch, tag)
    how = how or Normalizing()
    where = f"archive {archive}"
    for i, diff_id in enumerate(diff_ids):
        check_digest(diff_id, where=f"{where}: the diff_id of layer {i + 1}")
    base_ids = how.base.diff_ids if how.base is not None else how.base_diff_ids
    n_base = base_prefix(diff_ids, base_ids, where)
    with contextlib.ExitStack() as stack:
        writer = stack.enter_context(write_layout(out))
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=os.cpu_count()))
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
        writer.commit([replace(manifest_desc, annotations={REF_NAME: tag})])
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


@dataclass
class _Job:
    """The layers of one archive, as they arrive (``arrived``), then in order (``finish``):
    see the module's docstring."""

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
            digest, size = desc.digest, desc.size
        else:
            key = layer_key(kind=VERBATIM, diff_id=diff_id, compressor=self.how.compressor.ident)
            cached = self._cached(key) or self._compress_raw(index, layer, key, entries)
            digest, size, entries = cached.digest, cached.size, cached.entries
        return LayerInfo(
            digest=digest, diff_id=diff_id, size=size, entries=entries, dropped=(), origin="base"
        )

    def _cached(self, key: str) -> CachedLayer | None:
        if self.how.cache is None:
            return None
        spool = self.writer.spool()
        found = self.how.cache.take(key, spool)
        if found is not None:
            self.writer.add_blob_file(spool, found.digest)
        return found

    def _compress_raw(self, index: int, layer: ArrivedLayer, key: str, entries: int) -> CachedLayer:
        """The raw layer ``index`` compressed as it is: its diff_id must be the config's."""

        def fill(out: LayerTarWriter) -> int:
            with layer.spool.open("rb") as src:
                while chunk := src.read(CHUNK):
                    out.write_raw(chunk)
            return entries

        return self._make(key, self.where(index), fill, end=False, expected=self.diff_ids[index])

    def _own_layer(self, index: int, clamp: int) -> LayerInfo:
        """The own layer ``index`` from its spool (open until the job ends: the layers above
        may hash its files), taken from the cache or normalized, then applied."""
        where = self.where(index)
        key = layer_key(
            normalizer=NORMALIZER,
            chain=list(self.diff_ids[: index + 1]),
            clamp=clamp,
            drop=self.how.drop.ident,
            compressor=self.how.compressor.ident,
        )
        with refusing_tar_errors(where, HINT_ARCHIVE):
            spool = self.own[self.diff_ids[index]].spool
            tar = tarfile.open(spool, mode="r:", tarinfo=BoundedTarInfo)  # noqa: SIM115 (closed with the job)
            self.files.enter_context(tar)
            held = held_entries(read_headers(tar, where), self.how.drop, where)
            cached, origin = self._cached(key), "cached"
            if cached is None:
                planned = plan_layer(held, self.lower, where, _hasher(tar))

                def fill(out: LayerTarWriter) -> int:
                    for entry in planned:
                        data = tar.extractfile(entry.data) if entry.data is not None else None
                        out.add(tar_header(entry, clamp), data)
                    return len(planned)

                cached, origin = self._make(key, where, fill, dropped=held.dropped), "normalized"
            self.lower.apply(held.held, _hasher(tar))
        return LayerInfo(**asdict(cached), clamp=clamp, origin=origin)

    def _make(
        self,
        key: str,
        where: str,
        fill: Callable[[LayerTarWriter], int],
        *,
        end: bool = True,
        expected: str = "",
        dropped: tuple[str, ...] = (),
    ) -> CachedLayer:
        """A layer blob that ``fill`` writes (returning its number of entries), its diff_id
        ``expected`` when that is given, put into the layout and the cache (when there is one)."""
        spool = self.writer.spool()
        with spool.open("xb") as fh:
            out = LayerTarWriter(fh, where, HINT_ARCHIVE, self.how.compressor, self.pool)
            try:
                entries = fill(out)
            except BaseException:
                out.abandon()
                raise
            diff_id, digest, size = out.close(end=end)
        if expected and diff_id != expected:
            raise ImageLayoutError(
                f"{where}: its sha256 is {diff_id}, the image config says {expected}",
                hint=HINT_ARCHIVE,
            )
        layer = CachedLayer(
            digest=digest, diff_id=diff_id, size=size, entries=entries, dropped=dropped
        )
        if self.how.cache is not None:
            self.how.cache.put(key, layer, spool)
        self.writer.add_blob_file(spool, layer.digest)
        return layer


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
