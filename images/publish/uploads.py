"""What a publish uploaded: of the image's blobs, those its first copy uploaded, those the
destination repository had, and of these the ones mounted from another repository of the
registry (``images.engine.skopeo.CopyReport``, read from the copy's log).

The real image sits on a vendor base of tens of GB whose layers the build keeps byte for byte.
A registry mounts such a blob from one repository into another without a byte sent, and
skopeo does so for each blob whose other repository its blob-info cache knows: the base's,
once skopeo has read the base there, as a build on a base pinned by digest does. So a publish
costs the layers that changed, and says so: an ``UploadStats`` on the result, in the
``--json`` document and in the release record.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from core.tables import human_size
from images.builder.tags import ImageReference
from images.engine.skopeo import CopyReport
from images.oci.layout import Descriptor, find_manifest, manifest_parts
from images.records import UploadStats


def image_blobs(layout: Path, tag: str) -> tuple[Descriptor, tuple[Descriptor, ...]]:
    """The config and the layers of the image ``tag`` of ``layout``, each distinct layer once
    (in the manifest's order)."""
    digest, manifest = find_manifest(layout, tag)
    config, layers = manifest_parts(manifest, where=f"manifest {digest}")
    distinct: dict[str, Descriptor] = {}
    for layer in layers:
        distinct.setdefault(layer.digest, layer)
    return config, tuple(d for d in distinct.values() if d.digest != config.digest)


def count_upload(
    blobs: Sequence[Descriptor], *, uploaded: Collection[str], mounted: Collection[str]
) -> UploadStats:
    """The counts over ``blobs`` (distinct digests) of a copy that uploaded the digests
    ``uploaded`` and mounted those ``mounted``; every other blob the repository had."""
    sent = [b for b in blobs if b.digest in uploaded]
    reused = [b for b in blobs if b.digest not in uploaded]
    mounts = [b for b in reused if b.digest in mounted]
    return UploadStats(
        blobs_uploaded=len(sent),
        bytes_uploaded=sum(b.size for b in sent),
        blobs_reused=len(reused),
        bytes_reused=sum(b.size for b in reused),
        blobs_mounted=len(mounts),
        bytes_mounted=sum(b.size for b in mounts),
    )


def upload_stats(
    layout: Path,
    tag: str,
    report: CopyReport,
    destination: ImageReference,
    progress: Callable[[str], None],
) -> UploadStats:
    """What the copy ``report`` of the image ``tag`` of ``layout`` to ``destination`` did with
    the image's blobs; says from which repositories it mounted some."""
    config, layers = image_blobs(layout, tag)
    blobs = (config, *layers)
    digests = {b.digest for b in blobs}
    mounted = {d: repo for d, repo in report.mounted.items() if d in digests}
    for source in sorted(set(mounted.values())):
        n = sum(1 for repo in mounted.values() if repo == source)
        progress(f"mounted {_blobs(n)} from {destination.registry}/{source}")
    return count_upload(blobs, uploaded=report.uploaded, mounted=mounted)


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
            "another repository of the registry"
        )
    return line
