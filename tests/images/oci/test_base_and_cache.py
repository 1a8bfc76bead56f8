"""The normalizer at the image's scale: the base's layers kept byte for byte (its registry's
blobs, or a local base's layers compressed once as they are), each own layer clamped to its
stage's time, and layers already normalized taken from the layer cache, re-hashed."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from core.errors import ImageLayoutError
from images.oci.base_layers import read_base_store
from images.oci.layer_cache import LayerCache
from images.oci.layout import find_manifest, manifest_parts
from images.oci.normalize import NormalizedImage, Normalizing
from tests.support.saved_images import (
    EPOCH,
    LATE,
    config_with,
    directory,
    docker_save,
    file,
    layer_files,
    layer_tar,
    normalize_archive,
)

BASE = layer_tar([directory("etc"), file("etc/os-release", b"ID=debian\n", mtime=EPOCH - 99)])
OWN = [directory("opt"), file("opt/tool", b"x" * 70_000), file("opt/note", b"n")]
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
STAGE_TIME = EPOCH - 3600  # the stage's inputs are an hour older than the build's time


def _history(stage_time: int | None) -> list[dict[str, Any]]:
    arg = (
        []
        if stage_time is None
        else [{"created_by": f"ARG SOURCE_DATE_EPOCH={stage_time}", "empty_layer": True}]
    )
    return [
        {"created_by": "/bin/sh -c #(nop) ADD file:abc in /"},
        *arg,
        {"created_by": "RUN /bin/sh -c make # buildkit"},
    ]  # fmt: skip


def _archive(tmp_path: Path, *, stage_time: int | None = STAGE_TIME, own: Any = None) -> Path:
    config = config_with(history=_history(stage_time))
    return docker_save(tmp_path / "saved.tar", [BASE, own or OWN], config=config)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _store(tmp_path: Path) -> tuple[Path, str, dict[str, Any]]:
    """A base image as ``skopeo copy ... dir:`` and the host's store keep it: the registry's
    manifest (Docker's media types), its config and its gzip layer."""
    store = tmp_path / "base-store"
    blobs = store / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer = gzip.compress(BASE, mtime=1)  # the vendor's own compression, not ours
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [_sha(BASE)]}}).encode()
    for blob in (layer, config):
        (blobs / _sha(blob)[7:]).write_bytes(blob)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(config),
            "digest": _sha(config),
        },
        "layers": [{"mediaType": DOCKER_LAYER, "size": len(layer), "digest": _sha(layer)}],
    }
    raw = json.dumps(manifest, indent=3).encode()
    (store / "manifest.json").write_bytes(raw)
    return store, _sha(raw), manifest


def _layers(image: NormalizedImage) -> list[dict[str, Any]]:
    _, manifest = find_manifest(image.layout, image.tag)
    _, layers = manifest_parts(manifest, where="test")
    return [{"mediaType": d.media_type, "size": d.size, "digest": d.digest} for d in layers]


def _blob(image: NormalizedImage, index: int) -> Path:
    return image.layout / "blobs" / "sha256" / image.layers[index].digest[7:]


# ------------------------------------------------------------------------- the base verbatim


def test_the_base_layers_are_the_registry_blobs_as_they_are(tmp_path: Path) -> None:
    store, digest, registry = _store(tmp_path)
    base = read_base_store(store, reference=f"r.example/sdk@{digest}", digest=digest)
    image = normalize_archive(
        _archive(tmp_path), tmp_path / "out", epoch=EPOCH, tag="t", how=Normalizing(base=base)
    )
    [vendor] = registry["layers"]
    assert _layers(image)[0] == {
        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",  # Docker's type, mapped
        "size": vendor["size"],
        "digest": vendor["digest"],
    }
    assert [layer.origin for layer in image.layers] == ["base", "normalized"]
    assert image.layers[0].diff_id == _sha(BASE)  # the image id is unchanged by it
    kept = _blob(image, 0)
    assert kept.read_bytes() == gzip.compress(BASE, mtime=1)
    assert kept.stat().st_ino == (store / "blobs" / "sha256" / vendor["digest"][7:]).stat().st_ino


def test_an_image_not_built_on_the_base_is_refused(tmp_path: Path) -> None:
    store, digest, _ = _store(tmp_path)
    base = read_base_store(store, reference="r.example/sdk", digest=digest)
    other = docker_save(tmp_path / "other.tar", [[file("x")], OWN])
    with pytest.raises(ImageLayoutError) as info:
        normalize_archive(other, tmp_path / "out", epoch=EPOCH, tag="t", how=Normalizing(base=base))
    assert info.value.message == (
        f"archive {other}: the image's first 1 layer(s) are not its base image's (the base's "
        f"diff_ids {_sha(BASE)[7:19]}; the image's {_sha(layer_tar([file('x')]))[7:19]})"
    )
    assert not (tmp_path / "out").exists()


def test_a_store_whose_manifest_is_not_the_pinned_digest_is_refused(tmp_path: Path) -> None:
    store, digest, _ = _store(tmp_path)
    (store / "manifest.json").write_bytes(b"{}")
    with pytest.raises(ImageLayoutError) as info:
        read_base_store(store, reference="r.example/sdk", digest=digest)
    assert info.value.message == (
        f"base image r.example/sdk: {store}/manifest.json hashes to {_sha(b'{}')}, not to the "
        f"pinned {digest}"
    )


def test_a_store_with_a_short_blob_is_refused(tmp_path: Path) -> None:
    store, digest, registry = _store(tmp_path)
    blob = store / "blobs" / "sha256" / registry["layers"][0]["digest"][7:]
    blob.write_bytes(blob.read_bytes()[:-1])
    with pytest.raises(ImageLayoutError) as info:
        read_base_store(store, reference="r.example/sdk", digest=digest)
    assert info.value.message.endswith(
        f"blob {blob} is missing or not its {blob.stat().st_size + 1} bytes"
    )


def test_a_local_base_is_compressed_once_as_it_is(tmp_path: Path) -> None:
    cache = LayerCache(tmp_path / "cache", max_bytes=1 << 30)
    how = Normalizing(base_diff_ids=(_sha(BASE),), cache=cache)
    first = normalize_archive(_archive(tmp_path), tmp_path / "a", epoch=EPOCH, tag="t", how=how)
    assert gzip.decompress(_blob(first, 0).read_bytes()) == BASE  # not rewritten: verbatim
    assert first.layers[0].origin == "base"
    second = normalize_archive(_archive(tmp_path), tmp_path / "b", epoch=EPOCH, tag="t", how=how)
    assert second.manifest_digest == first.manifest_digest
    assert [layer.origin for layer in second.layers] == ["base", "cached"]


# ---------------------------------------------------------------------- each layer's own time


def test_a_later_build_time_keeps_a_layer_whose_stage_time_did_not_move(tmp_path: Path) -> None:
    archive = _archive(tmp_path)
    how = Normalizing(base_diff_ids=(_sha(BASE),))
    first = normalize_archive(archive, tmp_path / "a", epoch=EPOCH, tag="t", how=how)
    later = normalize_archive(archive, tmp_path / "b", epoch=EPOCH + 86400, tag="t", how=how)
    assert [x.digest for x in later.layers] == [x.digest for x in first.layers]
    assert later.config_digest != first.config_digest  # only the config's created moved
    assert [x.clamp for x in later.layers] == [0, STAGE_TIME]  # the base's is kept as it is
    assert set(layer_files(_blob(later, 1))) == {"opt/tool", "opt/note"}


def test_without_a_recorded_stage_time_a_layer_takes_the_build_time(tmp_path: Path) -> None:
    archive = _archive(tmp_path, stage_time=None)
    first = normalize_archive(archive, tmp_path / "a", epoch=EPOCH, tag="t")
    later = normalize_archive(archive, tmp_path / "b", epoch=EPOCH + 86400, tag="t")
    assert first.layers[1].digest != later.layers[1].digest  # LATE mtimes clamped to each
    assert [x.clamp for x in later.layers] == [EPOCH + 86400, EPOCH + 86400]


def test_a_stage_time_after_the_build_time_is_bounded_by_it(tmp_path: Path) -> None:
    archive = _archive(tmp_path, stage_time=LATE)
    image = normalize_archive(archive, tmp_path / "a", epoch=EPOCH, tag="t")
    assert [x.clamp for x in image.layers] == [EPOCH, EPOCH]


# ------------------------------------------------------------------------------ the cache


def test_a_rebuild_takes_its_layers_from_the_cache(tmp_path: Path) -> None:
    cache = LayerCache(tmp_path / "cache", max_bytes=1 << 30)
    how = Normalizing(cache=cache)
    first = normalize_archive(_archive(tmp_path), tmp_path / "a", epoch=EPOCH, tag="t", how=how)
    again = normalize_archive(_archive(tmp_path), tmp_path / "b", epoch=EPOCH, tag="t", how=how)
    assert [x.origin for x in first.layers] == ["normalized", "normalized"]
    assert [x.origin for x in again.layers] == ["cached", "cached"]
    assert again.manifest_digest == first.manifest_digest
    changed = [directory("opt"), file("opt/tool", b"y" * 70_000), file("opt/note", b"n")]
    other = normalize_archive(
        _archive(tmp_path, own=changed), tmp_path / "c", epoch=EPOCH, tag="t", how=how
    )
    assert [x.origin for x in other.layers] == ["cached", "normalized"]


def test_a_damaged_cache_entry_is_rebuilt_not_used(tmp_path: Path) -> None:
    notes: list[str] = []
    cache = LayerCache(tmp_path / "cache", max_bytes=1 << 30, note=notes.append)
    how = Normalizing(cache=cache)
    first = normalize_archive(_archive(tmp_path), tmp_path / "a", epoch=EPOCH, tag="t", how=how)
    good = _blob(first, 1).read_bytes()
    [entry] = [
        p for p in (tmp_path / "cache").glob("*/*/blob")
        if hashlib.sha256(p.read_bytes()).hexdigest() == first.layers[1].digest[7:]
    ]  # fmt: skip
    damaged = bytearray(entry.read_bytes())
    damaged[-9] ^= 0xFF  # the same size, one byte flipped
    entry.chmod(0o644)
    entry.write_bytes(bytes(damaged))
    again = normalize_archive(_archive(tmp_path), tmp_path / "b", epoch=EPOCH, tag="t", how=how)
    assert [x.origin for x in again.layers] == ["cached", "normalized"]
    assert again.manifest_digest == first.manifest_digest
    assert len(notes) == 1
    assert notes[0].startswith(f"note: layer cache entry {entry.parent}: its blob hashes to ")
    assert _blob(again, 1).read_bytes() == good
