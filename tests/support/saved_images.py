"""Synthetic ``docker save`` archives (the dockerd 20.10 shape), built with ``tarfile`` in a
test's ``tmp_path``: ``manifest.json``, the config ``<hex>.json`` and one uncompressed
``<hex>/layer.tar`` per layer, with each layer's sha256 in the config's ``diff_ids``."""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from images.oci.archive import docker_archive_stream
from images.oci.normalize import NormalizedImage, normalize_archive

EPOCH = 1714564800  # 2024-05-01T12:00:00Z
LATE = 1796236679  # 2026-12-02, after EPOCH: a build's own time


@dataclass(frozen=True)
class Entry:
    name: str
    data: bytes = b""
    type: bytes = tarfile.REGTYPE
    mode: int = 0o644
    uid: int = 0
    gid: int = 0
    uname: str = "root"
    gname: str = "root"
    mtime: float = LATE
    linkname: str = ""
    pax: dict[str, str] = field(default_factory=dict)


def file(name: str, data: bytes = b"", **kw: Any) -> Entry:
    return Entry(name, data, **kw)


def directory(name: str, **kw: Any) -> Entry:
    return Entry(name, type=tarfile.DIRTYPE, mode=kw.pop("mode", 0o755), **kw)


def symlink(name: str, target: str, **kw: Any) -> Entry:
    return Entry(name, type=tarfile.SYMTYPE, linkname=target, mode=0o777, **kw)


def hardlink(name: str, target: str, **kw: Any) -> Entry:
    return Entry(name, type=tarfile.LNKTYPE, linkname=target, **kw)


def layer_tar(entries: Sequence[Entry], *, fmt: int = tarfile.PAX_FORMAT) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type, info.mode, info.uid, info.gid = e.type, e.mode, e.uid, e.gid
            info.uname, info.gname, info.mtime, info.linkname = (
                e.uname,
                e.gname,
                e.mtime,
                e.linkname,
            )
            info.pax_headers = dict(e.pax)
            if e.type == tarfile.REGTYPE:
                info.size = len(e.data)
                tar.addfile(info, io.BytesIO(e.data))
            else:
                tar.addfile(info)
    return buf.getvalue()


BASE_CONFIG: dict[str, Any] = {
    "architecture": "amd64",
    "os": "linux",
    "author": "someone",
    "comment": "Imported from -",
    "config": {
        "Hostname": "3f2a9c1d",
        "Domainname": "",
        "User": "",
        "Env": ["PATH=/usr/bin:/bin"],
        "Cmd": ["sh"],
        "Image": "sha256:" + "1" * 64,
        "Volumes": None,
        "OnBuild": None,
        "Labels": {"org.example.k": "v"},
    },
    "container": "3f2a9c1d",
    "container_config": {"Hostname": "3f2a9c1d", "Cmd": ["/bin/sh", "-c", "echo hi"]},
    "created": "2026-12-02T18:37:59.246919899Z",
    "docker_version": "20.10.24+dfsg1",
    "history": [
        {"created": "2026-12-02T13:11:48.108830372Z", "comment": "Imported from -"},
        {
            "created": "2026-12-02T18:37:59.246919899Z",
            "created_by": "RUN /bin/sh -c echo hi # buildkit",
            "comment": "buildkit.dockerfile.v0",
            "author": "me",
            "empty_layer": False,
        },
        {
            "created": "2026-12-02T18:37:59.246919899Z",
            "created_by": "LABEL org.example.k=v",
            "comment": "buildkit.dockerfile.v0",
            "empty_layer": True,
        },
    ],
}


def config_with(**changes: Any) -> dict[str, Any]:
    config = copy.deepcopy(BASE_CONFIG)
    config.update(changes)
    return config


Layers = Sequence[Sequence[Entry] | bytes]  # each layer: its entries, or its raw bytes


def docker_save(
    path: Path,
    layers: Layers,
    *,
    config: dict[str, Any] | None = None,
    diff_ids: Sequence[str] | None = None,
    manifest: Any = None,
) -> Path:
    """Write the archive of one image with these layers (entries, or a layer's raw bytes)."""
    blobs = [x if isinstance(x, bytes) else layer_tar(x) for x in layers]
    doc = copy.deepcopy(config if config is not None else BASE_CONFIG)
    ids = diff_ids or ["sha256:" + hashlib.sha256(b).hexdigest() for b in blobs]
    doc["rootfs"] = {"type": "layers", "diff_ids": list(ids)}
    config_bytes = json.dumps(doc).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    names = [f"{hashlib.sha256(b'%d' % i + b).hexdigest()}/layer.tar" for i, b in enumerate(blobs)]
    if manifest is None:
        manifest = [{"Config": config_name, "RepoTags": ["x:y"], "Layers": names}]
    with tarfile.open(path, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, config_name, config_bytes)
        for name, blob in zip(names, blobs, strict=True):
            _add(tar, name.split("/")[0] + "/VERSION", b"1.0")
            _add(tar, name, blob)
        _add(tar, "manifest.json", json.dumps(manifest).encode())
    return path


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def read_layer(blob: Path) -> list[tarfile.TarInfo]:
    """The headers of a normalized (gzip) layer blob, in order."""
    with gzip.open(blob, "rb") as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
        return list(tar)


def layer_files(blob: Path) -> dict[str, bytes]:
    """The regular files of a normalized (gzip) layer blob and their bytes."""
    out: dict[str, bytes] = {}
    with gzip.open(blob, "rb") as gz, tarfile.open(fileobj=gz, mode="r|") as tar:
        for member in tar:
            reader = tar.extractfile(member) if member.isreg() else None
            if reader is not None:
                out[member.name] = reader.read()
    return out


def normalized_image(
    directory: Path,
    files: Mapping[str, bytes],
    *,
    tag: str,
    labels: Mapping[str, str] | None = None,
) -> NormalizedImage:
    """An image of one layer holding ``files`` (path -> bytes), labelled ``labels``, saved
    into ``directory/saved.tar`` and normalized into the OCI layout ``directory/layout``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = config_with(
        config={"Labels": dict(labels or {}), "Cmd": ["/bin/sh"]},
        history=[{"created": "2026-12-02T18:37:59Z", "created_by": "test image"}],
    )
    archive = docker_save(
        directory / "saved.tar", [[file(path, data) for path, data in sorted(files.items())]],
        config=config,
    )  # fmt: skip
    return normalize_archive(archive, directory / "layout", epoch=EPOCH, tag=tag)


def loaded_image(
    directory: Path,
    files: Mapping[str, bytes],
    *,
    tag: str,
    labels: Mapping[str, str],
    docker: str,
    name: str | None = None,
) -> NormalizedImage:
    """``normalized_image`` loaded into the Docker daemon (as ``name``, REPO:TAG, if given),
    as a build leaves its image: its id is its config digest."""
    image = normalized_image(directory, files, tag=tag, labels=labels)
    subprocess.run(
        [docker, "load"],
        input=b"".join(docker_archive_stream(image.layout, tag, name)),
        capture_output=True,
        check=True,
    )
    return image
