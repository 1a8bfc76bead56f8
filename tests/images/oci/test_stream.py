"""The normalizer reading ``docker save`` as the daemon streams it: either shape (dockerd 20.10's,
dockerd 25's OCI), in any member order, gives the image of the ordered archive; each layer is
known by its sha256; the base layers' spools go as soon as they are read, so the scratch space
holds the own layers and one base layer, never the whole archive; what is not the image's is
refused, naming the archive and the member."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import DockerError, ImageLayoutError
from images.engine.docker_build import _ChunkReader
from images.oci import normalize as normalize_module
from images.oci.base_layers import BaseLayers, read_base_store
from images.oci.layer_plan import plan_layer
from images.oci.layout import MAX_JSON_BYTES
from images.oci.normalize import NormalizedImage, Normalizing, normalize_stream
from images.oci.save_stream import StreamTimes
from tests.support.saved_images import (
    EPOCH,
    directory,
    docker_save,
    file,
    layer_tar,
    normalize_archive,
    read_layer,
    symlink,
)

BASE = [
    layer_tar(
        [
            directory("etc"),
            file("etc/os-release", b"ID=debian\n"),
            file("etc/x.conf", b"same"),
            directory("opt"),
            directory("opt/app"),
            file("usr/lib/libbig.so", b"b" * 600_000),
        ]
    ),
    layer_tar([directory("etc"), file("etc/y.conf", b"y"), file("opt/.wh.app")]),
    layer_tar([file("usr/lib/libother.so", b"c" * 500_000)]),
]
OWN = [
    layer_tar(
        [
            directory("etc"),
            file("etc/x.conf", b"same"),  # copied up unchanged: left out, by its hash below
            file("etc/y.conf", b"Y"),
            directory("opt/app"),
            file("opt/app/.wh..wh..opq"),
            file("var/log/dpkg.log", b"z"),
            file("opt/tool", b"t" * 60_000),
        ]
    ),
    layer_tar([file("etc/os-release", b"ID=debian\n"), file("etc/z.conf", b"z")]),
    layer_tar([symlink("bin/sh", "dash")]),
]
LAYERS = [*BASE, *OWN, OWN[2]]  # the last layer twice, as an image may hold one
SHAPES = ["20.10", "oci"]
ORDERS = ["lexical", "reversed", "shuffled"]


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


DIFF_IDS = [_sha(layer) for layer in LAYERS]
LOCAL_BASE = Normalizing(base_diff_ids=tuple(DIFF_IDS[: len(BASE)]))


def _stream(archive: Path, out: Path, diff_ids: list[str], **kw: Any) -> NormalizedImage:
    with archive.open("rb") as stream:
        return normalize_stream(
            stream, out, archive=str(archive), diff_ids=diff_ids, epoch=EPOCH, tag="t", **kw
        )


def _same(a: NormalizedImage, b: NormalizedImage) -> None:
    assert (a.manifest_digest, a.config_digest, a.layers) == (
        b.manifest_digest,
        b.config_digest,
        b.layers,
    )


@pytest.fixture(scope="module")
def ordered(tmp_path_factory: pytest.TempPathFactory) -> NormalizedImage:
    """The image of the archive whose members come in the order written, read in place."""
    root = tmp_path_factory.mktemp("ordered")
    archive = docker_save(root / "a.tar", LAYERS)
    return normalize_archive(archive, root / "out", epoch=EPOCH, tag="t", how=LOCAL_BASE)


# ----------------------------------------------------------------- shapes and orders


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("shape", SHAPES)
def test_either_shape_in_any_order_gives_the_ordered_image(
    tmp_path: Path, ordered: NormalizedImage, shape: str, order: str
) -> None:
    archive = docker_save(tmp_path / "a.tar", LAYERS, shape=shape, order=order)
    image = _stream(archive, tmp_path / "out", DIFF_IDS, how=LOCAL_BASE)
    _same(image, ordered)
    assert [x.origin for x in image.layers] == ["base"] * 3 + ["normalized"] * 4
    own = tmp_path / "out" / "blobs" / "sha256" / image.layers[3].digest[7:]
    assert "etc/x.conf" not in [m.name for m in read_layer(own)]  # its twin below was hashed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "out"]


@pytest.mark.parametrize("shape", SHAPES)
def test_an_archive_file_of_either_shape_normalizes_alike(
    tmp_path: Path, ordered: NormalizedImage, shape: str
) -> None:
    archive = docker_save(tmp_path / "a.tar", LAYERS, shape=shape, order="shuffled")
    image = normalize_archive(archive, tmp_path / "out", epoch=EPOCH, tag="t", how=LOCAL_BASE)
    _same(image, ordered)


def test_the_daemons_chunks_read_as_one_file_give_the_same_image(
    tmp_path: Path, ordered: NormalizedImage
) -> None:
    data = docker_save(tmp_path / "a.tar", LAYERS, shape="oci", order="shuffled").read_bytes()
    data += b"\0" * 10240  # the daemon may pad the tar: read, and left alone
    chunks = (data[i : i + 7777] for i in range(0, len(data), 7777))
    stream = io.BufferedReader(_ChunkReader(chunks, "docker save x"), 1 << 20)
    times = StreamTimes()
    started = time.monotonic()
    image = normalize_stream(
        stream,
        tmp_path / "out",
        archive="`docker save x`",
        diff_ids=DIFF_IDS,
        epoch=EPOCH,
        tag="t",
        how=LOCAL_BASE,
        times=times,
    )
    _same(image, ordered)
    assert stream.read() == b""  # the stream was read to its end
    assert started <= times.ended


def test_a_daemon_failing_while_it_streams_is_a_docker_error(tmp_path: Path) -> None:
    data = docker_save(tmp_path / "a.tar", LAYERS).read_bytes()

    def chunks() -> Iterator[bytes]:
        yield data[:100_000]
        raise OSError("Connection reset by peer")

    stream = io.BufferedReader(_ChunkReader(chunks(), "docker save x"), 1 << 20)
    with pytest.raises(DockerError) as caught:
        normalize_stream(
            stream, tmp_path / "out", archive="x", diff_ids=DIFF_IDS, epoch=EPOCH, tag="t"
        )
    assert caught.value.message == "docker save x: Connection reset by peer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]


# --------------------------------------------------------------------- the scratch space


def _spooled(tmp_path: Path) -> list[Path]:
    return sorted(tmp_path.glob(".out.*.new/.spool/*"))


def test_the_base_spools_are_gone_before_the_own_layers_are_normalized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[set[str]] = []

    def planning(*args: Any) -> Any:
        seen.append({_sha(path.read_bytes()) for path in _spooled(tmp_path)})
        return plan_layer(*args)

    monkeypatch.setattr(normalize_module, "plan_layer", planning)
    archive = docker_save(tmp_path / "a.tar", LAYERS, order="reversed")  # own layers first
    _stream(archive, tmp_path / "out", DIFF_IDS, how=LOCAL_BASE)
    assert seen == [set(DIFF_IDS[3:])] * 4  # each own layer's spool, and nothing of the base


def _store(tmp_path: Path) -> BaseLayers:
    """The base as the host's store keeps a registry's image (``skopeo copy ... dir:``)."""
    store = tmp_path / "store"
    blobs = store / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layers = [gzip.compress(layer, mtime=1) for layer in BASE]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": DIFF_IDS[:3]}}).encode()
    for blob in (*layers, config):
        (blobs / _sha(blob)[7:]).write_bytes(blob)
    gz = "application/vnd.docker.image.rootfs.diff.tar.gzip"
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "size": len(config),
            "digest": _sha(config),
        },
        "layers": [{"mediaType": gz, "size": len(x), "digest": _sha(x)} for x in layers],
    }
    raw = json.dumps(manifest).encode()
    (store / "manifest.json").write_bytes(raw)
    return read_base_store(store, reference=f"r.example/sdk@{_sha(raw)}", digest=_sha(raw))


@pytest.mark.parametrize("order", ["written", "reversed", "shuffled"])
def test_the_scratch_space_is_the_own_layers_and_one_base_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str
) -> None:
    """Spooled and written, at each layer: never more than the own layers (spooled, then
    normalized) and the largest base layer; less than the image's layers together."""
    peak: list[int] = []
    staging = tmp_path / "staging"
    staging.mkdir()

    def measure() -> None:
        files = [p for p in staging.glob(".out.*.new/**/*") if p.is_file()]
        peak.append(sum(p.stat().st_size for p in files if p.stat().st_nlink == 1))

    def wrap(name: str) -> None:
        original = getattr(normalize_module._Job, name)

        def measured(*args: Any) -> Any:
            measure()
            result = original(*args)
            measure()
            return result

        monkeypatch.setattr(normalize_module._Job, name, measured)

    wrap("arrived")
    wrap("_own_layer")
    archive = docker_save(tmp_path / "a.tar", LAYERS, order=order)
    image = _stream(archive, staging / "out", DIFF_IDS, how=Normalizing(base=_store(tmp_path)))
    own = sum(len(layer) for layer in OWN)  # the last layer, held twice, is spooled once
    assert max(peak) <= 2 * own + max(len(layer) for layer in BASE)
    assert max(peak) < sum(len(layer) for layer in set(LAYERS))
    assert [x.origin for x in image.layers] == ["base"] * 3 + ["normalized"] * 4
    assert not list(staging.glob(".out.*"))


# -------------------------------------------------------------------------- refusals


def _refused(tmp_path: Path, archive: Path, diff_ids: list[str]) -> ImageLayoutError:
    with pytest.raises(ImageLayoutError) as caught:
        _stream(archive, tmp_path / "out", diff_ids)
    assert sorted(p.name for p in tmp_path.iterdir()) == [archive.name]  # no spool left
    assert caught.value.hint is not None
    return caught.value


def _read(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        reader = tar.extractfile(name)
        assert reader is not None
        return reader.read()


def _layer_names(archive: Path) -> list[str]:
    names: list[str] = json.loads(_read(archive, "manifest.json"))[0]["Layers"]
    return names


@pytest.mark.parametrize("shape", SHAPES)
def test_a_layer_whose_bytes_are_not_its_diff_id_is_refused(tmp_path: Path, shape: str) -> None:
    layer, said = layer_tar([file("a", b"1")]), "sha256:" + "0" * 64
    archive = docker_save(tmp_path / "a.tar", [layer], diff_ids=[said], shape=shape)
    [name] = _layer_names(archive)
    assert _refused(tmp_path, archive, [said]).message == (
        f"layer 1 ({name}) of archive {archive}: its sha256 is {_sha(layer)}, the image "
        f"config says {said}"
    )


@pytest.mark.parametrize("shape", SHAPES)
def test_a_large_layer_whose_bytes_are_not_its_diff_id_is_refused_as_it_arrives(
    tmp_path: Path, shape: str
) -> None:
    layer, said = layer_tar([file("big", b"\1" * MAX_JSON_BYTES)]), "sha256:" + "0" * 64
    archive = docker_save(tmp_path / "a.tar", [layer], diff_ids=[said], shape=shape)
    [name] = _layer_names(archive)
    refused = _refused(tmp_path, archive, [said])
    assert refused.message == (
        f"archive {archive}: {name!r} ({len(layer)} bytes) hashes to {_sha(layer)}, which is "
        f"none of the image's diff_ids, and is larger than a JSON file may be "
        f"({MAX_JSON_BYTES} bytes)"
    )
    assert "containerd image store" in (refused.hint or "")


def test_a_member_neither_a_layer_nor_small_json_is_refused(tmp_path: Path) -> None:
    junk = b"\1" * (MAX_JSON_BYTES + 1)
    archive = docker_save(tmp_path / "a.tar", LAYERS, shape="oci", extra={"junk.bin": junk})
    assert _refused(tmp_path, archive, DIFF_IDS).message == (
        f"archive {archive}: 'junk.bin' ({len(junk)} bytes) hashes to {_sha(junk)}, which is "
        f"none of the image's diff_ids, and is larger than a JSON file may be "
        f"({MAX_JSON_BYTES} bytes)"
    )


def test_a_diff_id_that_never_arrives_is_refused(tmp_path: Path) -> None:
    layer, other = layer_tar([file("a")]), layer_tar([file("b")])
    # dockerd 20.10 saves the second as a link to the first: nothing carries `other`
    archive = docker_save(tmp_path / "a.tar", [layer, layer], diff_ids=[_sha(layer), _sha(other)])
    name = _layer_names(archive)[1]
    assert _refused(tmp_path, archive, [_sha(layer), _sha(other)]).message == (
        f"layer 2 ({name}) of archive {archive}: no file of the archive has the sha256 the "
        f"image config says, {_sha(other)}"
    )


def test_an_image_other_than_the_one_asked_for_is_refused(tmp_path: Path) -> None:
    layer, other = layer_tar([file("a")]), layer_tar([file("b")])
    archive = docker_save(tmp_path / "a.tar", [layer])
    config = json.loads(_read(archive, "manifest.json"))[0]["Config"]
    assert _refused(tmp_path, archive, [_sha(other)]).message == (
        f"config {config} in archive {archive}: its diff_ids ({_sha(layer)[7:19]}) are not "
        f"those of the image asked for ({_sha(other)[7:19]})"
    )


def test_a_layer_the_manifest_names_but_the_archive_lacks_is_refused(tmp_path: Path) -> None:
    layer = layer_tar([file("a")])
    archive = docker_save(tmp_path / "a.tar", [layer])
    manifest = json.loads(_read(archive, "manifest.json"))
    manifest[0]["Layers"] = ["nothere/layer.tar"]
    docker_save(archive, [layer], manifest=manifest, order="shuffled")
    assert _refused(tmp_path, archive, [_sha(layer)]).message == (
        f"archive {archive} has no file 'nothere/layer.tar'"
    )


def test_a_manifest_larger_than_json_may_be_is_refused_as_it_arrives(tmp_path: Path) -> None:
    layer = layer_tar([file("a")])
    archive = docker_save(tmp_path / "a.tar", [layer], manifest=["x" * MAX_JSON_BYTES])
    assert _refused(tmp_path, archive, [_sha(layer)]).message == (
        f"manifest.json in archive {archive} is larger than {MAX_JSON_BYTES} bytes"
    )
