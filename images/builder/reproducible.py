"""The image a build hands on is the normalized one, not the daemon's.

BuildKit's image varies from build to build with the same inputs (mtimes, apt's logs, empty
mount points, the order of entries, compression). ``normalize_built`` saves it from the daemon,
normalizes it into an OCI image layout (``images.oci.normalize``: entries sorted, mtimes clamped
to the build's time, owners numeric, the build's own records removed, layers compressed the
same way every time), loads that image back, and removes the daemon's. The gates, the tags and
``publish`` then see the normalized image: its id is its config's digest, and its manifest
digest is the digest a registry serves once ``publish`` copies the layout there as it is.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from core.errors import DockerError, ImageLayoutError
from images.engine.port import BuildEngine
from images.oci.archive import docker_archive_stream
from images.oci.normalize import NormalizedImage, normalize_archive

_PUBLIC_EXECUTABLE = 0o755  # what any host's checkout of a public tree may give: not secret
_PUBLIC_FILE = 0o644


@dataclass(frozen=True, kw_only=True)
class Normalized:
    """The normalized image: the daemon's id for it, its manifest digest and its layout."""

    image_id: str  # sha256:... of its config, as the daemon names it once loaded
    digest: str  # sha256:... of its OCI manifest: what a registry serves
    layout: Path  # the OCI image layout, the image under ``tag``
    tag: str
    epoch: int  # the build's time: every mtime is at most this
    dropped: tuple[str, ...]  # the entries removed, "layer N: path"


def normalize_built(
    engine: BuildEngine, built_id: str, *, layout: Path, epoch: int, tag: str
) -> Normalized:
    """Normalize the daemon's image ``built_id`` into ``layout`` (replaced whole) and load it;
    the daemon's own image is removed when nothing else names it."""
    archive = layout.with_name(layout.name + ".save.tar")
    try:
        engine.save(built_id, archive)
        image = normalize_archive(archive, layout, epoch=epoch, tag=tag)
    finally:
        archive.unlink(missing_ok=True)
    loaded = engine.load(docker_archive_stream(layout, tag))
    if loaded != image.config_digest:
        raise ImageLayoutError(
            f"{layout}: the daemon loaded the normalized image as {loaded}, not as its config "
            f"digest {image.config_digest}",
            hint="the daemon rewrote the image's config; build again with a Docker daemon that "
            "loads images as they are (dockerd 20.10 or later)",
        )
    if built_id != loaded:  # tagged elsewhere or in use by a container: the daemon keeps it
        with contextlib.suppress(DockerError):
            engine.remove_image(built_id)
    return Normalized(
        image_id=loaded,
        digest=image.manifest_digest,
        layout=layout,
        tag=tag,
        epoch=epoch,
        dropped=_dropped(image),
    )


def _dropped(image: NormalizedImage) -> tuple[str, ...]:
    return tuple(
        f"layer {n}: {path}" for n, layer in enumerate(image.layers, 1) for path in layer.dropped
    )


def settle_context(directory: Path, *, epoch: int) -> None:
    """Make what the build copies from ``directory`` independent of the host: directories
    0755, files 0755 when executable by anyone and else 0644, every mtime (symlinks' own
    included) the time of staging, which is after ``epoch``, so that normalizing clamps each
    to ``epoch`` whatever the checkout's own mtimes were. Never ``epoch`` itself: BuildKit
    takes a file of the same size and mtime as the one it was sent before for the same file,
    so a new lock of the same length would not reach the build. Files linked from the cache
    (the wheelhouse, the .deb files) are the cache's and are left as they are: they are
    bind-mounted, never copied."""
    stamp = max(int(time.time()), epoch + 1)
    for root, dirs, files in os.walk(directory):
        for name in (*dirs, *files):
            _settle(Path(root, name), stamp)
    _settle(directory, stamp)


def _settle(path: Path, stamp: int) -> None:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):  # never followed: it may point out of the context
        os.utime(path, (stamp, stamp), follow_symlinks=False)
        return
    if not stat.S_ISDIR(info.st_mode) and info.st_nlink > 1:
        return
    if stat.S_ISDIR(info.st_mode) or info.st_mode & 0o111:
        mode = _PUBLIC_EXECUTABLE
    else:
        mode = _PUBLIC_FILE
    path.chmod(mode)
    os.utime(path, (stamp, stamp))
