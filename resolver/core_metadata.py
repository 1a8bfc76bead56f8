"""A wheel's METADATA, read without downloading the wheel where the index allows it.

In order: a METADATA kept in the cache (keyed by the file's URL and advertised sha256, and
checked against the index's hash of the metadata file), the wheel itself when it is in the
cache, the PEP 658/714 metadata file (its advertised hash verified), HTTP range reads into the
wheel's zip, and, from a server that ignores range requests, the whole wheel: streamed into the
cache like any download (never held in memory), and METADATA read from the file.

Bounds: a metadata file, and a METADATA read out of a wheel, at most ``MAX_METADATA_BYTES``;
the range reads of one wheel's METADATA at most ``MAX_RANGE_BYTES`` in all.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import (
    DeadlineError,
    HashMismatchError,
    IndexReadError,
    MetadataError,
    TransportError,
)
from core.transport import ACCEPT_COMPRESSED, IDENTITY, Response
from core.urls import redact
from resolver.cache import Cache
from resolver.downloads import Downloader
from resolver.endpoints import IndexEndpoint
from resolver.index_http import IndexHttp, RequestCounts
from resolver.simple_page import IndexFile
from resolver.wheel_metadata import MAX_METADATA_BYTES, metadata_from_zip

MAX_RANGE_BYTES = 64 << 20  # the range reads of one wheel's METADATA, in all


@dataclass(eq=False)
class MetadataReader:
    """The METADATA of wheels on the indexes, kept in ``cache``."""

    http: IndexHttp
    cache: Cache
    counts: RequestCounts
    downloads: Downloader

    def core_metadata(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        """The wheel's METADATA, from the first source of the module's docstring that has it."""
        sha = file.hashes.get("sha256")
        # keyed by the URL and the advertised hash together: an index that lies about a hash
        # cannot plant metadata that another index's file with that hash would then read.
        # A file without a hash may be re-uploaded under its URL: its metadata is not kept.
        key = _metadata_key(file.url, sha) if sha else None
        cached = self._cached_metadata(key, file) if key else None
        if cached is not None:
            return cached
        path = self.cache.verified_file(sha) if sha else None
        if path is not None:
            data = metadata_from_wheel(path, file.filename, label=label)
        elif not sha and self.downloads.have_downloaded(file):
            # downloaded before: one conditional request says whether those bytes still stand
            got = self.downloads.download(index, file, label=label)
            data = metadata_from_wheel(got.path, file.filename, label=label)
        elif file.metadata_hashes is not None:
            data = self._metadata_file(index, file, label=label)
        else:
            data = self._metadata_by_range(index, file, label=label)
        if key is not None:
            self.cache.put_metadata(key, data)
        return data

    def _cached_metadata(self, key: str, file: IndexFile) -> bytes | None:
        """A METADATA kept by an earlier run; checked against the index's hash of the metadata
        file when it gives one."""
        data = self.cache.get_metadata(key, max_bytes=MAX_METADATA_BYTES)
        if data is None:
            return None
        want = (file.metadata_hashes or {}).get("sha256")
        if want and hashlib.sha256(data).hexdigest() != want:
            self.cache.drop_metadata(key)
            self.cache.note(
                f"note: the cached METADATA of {file.filename} does not have the sha256 its "
                "index gives for its metadata file; removed it from the cache"
            )
            return None
        return data

    def _metadata_file(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        assert file.metadata_hashes is not None
        url = file.metadata_url
        self.counts.count("metadata")
        too_large = (
            f"{label}: index {index.name}: the metadata file of {file.filename} "
            f"({redact(url)}) has more than the {MAX_METADATA_BYTES} bytes a METADATA may have",
            "no real wheel has a METADATA this big; do not use this file",
        )
        with self.http.get(
            index,
            url,
            headers={"Accept-Encoding": ACCEPT_COMPRESSED},  # its hash covers the decoded bytes
            max_body=MAX_METADATA_BYTES,
            too_large=too_large,
        ) as resp:
            if resp.status == 404:
                return self._metadata_by_range(index, file, label=label)
            data = resp.content
        for algo, want in file.metadata_hashes.items():
            if (
                algo in hashlib.algorithms_guaranteed
                and hashlib.new(algo, data).hexdigest() != want
            ):
                raise HashMismatchError(
                    f"{label}: index {index.name}: the metadata file of {file.filename} does not "
                    f"match its advertised {algo}={want}"
                )
        return data

    def _metadata_by_range(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        self.counts.count("ranges")
        with _range_request(self.http, index, file, f"-{RangeReader.TAIL}") as resp:
            if resp.status == 200:  # the server ignores ranges: this is the whole wheel
                got = self.downloads.take_whole(index, file, resp, label=label)
                return metadata_from_wheel(got.path, file.filename, label=label)
            reader = RangeReader(self.http, index, file, resp, label=label)
        try:
            with zipfile.ZipFile(reader) as zf:
                return metadata_from_zip(zf, file.filename, label=label)
        except zipfile.BadZipFile as exc:
            raise IndexReadError(
                f"{label}: {file.filename} on index {index.name} is not a zip: {exc}"
            ) from None


@contextlib.contextmanager
def _range_request(
    http: IndexHttp, index: IndexEndpoint, file: IndexFile, byte_range: str
) -> Iterator[Response]:
    """The answer to a request for the bytes ``byte_range`` of ``file`` (``A-B``, or ``-N``
    for the last N), asked for unencoded: a 206, or a 200 (the whole file) from a server that
    ignores ranges. A 404 is an ``IndexReadError``."""
    headers = {"Range": f"bytes={byte_range}", "Accept-Encoding": IDENTITY}
    with http.get(index, file.url, headers=headers, stream=True, ok=frozenset({200, 206})) as resp:
        if resp.status == 404:
            raise IndexReadError(f"index {index.name}: {redact(file.url)} is 404")
        yield resp


class RangeReader(io.RawIOBase):
    """A seekable read-only view of a remote file, backed by HTTP range requests; at most
    ``MAX_RANGE_BYTES`` are fetched in all."""

    TAIL = 64 * 1024

    def __init__(
        self,
        http: IndexHttp,
        index: IndexEndpoint,
        file: IndexFile,
        tail: Response,
        *,
        label: str,
    ) -> None:
        super().__init__()
        self._http, self._index, self._file, self._label = http, index, file, label
        self._fetched = 0
        data = self._body(tail, self.TAIL)
        total = tail.headers.get("Content-Range", "").rsplit("/", 1)[-1]
        self.size = int(total) if total.isdigit() else 0
        self._chunks: dict[int, bytes] = {max(0, self.size - len(data)): data}
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _find(self, start: int, end: int) -> bytes | None:
        for off, data in self._chunks.items():
            if off <= start and end <= off + len(data):
                return data[start - off : end - off]
        return None

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self._pos
        end = min(self.size, self._pos + n)
        if end <= self._pos:
            return b""
        data = self._find(self._pos, end)
        if data is None:
            fetch_end = min(self.size, max(end, self._pos + self.TAIL)) - 1
            self._chunks[self._pos] = self._get(self._pos, fetch_end)
            data = self._find(self._pos, end) or b""
        self._pos += len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def _get(self, first: int, last: int) -> bytes:
        index, file = self._index, self._file
        if self._fetched + (last - first + 1) > MAX_RANGE_BYTES:
            raise IndexReadError(
                f"{self._label}: reading the METADATA of {file.filename} on index {index.name} "
                f"takes more than {MAX_RANGE_BYTES} bytes of range requests",
                hint="the wheel's zip directory is implausibly big; do not use this file",
            )
        with _range_request(self._http, index, file, f"{first}-{last}") as resp:
            if resp.status != 206:
                raise IndexReadError(
                    f"{self._label}: index {index.name}: {redact(file.url)} stopped answering "
                    f"range requests (HTTP {resp.status})",
                    hint="run the command again",
                )
            return self._body(resp, last - first + 1)

    def _body(self, resp: Response, length: int) -> bytes:
        """A range answer's bytes: at most ``length``, unencoded."""
        index, file = self._index, self._file
        if resp.encoding:
            raise IndexReadError(
                f"{self._label}: index {index.name}: {redact(file.url)} answered a range request "
                f"with Content-Encoding {resp.encoding}"
            )
        try:
            data = resp.read_all(length)
        except DeadlineError as exc:
            raise DeadlineError(f"index {index.name}: {exc.message}", hint=exc.hint) from None
        except TransportError as exc:
            if exc.kind == "too-large":
                raise IndexReadError(
                    f"{self._label}: index {index.name}: {redact(file.url)} answered a range "
                    f"request for {length} bytes with more"
                ) from None
            raise IndexReadError(
                f"{self._label}: index {index.name}: a range read of {file.filename} "
                f"({redact(file.url)}) broke off ({exc.detail})",
                hint="run the command again; nothing was written",
            ) from None
        self._fetched += len(data)
        return data


def metadata_from_wheel(path: Path, filename: str, *, label: str = "") -> bytes:
    """The METADATA of the wheel file at ``path`` (read incrementally, bounded)."""
    try:
        with zipfile.ZipFile(path) as zf:
            return metadata_from_zip(zf, filename, label=label or filename)
    except zipfile.BadZipFile as exc:
        raise MetadataError(
            f"{label or filename}: {filename} is not a valid wheel (zip): {exc}"
        ) from None


def _metadata_key(url: str, sha256: str) -> str:
    """The cache's key of the METADATA of the file at ``url`` with that advertised sha256."""
    return hashlib.sha256("\n".join(("metadata", url, sha256)).encode()).hexdigest()
