"""Reading OCI layouts: the index, a tagged manifest, blobs checked as they are read, and
every refusal of a damaged or hostile layout with its message."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import ImageLayoutError
from images.oci.layout import (
    MAX_JSON_BYTES,
    Descriptor,
    blob_path,
    canonical_json,
    find_manifest,
    open_blob,
    read_index,
    write_layout,
)
from images.oci.normalize import NormalizedImage
from tests.support.saved_images import EPOCH, docker_save, file, normalize_archive


@pytest.fixture
def image(tmp_path: Path) -> NormalizedImage:
    archive = docker_save(tmp_path / "a.tar", [[file("a", b"1" * 3000)], [file("b", b"2")]])
    return normalize_archive(archive, tmp_path / "layout", epoch=EPOCH, tag="v1")


def _message(call: Callable[..., object], *args: object, **kw: object) -> str:
    with pytest.raises(ImageLayoutError) as caught:
        call(*args, **kw)
    assert caught.value.hint
    return caught.value.message


def _write_index(layout: Path, manifests: list[dict[str, object]]) -> None:
    (layout / "index.json").write_bytes(
        canonical_json({"manifests": manifests, "schemaVersion": 2})
    )


def test_the_index_and_the_tagged_manifest(image: NormalizedImage) -> None:
    [desc] = read_index(image.layout)
    assert desc.digest == image.manifest_digest
    assert desc.ref_name == "v1"
    assert desc.media_type == "application/vnd.oci.image.manifest.v1+json"
    digest, manifest = find_manifest(image.layout, "v1")
    assert digest == image.manifest_digest
    assert manifest["config"]["digest"] == image.config_digest
    assert [x["size"] for x in manifest["layers"]] == [x.size for x in image.layers]


def test_a_blob_is_checked_as_it_is_read(image: NormalizedImage) -> None:
    digest, size = image.layers[0].digest, image.layers[0].size
    with open_blob(image.layout, digest, size=size) as blob:
        assert len(blob.readall()) == size
    path = blob_path(image.layout, digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    with open_blob(image.layout, digest, size=size) as blob:
        assert len(blob.read(10)) == 10  # nothing is known before the end
        with pytest.raises(ImageLayoutError) as caught:
            blob.finish()
    assert caught.value.message == (
        f"blob {path}: its bytes hash to {actual}, not to its name {digest}"
    )
    assert caught.value.hint == (
        "the layout is damaged: write it again (normalize the image again), or copy it again "
        "from where it came from"
    )


def test_a_damaged_manifest_is_refused(image: NormalizedImage) -> None:
    path = blob_path(image.layout, image.manifest_digest)
    data = path.read_bytes()
    path.write_bytes(data.replace(b'"schemaVersion":2', b'"schemaVersion":3'))
    assert _message(find_manifest, image.layout, "v1").startswith(
        f"blob {path}: its bytes hash to sha256:"
    )


def test_a_blob_of_another_size_is_refused(image: NormalizedImage) -> None:
    digest = image.layers[1].digest
    assert _message(open_blob, image.layout, digest, size=1) == (
        f"blob {blob_path(image.layout, digest)} has {image.layers[1].size} bytes, its "
        "descriptor says 1"
    )


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:../../../../etc/passwd",
        "sha256:" + "a" * 63 + "/",
        "sha256:" + "A" * 64,
        "sha512:" + "a" * 64,
        "../oci-layout",
    ],
)
def test_a_digest_that_could_name_another_path_is_refused(
    image: NormalizedImage, digest: str
) -> None:
    assert _message(open_blob, image.layout, digest) == (
        f"{image.layout}: a blob: {digest!r} is not a sha256 digest (sha256: and 64 lowercase "
        "hex digits)"
    )


def test_an_index_naming_a_digest_with_dots_is_refused(image: NormalizedImage) -> None:
    _write_index(
        image.layout,
        [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": "sha256:../../index.json",
                "size": 2,
                "annotations": {"org.opencontainers.image.ref.name": "v1"},
            }
        ],
    )
    assert _message(find_manifest, image.layout, "v1") == (
        f"index {image.layout / 'index.json'}: manifests[0]: 'sha256:../../index.json' is not a "
        "sha256 digest (sha256: and 64 lowercase hex digits)"
    )


def test_a_blob_that_is_a_symbolic_link_is_refused(image: NormalizedImage, tmp_path: Path) -> None:
    digest = image.layers[1].digest
    path = blob_path(image.layout, digest)
    outside = tmp_path / "outside"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    assert _message(open_blob, image.layout, digest) == (
        f"blob {path} cannot be read: it is a symbolic link"
    )
    path.unlink()
    assert _message(open_blob, image.layout, digest) == f"blob {path} is missing"


def test_a_directory_without_oci_layout_is_refused(tmp_path: Path) -> None:
    assert _message(read_index, tmp_path) == (
        f"{tmp_path} is not an OCI image layout: it has no oci-layout file"
    )


def test_another_layout_version_is_refused(image: NormalizedImage) -> None:
    (image.layout / "oci-layout").write_text('{"imageLayoutVersion": "2.0.0"}')
    assert _message(read_index, image.layout) == (
        f"layout marker {image.layout / 'oci-layout'}: imageLayoutVersion is '2.0.0', not '1.0.0'"
    )
    (image.layout / "oci-layout").write_text("{")
    assert _message(read_index, image.layout) == (
        f"layout marker {image.layout / 'oci-layout'} is not valid JSON: Expecting property "
        "name enclosed in double quotes: line 1 column 2 (char 1)"
    )


def test_an_oversized_index_is_refused(image: NormalizedImage) -> None:
    with (image.layout / "index.json").open("wb") as fh:
        fh.truncate(MAX_JSON_BYTES + 1)
    assert _message(read_index, image.layout) == (
        f"index {image.layout / 'index.json'} is larger than {MAX_JSON_BYTES} bytes"
    )


def test_json_that_is_not_strict_is_refused(image: NormalizedImage) -> None:
    (image.layout / "index.json").write_text('{"manifests": [], "x": NaN}')
    assert _message(read_index, image.layout) == (
        f"index {image.layout / 'index.json'} is not valid JSON: NaN is not JSON"
    )
    (image.layout / "index.json").write_text("[" * 100_000 + "]" * 100_000)
    assert _message(read_index, image.layout) == (
        f"index {image.layout / 'index.json'} is not valid JSON: nested too deeply"
    )


def test_a_tag_the_index_does_not_have_is_refused(image: NormalizedImage) -> None:
    assert _message(find_manifest, image.layout, "v2") == (
        f"{image.layout}/index.json has no image tagged 'v2' (its tags: v1)"
    )


def test_a_descriptor_with_a_bad_size_is_refused(image: NormalizedImage) -> None:
    [desc] = read_index(image.layout)
    _write_index(image.layout, [{**desc.to_json(), "size": -1}])
    assert _message(read_index, image.layout) == (
        f"index {image.layout / 'index.json'}: manifests[0]: size -1 is not a number of bytes"
    )


def test_an_index_is_not_read_as_a_manifest(image: NormalizedImage) -> None:
    [desc] = read_index(image.layout)
    index_desc = Descriptor(
        media_type="application/vnd.oci.image.index.v1+json",
        digest=desc.digest,
        size=desc.size,
        annotations=desc.annotations,
    )
    _write_index(image.layout, [index_desc.to_json()])
    assert _message(find_manifest, image.layout, "v1") == (
        f"{image.layout}/index.json: 'v1' is a application/vnd.oci.image.index.v1+json, not an "
        "OCI image manifest"
    )


def _write_then_fail(out: Path) -> None:
    with write_layout(out) as writer:
        writer.add_json({"a": 1}, "application/json")
        raise RuntimeError("stop")


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        _write_then_fail(out)
    assert list(tmp_path.iterdir()) == []
    with write_layout(out) as writer:
        desc = writer.add_json({"b": 2}, "application/json")
        writer.commit([desc])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert json.loads((out / "index.json").read_bytes())["manifests"] == [desc.to_json()]
    assert blob_path(out, desc.digest).read_bytes() == b'{"b":2}'
