"""Synthetic ``docker save`` archives, built with ``tarfile`` in a test's ``tmp_path``, in either
shape a daemon writes, each layer's sha256 in the config's ``diff_ids``:

- dockerd 20.10's: ``manifest.json``, the config ``<hex>.json``, per layer ``<v1id>/`` with
  ``VERSION``, ``json`` and the uncompressed ``layer.tar`` (a symbolic link to the first when
  the image holds the same layer again), and ``repositories``;
- dockerd 25's OCI shape: ``blobs/sha256/<hex>`` (each layer once, named by its diff_id, a
  legacy config per layer, the config, the OCI manifest), ``index.json``, ``manifest.json``,
  ``oci-layout`` and ``repositories``.

The members come in the order written above, or ``lexical`` (as a daemon walks its directory),
``reversed``, or ``shuffled`` (a fixed order that is none of those)."""

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
from images.oci.layer_plan import DEFAULT_DROP, DropRules
from images.oci.normalize import NormalizedImage, Normalizing, normalize_stream

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
    shape: str = "20.10",
    order: str = "written",
    extra: Mapping[str, bytes] | None = None,
) -> Path:
    """Write the archive of one image with these layers (entries, or a layer's raw bytes),
    plus the ``extra`` files (path -> bytes) at its end."""
    blobs = [x if isinstance(x, bytes) else layer_tar(x) for x in layers]
    doc = copy.deepcopy(config if config is not None else BASE_CONFIG)
    ids = diff_ids or ["sha256:" + hashlib.sha256(b).hexdigest() for b in blobs]
    doc["rootfs"] = {"type": "layers", "diff_ids": list(ids)}
    config_bytes = json.dumps(doc).encode()
    if shape == "20.10":
        members, config_name, names = _shape_20_10(blobs, config_bytes)
    elif shape == "oci":
        members, config_name, names = _shape_oci(blobs, ids, config_bytes)
    else:
        raise ValueError(f"no docker save shape {shape!r}")
    if manifest is None:
        manifest = [{"Config": config_name, "RepoTags": ["x:y"], "Layers": names}]
    members.append(_Member("manifest.json", json.dumps(manifest).encode()))
    members.append(_Member("repositories", b'{"x":{"y":"' + names[-1][:64].encode() + b'"}}'))
    if shape == "oci":
        members.append(_Member("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'))
    members += [_Member(name, data) for name, data in (extra or {}).items()]
    with tarfile.open(path, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for member in _ordered(members, order):
            member.add_to(tar)
    return path


@dataclass(frozen=True)
class _Member:
    name: str
    data: bytes = b""
    type: bytes = tarfile.REGTYPE
    linkname: str = ""

    def add_to(self, tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(self.name)
        info.type, info.linkname = self.type, self.linkname
        if self.type == tarfile.REGTYPE:
            info.size = len(self.data)
            tar.addfile(info, io.BytesIO(self.data))
        else:
            info.mode = 0o755 if self.type == tarfile.DIRTYPE else 0o777
            tar.addfile(info)


def _shape_20_10(blobs: list[bytes], config: bytes) -> tuple[list[_Member], str, list[str]]:
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    members = [_Member(config_name, config)]
    names: list[str] = []
    first: dict[bytes, str] = {}
    for i, blob in enumerate(blobs):
        v1id = hashlib.sha256(b"%d" % i + blob).hexdigest()
        names.append(f"{v1id}/layer.tar")
        members += [
            _Member(f"{v1id}/", type=tarfile.DIRTYPE),
            _Member(f"{v1id}/VERSION", b"1.0"),
            _Member(f"{v1id}/json", json.dumps({"id": v1id}).encode()),
        ]
        if blob in first:  # as dockerd 20.10 saves a layer the image holds again
            members.append(_Member(names[-1], type=tarfile.SYMTYPE, linkname=f"../{first[blob]}"))
        else:
            first[blob] = names[-1]
            members.append(_Member(names[-1], blob))
    return members, config_name, names


def _shape_oci(
    blobs: list[bytes], ids: Sequence[str], config: bytes
) -> tuple[list[_Member], str, list[str]]:
    def blob(data: bytes, name: str | None = None) -> _Member:
        return _Member(f"blobs/sha256/{name or hashlib.sha256(data).hexdigest()}", data)

    members = [
        _Member("blobs/", type=tarfile.DIRTYPE),
        _Member("blobs/sha256/", type=tarfile.DIRTYPE),
    ]
    names = [f"blobs/sha256/{diff_id.removeprefix('sha256:')}" for diff_id in ids]
    for i, (data, name) in enumerate(zip(blobs, names, strict=True)):
        if name not in names[:i]:
            members.append(blob(data, name.rsplit("/", 1)[1]))
        members.append(blob(json.dumps({"id": str(i), "created": "1970-01-01T00:00:00Z"}).encode()))
    config_blob = blob(config)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"digest": "sha256:" + config_blob.name[13:], "size": len(config)},
            "layers": [{"digest": d, "size": len(b)} for d, b in zip(ids, blobs, strict=True)],
        }
    ).encode()
    manifest_blob = blob(manifest)
    index = {"schemaVersion": 2, "manifests": [{"digest": "sha256:" + manifest_blob.name[13:]}]}
    members += [config_blob, manifest_blob, _Member("index.json", json.dumps(index).encode())]
    return members, config_blob.name, names


def _ordered(members: list[_Member], order: str) -> list[_Member]:
    if order == "written":
        return members
    if order == "lexical":
        return sorted(members, key=lambda m: m.name)
    if order == "reversed":
        return members[::-1]
    if order == "shuffled":
        return sorted(members, key=lambda m: hashlib.sha256(m.name.encode()).digest())
    raise ValueError(f"no member order {order!r}")


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


def normalize_archive(
    archive: Path,
    out: Path,
    *,
    epoch: int,
    tag: str,
    drop: DropRules = DEFAULT_DROP,
    how: Normalizing | None = None,
) -> NormalizedImage:
    """``normalize_stream`` of the ``docker save`` archive file ``archive``, its diff_ids read
    from its config first (none when it cannot be read: the stream's checks refuse it), as
    ``build`` reads the daemon's stream after inspecting the image."""
    with archive.open("rb") as stream:
        return normalize_stream(
            stream,
            out,
            archive=str(archive),
            diff_ids=_diff_ids(archive),
            epoch=epoch,
            tag=tag,
            how=how or Normalizing(drop=drop),
        )


def _diff_ids(archive: Path) -> tuple[str, ...]:
    """The diff_ids the config of the archive's one image lists; () when it cannot say."""
    try:
        with tarfile.open(archive) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
            config = json.load(tar.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
            return tuple(config["rootfs"]["diff_ids"])
    except (OSError, tarfile.TarError, LookupError, TypeError, ValueError):
        return ()
