"""Downloads into the cache: verified, resumed when they break off, revalidated when unhashed.

A download is streamed into the cache's staging directory (``resolver.download_stream``) and
adopted into the content-addressed store only once verified, at most once per run. For a file
the index gives no sha256 for, a download record (sha256, size, ETag, Last-Modified) lets a
later run revalidate it with a conditional GET; a record whose file is missing, does not hash
to its name or is not a complete archive is removed, and the file fetched again.

A download with an advertised sha256 that breaks off resumes (``Range``, ``If-Range``), in
this run while attempts are left, else in the next one from the ``.part`` the cache keeps; the
whole file is hashed either way, and one that does not verify is downloaded once more from
zero. A 200, a 416 or a 206 that does not continue those bytes starts over from zero.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from core.errors import BuildImageError, DeadlineError, HashMismatchError, IndexReadError
from core.file_store import PartialDownload, PartialDownloadOrigin
from core.progress import Bar, DownloadProgress
from core.transport import IDENTITY, Response
from core.urls import redact
from resolver.cache import Cache, conditional_headers, usable_validator
from resolver.download_stream import (
    BrokeOff,
    DownloadJob,
    complete_archive,
    stream_body,
    too_large,
)
from resolver.endpoints import IndexEndpoint
from resolver.index_http import IndexHttp, RequestCounts
from resolver.simple_page import IndexFile

MAX_RECORD_BYTES = 64 << 10  # a download record
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Downloaded:
    """The verified bytes of a file in the cache: their sha256, their size and where they are."""

    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class _Record:
    """What an earlier run downloaded from a URL the index gives no sha256 for."""

    sha256: str
    size: int
    etag: str | None
    last_modified: str | None
    path: Path


@dataclass
class _Transfer:
    """One download in progress: its job, the ``.part`` its bytes go into, its progress bar,
    and what it may still spend: requests, and one restart from zero (which does not count as
    an attempt)."""

    job: DownloadJob
    part: PartialDownload
    bar: Bar
    attempts: int
    restarts: int = 1

    def restart(self) -> bool:
        """Spend the restart; False when it is spent already."""
        if self.restarts <= 0:
            return False
        self.restarts -= 1
        self.attempts += 1
        return True


@dataclass(eq=False)
class Downloader:
    """The downloads of one run, into ``cache``; each download makes at most ``attempts``
    requests, besides one restart from zero."""

    http: IndexHttp
    cache: Cache
    counts: RequestCounts
    progress: DownloadProgress
    _: KW_ONLY
    attempts: int

    def __post_init__(self) -> None:
        self._lock = threading.Lock()  # guards _streaming and _whole
        # held while a whole file streams from a URL: a second stream of it waits, then reuses
        self._streaming: dict[str, threading.RLock] = {}
        self._whole: set[str] = set()  # sha256 of cached files found complete archives
        self._done: dict[str, Downloaded] = {}  # URL -> its bytes, fetched in this run

    def download(
        self, index: IndexEndpoint, file: IndexFile, *, label: str, max_size: int | None = None
    ) -> Downloaded:
        """The verified bytes of ``file`` in the cache; downloads only when missing or changed
        (``IndexClient.download``)."""
        job = DownloadJob(index, file, label, max_size)
        if max_size is not None and file.size is not None and file.size > max_size:
            raise IndexReadError(too_large(job, file.size, max_size))
        with self._stream_lock(file.url):
            done = self._done.get(file.url)
            if done is not None:  # downloaded or revalidated earlier in this run
                return done
            expected = file.hashes.get("sha256")
            if expected:
                path = self.cache.verified_file(expected)
                if path is not None:
                    return Downloaded(expected, path.stat().st_size, path)
            record = None if expected else self._record(file)
            with (
                self.cache.download_part(file.url, sha256=expected) as part,
                self.progress.bar(file.filename, total=file.size) as bar,
            ):
                got = self._download_into(job, part=part, bar=bar, record=record)
            self._done[file.url] = got
            return got

    def have_downloaded(self, file: IndexFile) -> bool:
        """``file`` (one the index gives no sha256 for) was downloaded in this run, or has a
        download record whose bytes are in the cache, whole."""
        # under the URL's stream lock, as a download's check of the record is: two checks
        # at once of a record found broken would both remove its file, one after the other
        # has read it
        with self._stream_lock(file.url):
            if file.url in self._done:
                return True
            return self._record(file) is not None

    def take_whole(
        self, index: IndexEndpoint, file: IndexFile, resp: Response, *, label: str
    ) -> Downloaded:
        """The bytes of ``file`` from ``resp``, a 200 with the whole file: streamed into the
        cache, so that its download needs no second transfer; when the file is downloading
        already, ``resp`` is dropped and that download's bytes are used."""
        lock = self._stream_lock(file.url)
        if not lock.acquire(blocking=False):
            resp.discard()  # it is downloading already: wait for that, read the file
            return self.download(index, file, label=label)
        try:
            return self._receive(DownloadJob(index, file, label, None), resp)
        finally:
            lock.release()

    def _stream_lock(self, url: str) -> threading.RLock:
        with self._lock:
            return self._streaming.setdefault(url, threading.RLock())

    # ----------------------------------------------------------------- requests

    def _download_into(
        self, job: DownloadJob, *, part: PartialDownload, bar: Bar, record: _Record | None
    ) -> Downloaded:
        """The requests of one download: the first, a resume after each break while attempts
        are left, and one clean restart from zero when resumed bytes cannot be used. What
        breaks off (the connection, the server, the deadline) is kept for the next run; bytes
        found wrong never are."""
        transfer = _Transfer(job, part, bar, attempts=self.attempts)
        # the validators of a recorded download: a conditional GET when there are any
        headers = {} if record is None else conditional_headers(record.etag, record.last_modified)
        part.keep = True
        while True:
            transfer.attempts -= 1
            offset = _usable_offset(part, job.max_size)
            sent = {**headers, "Accept-Encoding": IDENTITY, **_resume_headers(part, offset)}
            ok = frozenset({200, 206, 304, 416} if offset else {200, 304})
            with self.http.get(job.index, job.file.url, headers=sent, stream=True, ok=ok) as resp:
                got = self._answer(transfer, resp, offset=offset, record=record)
                if got is not None:
                    return got

    def _answer(
        self, transfer: _Transfer, resp: Response, *, offset: int, record: _Record | None
    ) -> Downloaded | None:
        """The file from one answer of a download; None when it is to be asked for again."""
        job, part = transfer.job, transfer.part
        index, file = job.index, job.file
        if resp.status == 404:
            part.restart()
            raise IndexReadError(
                f"{job.label}: index {index.name} lists {file.filename}, "
                f"but {redact(file.url)} is 404"
            )
        if resp.status == 304:
            return _not_modified(job, record)
        if offset and (resp.status == 416 or not _resumes_at(resp, offset)):
            resp.discard()  # its body is not the rest of these bytes
            part.restart()
            if not transfer.restart():
                raise IndexReadError(
                    f"{job.label}: index {index.name}: {redact(file.url)} answered HTTP "
                    f"{resp.status} to a request for its bytes from {offset} on",
                    hint="run the command again",
                )
            return None
        if resp.status == 200:  # the whole file: a first request, or Range ignored
            offset = 0
            part.restart()
            part.record(_origin(file, resp))
        return self._stream_or_retry(transfer, resp, offset=offset)

    def _stream_or_retry(
        self, transfer: _Transfer, resp: Response, *, offset: int
    ) -> Downloaded | None:
        """The file streamed from ``resp``; None when it broke off or the bytes kept from
        before proved wrong, and what the transfer may still spend allows asking again."""
        job, part = transfer.job, transfer.part
        try:
            return self._stream(job, resp, part, transfer.bar, offset=offset)
        except HashMismatchError:
            part.restart()
            if not offset or not transfer.restart():
                raise
            self.cache.note(
                f"note: {job.label}: the {offset} bytes kept from an earlier download of "
                f"{job.file.filename} do not complete it to its sha256; downloading it again"
            )
            return None
        except BrokeOff as exc:
            kept = part.resume_from()
            if kept and exc.got > 0 and transfer.attempts > 0 and not exc.cancelled:
                return None  # resumed now, from where it broke off
            raise _broke_off(job, exc, kept=kept) from None
        except DeadlineError:
            raise  # kept: the next run resumes it
        except BuildImageError:
            part.restart()  # too large, not a complete archive: never resumed
            raise

    def _receive(self, job: DownloadJob, resp: Response) -> Downloaded:
        """Stream the body of ``resp`` (a 200 for ``job.file``) into the cache, as a download
        does (``_stream``), kept for a resume when it breaks off."""
        file = job.file
        with (
            self.cache.download_part(file.url, sha256=file.hashes.get("sha256")) as part,
            self.progress.bar(file.filename, total=file.size) as bar,
        ):
            part.restart()
            part.record(_origin(file, resp))
            try:
                return self._stream(job, resp, part, bar, offset=0)
            except (BrokeOff, DeadlineError) as exc:
                part.keep = True  # the download of this file resumes from it
                if isinstance(exc, DeadlineError):
                    raise
                raise _broke_off(job, exc, kept=part.resume_from()) from None

    def _stream(
        self, job: DownloadJob, resp: Response, part: PartialDownload, bar: Bar, *, offset: int
    ) -> Downloaded:
        """Stream the body of ``resp`` into ``part`` (``stream_body``), adopt the verified
        file into the store, and record it when the index gives no sha256 for it."""
        self.counts.count("downloads")
        streamed = stream_body(job, resp, part, bar, offset=offset)
        path = self.cache.adopt_file(part.path, streamed.sha256)
        if "sha256" not in job.file.hashes:  # what the next run revalidates instead
            record = {
                "sha256": streamed.sha256,
                "size": streamed.size,
                "etag": resp.headers.get("ETag"),
                "last_modified": resp.headers.get("Last-Modified"),
            }
            self.cache.put_metadata(_record_key(job.file.url), json.dumps(record).encode())
        return Downloaded(streamed.sha256, streamed.size, path)

    # ----------------------------------------------------------------- records

    def _record(self, file: IndexFile) -> _Record | None:
        """The download record of ``file`` when its bytes are still in the cache, whole; a
        record that is not is removed (and the file fetched again)."""
        key = _record_key(file.url)
        raw = self.cache.get_metadata(key, max_bytes=MAX_RECORD_BYTES)
        fields = _parse_record(raw) if raw is not None else None
        if fields is None:
            if raw is not None:
                self.cache.drop_metadata(key)
            return None
        sha, size, etag, last_modified = fields
        path = self.cache.verified_file(sha)  # bytes that do not hash to the name are removed
        if path is not None:
            try:
                whole = path.stat().st_size == size and self._complete(path, file)
            except FileNotFoundError:  # another thread found it incomplete and removed it
                whole, path = False, None
            if not whole and path is not None:
                self.cache.evict(sha, f"is not a complete copy of {file.filename}")
            path = path if whole else None
        if path is None:
            self.cache.drop_metadata(key)
            return None
        return _Record(sha, size, etag, last_modified, path)

    def _complete(self, path: Path, file: IndexFile) -> bool:
        """``complete_archive``, once per verified file and run."""
        with self._lock:
            if path.name in self._whole:
                return True
        if not complete_archive(path, file.filename):
            return False
        with self._lock:
            self._whole.add(path.name)
        return True


def _record_key(url: str) -> str:
    """The cache's metadata key of the download record of ``url``."""
    return hashlib.sha256("\n".join(("download-record", url)).encode()).hexdigest()


def _parse_record(raw: bytes) -> tuple[str, int, str | None, str | None] | None:
    """(sha256, size, etag, last_modified) of a download record; None when it is not one."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    sha, size = data.get("sha256"), data.get("size")
    etag, last_modified = data.get("etag"), data.get("last_modified")
    if not (isinstance(sha, str) and _SHA256_HEX.fullmatch(sha) and type(size) is int):
        return None
    if not all(isinstance(v, (str, type(None))) for v in (etag, last_modified)):
        return None
    return sha, size, etag, last_modified


def _not_modified(job: DownloadJob, record: _Record | None) -> Downloaded:
    """The recorded bytes, which the server has just said are still the file's."""
    if record is None:
        raise IndexReadError(
            f"{job.label}: index {job.index.name}: {redact(job.file.url)} answered 304 (not "
            "modified) to a request that named no cached copy"
        )
    return Downloaded(record.sha256, record.size, record.path)


def _broke_off(job: DownloadJob, exc: BrokeOff, *, kept: int) -> IndexReadError:
    return IndexReadError(
        f"{job.label}: index {job.index.name}: download of {job.file.filename} broke off after "
        f"{exc.got} bytes ({exc.detail})",
        hint=f"run the command again: it resumes from the {kept} bytes kept in the cache"
        if kept
        else "run the command again; nothing was written",
    )


def _origin(file: IndexFile, resp: Response) -> PartialDownloadOrigin:
    etag, last_modified = usable_validator(
        resp.headers.get("ETag"), resp.headers.get("Last-Modified")
    )
    return PartialDownloadOrigin(
        url=file.url,
        sha256=file.hashes.get("sha256", ""),
        etag=etag,
        last_modified=last_modified,
    )


def _usable_offset(part: PartialDownload, max_size: int | None) -> int:
    """The bytes of ``part`` a download may resume after (bytes past the cap are dropped)."""
    offset = part.resume_from()
    if max_size is not None and offset > max_size:
        part.restart()
        return 0
    return offset


def _resume_headers(part: PartialDownload, offset: int) -> dict[str, str]:
    """``Range`` for the bytes after ``offset``, ``If-Range`` on what they came from."""
    if not offset or part.origin is None or part.origin.validator is None:
        return {}
    return {"Range": f"bytes={offset}-", "If-Range": part.origin.validator}


def _resumes_at(resp: Response, offset: int) -> bool:
    """``resp`` is a 206 whose body is the file's bytes from ``offset`` to its end."""
    if resp.status != 206:
        return resp.status == 200
    match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+)\s*", resp.headers.get("Content-Range", ""))
    if match is None:
        return False
    first, last, total = (int(g) for g in match.groups())
    return first == offset and last + 1 == total and not resp.encoding
