"""Comparing two normalized images: config keys, layers by position, files by what differs,
the JSON document and the text people read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from core.errors import ImageLayoutError
from images.oci.diff import ConfigChange, FileDiff, ImageDiff, diff_images, render_text
from images.oci.layout import blob_path
from images.oci.normalize import NormalizedImage
from tests.support.saved_images import (
    BASE_CONFIG,
    EPOCH,
    Layers,
    config_with,
    directory,
    docker_save,
    file,
    normalize_archive,
    symlink,
)

BASE = [file("etc/base", b"same")]
LAYER_A = [
    directory("usr/local/lib", mtime=100),
    file("usr/local/lib/x.txt", b"twelve bytes", mtime=12),
    file("usr/local/lib/gone", b"bye"),
    file("usr/local/bin/tool", b"t", mode=0o755),
    file("usr/local/etc/owned", b"o"),
    symlink("usr/local/cur", "v1"),
    file("usr/local/kind", b"file"),
]
LAYER_B = [
    directory("usr/local/lib", mtime=100),
    file("usr/local/lib/x.txt", b"fourteen bytes", mtime=14),
    file("usr/local/lib/new.txt", b"new"),
    file("usr/local/bin/tool", b"t", mode=0o700),
    file("usr/local/etc/owned", b"o", uid=1000, gid=1000),
    symlink("usr/local/cur", "v2"),
    directory("usr/local/kind", mode=0o644),
]


def _image(tmp_path: Path, name: str, layers: Layers, **kw: Any) -> NormalizedImage:
    archive = docker_save(tmp_path / f"{name}.tar", layers, **kw)
    return normalize_archive(archive, tmp_path / name, epoch=EPOCH, tag="t")


@pytest.fixture
def pair(tmp_path: Path) -> tuple[NormalizedImage, NormalizedImage, ImageDiff]:
    a = _image(tmp_path, "a", [BASE, LAYER_A])
    labels = {"org.example.k": "w", "extra": "1"}
    history = [*BASE_CONFIG["history"], {"created_by": "RUN more", "created": "now"}]
    history[1] = {**history[1], "created_by": "RUN /bin/sh -c echo ho # buildkit"}
    b = _image(
        tmp_path,
        "b",
        [BASE, LAYER_B, [file("opt/more", b"m")]],
        config=config_with(config={**BASE_CONFIG["config"], "Labels": labels}, history=history),
    )
    return a, b, diff_images(a.layout, "t", b.layout, "t")


def test_each_differing_path_says_what_differs(
    pair: tuple[NormalizedImage, NormalizedImage, ImageDiff],
) -> None:
    a, b, diff = pair
    assert not diff.same
    assert diff.config == (
        ConfigChange(key="config.Labels[extra]", a=None, b="1"),
        ConfigChange(key="config.Labels[org.example.k]", a="v", b="w"),
        ConfigChange(key="history (length)", a=3, b=4),
        ConfigChange(
            key="history[1].created_by",
            a="RUN /bin/sh -c echo hi # buildkit",
            b="RUN /bin/sh -c echo ho # buildkit",
        ),
    )
    assert [(x.number, x.status) for x in diff.layers] == [(2, "changed"), (3, "added")]
    assert diff.layers[0].a_digest == a.layers[1].digest
    assert diff.layers[0].b_digest == b.layers[1].digest
    assert diff.layers[1].a_digest is None
    assert diff.layers[0].files == (
        FileDiff(path="usr/local/bin/tool", what=("mode",), a_size=1, b_size=1),
        FileDiff(path="usr/local/cur", what=("link",), a_size=0, b_size=0),
        FileDiff(path="usr/local/etc/owned", what=("owner",), a_size=1, b_size=1),
        FileDiff(path="usr/local/kind", what=("type",), a_size=4, b_size=0),
        FileDiff(path="usr/local/lib/gone", what=("removed",), a_size=3, b_size=None),
        FileDiff(path="usr/local/lib/new.txt", what=("added",), a_size=None, b_size=3),
        FileDiff(path="usr/local/lib/x.txt", what=("content", "mtime"), a_size=12, b_size=14),
    )


def test_the_text(pair: tuple[NormalizedImage, NormalizedImage, ImageDiff]) -> None:
    a, b, diff = pair
    la, lb, extra = a.layers[1].digest[:19], b.layers[1].digest[:19], b.layers[2].digest[:19]
    assert render_text(diff) == [
        f"a: {a.manifest_digest} ({a.layout}:t)",
        f"b: {b.manifest_digest} ({b.layout}:t)",
        'config config.Labels[extra]: absent -> "1"',
        'config config.Labels[org.example.k]: "v" -> "w"',
        "config history (length): 3 -> 4",
        'config history[1].created_by: "RUN /bin/sh -c echo hi # buildkit" -> "RUN /bin/sh -c '
        'echo ho # buildkit"',
        f"layer 2 ({la}… vs {lb}…): 7 file(s) differ",
        "  usr/local/bin/tool: mode (1 bytes)",
        "  usr/local/cur: link (0 bytes)",
        "  usr/local/etc/owned: owner (1 bytes)",
        "  usr/local/kind: type (4 -> 0 bytes)",
        "  usr/local/lib/gone: removed (3 bytes)",
        "  usr/local/lib/new.txt: added (3 bytes)",
        "  usr/local/lib/x.txt: content, mtime (12 -> 14 bytes)",
        f"layer 3 ({extra}…): only in b",
    ]
    assert render_text(diff, limit=2)[6:10] == [
        f"layer 2 ({la}… vs {lb}…): 7 file(s) differ",
        "  usr/local/bin/tool: mode (1 bytes)",
        "  usr/local/cur: link (0 bytes)",
        "  ... and 5 more",
    ]


def test_the_json_document_lists_every_path(
    pair: tuple[NormalizedImage, NormalizedImage, ImageDiff],
) -> None:
    a, b, diff = pair
    doc = json.loads(json.dumps(diff.to_json()))
    assert list(doc) == ["a", "b", "config", "layers", "same"]
    assert doc["a"] == {
        "config": a.config_digest,
        "layers": [x.digest for x in a.layers],
        "layout": str(a.layout),
        "manifest": a.manifest_digest,
        "tag": "t",
    }
    assert doc["same"] is False
    assert doc["config"][0] == {"a": None, "b": "1", "key": "config.Labels[extra]"}
    assert len(doc["layers"][0]["files"]) == 7
    assert doc["layers"][0]["files"][-1] == {
        "a_size": 12,
        "b_size": 14,
        "path": "usr/local/lib/x.txt",
        "what": ["content", "mtime"],
    }
    assert doc["layers"][1] == {
        "a": None,
        "b": b.layers[2].digest,
        "files": [],
        "layer": 3,
        "status": "added",
    }


def test_the_same_image_twice_is_the_same(tmp_path: Path) -> None:
    a = _image(tmp_path, "a", [BASE, LAYER_A])
    b = _image(tmp_path, "b", [BASE, list(reversed(LAYER_A))])
    diff = diff_images(a.layout, "t", b.layout, "t")
    assert diff.same
    assert (diff.config, diff.layers) == ((), ())
    assert render_text(diff) == [f"same image: {a.manifest_digest} ({a.layout}:t, {b.layout}:t)"]


def test_a_removed_layer_and_a_config_key(tmp_path: Path) -> None:
    a = _image(tmp_path, "a", [BASE, LAYER_A])
    b = _image(tmp_path, "b", [BASE], config=config_with(os="windows"))
    diff = diff_images(a.layout, "t", b.layout, "t")
    assert diff.config == (ConfigChange(key="os", a="linux", b="windows"),)
    assert [(x.number, x.status, x.b_digest) for x in diff.layers] == [(2, "removed", None)]
    assert render_text(diff)[-1] == f"layer 2 ({a.layers[1].digest[:19]}…): only in a"


def test_a_damaged_layer_is_refused(
    pair: tuple[NormalizedImage, NormalizedImage, ImageDiff],
) -> None:
    a, b, _ = pair
    path = blob_path(b.layout, b.layers[1].digest)
    data = bytearray(path.read_bytes())
    data[-8] ^= 0xFF  # the gzip trailer's CRC
    path.write_bytes(bytes(data))
    with pytest.raises(ImageLayoutError) as caught:
        diff_images(a.layout, "t", b.layout, "t")
    assert caught.value.message == (
        f"blob {path}: its bytes hash to sha256:{hashlib.sha256(data).hexdigest()}, not to its "
        f"name {b.layers[1].digest}"
    )
    path.write_bytes(bytes(data) + b"\0")
    with pytest.raises(ImageLayoutError) as grown:
        diff_images(a.layout, "t", b.layout, "t")
    assert grown.value.message == (
        f"blob {path} has {len(data) + 1} bytes, its descriptor says {len(data)}"
    )
