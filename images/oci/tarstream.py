"""Tar streams of image layers, read and written in bounded memory.

``BoundedTarInfo`` refuses, while the headers are read, a pax or GNU long-name header larger
than ``MAX_META_BYTES`` (``tarfile`` reads those whole into memory), a GNU sparse entry and a
damaged header. ``entry_key`` is the one spelling of an entry's path that layers are sorted,
matched and compared by. ``LayerTarWriter`` writes a layer tar in one format (pax) through gzip
(``compress``), hashing the tar and the gzip. ``refusing_tar_errors`` turns what ``tarfile``,
``gzip`` and ``zlib`` raise on damaged input into an ``ImageLayoutError`` naming where.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import posixpath
import tarfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from typing import IO, BinaryIO, TypeVar

from core.errors import ImageLayoutError
from images.oci.compress import Compressor, GzipBlockWriter

CHUNK = 1024 * 1024
MAX_META_BYTES = 1024 * 1024  # one pax header or GNU long name

_META_TYPES = {
    tarfile.XHDTYPE: "pax",
    tarfile.XGLTYPE: "pax global",
    tarfile.SOLARIS_XHDTYPE: "Solaris pax",
    tarfile.GNUTYPE_LONGNAME: "GNU long name",
    tarfile.GNUTYPE_LONGLINK: "GNU long link",
}
_T = TypeVar("_T", bound="BoundedTarInfo")


class BoundedTarInfo(tarfile.TarInfo):
    """A tar header that refuses oversized pax and long-name headers, sparse files, and a
    damaged or truncated header (where ``tarfile`` would end the archive there silently)."""

    @classmethod
    def frombuf(cls: type[_T], buf: bytes | bytearray, encoding: str, errors: str) -> _T:
        return _bounded(buf, super().frombuf, encoding, errors)

    @classmethod
    def _frombuf(
        cls: type[_T], buf: bytes | bytearray, encoding: str, errors: str, **kw: bool
    ) -> _T:
        """What the ``tarfile`` of recent Python releases reads every header with, not
        ``frombuf``."""
        return _bounded(buf, super()._frombuf, encoding, errors, **kw)  # type: ignore[misc,no-any-return]


def _bounded(buf: bytes | bytearray, parse: Callable[..., _T], *args: str, **kw: bool) -> _T:
    try:
        info = parse(buf, *args, **kw)
    except tarfile.HeaderError as exc:
        if not bytes(buf).strip(b"\0"):  # no block, or a block of zeros: the end
            raise
        raise tarfile.TarError(f"a damaged tar header ({exc})") from None
    meta = _META_TYPES.get(info.type)
    if meta is not None and info.size > MAX_META_BYTES:
        raise tarfile.TarError(
            f"a {meta} header of {info.size} bytes (at most {MAX_META_BYTES} are read)"
        )
    if info.type == tarfile.GNUTYPE_SPARSE:
        raise tarfile.TarError(f"entry {info.name[:200]!r} is a GNU sparse file")
    return info


def entry_key(name: str, *, where: str) -> str:
    """The path of a tar entry as layers are sorted and compared by it: no leading ``./``
    or ``/``, no trailing ``/``, no empty or ``.`` parts; ``""`` for the root. Refused when a
    part is ``..``."""
    if ".." in name.split("/"):
        raise ImageLayoutError(
            f"{where}: entry {name[:200]!r} leads out of the layer's root (a '..' part)",
            hint="the layer is hostile or damaged: build the image again from trusted inputs",
        )
    key = posixpath.normpath(name.lstrip("/"))
    return "" if key == "." else key.lstrip("/")


@contextlib.contextmanager
def refusing_tar_errors(where: str, hint: str) -> Iterator[None]:
    """Turn a damaged tar or gzip stream met in the block into an ``ImageLayoutError``."""
    try:
        yield
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        reason = str(exc) or type(exc).__name__
        raise ImageLayoutError(f"{where}: {reason}", hint=hint) from None


def forget_members(tar: tarfile.TarFile) -> None:
    """Drop the headers ``tar`` keeps of the entries read so far: a stream read entry by
    entry needs none of them, and keeping them all grows with the archive."""
    members = getattr(tar, "members", None)
    if isinstance(members, list):
        members.clear()


def header_bytes(info: tarfile.TarInfo) -> bytes:
    """The header block(s) of ``info`` in the one format written: pax, UTF-8."""
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def padding(size: int) -> bytes:
    """The zeros that fill an entry's data of ``size`` bytes up to the next 512."""
    return b"\0" * (-size % tarfile.BLOCKSIZE)


END_OF_ARCHIVE = b"\0" * (2 * tarfile.BLOCKSIZE)


class LayerTarWriter:
    """A layer tar written entry by entry into ``fh`` through gzip (``compress``: blocks
    compressed on ``executor``, the same bytes whatever its size); ``close`` gives the sha256
    of the tar (the diff_id), of the gzip (the digest) and the gzip's size."""

    def __init__(
        self,
        fh: BinaryIO,
        where: str,
        hint: str,
        compressor: Compressor,
        executor: Executor | None = None,
    ) -> None:
        self._gzip = GzipBlockWriter(fh, compressor, executor=executor)
        self._tar_hash = hashlib.sha256()
        self._where = where
        self._hint = hint
        self.entries = 0

    def write_raw(self, data: bytes) -> None:
        """Tar bytes written as they are (a layer kept verbatim)."""
        self._tar_hash.update(data)
        self._gzip.write(data)

    def add(self, info: tarfile.TarInfo, data: IO[bytes] | None) -> None:
        """Write ``info``, then ``info.size`` bytes of ``data`` (a regular file)."""
        self.write_raw(header_bytes(info))
        self.entries += 1
        if data is None:
            return
        remaining = info.size
        while remaining:
            chunk = data.read(min(CHUNK, remaining))
            if not chunk:
                raise ImageLayoutError(
                    f"{self._where}: entry {info.name[:200]!r} ends before its {info.size} bytes",
                    hint=self._hint,
                )
            self.write_raw(chunk)
            remaining -= len(chunk)
        self.write_raw(padding(info.size))

    def abandon(self) -> None:
        """Give the layer up after a failure: nothing more is written to ``fh``."""
        self._gzip.abandon()

    def close(self, *, end: bool = True) -> tuple[str, str, int]:
        """End the tar (unless ``end`` is false: raw bytes that end it already) and the gzip
        stream: (diff_id, digest, size)."""
        if end:
            self.write_raw(END_OF_ARCHIVE)
        digest, size = self._gzip.close()
        return "sha256:" + self._tar_hash.hexdigest(), digest, size
