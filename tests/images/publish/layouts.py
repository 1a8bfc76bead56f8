"""Small OCI image layouts written by hand for the upload tests: gzip layers made here (so
that two images can share layers byte for byte, as an image shares its base's), a config, a
manifest and the index naming it; and the same image as a ``docker load`` archive."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Layer:
    blob: bytes  # the gzip stream, as the registry stores it
    diff_id: str  # the sha256 of the tar inside

    @property
    def digest(self) -> str:
        return sha256(self.blob)

    @property
    def size(self) -> int:
        return len(self.blob)


def layer(files: Mapping[str, bytes]) -> Layer:
    """A gzip layer of ``files`` (path -> bytes); the same files, the same bytes."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 1714564800
            tar.addfile(info, io.BytesIO(data))
    plain = buf.getvalue()
    return Layer(blob=gzip.compress(plain, mtime=0), diff_id=sha256(plain))


@dataclass(frozen=True)
class Image:
    layout: Path
    tag: str
    config: bytes
    manifest: bytes
    layers: tuple[Layer, ...]

    @property
    def config_digest(self) -> str:
        return sha256(self.config)

    @property
    def manifest_digest(self) -> str:
        return sha256(self.manifest)


def _blob(layout: Path, data: bytes) -> str:
    digest = sha256(data)
    path = layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest


def write_image(
    layout: Path, tag: str, layers: Sequence[Layer], labels: Mapping[str, str] | None = None
) -> Image:
    """An OCI layout at ``layout`` holding one image of ``layers``, tagged ``tag``."""
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Labels": dict(labels or {}), "Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": [x.diff_id for x in layers]},
        },
        sort_keys=True,
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": sha256(config), "size": len(config)},
            "layers": [{"mediaType": LAYER, "digest": x.digest, "size": x.size} for x in layers],
        },
        sort_keys=True,
    ).encode()
    for data in (config, manifest, *(x.blob for x in layers)):
        _blob(layout, data)
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [
            {
                "mediaType": MANIFEST,
                "digest": sha256(manifest),
                "size": len(manifest),
                "annotations": {REF_NAME: tag},
            }
        ],
    }
    (layout / "index.json").write_text(json.dumps(index), encoding="utf-8")
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}', encoding="utf-8")
    return Image(layout=layout, tag=tag, config=config, manifest=manifest, layers=tuple(layers))


def docker_archive(image: Image, repo_tag: str) -> bytes:
    """``image`` as a tar ``docker load`` takes (its image id is the config's digest)."""
    names = [f"{x.digest.removeprefix('sha256:')}.tar.gz" for x in image.layers]
    config_name = f"{image.config_digest.removeprefix('sha256:')}.json"
    manifest = [{"Config": config_name, "RepoTags": [repo_tag], "Layers": names}]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        members = [
            ("manifest.json", json.dumps(manifest).encode()),
            (config_name, image.config),
            *((n, x.blob) for n, x in zip(names, image.layers, strict=True)),
        ]
        for name, data in dict(members).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
