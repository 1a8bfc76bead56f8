"""The normalizer on synthetic ``docker save`` archives: the layers it writes entry by entry,
the drop rules, the config, the digests two different runs of one build agree on, and what
it refuses."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from core.errors import ImageLayoutError
from images.oci import normalize as normalize_module
from images.oci.archive import docker_archive_stream
from images.oci.layer_plan import DEFAULT_DROP, DropRules, tar_header
from images.oci.layout import MAX_JSON_BYTES, find_manifest
from images.oci.normalize import NormalizedImage, normalize_config
from tests.support.saved_images import (
    BASE_CONFIG,
    EPOCH,
    LATE,
    Layers,
    config_with,
    directory,
    docker_save,
    file,
    hardlink,
    layer_files,
    layer_tar,
    normalize_archive,
    read_layer,
    symlink,
)

# security.capability of `setcap cap_net_bind_service=+ep`
CAP_BYTES = bytes.fromhex("0100000200200000000000000000000000000000")


def _blob(image: NormalizedImage, index: int = 0) -> Path:
    return image.layout / "blobs" / "sha256" / image.layers[index].digest.removeprefix("sha256:")


def _bytes(tar: tarfile.TarFile, name: str) -> bytes:
    reader = tar.extractfile(name)
    assert reader is not None
    return reader.read()


def _read(tar: tarfile.TarFile, name: str) -> Any:
    return json.loads(_bytes(tar, name))


def _normalize(tmp_path: Path, layers: Layers, name: str = "img", **kw: Any) -> NormalizedImage:
    archive = docker_save(tmp_path / f"{name}.tar", layers, **kw)
    return normalize_archive(archive, tmp_path / name, epoch=EPOCH, tag="t")


def test_entries_are_sorted_with_mtimes_clamped_and_owner_names_cleared(tmp_path: Path) -> None:
    capability = CAP_BYTES.decode("utf-8", "surrogateescape")
    image = _normalize(
        tmp_path,
        [
            [
                file("./usr/bin/zz", b"z", uname="builder", gname="staff", uid=1000, gid=50),
                directory("./usr/"),
                file(
                    "./usr/bin/ping",
                    b"\x7fELF",
                    mode=0o4755,
                    pax={
                        "SCHILY.xattr.security.capability": capability,
                        "atime": "1796236679.5",
                        "ctime": "1796236679.5",
                    },
                ),
                directory("./usr/bin/"),
                file("./usr/bin-old", b"o", mtime=1000),
                file("./etc/old.conf", b"c", mtime=EPOCH - 1),
                directory("./etc/", mtime=EPOCH + 1),
            ]
        ],
    )
    members = read_layer(_blob(image))
    assert [(m.name, m.mtime, m.uname, m.gname, m.uid, m.gid, m.mode) for m in members] == [
        ("etc", EPOCH, "", "", 0, 0, 0o755),
        ("etc/old.conf", EPOCH - 1, "", "", 0, 0, 0o644),
        ("usr", EPOCH, "", "", 0, 0, 0o755),
        ("usr/bin", EPOCH, "", "", 0, 0, 0o755),
        ("usr/bin-old", 1000, "", "", 0, 0, 0o644),  # by code point: "-" sorts before "/"
        ("usr/bin/ping", EPOCH, "", "", 0, 0, 0o4755),
        ("usr/bin/zz", EPOCH, "", "", 1000, 50, 0o644),
    ]
    ping = members[5]
    assert ping.pax_headers == {"SCHILY.xattr.security.capability": capability}
    assert image.layers[0].entries == 7
    assert image.layers[0].dropped == ()
    assert layer_files(_blob(image))["usr/bin/ping"] == b"\x7fELF"


def test_the_xattr_bytes_survive_as_they_were(tmp_path: Path) -> None:
    capability = CAP_BYTES.decode("utf-8", "surrogateescape")
    image = _normalize(
        tmp_path, [[file("bin/ping", b"x", pax={"SCHILY.xattr.security.capability": capability})]]
    )
    raw = gzip.decompress(_blob(image).read_bytes())
    assert b"SCHILY.xattr.security.capability=" + CAP_BYTES + b"\n" in raw
    assert b"atime" not in raw
    assert b"root" not in raw


def test_whiteouts_symlinks_and_hard_links_are_kept(tmp_path: Path) -> None:
    image = _normalize(
        tmp_path,
        [
            [
                file("usr/bin/uncompress", b"#!/bin/sh\n", mode=0o755, mtime=1000),
                hardlink("usr/bin/gunzip", "usr/bin/uncompress", mtime=1000),
                hardlink("usr/bin/zzz", "usr/bin/uncompress", mtime=1000),
                file("usr/bin/perl", b"perl", mode=0o755),
                hardlink("usr/bin/perl5.36.0", "usr/bin/perl"),
                hardlink("usr/bin/lower", "usr/lib/in-a-lower-layer"),
                symlink("usr/bin/sh", "dash"),
                file("etc/.wh.gone", mode=0o600),
                file("opt/.wh..wh..opq", mode=0),
            ]
        ],
    )
    members = read_layer(_blob(image))
    assert [(m.name, m.type, m.linkname, m.size, m.mode, m.mtime) for m in members] == [
        ("etc/.wh.gone", tarfile.REGTYPE, "", 0, 0o644, EPOCH),  # one mode for whiteouts
        # the first path in sorted order carries the bytes; the original links to it
        ("usr/bin/gunzip", tarfile.REGTYPE, "", 10, 0o755, 1000),
        ("usr/bin/lower", tarfile.LNKTYPE, "usr/lib/in-a-lower-layer", 0, 0o644, EPOCH),
        ("usr/bin/perl", tarfile.REGTYPE, "", 4, 0o755, EPOCH),
        ("usr/bin/perl5.36.0", tarfile.LNKTYPE, "usr/bin/perl", 0, 0o644, EPOCH),
        ("usr/bin/sh", tarfile.SYMTYPE, "dash", 0, 0o777, EPOCH),
        ("usr/bin/uncompress", tarfile.LNKTYPE, "usr/bin/gunzip", 0, 0o755, 1000),
        ("usr/bin/zzz", tarfile.LNKTYPE, "usr/bin/gunzip", 0, 0o644, 1000),
    ]
    assert layer_files(_blob(image))["usr/bin/gunzip"] == b"#!/bin/sh\n"


def test_what_changes_nothing_over_the_layers_below_is_left_out(tmp_path: Path) -> None:
    """As overlay2 writes a step (its directories' parents, opaque whiteouts in new
    directories) and as vfs writes it: the same layer."""
    below = [directory("etc"), directory("opt"), directory("tmp", mode=0o1777)]
    overlay = [
        directory("etc"),  # a parent, unchanged but for its mtime
        file("etc/x.conf", b"x"),
        directory("new"),
        file("new/.wh..wh..opq", mode=0),  # a new directory: nothing below to hide
        file("opt/.wh..wh..opq", mode=0),  # hides what the layers below have in opt
        directory("tmp", mode=0o755),  # changed: kept
    ]
    vfs = [
        file("etc/x.conf", b"x"),
        directory("new"),
        file("opt/.wh..wh..opq", mode=0o600),
        directory("tmp", mode=0o755),
    ]
    a = _normalize(tmp_path, [below, overlay], name="overlay")
    b = _normalize(tmp_path, [below, vfs], name="vfs")
    assert a.manifest_digest == b.manifest_digest
    assert [(m.name, m.mode) for m in read_layer(_blob(a, 1))] == [
        ("etc/x.conf", 0o644),
        ("new", 0o755),
        ("opt/.wh..wh..opq", 0o644),
        ("tmp", 0o755),
    ]


def test_a_file_copied_up_unchanged_is_left_out_and_a_changed_one_kept(tmp_path: Path) -> None:
    below = [
        directory("var"),
        file("var/config.dat", b"same", mtime=1000),
        file("var/other.dat", b"before"),
        file("var/mode.dat", b"m"),
    ]
    overlay = [
        file("var/config.dat", b"same"),  # opened for writing, bytes unchanged: a copy up
        file("var/other.dat", b"after!"),  # the same size, other bytes
        file("var/mode.dat", b"m", mode=0o600),
    ]
    image = _normalize(tmp_path, [below, overlay])
    assert [m.name for m in read_layer(_blob(image, 1))] == ["var/mode.dat", "var/other.dat"]


def test_a_directory_a_whiteout_removed_is_new_again(tmp_path: Path) -> None:
    layers = [
        [directory("opt"), directory("opt/app")],
        [file("opt/.wh.app")],
        [directory("opt/app"), file("opt/app/.wh..wh..opq")],
    ]
    image = _normalize(tmp_path, layers)
    assert [m.name for m in read_layer(_blob(image, 2))] == ["opt/app"]


def test_the_default_drop_rules(tmp_path: Path) -> None:
    image = _normalize(
        tmp_path,
        [
            [
                directory("./var/log/apt/"),
                file("./var/log/apt/history.log", b"Start-Date: 2026-12-02"),
                file("./var/log/apt/eipp.log.xz", b"xz"),
                file("./var/log/dpkg.log", b"2026-12-02 status installed"),
                file("./var/log/alternatives.log", b"update-alternatives 2026"),
                file("./var/log/faillog"),
                file("./var/cache/ldconfig/aux-cache", b"aux"),
                file("./var/cache/debconf/config.dat-old", b"old"),
                file("./var/cache/debconf/templates.dat-old", b"old"),
                file("./var/cache/debconf/config.dat", b"new"),
                directory("./tmp/"),
                directory("./tmp/build/"),
                directory("./tmp/wheelhouse/"),
                directory("./tmp/sbom/"),
                directory("./tmp/tools/"),
                directory("./tmp/crates/"),
                directory("./tmp/buildx/"),
            ],
            [directory("tmp/build"), file("tmp/build/kept.whl", b"w")],
        ],
    )
    assert image.layers[0].dropped == (
        "tmp/build",
        "tmp/crates",
        "tmp/sbom",
        "tmp/tools",
        "tmp/wheelhouse",
        "var/cache/debconf/config.dat-old",
        "var/cache/debconf/templates.dat-old",
        "var/cache/ldconfig/aux-cache",
        "var/log/alternatives.log",
        "var/log/apt/eipp.log.xz",
        "var/log/apt/history.log",
        "var/log/dpkg.log",
    )
    assert [m.name for m in read_layer(_blob(image, 0))] == [
        "tmp",
        "tmp/buildx",
        "var/cache/debconf/config.dat",
        "var/log/apt",
        "var/log/faillog",
    ]
    assert image.layers[1].dropped == ()  # a mount point with something in it stays
    assert [m.name for m in read_layer(_blob(image, 1))] == ["tmp/build", "tmp/build/kept.whl"]


def test_custom_drop_rules(tmp_path: Path) -> None:
    archive = docker_save(
        tmp_path / "a.tar", [[file("a/x"), file("b/y"), directory("c"), file("var/log/dpkg.log")]]
    )
    rules = DropRules(paths=frozenset({"a/x"}), prefixes=("b/",), empty_dirs=frozenset({"c"}))
    image = normalize_archive(archive, tmp_path / "out", epoch=EPOCH, tag="t", drop=rules)
    assert image.layers[0].dropped == ("a/x", "b/y", "c")
    assert [m.name for m in read_layer(_blob(image))] == ["var/log/dpkg.log"]
    assert "var/log/dpkg.log" in DEFAULT_DROP.paths


def test_two_runs_of_one_build_give_one_digest(tmp_path: Path) -> None:
    """Another entry order, other mtimes after the epoch, other owner names, another
    tar format, another daemon's config times and ids: the same image."""
    first = [
        directory("./x/"),
        file("./x/a", b"hi\n", mtime=LATE),
        symlink("./x/l", "a", mtime=LATE),
        file("./var/log/dpkg.log", b"run 1"),
    ]
    second = [
        file("x/a", b"hi\n", mtime=LATE + 61, uname="nobody"),
        file("var/log/dpkg.log", b"run 2, another time"),
        symlink("x/l", "a", mtime=LATE + 61),
        directory("x/", mtime=LATE + 61),
    ]
    one = _normalize(tmp_path, [first], "one")
    two = _normalize(
        tmp_path,
        [layer_tar(second, fmt=tarfile.GNU_FORMAT)],
        "two",
        config=config_with(
            created="2026-12-02T18:38:00.456786846Z",
            container="77aa",
            config={**BASE_CONFIG["config"], "Hostname": "77aa", "Image": "sha256:" + "2" * 64},
        ),
    )
    assert one.manifest_digest == two.manifest_digest
    assert one.config_digest == two.config_digest
    assert one.layers == two.layers
    changed = _normalize(tmp_path, [[*first[:1], file("./x/a", b"ho\n"), *first[2:]]], "three")
    assert changed.manifest_digest != one.manifest_digest
    assert changed.layers[0].diff_id != one.layers[0].diff_id


def test_the_config_keeps_the_oci_keys_at_the_epoch(tmp_path: Path) -> None:
    image = _normalize(tmp_path, [[file("a")]])
    _, manifest = find_manifest(image.layout, "t")
    config_path = image.layout / "blobs/sha256" / manifest["config"]["digest"][7:]
    assert json.loads(config_path.read_bytes()) == {
        "architecture": "amd64",
        "author": "someone",
        "config": {
            "Cmd": ["sh"],
            "Domainname": "",
            "Env": ["PATH=/usr/bin:/bin"],
            "Labels": {"org.example.k": "v"},
            "User": "",
        },
        "created": "2024-05-01T12:00:00Z",
        "history": [
            {"comment": "Imported from -", "created": "2024-05-01T12:00:00Z"},
            {
                "author": "me",
                "comment": "buildkit.dockerfile.v0",
                "created": "2024-05-01T12:00:00Z",
                "created_by": "RUN /bin/sh -c echo hi # buildkit",
                "empty_layer": False,
            },
            {
                "comment": "buildkit.dockerfile.v0",
                "created": "2024-05-01T12:00:00Z",
                "created_by": "LABEL org.example.k=v",
                "empty_layer": True,
            },
        ],
        "os": "linux",
        "rootfs": {"diff_ids": [image.layers[0].diff_id], "type": "layers"},
    }
    data = config_path.read_bytes()
    assert data == json.dumps(json.loads(data), sort_keys=True, separators=(",", ":")).encode()
    assert image.config_digest == "sha256:" + hashlib.sha256(data).hexdigest()


def test_normalize_config_refuses_a_config_that_is_not_an_object() -> None:
    with pytest.raises(ImageLayoutError) as caught:
        normalize_config({"config": [1]}, epoch=0, diff_ids=[], where="config c.json")
    assert caught.value.message == "config c.json: config is not a JSON object"


def test_the_layout_written(tmp_path: Path) -> None:
    image = _normalize(tmp_path, [[file("a", b"1")], [file("b", b"2")]])
    assert (image.layout / "oci-layout").read_bytes() == b'{"imageLayoutVersion":"1.0.0"}'
    assert json.loads((image.layout / "index.json").read_bytes()) == {
        "manifests": [
            {
                "annotations": {"org.opencontainers.image.ref.name": "t"},
                "digest": image.manifest_digest,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "size": (image.layout / "blobs/sha256" / image.manifest_digest[7:]).stat().st_size,
            }
        ],
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "schemaVersion": 2,
    }
    digest, manifest = find_manifest(image.layout, "t")
    assert digest == image.manifest_digest
    assert [layer["digest"] for layer in manifest["layers"]] == [x.digest for x in image.layers]
    assert {layer["mediaType"] for layer in manifest["layers"]} == {
        "application/vnd.oci.image.layer.v1.tar+gzip"
    }
    blobs = sorted(p.name for p in (image.layout / "blobs/sha256").iterdir())
    expected = {image.manifest_digest, image.config_digest, *(x.digest for x in image.layers)}
    assert blobs == sorted(d[7:] for d in expected)
    for layer in image.layers:
        data = _blob(image, image.layers.index(layer)).read_bytes()
        assert layer.size == len(data)
        assert data[4:8] == b"\0\0\0\0"  # gzip mtime 0
        assert data[3] == 0  # no file name in the gzip header


def test_normalizing_again_replaces_the_layout_whole(tmp_path: Path) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a", b"1")]])
    first = normalize_archive(archive, tmp_path / "out", epoch=EPOCH, tag="t")
    (tmp_path / "out" / "stray").write_text("left from before")
    second = normalize_archive(archive, tmp_path / "out", epoch=EPOCH + 1, tag="t")
    assert second.manifest_digest != first.manifest_digest
    assert not (tmp_path / "out" / "stray").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar", "out"]


def test_an_output_directory_that_is_not_a_layout_is_not_replaced(tmp_path: Path) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a")]])
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    with pytest.raises(ImageLayoutError) as caught:
        normalize_archive(archive, tmp_path / "home", epoch=EPOCH, tag="t")
    assert caught.value.message == (
        f"{tmp_path / 'home'} exists and is not an OCI image layout (no oci-layout file); "
        "it is not replaced"
    )
    assert (tmp_path / "home" / "notes.txt").read_text() == "mine"


def test_a_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    good = layer_tar([file("a")])
    archive = docker_save(
        tmp_path / "a.tar",
        [good, layer_tar([file("b")])],
        diff_ids=["sha256:" + hashlib.sha256(good).hexdigest(), "sha256:" + "0" * 64],
    )
    with pytest.raises(ImageLayoutError):
        normalize_archive(archive, tmp_path / "out", epoch=EPOCH, tag="t")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]


# -------------------------------------------------------------------------------- refusals


def _refusal(tmp_path: Path, archive: Path) -> str:
    with pytest.raises(ImageLayoutError) as caught:
        normalize_archive(archive, tmp_path / "out", epoch=EPOCH, tag="t")
    assert not (tmp_path / "out").exists()
    assert caught.value.hint is not None
    return caught.value.message


def test_a_layer_that_is_not_what_the_config_says_is_refused(tmp_path: Path) -> None:
    layer = layer_tar([file("a", b"1")])
    archive = docker_save(tmp_path / "a.tar", [layer], diff_ids=["sha256:" + "0" * 64])
    with tarfile.open(archive) as tar:
        name = next(m.name for m in tar if m.name.endswith("/layer.tar"))
    assert _refusal(tmp_path, archive) == (
        f"layer 1 ({name}) of archive {archive}: its sha256 is "
        f"sha256:{hashlib.sha256(layer).hexdigest()}, the image config says sha256:{'0' * 64}"
    )


def test_an_entry_leading_out_of_the_root_is_refused(tmp_path: Path) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a"), file("x/../../etc/passwd")]])
    message = _refusal(tmp_path, archive)
    assert message.endswith(
        ": entry 'x/../../etc/passwd' leads out of the layer's root (a '..' part)"
    )
    assert message.startswith("layer 1 (")


def test_an_oversized_pax_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a", pax={"comment": "x" * (1 << 20)})]])
    message = _refusal(tmp_path, archive)
    assert message.endswith(": a pax header of 1048593 bytes (at most 1048576 are read)")


def test_a_damaged_header_in_a_layer_is_refused(tmp_path: Path) -> None:
    layer = bytearray(layer_tar([file("a", b"1"), file("b", b"2")], fmt=tarfile.USTAR_FORMAT))
    layer[1024 + 148 : 1024 + 156] = b"0000000\0"  # the second header's checksum
    archive = docker_save(tmp_path / "a.tar", [bytes(layer)])
    assert _refusal(tmp_path, archive).endswith(": a damaged tar header (bad checksum)")


def test_a_device_type_a_layer_cannot_hold_is_refused(tmp_path: Path) -> None:
    archive = docker_save(
        tmp_path / "a.tar", [[file("a", type=tarfile.CONTTYPE), file("v", type=b"V")]]
    )
    assert _refusal(tmp_path, archive).endswith(
        ": entry 'v' has tar type b'V', which a layer cannot hold"
    )


def test_an_archive_of_two_images_is_refused(tmp_path: Path) -> None:
    entry = {"Config": "c.json", "RepoTags": [], "Layers": []}
    archive = docker_save(tmp_path / "a.tar", [[file("a")]], manifest=[entry, entry])
    assert _refusal(tmp_path, archive) == (
        f"manifest.json in archive {archive} lists 2 images, not one"
    )


def test_a_missing_layer_is_refused(tmp_path: Path) -> None:
    layer = layer_tar([file("a")])
    archive = tmp_path / "a.tar"
    docker_save(archive, [layer])
    with tarfile.open(archive) as tar:
        manifest = _read(tar, "manifest.json")
    manifest[0]["Layers"] = ["nothere/layer.tar"]
    docker_save(archive, [layer], manifest=manifest)
    assert _refusal(tmp_path, archive) == f"archive {archive} has no file 'nothere/layer.tar'"


def test_a_file_that_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(b"not a tar at all" * 100)
    assert (
        _refusal(tmp_path, archive) == f"archive {archive}: a damaged tar header (invalid header)"
    )


def test_an_oversized_manifest_is_refused(tmp_path: Path) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a")]], manifest=["x" * MAX_JSON_BYTES])
    assert _refusal(tmp_path, archive) == (
        f"manifest.json in archive {archive} is larger than {MAX_JSON_BYTES} bytes"
    )


def test_a_config_that_is_not_json_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in (
            ("c.json", b"{nope"),
            ("manifest.json", b'[{"Config":"c.json","Layers":[]}]'),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert _refusal(tmp_path, archive) == (
        f"c.json in archive {archive} is not valid JSON: Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)"
    )


@pytest.mark.parametrize(
    ("epoch", "tag", "message"),
    [
        (-1, "t", "epoch -1 is not a number of seconds since 1970"),
        (True, "t", "epoch True is not a number of seconds since 1970"),
        (EPOCH, "-t", "tag '-t' is not a valid image tag"),
        (EPOCH, "a/b", "tag 'a/b' is not a valid image tag"),
    ],
)
def test_bad_arguments_are_refused(tmp_path: Path, epoch: int, tag: str, message: str) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a")]])
    with pytest.raises(ImageLayoutError) as caught:
        normalize_archive(archive, tmp_path / "out", epoch=epoch, tag=tag)
    assert caught.value.message == message


# ------------------------------------------------------------------------ docker load input


def test_the_docker_archive_holds_the_manifest_and_the_blobs(tmp_path: Path) -> None:
    image = _normalize(tmp_path, [[symlink("s", "a")], [symlink("s", "a")]])  # one layer twice
    data = b"".join(docker_archive_stream(image.layout, "t", "example/x:t"))
    assert len(data) % 512 == 0
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = tar.getnames()
        manifest = _read(tar, "manifest.json")
        blobs = {n: _bytes(tar, n) for n in names[1:]}
    layer = "blobs/sha256/" + image.layers[0].digest[7:]
    config = "blobs/sha256/" + image.config_digest[7:]
    assert names == ["manifest.json", config, layer]
    assert manifest == [{"Config": config, "Layers": [layer, layer], "RepoTags": ["example/x:t"]}]
    for name, content in blobs.items():
        assert content == (image.layout / name).read_bytes()


def test_the_docker_archive_stops_at_a_damaged_blob(tmp_path: Path) -> None:
    image = _normalize(tmp_path, [[file("a", b"1")]])
    blob = _blob(image)
    data = bytearray(blob.read_bytes())
    data[-5] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(ImageLayoutError) as caught:
        b"".join(docker_archive_stream(image.layout, "t", "example/x:t"))
    assert caught.value.message.startswith(f"blob {blob}: its bytes hash to sha256:")
    with pytest.raises(ImageLayoutError) as refused:
        docker_archive_stream(image.layout, "t", "not a reference")
    assert refused.value.message == "'not a reference' is not an image reference REPO:TAG"


def test_the_docker_archive_without_a_name(tmp_path: Path) -> None:
    image = _normalize(tmp_path, [[file("a", b"1")]])
    data = b"".join(docker_archive_stream(image.layout, "t"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        manifest = _read(tar, "manifest.json")
    assert manifest[0]["RepoTags"] == []


def test_a_failure_while_a_layer_is_written_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = docker_save(tmp_path / "a.tar", [[file("a", b"1" * 100_000), file("b")]])
    calls: list[str] = []

    def failing(entry: Any, epoch: int) -> tarfile.TarInfo:
        calls.append(entry.key)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return header(entry, epoch)

    header = tar_header
    monkeypatch.setattr(normalize_module, "tar_header", failing)
    with pytest.raises(OSError, match="No space left on device"):
        normalize_archive(archive, tmp_path / "out", epoch=EPOCH, tag="t")
    assert calls == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]
