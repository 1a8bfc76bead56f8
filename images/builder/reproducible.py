"""The image a build hands on is the normalized one, not the daemon's.

BuildKit's image varies from build to build with the same inputs (mtimes, apt's logs, the
order of entries, compression). ``normalize_built`` normalizes it into an OCI image layout as
``docker save`` streams it (``images.oci.normalize``), loads that image back and removes the
daemon's. The gates, the tags and ``publish`` then see the normalized image, whose manifest
digest is the one a registry serves once ``publish`` copies the layout there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import DockerError, EnvironmentFailureError, ImageLayoutError
from core.tables import human_size
from images.engine.port import BuildEngine
from images.oci.archive import docker_archive_stream
from images.oci.normalize import LayerInfo, Normalizing, normalize_stream
from images.oci.save_stream import StreamTimes

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
    compressor: str = ""  # Compressor.ident of the own layers
    layers: tuple[LayerInfo, ...] = ()
    durations_s: Mapping[str, float] = field(default_factory=dict)  # save, normalize, load


def scratch_needed(image_bytes: int, base_bytes: int, largest_layer: int | None = None) -> int:
    """About the space normalizing needs on the layouts' filesystem: the image's own layers
    twice (spooled uncompressed, then normalized) and one base layer (spooled while read; at
    most ``largest_layer`` when known). The base's blobs are linked, not copied."""
    own = max(0, image_bytes - base_bytes)
    one_base = base_bytes if largest_layer is None else min(largest_layer, base_bytes)
    return 2 * own + one_base


def check_scratch(directory: Path, needed: int, *, what: str) -> None:
    """Refuse now, not half-way, when ``directory``'s filesystem has less than ``needed``."""
    directory.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(directory)
    if usage.free < needed:
        raise EnvironmentFailureError(
            f"{directory}: {human_size(usage.free)} free, but {what} needs about "
            f"{human_size(needed)} ({needed} bytes)",
            hint="free space on that filesystem, or build from a checkout on a larger one "
            "(the layouts are written under build/images/ of the checkout)",
        )


def normalize_built(
    engine: BuildEngine,
    built_id: str,
    *,
    layout: Path,
    epoch: int,
    tag: str,
    how: Normalizing | None = None,
    base_bytes: int = 0,
    progress: Callable[[str], None] = lambda _line: None,
) -> Normalized:
    """Normalize the daemon's image ``built_id`` into ``layout`` (replaced whole) and load it;
    the daemon's own image is removed when nothing else names it. ``base_bytes``: the base's
    size (what the scratch space need not hold in whole).

    ``durations_s``: ``save`` until the archive's last byte is read, the base layers' work
    included (the daemon waits for the reader); ``normalize``, that same work plus all after
    the stream ended (so the two overlap); ``load``, the normalized image loaded."""
    how = how or Normalizing()
    has_base = how.base is not None or bool(how.base_diff_ids)
    check_scratch(
        layout.parent,
        scratch_needed(
            engine.inspect(built_id).size, base_bytes if has_base else 0, _largest(engine, built_id)
        ),
        what=f"normalizing image {built_id[:19]}",
    )
    diff_ids = daemon_diff_ids(engine, built_id)
    times = StreamTimes()
    started = time.monotonic()
    with engine.save_stream(built_id) as stream:
        image = normalize_stream(
            stream,
            layout,
            archive=f"`docker save {built_id}`",
            diff_ids=diff_ids,
            epoch=epoch,
            tag=tag,
            how=how,
            times=times,
        )
    durations = {
        "save": round(times.ended - started, 3),
        "normalize": round(times.overlapped_s + time.monotonic() - times.ended, 3),
    }
    kept = sum(1 for layer in image.layers if layer.origin == "base")
    t = time.monotonic()
    loaded = engine.load(docker_archive_stream(layout, tag, loaded_layers=kept))
    durations["load"] = round(time.monotonic() - t, 3)
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
    for origin in ("base", "cached", "normalized"):  # the layers of each origin, and their bytes
        chosen = [layer for layer in image.layers if layer.origin == origin]
        if chosen:
            size = sum(layer.size for layer in chosen)
            progress(f"layers {origin}: {len(chosen)}, {human_size(size)}")
    return Normalized(
        image_id=loaded,
        digest=image.manifest_digest,
        layout=layout,
        tag=tag,
        epoch=epoch,
        dropped=tuple(
            f"layer {n}: {path}"
            for n, layer in enumerate(image.layers, 1)
            for path in layer.dropped
        ),
        compressor=image.compressor,
        layers=image.layers,
        durations_s=durations,
    )


def daemon_diff_ids(
    engine: BuildEngine, ref: str, *, what: str = "image", hint: str = "build the image again"
) -> tuple[str, ...]:
    """The diff_ids of the daemon's image ``ref`` (its ``RootFS.Layers``)."""
    layers = engine.inspect(ref).diff_ids
    if not layers:
        raise ImageLayoutError(f"the daemon gives no layers for {what} {ref}", hint=hint)
    return layers


def _largest(engine: BuildEngine, ref: str) -> int | None:
    """The size of the largest layer of ``ref`` as its history gives it; None if it does not."""
    sizes = [entry.get("Size") for entry in engine.history(ref)]
    if not sizes or not all(isinstance(x, int) and not isinstance(x, bool) for x in sizes):
        return None
    return max(int(x) for x in sizes if isinstance(x, int))


def settle_context(directory: Path, *, epoch: int) -> None:
    """Make what the build copies from ``directory`` independent of the host: directories
    and executables 0755, other files 0644, every mtime (symlinks' own too) the time of
    staging, after ``epoch``, so that normalizing clamps each to ``epoch``. Never ``epoch``
    itself: BuildKit takes a file of the same size and mtime as the one sent before, so a new
    lock of the same length would not reach the build. Files linked from the cache are left
    as they are: they are bind-mounted, never copied."""
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
