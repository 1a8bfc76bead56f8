"""The base image's layers, kept verbatim: its registry's blobs in a store on the host.

A base pinned by digest has its manifest and blobs copied once into the host's store
(``skopeo copy ... dir:``) under the manifest's digest: ``<store>/manifest.json`` (whose sha256
must be the pinned digest) and ``<store>/blobs/sha256/<hex>``, each blob hashed as it enters;
afterwards checked by its size when linked into a layout, and by its digest wherever it is read
again. ``read_base_store`` gives the layers as an image manifest lists them: Docker's media
types mapped to OCI's, the same digests and sizes, nothing recompressed.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from core.errors import ImageLayoutError
from core.fsutil import swap_directory
from images.oci.layout import (
    MAX_JSON_BYTES,
    Descriptor,
    blob_path,
    check_digest,
    config_diff_ids,
    manifest_parts,
    parse_json,
    read_json_blob,
)
from images.oci.tarstream import CHUNK

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_LISTS = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
# the layer media types a base may have, and what an OCI manifest calls each
_OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
LAYER_TYPES = {
    "application/vnd.docker.image.rootfs.diff.tar.gzip": f"{_OCI_LAYER}+gzip",
    f"{_OCI_LAYER}+gzip": f"{_OCI_LAYER}+gzip",
    _OCI_LAYER: _OCI_LAYER,
    f"{_OCI_LAYER}+zstd": f"{_OCI_LAYER}+zstd",
}
HINT_STORE = (
    "the host's store of base images is damaged: remove that directory, and the next build "
    "fetches the base again from its registry"
)


@dataclass(frozen=True, kw_only=True)
class BaseLayers:
    """A base image's layers as its registry serves them: the store holding the blobs, the
    diff_ids of its config, and one descriptor per layer (OCI media types)."""

    reference: str  # registry/repository[:tag]@sha256:... as pinned
    store: Path
    diff_ids: tuple[str, ...]
    descriptors: tuple[Descriptor, ...]


def store_path(root: Path, digest: str) -> Path:
    """Where the base image of manifest ``digest`` is kept under ``root``."""
    return root / check_digest(digest, where="a base image's pinned digest")


def read_base_store(store: Path, *, reference: str, digest: str) -> BaseLayers:
    """The base image kept in ``store``, checked: its manifest is the pinned ``digest``, a
    single image manifest whose config (hashed) lists one diff_id per layer, and every layer
    blob is there with its size."""
    path = store / "manifest.json"
    where = f"base image {reference}: {path}"
    try:
        with path.open("rb") as fh:
            data = fh.read(MAX_JSON_BYTES + 1)
    except OSError as exc:
        raise ImageLayoutError(f"{where} cannot be read: {exc.strerror}", hint=HINT_STORE) from None
    actual = "sha256:" + hashlib.sha256(data).hexdigest()
    if actual != digest:
        raise ImageLayoutError(
            f"{where} hashes to {actual}, not to the pinned {digest}", hint=HINT_STORE
        )
    manifest = parse_json(data, where=where)
    media_type = manifest.get("mediaType") if isinstance(manifest, dict) else None
    if media_type in _LISTS:
        raise ImageLayoutError(
            f"base image {reference}: {digest} is an image index (several platforms), not one "
            "image's manifest",
            hint="pin the digest of the linux/amd64 image: `skopeo inspect --raw "
            "docker://REF | jq` lists each platform's digest",
        )
    if not isinstance(manifest, dict) or media_type not in (DOCKER_MANIFEST, OCI_MANIFEST, None):
        raise ImageLayoutError(f"{where} is not an image manifest", hint=HINT_STORE)
    config_desc, layers = manifest_parts(manifest, where=where)
    config = read_json_blob(store, config_desc, what="base image config")
    diff_ids = config_diff_ids(config, len(layers), where=f"{where}: its config", hint=HINT_STORE)
    return BaseLayers(
        reference=reference,
        store=store,
        diff_ids=diff_ids,
        descriptors=tuple(_oci_layer(store, layer, where) for layer in layers),
    )


def _oci_layer(store: Path, layer: Descriptor, where: str) -> Descriptor:
    media_type = LAYER_TYPES.get(layer.media_type)
    if media_type is None:
        raise ImageLayoutError(
            f"{where}: layer {layer.digest} has media type {layer.media_type!r}, which an "
            "image of this tool cannot carry as it is",
            hint="build on a base whose layers are tar, tar+gzip or tar+zstd (no foreign layers)",
        )
    path = blob_path(store, layer.digest)
    try:
        size = path.lstat().st_size if path.is_file() and not path.is_symlink() else -1
    except OSError:
        size = -1
    if size != layer.size:
        raise ImageLayoutError(
            f"{where}: blob {path} is missing or not its {layer.size} bytes", hint=HINT_STORE
        )
    return Descriptor(media_type=media_type, digest=layer.digest, size=layer.size)


def adopt_copied_dir(copied: Path, store: Path, *, reference: str, digest: str) -> BaseLayers:
    """Take what ``skopeo copy docker://REF@DIGEST dir:COPIED`` wrote into the store (each
    blob hashed against its name as it is moved; the store is swapped in whole), then read it
    back as ``read_base_store`` does."""
    store.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=store.parent, prefix=f".{store.name}.", suffix=".new"))
    blobs = staging / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    try:
        for entry in sorted(copied.iterdir()):
            if entry.name in ("manifest.json", "version"):
                continue
            name = check_digest(f"sha256:{entry.name}", where=f"skopeo's copy of {reference}")
            _hashed_move(entry, blobs / name, f"sha256:{name}", reference)
        (copied / "manifest.json").replace(staging / "manifest.json")
        read_base_store(staging, reference=reference, digest=digest)
        swap_directory(staging, store, check=lambda: None)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return read_base_store(store, reference=reference, digest=digest)


def _hashed_move(source: Path, dest: Path, digest: str, reference: str) -> None:
    hasher = hashlib.sha256()
    with source.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            hasher.update(chunk)
    if "sha256:" + hasher.hexdigest() != digest:
        raise ImageLayoutError(
            f"base image {reference}: the blob {digest} skopeo copied hashes to "
            f"sha256:{hasher.hexdigest()}",
            hint="the registry served other bytes than its digest names: copy the base again",
        )
    source.replace(dest)
