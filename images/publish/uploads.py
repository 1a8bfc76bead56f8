"""What a publish uploads, before it copies: the image's blobs the destination repository
already has, the base image's layers mounted into it from the base's repository on the same
registry, and the rest, which the copy uploads.

The real image sits on a vendor base of tens of GB whose layers the build keeps byte for byte
(the blob digests of the base's manifest in its registry). A registry mounts such a blob from
one repository into another without a byte sent (``POST /v2/<repo>/blobs/uploads/?mount=
<digest>&from=<base repo>``), so a publish costs the layers that changed, and says so: an
``UploadStats`` on the result, in the ``--json`` document and in the release record.

A mount is an optimization: when the base's repository cannot be read with the destination's
credentials, its layers are uploaded as any other, and the publish goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Protocol

from core.errors import ImageReferenceError, RegistryAuthError
from core.tables import human_size
from images.builder.tags import ImageReference, parse_reference
from images.oci.layout import Descriptor, find_manifest, manifest_parts
from images.records import UploadStats


class BlobRegistry(Protocol):
    """What the accounting asks of a registry (``images.publish.registry.RegistryClient``)."""

    def blob_exists(self, repository: str, digest: str) -> bool: ...
    def mount_blob(self, repository: str, digest: str, source_repository: str) -> bool: ...


def image_blobs(layout: Path, tag: str) -> tuple[Descriptor, tuple[Descriptor, ...]]:
    """The config and the layers of the image ``tag`` of ``layout``, each distinct layer once
    (in the manifest's order)."""
    digest, manifest = find_manifest(layout, tag)
    config, layers = manifest_parts(manifest, where=f"manifest {digest}")
    distinct: dict[str, Descriptor] = {}
    for layer in layers:
        distinct.setdefault(layer.digest, layer)
    return config, tuple(d for d in distinct.values() if d.digest != config.digest)


def mount_source(base_image: str | None, destination: ImageReference) -> str | None:
    """The repository of ``base_image`` (``registry/repo:tag@sha256:...``) when it is on the
    registry of ``destination`` and is another repository; else None (nothing to mount)."""
    if not base_image:
        return None
    try:
        base = parse_reference(base_image)
    except ImageReferenceError:
        return None
    if base.registry != destination.registry or base.repository == destination.repository:
        return None
    return base.repository


def count_upload(
    blobs: Sequence[Descriptor], *, present: Collection[str], mounted: Collection[str]
) -> UploadStats:
    """The counts over ``blobs`` (distinct digests) of a copy to a repository that has the
    digests ``present`` and got those ``mounted``."""
    reused = [b for b in blobs if b.digest in present or b.digest in mounted]
    uploaded = [b for b in blobs if b.digest not in present and b.digest not in mounted]
    mounts = [b for b in reused if b.digest in mounted and b.digest not in present]
    return UploadStats(
        blobs_uploaded=len(uploaded),
        bytes_uploaded=sum(b.size for b in uploaded),
        blobs_reused=len(reused),
        bytes_reused=sum(b.size for b in reused),
        blobs_mounted=len(mounts),
        bytes_mounted=sum(b.size for b in mounts),
    )


def _mount_layers(
    registry: BlobRegistry,
    repository: str,
    source: str,
    layers: Sequence[Descriptor],
    progress: Callable[[str], None],
) -> set[str]:
    """Mount into ``repository`` each of ``layers`` that ``source`` has: the digests mounted."""
    mounted: set[str] = set()
    try:
        for layer in layers:
            if registry.blob_exists(source, layer.digest) and registry.mount_blob(
                repository, layer.digest, source
            ):
                mounted.add(layer.digest)
    except RegistryAuthError as exc:
        progress(
            f"cannot mount the base image's layers from {source} ({exc.message}); "
            "the copy uploads them"
        )
    return mounted


def prepare_upload(
    registry: BlobRegistry,
    *,
    destination: ImageReference,
    layout: Path,
    tag: str,
    base_image: str | None,
    progress: Callable[[str], None],
) -> UploadStats:
    """Before the image ``tag`` of ``layout`` is copied to ``destination`` (a repository):
    ask which of its blobs the repository has, mount the layers it lacks from the repository
    of ``base_image`` when that is on the same registry and has them, and count what is
    reused (had or mounted) and what the copy will upload."""
    config, layers = image_blobs(layout, tag)
    blobs = (config, *layers)
    repository = destination.repository
    present = {b.digest for b in blobs if registry.blob_exists(repository, b.digest)}
    mounted: set[str] = set()
    source = mount_source(base_image, destination)
    missing = [layer for layer in layers if layer.digest not in present]
    if source is not None and missing:
        mounted = _mount_layers(registry, repository, source, missing, progress)
        if mounted:
            progress(
                f"mounted {_blobs(len(mounted))} of the base image from "
                f"{destination.registry}/{source}"
            )
    return count_upload(blobs, present=present, mounted=mounted)


def _blobs(n: int) -> str:
    return f"{n} blob{'' if n == 1 else 's'}"


def render_upload(stats: UploadStats) -> str:
    """The line of the human summary: what was uploaded, what reused, what of it mounted."""
    line = (
        f"uploaded {_blobs(stats.blobs_uploaded)} ({human_size(stats.bytes_uploaded)}); "
        f"reused {_blobs(stats.blobs_reused)} ({human_size(stats.bytes_reused)})"
    )
    if stats.blobs_mounted:
        line += (
            f", {stats.blobs_mounted} of them ({human_size(stats.bytes_mounted)}) mounted from "
            "the base image's repository"
        )
    return line
