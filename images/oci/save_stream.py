"""A ``docker save`` archive of one image read as it streams: once, in order, in bounded memory.

Both shapes ``docker save`` writes are read: dockerd 20.10's (``<v1id>/layer.tar``, a symbolic
link for a layer the image holds twice) and dockerd 25's (``blobs/sha256/<hex>``). The entries
come in no order that helps (``manifest.json`` near the end), so a member is known by its
sha256 among the diff_ids the caller names up front: such a member is spooled (``spool``) as it
is read and handed to ``on_layer``, whose file it is from then on (a layer that comes again is
skipped); any other member of at most ``layout.MAX_JSON_BYTES`` is kept in memory as a
candidate JSON file (at most ``MAX_SMALL_BYTES`` together); anything else is refused as it is
read: the archive is damaged, or not of the image named (a daemon that saves its layers
compressed, as the containerd image store does, gives no member of the diff_ids' bytes). At
the end ``manifest.json`` and the config are checked (one image; its diff_ids the manifest's
layers', in order, and the ones named up front), every diff_id has arrived, and the stream is
read to its last byte.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from core.errors import ImageLayoutError
from images.oci.archive import HINT_ARCHIVE
from images.oci.layout import MAX_JSON_BYTES, config_diff_ids, parse_json
from images.oci.tarstream import CHUNK, BoundedTarInfo, forget_members, refusing_tar_errors

MAX_ARCHIVE_MEMBERS = 100_000  # a docker save archive has a few per layer
MAX_SMALL_BYTES = 16 * MAX_JSON_BYTES  # the members that are not layers, together
HINT_STREAM = (
    "the archive is damaged, or its layers are not the image's uncompressed layers (a daemon "
    "with the containerd image store saves them compressed): save the image again from a "
    "daemon that stores its layers itself"
)


@dataclass(frozen=True, kw_only=True)
class ArrivedLayer:
    """One layer read whole: its diff_id, the spool file holding its bytes, and the archive's
    member that carried it."""

    diff_id: str
    spool: Path
    name: str


@dataclass(frozen=True, kw_only=True)
class StreamedImage:
    """The one image of a streamed archive: its config (as parsed), the config's path in the
    archive, and its diff_ids."""

    config: Mapping[str, Any]
    config_name: str
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
                self._arrive(ArrivedLayer(diff_id=sha, spool=path, name=name))
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
            self._arrive(ArrivedLayer(diff_id=sha, spool=path, name=name))
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
        config_name, layer_names = image_entry(self._json("manifest.json"), self.archive)
        config = self._json(config_name)
        where = f"config {config_name} in archive {self.archive}"
        diff_ids = config_diff_ids(config, len(layer_names), where=where, hint=HINT_ARCHIVE)
        if diff_ids != expected:
            raise ImageLayoutError(
                f"config {config_name} in archive {self.archive}: its diff_ids "
                f"({_short(diff_ids)}) are not those of the image asked for ({_short(expected)})",
                hint="the daemon saved another image than the one inspected: build again",
            )
        for index, (name, diff_id) in enumerate(zip(layer_names, diff_ids, strict=True)):
            self._check_layer(index, name, diff_id)
        return StreamedImage(config=config, config_name=config_name, diff_ids=diff_ids)

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


def plain_name(name: str) -> str:
    """The path of an archive's entry as ``manifest.json`` names it: no leading ``./``."""
    return posixpath.normpath(name).lstrip("/")


def no_file(name: str, archive: str) -> ImageLayoutError:
    return ImageLayoutError(f"archive {archive} has no file {name[:200]!r}", hint=HINT_ARCHIVE)


def image_entry(doc: Any, archive: str) -> tuple[str, list[str]]:
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
