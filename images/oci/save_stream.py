"""A ``docker save`` archive of one image read as it streams: once, in order, in bounded memory.

Both shapes ``docker save`` writes are read. dockerd 20.10's: ``manifest.json``, the config
``<hex>.json``, per layer ``<v1id>/layer.tar`` (uncompressed; a layer the image holds twice is
a symbolic link to the first), ``<v1id>/json`` and ``<v1id>/VERSION``, and ``repositories``.
dockerd 25's OCI shape: ``blobs/sha256/<hex>`` holding the uncompressed layers and small JSON
blobs (the config, the OCI manifest, a legacy config per layer), ``index.json``,
``manifest.json``, ``oci-layout``. The daemon writes the entries in no order that helps (the walk
of its temporary directory; ``manifest.json`` near the end), so a member is known by its bytes:
the caller names the image's diff_ids up front (the daemon's ``RootFS.Layers``) and each regular
member is hashed as it is read.

- A member whose sha256 is one of the diff_ids is that layer. It is written to a spool file
  (``spool``: on the layout's filesystem) as it is read, and handed to ``on_layer`` once
  whole; the file is ``on_layer``'s from then on (it keeps it or deletes it). A layer that
  comes again (the same bytes) is skipped.
- Any other member of at most ``layout.MAX_JSON_BYTES`` is kept in memory, as a candidate
  JSON file (``manifest.json``, the config), at most ``MAX_SMALL_BYTES`` of them together.
- Anything else is refused as soon as it is read (an ``ImageLayoutError`` naming the archive,
  the member and its sha256): the archive is damaged, or it is not of the image named (a daemon
  that saves its layers compressed, as the containerd image store does, gives no member of the
  diff_ids' bytes).

At the end ``manifest.json`` and the config are checked as ``archive.open_saved_image`` checks
them (one image; its config a JSON object; its diff_ids the manifest's layers', in order, and
the ones named up front), every diff_id has arrived, and the stream is read to its last byte.
Memory holds the small members and each member's path and sha256, never a layer's bytes; the
scratch space is what ``on_layer`` keeps, plus the one layer being read.
"""

from __future__ import annotations

import hashlib
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from core.errors import ImageLayoutError
from images.oci.archive import (
    HINT_ARCHIVE,
    MAX_ARCHIVE_MEMBERS,
    config_diff_ids,
    image_entry,
    no_file,
    plain_name,
)
from images.oci.layout import MAX_JSON_BYTES, parse_json
from images.oci.tarstream import CHUNK, BoundedTarInfo, forget_members, refusing_tar_errors

MAX_SMALL_BYTES = 16 * MAX_JSON_BYTES  # the members that are not layers, together
HINT_STREAM = (
    "the archive is damaged, or its layers are not the image's uncompressed layers (a daemon "
    "with the containerd image store saves them compressed): save the image again from a "
    "daemon that stores its layers itself"
)


@dataclass(frozen=True, kw_only=True)
class ArrivedLayer:
    """One layer read whole: its diff_id, the spool file holding its bytes, the archive's
    member that carried it, and its size."""

    diff_id: str
    spool: Path
    name: str
    size: int


@dataclass(frozen=True, kw_only=True)
class StreamedImage:
    """The one image of a streamed archive: its config (as parsed), the config's path in the
    archive, the layers' paths as ``manifest.json`` names them, and their diff_ids."""

    archive: str
    config: Mapping[str, Any]
    config_name: str
    layer_names: tuple[str, ...]
    diff_ids: tuple[str, ...]


@dataclass
class StreamTimes:
    """When the archive's last byte was read (``time.monotonic``), and how many seconds of
    the reading ``on_layer`` took (work done while the daemon streams)."""

    ended: float = 0.0
    overlapped_s: float = 0.0


def read_saved_stream(
    stream: IO[bytes],
    *,
    archive: str,
    diff_ids: Sequence[str],
    spool: Callable[[], Path],
    on_layer: Callable[[ArrivedLayer], None],
    times: StreamTimes | None = None,
) -> StreamedImage:
    """Read the ``docker save`` archive ``stream`` (named ``archive`` in messages) of the
    image whose layers have ``diff_ids``: each layer handed to ``on_layer`` as it arrives,
    then the image checked (see the module's docstring)."""
    reader = _Reader(
        archive=archive,
        wanted=frozenset(diff_ids),
        spool=spool,
        on_layer=on_layer,
        times=times or StreamTimes(),
    )
    with refusing_tar_errors(f"archive {archive}", HINT_ARCHIVE):
        with tarfile.open(
            fileobj=stream, mode="r|", tarinfo=BoundedTarInfo, bufsize=CHUNK
        ) as outer:
            while (member := outer.next()) is not None:
                forget_members(outer)
                reader.member(outer, member)
        while stream.read(CHUNK):  # what follows the end of the tar: the daemon's padding
            pass
    reader.times.ended = time.monotonic()
    return reader.image(tuple(diff_ids))


@dataclass
class _Reader:
    archive: str
    wanted: frozenset[str]
    spool: Callable[[], Path]
    on_layer: Callable[[ArrivedLayer], None]
    times: StreamTimes
    arrived: set[str] = field(default_factory=set)
    hashed: dict[str, str | None] = field(default_factory=dict)  # path -> sha256 (None: a link)
    small: dict[str, bytes] = field(default_factory=dict)
    small_bytes: int = 0
    count: int = 0

    def member(self, outer: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self.count += 1
        if self.count > MAX_ARCHIVE_MEMBERS:
            raise ImageLayoutError(
                f"archive {self.archive} has more than {MAX_ARCHIVE_MEMBERS} entries",
                hint=HINT_ARCHIVE,
            )
        name = plain_name(member.name)
        if member.issym() or member.islnk():
            self.hashed.setdefault(name, None)  # a layer saved twice: the first carries it
        if not member.isreg():
            return
        # the member's bytes straight from the archive's stream, which stands at them: through
        # extractfile each chunk would be copied several times more
        src = outer.fileobj
        assert src is not None  # open for reading
        if member.size <= MAX_JSON_BYTES:
            data = src.read(member.size)
            if len(data) != member.size:
                raise _truncated(f"{name} in archive {self.archive}", member.size)
            self._small(name, data)
        else:
            self._large(name, member.size, src)

    def _small(self, name: str, data: bytes) -> None:
        sha = "sha256:" + hashlib.sha256(data).hexdigest()
        self.hashed[name] = sha
        if sha in self.wanted:
            if sha not in self.arrived:
                path = self.spool()
                try:
                    path.write_bytes(data)
                except BaseException:
                    path.unlink(missing_ok=True)
                    raise
                self._arrive(ArrivedLayer(diff_id=sha, spool=path, name=name, size=len(data)))
            return
        self.small_bytes += len(data)
        if self.small_bytes > MAX_SMALL_BYTES:
            raise ImageLayoutError(
                f"archive {self.archive}: its files that are not layers hold more than "
                f"{MAX_SMALL_BYTES} bytes together",
                hint=HINT_ARCHIVE,
            )
        self.small[name] = data

    def _large(self, name: str, size: int, src: _Readable) -> None:
        if name == "manifest.json":
            raise ImageLayoutError(
                f"manifest.json in archive {self.archive} is larger than {MAX_JSON_BYTES} bytes",
                hint=HINT_ARCHIVE,
            )
        path = self.spool()
        try:
            sha = _copy(src, path, size, f"{name} in archive {self.archive}")
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        self.hashed[name] = sha
        if sha in self.wanted and sha not in self.arrived:
            self._arrive(ArrivedLayer(diff_id=sha, spool=path, name=name, size=size))
            return
        path.unlink()
        if sha in self.arrived:
            return
        raise ImageLayoutError(
            f"archive {self.archive}: {name[:200]!r} ({size} bytes) hashes to {sha}, which is "
            f"none of the image's diff_ids, and is larger than a JSON file may be "
            f"({MAX_JSON_BYTES} bytes)",
            hint=HINT_STREAM,
        )

    def _arrive(self, layer: ArrivedLayer) -> None:
        self.arrived.add(layer.diff_id)
        started = time.monotonic()
        try:
            self.on_layer(layer)
        finally:
            self.times.overlapped_s += time.monotonic() - started

    def _json(self, name: str) -> Any:
        data = self.small.get(plain_name(name))
        if data is None:
            raise no_file(name, self.archive)
        return parse_json(data, where=f"{name} in archive {self.archive}")

    def image(self, expected: tuple[str, ...]) -> StreamedImage:
        """The image, checked: see the module's docstring."""
        config_name, layer_names = image_entry(self._json("manifest.json"), self.archive)
        config = self._json(config_name)
        diff_ids = config_diff_ids(config, config_name, len(layer_names), self.archive)
        if diff_ids != expected:
            raise ImageLayoutError(
                f"config {config_name} in archive {self.archive}: its diff_ids "
                f"({_short(diff_ids)}) are not those of the image asked for ({_short(expected)})",
                hint="the daemon saved another image than the one inspected: build again",
            )
        for index, (name, diff_id) in enumerate(zip(layer_names, diff_ids, strict=True)):
            self._check_layer(index, name, diff_id)
        return StreamedImage(
            archive=self.archive,
            config=config,
            config_name=config_name,
            layer_names=tuple(layer_names),
            diff_ids=diff_ids,
        )

    def _check_layer(self, index: int, name: str, diff_id: str) -> None:
        where = f"layer {index + 1} ({name}) of archive {self.archive}"
        path = plain_name(name)
        if path not in self.hashed:
            raise no_file(name, self.archive)
        sha = self.hashed[path]
        if sha is not None and sha != diff_id:
            raise ImageLayoutError(
                f"{where}: its sha256 is {sha}, the image config says {diff_id}",
                hint=HINT_ARCHIVE,
            )
        if diff_id not in self.arrived:  # a link to nothing that carried it
            raise ImageLayoutError(
                f"{where}: no file of the archive has the sha256 the image config says, {diff_id}",
                hint=HINT_ARCHIVE,
            )


class _Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


def _copy(src: _Readable, path: Path, size: int, where: str) -> str:
    """The next ``size`` bytes of ``src`` written to the new file ``path``: their sha256."""
    digest = hashlib.sha256()
    left = size
    with path.open("xb") as out:
        while left:
            chunk = src.read(min(CHUNK, left))
            if not chunk:
                raise _truncated(where, size)
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return "sha256:" + digest.hexdigest()


def _truncated(where: str, size: int) -> ImageLayoutError:
    return ImageLayoutError(f"{where} ends before its {size} bytes", hint=HINT_ARCHIVE)


def _short(diff_ids: Sequence[str]) -> str:
    return ", ".join(d[7:19] for d in diff_ids) or "none"
