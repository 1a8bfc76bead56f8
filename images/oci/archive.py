"""An image of an OCI layout written as an archive ``docker load`` accepts (``manifest.json``
naming the config and the layers under ``blobs/sha256/``), streamed blob by blob, each blob
checked as it is read; and the hint of every refusal of a ``docker save`` archive."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Iterator
from pathlib import Path

from core.errors import ImageLayoutError
from images.oci.layout import Descriptor, canonical_json, find_manifest, manifest_parts, open_blob
from images.oci.tarstream import CHUNK, END_OF_ARCHIVE, header_bytes, padding

HINT_ARCHIVE = (
    "the archive is damaged or was not written by `docker save`: save the image again "
    "(`docker save IMAGE -o FILE`)"
)
_REPO_TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}")


def _blob_name(desc: Descriptor) -> str:
    return "blobs/sha256/" + desc.digest.removeprefix("sha256:")


def _file_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    info.uname = info.gname = ""
    return header_bytes(info)


def docker_archive_stream(
    layout: Path, tag: str, repo_tag: str | None = None, *, loaded_layers: int = 0
) -> Iterator[bytes]:
    """The image tagged ``tag`` in ``layout`` as a tar ``docker load`` accepts (its image ID
    the config's digest), in chunks of at most ``CHUNK`` bytes, ``manifest.json`` naming it
    ``repo_tag`` (``REPO:TAG``; None: loaded without a name). A damaged blob ends the stream
    with an ``ImageLayoutError``. The first ``loaded_layers`` layers are left out: the daemon
    has them (the base it built on), and ``docker load`` reads a layer's file only for a layer
    chain it lacks."""
    if repo_tag is not None and not _REPO_TAG_RE.fullmatch(repo_tag):
        raise ImageLayoutError(
            f"{repo_tag[:80]!r} is not an image reference REPO:TAG",
            hint="name it like registry/repository:tag",
        )
    digest, manifest = find_manifest(layout, tag)
    config, layers = manifest_parts(manifest, where=f"manifest {digest}")
    doc = [
        {
            "Config": _blob_name(config),
            "Layers": [_blob_name(layer) for layer in layers],
            "RepoTags": [] if repo_tag is None else [repo_tag],
        }
    ]
    return _stream(layout, canonical_json(doc), (config, *layers[loaded_layers:]))


def _stream(layout: Path, manifest: bytes, blobs: tuple[Descriptor, ...]) -> Iterator[bytes]:
    yield _file_header("manifest.json", len(manifest))
    yield manifest + padding(len(manifest))
    seen: set[str] = set()
    for desc in blobs:
        if desc.digest in seen:
            continue
        seen.add(desc.digest)
        yield _file_header(_blob_name(desc), desc.size)
        with open_blob(layout, desc.digest, size=desc.size) as blob:
            while chunk := blob.read(CHUNK):
                yield chunk
        yield padding(desc.size)
    yield END_OF_ARCHIVE
