"""The body of one download response, streamed into its ``.part`` file and verified.

The bytes are hashed as they arrive (with the bytes a resumed download kept), and the stream
stops at the first byte past the index's ``size``, the response's ``Content-Length`` (or
``Content-Range``) or the caller's ``max_size``. The file is returned only once verified: every
hash the index gives matches, the size is the index's, and a file without an advertised sha256
is a complete archive, so a response cut short is never taken. A body that breaks off raises
``BrokeOff`` with what arrived, for the caller to resume from.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from core.errors import (
    BuildImageError,
    DeadlineError,
    HashMismatchError,
    IndexReadError,
    TransportError,
)
from core.file_store import PartialDownload
from core.progress import Bar
from core.transport import Response
from core.urls import redact
from resolver.endpoints import IndexEndpoint
from resolver.simple_page import IndexFile
from sources.sdist import MAX_UNPACKED_BYTES

CHUNK = 1 << 20
OTHER_BYTES = (
    "the index serves other bytes than it advertises; do not use them until the index owner "
    "explains the change"
)


@dataclass(frozen=True)
class DownloadJob:
    """One file to download: the index that lists it, what the index says of it, the name of
    its package in messages and the most bytes it may have."""

    index: IndexEndpoint
    file: IndexFile
    label: str
    max_size: int | None


@dataclass(frozen=True)
class Streamed:
    """The verified bytes of a file in its ``.part``: their sha256 and size."""

    sha256: str
    size: int


class BrokeOff(Exception):  # a signal inside the download loop, never shown
    """The body of a download broke off after ``got`` bytes of this response."""

    def __init__(self, *, got: int, detail: str, cancelled: bool) -> None:
        super().__init__(detail)
        self.got, self.detail, self.cancelled = got, detail, cancelled


def stream_body(
    job: DownloadJob, resp: Response, part: PartialDownload, bar: Bar, *, offset: int
) -> Streamed:
    """Stream the body of ``resp`` into ``part`` after its first ``offset`` bytes (a 200
    when 0, else a 206 for the rest): hashed with those bytes while it arrives, stopped at
    the first byte past a bound, returned only once the whole file is verified."""
    length = _content_length(resp)
    cap = _size_cap(job, length, offset)
    hashes = _hashes_for(job.file)
    out = part.fh
    start = _rehash(out, offset, hashes.values())  # the bytes kept from before
    bar.restart(done=start, total=cap)
    size = _copy_body(job, resp, out, bar, hashes, start=start, cap=cap)
    _check_digests(job, hashes, size)
    if "sha256" not in job.file.hashes:
        _check_complete(job, part.path, size, length)
    return Streamed(hashes["sha256"].hexdigest(), size)


def _size_cap(job: DownloadJob, length: int | None, offset: int) -> int | None:
    """The most bytes the file may have: the least of ``max_size``, the index's size and the
    size the server announces (refused here when it is more than the first two allow)."""
    file, max_size = job.file, job.max_size
    announced = None if length is None else offset + length
    told = "Content-Length" if not offset else "Content-Range"
    if announced is not None:
        if max_size is not None and announced > max_size:
            raise IndexReadError(too_large(job, announced, max_size))
        if file.size is not None and announced != file.size:
            raise HashMismatchError(
                f"{job.label}: index {job.index.name} gives size {file.size} for "
                f"{file.filename}, but the server announces {announced} bytes ({told})",
                hint=OTHER_BYTES,
            )
    bounds = [n for n in (max_size, file.size, announced) if n is not None]
    return min(bounds) if bounds else None


def _hashes_for(file: IndexFile) -> dict[str, Any]:
    """A hash of every algorithm the index gives that hashlib always has, and sha256."""
    algos = {a: hashlib.new(a) for a in file.hashes if a in hashlib.algorithms_guaranteed}
    algos.setdefault("sha256", hashlib.sha256())
    return algos


def _copy_body(
    job: DownloadJob,
    resp: Response,
    out: BinaryIO,
    bar: Bar,
    hashes: dict[str, Any],
    *,
    start: int,
    cap: int | None,
) -> int:
    """Append the body of ``resp`` to ``out`` (holding ``start`` bytes), hashing it; return
    the size of the file. Raises at the first byte past ``cap``, and ``BrokeOff`` when the
    body breaks off."""
    size = start
    try:
        while chunk := resp.read(CHUNK if cap is None else min(CHUNK, cap - size + 1)):
            size += len(chunk)
            if cap is not None and size > cap:
                raise _overflow(job, size)
            out.write(chunk)
            for h in hashes.values():
                h.update(chunk)
            bar.advance(len(chunk))
    except DeadlineError as exc:
        raise DeadlineError(
            f"{job.label}: index {job.index.name}: {exc.message}", hint=exc.hint
        ) from None
    except TransportError as exc:
        out.flush()
        raise BrokeOff(
            got=size - start, detail=exc.detail, cancelled=exc.kind == "cancelled"
        ) from None
    out.flush()
    return size


def _check_digests(job: DownloadJob, hashes: dict[str, Any], size: int) -> None:
    """The bytes have every hash and the size the index gives."""
    file = job.file
    for algo, want in sorted(file.hashes.items()):
        if algo in hashes and hashes[algo].hexdigest() != want:
            raise HashMismatchError(
                f"{job.label}: index {job.index.name} gives {algo}={want} for {file.filename}, "
                f"but the downloaded bytes hash to {hashes[algo].hexdigest()}",
                hint=OTHER_BYTES,
            )
    if file.size is not None and file.size != size:
        raise HashMismatchError(
            f"{job.label}: index {job.index.name} gives size {file.size} for {file.filename}, "
            f"but {size} bytes arrived"
        )


def _check_complete(job: DownloadJob, path: Path, size: int, length: int | None) -> None:
    """The bytes at ``path`` (of a file the index gives no sha256 for) are a whole archive."""
    filename = job.file.filename
    if complete_archive(path, filename):
        return
    told = "no Content-Length" if length is None else f"Content-Length {length}"
    raise IndexReadError(
        f"{job.label}: index {job.index.name}: the {size} bytes that arrived for "
        f"{filename} ({told}) are not a complete {_kind(filename)}; "
        "nothing was kept",
        hint="the server cut the download short; run the command again",
    )


def _rehash(out: BinaryIO, offset: int, hashes: Iterable[Any]) -> int:
    """Feed the first ``offset`` bytes of ``out`` to ``hashes``; leave ``out`` positioned
    (and cut) after them; return how many there were."""
    out.seek(0)
    size = 0
    while size < offset and (chunk := out.read(min(CHUNK, offset - size))):
        size += len(chunk)
        for h in hashes:
            h.update(chunk)
    out.seek(size)
    out.truncate(size)
    return size


def _content_length(resp: Response) -> int | None:
    """The ``Content-Length`` of an unencoded body (None: not given, or of encoded bytes)."""
    value = resp.headers.get("Content-Length", "")
    return int(value) if value.isdigit() and not resp.encoding else None


def _overflow(job: DownloadJob, size: int) -> BuildImageError:
    """What a body that went past its cap at byte ``size`` reports."""
    index, file, max_size = job.index, job.file, job.max_size
    if max_size is not None and size > max_size:
        return IndexReadError(too_large(job, size, max_size))
    if file.size is not None and size > file.size:
        return HashMismatchError(
            f"{job.label}: index {index.name} gives size {file.size} for {file.filename}, but "
            f"the server sent more (stopped at byte {size})",
            hint=OTHER_BYTES,
        )
    return IndexReadError(
        f"{job.label}: index {index.name}: {redact(file.url)} sent more bytes than its "
        "Content-Length"
    )


def too_large(job: DownloadJob, size: int, limit: int) -> str:
    """The message for a file of ``size`` bytes or more, past the ``limit`` it may have."""
    return (
        f"{job.label}: {job.file.filename} on index {job.index.name} has {size} bytes or more, "
        f"more than the {limit} this file may have"
    )


def _kind(filename: str) -> str:
    return "zip" if filename.lower().endswith((".whl", ".zip")) else "archive"


def complete_archive(path: Path, filename: str) -> bool:
    """The bytes at ``path`` are a whole archive of ``filename``'s kind: a wheel's (or zip's)
    central directory reads and follows every member's data (a file cut short has none); a
    ``.tar.gz``'s gzip stream reaches its end. Other kinds are not checked."""
    name = filename.lower()
    if name.endswith((".whl", ".zip")):
        try:
            with zipfile.ZipFile(path) as zf:
                start = getattr(zf, "start_dir", None)
                if start is None:
                    return True
                return all(i.header_offset + i.compress_size <= start for i in zf.infolist())
        except (zipfile.BadZipFile, OSError, ValueError, EOFError):
            return False
    if name.endswith((".tar.gz", ".tgz")):
        return _gzip_complete(path)
    return True


def _gzip_complete(path: Path) -> bool:
    obj = zlib.decompressobj(16 + zlib.MAX_WBITS)
    unpacked = 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                data = chunk
                while data:
                    unpacked += len(obj.decompress(data, CHUNK))
                    if unpacked > MAX_UNPACKED_BYTES:
                        return False
                    data = obj.unconsumed_tail
                    if obj.eof and obj.unused_data:  # another gzip member
                        data, obj = obj.unused_data, zlib.decompressobj(16 + zlib.MAX_WBITS)
    except (zlib.error, OSError):
        return False
    return bool(obj.eof)
