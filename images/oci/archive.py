"""Docker's image archive (``docker save``, ``docker load``): reading the one image of an
archive, and writing an image of an OCI layout as an archive ``docker load`` accepts.

An archive of dockerd 20.10 holds ``manifest.json`` (``[{"Config": ..., "RepoTags": [...],
"Layers": [...]}]``), the image config and one uncompressed ``layer.tar`` per layer (a layer
the image holds twice is a symbolic link to the first); dockerd 25 writes the same
``manifest.json`` naming ``blobs/sha256/<hex>`` files. ``open_saved_image`` reads an archive
file in place (random access): nothing but its JSON files (each at most
``layout.MAX_JSON_BYTES``) and its entry headers (at most ``MAX_ARCHIVE_MEMBERS``) is held in
memory. ``image_entry`` and ``config_diff_ids`` are its checks of ``manifest.json`` and of the
config, shared with the reader of a streamed archive (``save_stream``). The archive written is
streamed blob by blob, each blob checked as it is read."""

from __future__ import annotations

import contextlib
import posixpath
import re
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ImageLayoutError
from images.oci.layout import (
    MAX_JSON_BYTES,
    Descriptor,
    canonical_json,
    check_digest,
    find_manifest,
    manifest_parts,
    open_blob,
    parse_json,
)
from images.oci.tarstream import (
    CHUNK,
    END_OF_ARCHIVE,
    BoundedTarInfo,
    header_bytes,
    padding,
    refusing_tar_errors,
)

MAX_ARCHIVE_MEMBERS = 100_000  # a docker save archive has a few per layer
HINT_ARCHIVE = (
    "the archive is damaged or was not written by `docker save`: save the image again "
    "(`docker save IMAGE -o FILE`)"
)
_REPO_TAG_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:-]{0,254}")


@dataclass(frozen=True, kw_only=True)
class SavedImage:
    """The one image of an archive: its config (as parsed), the config's path, its layers'
    entries in the archive (in order) and the diff_ids the config gives them."""

    archive: Path
    config: Mapping[str, Any]
    config_name: str
    layers: tuple[tarfile.TarInfo, ...]
    diff_ids: tuple[str, ...]


@contextlib.contextmanager
def open_saved_image(archive: Path) -> Iterator[tuple[tarfile.TarFile, SavedImage]]:
    """The archive opened for random access, and its image; refused unless it holds exactly
    one image whose config and layers are all there."""
    try:
        outer = tarfile.open(archive, mode="r:", tarinfo=BoundedTarInfo)  # noqa: SIM115 (closed below)
    except OSError as exc:
        raise ImageLayoutError(
            f"archive {archive} cannot be read: {exc.strerror}", hint=HINT_ARCHIVE
        ) from None
    except tarfile.TarError as exc:
        raise ImageLayoutError(
            f"archive {archive} is not a tar archive: {exc}", hint=HINT_ARCHIVE
        ) from None
    with outer:
        yield outer, _read_saved_image(outer, archive)


def _read_saved_image(outer: tarfile.TarFile, archive: Path) -> SavedImage:
    members = _index_archive(outer, archive)
    config_name, layer_names = image_entry(
        _member_json(outer, members, "manifest.json", archive), archive
    )
    config = _member_json(outer, members, config_name, archive)
    diff_ids = config_diff_ids(config, config_name, len(layer_names), archive)
    return SavedImage(
        archive=archive,
        config=config,
        config_name=config_name,
        layers=tuple(_member(members, name, archive) for name in layer_names),
        diff_ids=diff_ids,
    )


def plain_name(name: str) -> str:
    """The path of an archive's entry as ``manifest.json`` names it: no leading ``./``."""
    return posixpath.normpath(name).lstrip("/")


def no_file(name: str, archive: Path | str) -> ImageLayoutError:
    return ImageLayoutError(f"archive {archive} has no file {name[:200]!r}", hint=HINT_ARCHIVE)


def _index_archive(outer: tarfile.TarFile, archive: Path) -> dict[str, tarfile.TarInfo]:
    """The regular files and the links of the archive by their path (no leading ``./``)."""
    found: dict[str, tarfile.TarInfo] = {}
    count = 0
    with refusing_tar_errors(f"archive {archive}", HINT_ARCHIVE):
        while (member := outer.next()) is not None:
            count += 1
            if count > MAX_ARCHIVE_MEMBERS:
                raise ImageLayoutError(
                    f"archive {archive} has more than {MAX_ARCHIVE_MEMBERS} entries",
                    hint=HINT_ARCHIVE,
                )
            if member.isreg() or member.issym() or member.islnk():
                found[plain_name(member.name)] = member
    return found


def _member(members: Mapping[str, tarfile.TarInfo], name: str, archive: Path) -> tarfile.TarInfo:
    found = members.get(plain_name(name))
    if found is None:
        raise no_file(name, archive)
    return found


def _member_json(
    outer: tarfile.TarFile, members: Mapping[str, tarfile.TarInfo], name: str, archive: Path
) -> Any:
    member = _member(members, name, archive)
    where = f"{name} in archive {archive}"
    if member.size > MAX_JSON_BYTES:
        raise ImageLayoutError(f"{where} is larger than {MAX_JSON_BYTES} bytes", hint=HINT_ARCHIVE)
    with refusing_tar_errors(where, HINT_ARCHIVE):
        reader = outer.extractfile(member)
        assert reader is not None  # a regular file, or a link to one
        data = reader.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ImageLayoutError(f"{where} is larger than {MAX_JSON_BYTES} bytes", hint=HINT_ARCHIVE)
    return parse_json(data, where=where)


def image_entry(doc: Any, archive: Path | str) -> tuple[str, list[str]]:
    """The config's and the layers' paths in the archive, from its ``manifest.json`` (parsed:
    ``doc``); refused unless it lists exactly one image."""
    if not isinstance(doc, list) or len(doc) != 1:
        count = len(doc) if isinstance(doc, list) else "no list of"
        raise ImageLayoutError(
            f"manifest.json in archive {archive} lists {count} images, not one",
            hint="save one image: `docker save IMAGE -o FILE`",
        )
    [entry] = doc
    config = entry.get("Config") if isinstance(entry, dict) else None
    layers = entry.get("Layers") if isinstance(entry, dict) else None
    if not isinstance(config, str) or not (
        isinstance(layers, list) and all(isinstance(x, str) for x in layers)
    ):
        raise ImageLayoutError(
            f"manifest.json in archive {archive} has no Config path and Layers paths",
            hint=HINT_ARCHIVE,
        )
    return config, layers


def config_diff_ids(
    config: Any, config_name: str, layers: int, archive: Path | str
) -> tuple[str, ...]:
    """The diff_ids of the image config ``config`` (parsed), read from ``config_name``;
    refused unless it is a JSON object listing ``layers`` sha256 digests."""
    where = f"config {config_name} in archive {archive}"
    if not isinstance(config, dict):
        raise ImageLayoutError(f"{where} is not a JSON object", hint=HINT_ARCHIVE)
    rootfs = config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != layers:
        listed = len(diff_ids) if isinstance(diff_ids, list) else "no"
        raise ImageLayoutError(
            f"{where} lists {listed} layer diff_ids, manifest.json {layers} layers",
            hint=HINT_ARCHIVE,
        )
    for i, diff_id in enumerate(diff_ids):
        check_digest(diff_id, where=f"{where}: rootfs.diff_ids[{i}]")
    return tuple(diff_ids)


# ------------------------------------------------------------------------------- writing


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
    """The image tagged ``tag`` in ``layout`` as a tar ``docker load`` accepts, in chunks of
    at most ``CHUNK`` bytes: ``manifest.json`` naming it ``repo_tag`` (``REPO:TAG``; None:
    loaded without a name), the config and the (gzip) layers under ``blobs/sha256/``. The
    image ID ``docker load`` gives it is the config's digest. The layout's index and manifest
    are checked before the first chunk; each blob as it is streamed (a damaged blob ends the
    stream with an ``ImageLayoutError`` before the tar is complete).

    The first ``loaded_layers`` layers are left out of the stream: the daemon has them (the
    base image it built on), and ``docker load`` reads a layer's file only for a layer chain
    it lacks, so a base of tens of GB is not streamed again."""
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
