"""The content-addressed file store: downloaded files named by their sha256, each re-hashed
before it is used, and moved into place only once verified.

Layout under the cache root::

    files/sha256/ab/abcdef...        the bytes of a downloaded file, named by their sha256
    tmp/*.part                       downloads in progress

The store is never trusted. A file is used only when its bytes hash to its name:
``verified_file`` re-hashes it each run before it is used (once per ``FileStore``: a file
already hashed is not hashed again while its size, mtime and inode stay the same), and a file
that does not hash to its name is removed and reported (``note``) so that the caller fetches
it again. Re-hashing rather than trusting a record of an earlier check, because whatever can
plant a file in the cache can plant its record too: only the bytes themselves are evidence.
The cost is one streaming sha256 of each cached file a run uses, read from the page cache at
about 1.5 GB/s (``bench/lock_download.py`` measures a warm re-lock of the 1.1 GB vendor stack
with it). Files are made read-only when adopted, so that a hard link into a build context is
never written through by accident.

A download is written to ``tmp/`` (``download_part``: the ``.part`` file is ``flock``-ed while
its download runs) and moved into ``files/`` by ``adopt_file`` only once verified. A download
whose index gives its sha256 has a ``.part`` named by its URL, so that one cut short resumes
where it stopped (an HTTP range request, ``resolver.downloads``): when the connection breaks,
the bytes are kept with a sidecar ``.part.json`` recording the URL, the sha256 the index gives
and the server's validator (a strong ETag, else Last-Modified). A later download of that URL
and sha256 asks only for the rest, and only while the validator still holds (``If-Range``);
the bytes on disk are never trusted for it: the whole file is hashed at the end, and one that
does not match is downloaded again from zero. A ``.part`` without a sidecar that matches is
truncated before use. Downloads of files without an advertised sha256 are never resumed (no
hash could catch a bad splice): their ``.part`` is anonymous and removed at the end.

The first staging of a ``FileStore`` sweeps what no running download holds: anonymous
``.part`` files, ``.part`` files without a sidecar and sidecars without a ``.part`` (older
than ``STALE_PART_SECONDS``), and resumable ones older than ``RESUME_KEEP_SECONDS``. A kept
``.part`` is never larger than the download's size cap, so the staging directory holds at
most one capped file per URL whose download broke off within that week.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.fsutil import atomic_write_bytes

STALE_PART_SECONDS = 60.0  # a .part file younger than this is never swept (being created)
RESUME_KEEP_SECONDS = 7 * 24 * 3600.0  # a resumable .part untouched this long is swept
MAX_SIDECAR_BYTES = 64 << 10


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """``$BUILD_IMAGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vllm-musa-image``, else ``~/.cache/``."""
    if env.get("BUILD_IMAGE_CACHE_DIR"):
        return Path(env["BUILD_IMAGE_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "vllm-musa-image"


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_RESUMABLE = re.compile(r"[0-9a-f]{64}\.part")


def check_key(key: str) -> None:
    """Cache paths are built from sha256 hex digests only (never from index-supplied text)."""
    if not _SHA256_HEX.fullmatch(key):
        raise ValueError(f"not a sha256 hex digest: {key[:80]!r}")


def sha256_of(path: Path) -> str:
    """The sha256 of the file at ``path``, streamed."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class PartialDownloadOrigin:
    """Where the bytes of a resumable ``.part`` came from (its sidecar)."""

    url: str
    sha256: str  # the sha256 the index gives for the whole file
    etag: str | None  # a strong ETag of the response, or None
    last_modified: str | None

    @property
    def validator(self) -> str | None:
        """What ``If-Range`` sends: the strong ETag, else the Last-Modified date."""
        return self.etag or self.last_modified


class PartialDownload:
    """A download's ``.part`` file, open for reading and writing and locked. ``resumable``:
    named by its URL, kept when the download breaks off (``keep``) with its ``origin``;
    else anonymous. ``adopt_file`` moves it into the store."""

    def __init__(
        self, path: Path, fh: BinaryIO, *, resumable: bool, origin: PartialDownloadOrigin | None
    ) -> None:
        self.path = path
        self.fh = fh
        self.resumable = resumable
        self.origin = origin
        self.keep = False  # set when the download broke off: kept for the next try

    @property
    def sidecar(self) -> Path:
        return self.path.with_name(self.path.name + ".json")

    def size(self) -> int:
        return os.fstat(self.fh.fileno()).st_size

    def resume_from(self) -> int:
        """How many bytes a download may ask the rest after (0: none are usable)."""
        if not self.resumable or self.origin is None or self.origin.validator is None:
            return 0
        return self.size()

    def restart(self) -> None:
        """Start over from zero: the bytes and the sidecar go."""
        self.origin = None
        self.sidecar.unlink(missing_ok=True)
        self.fh.seek(0)
        self.fh.truncate(0)

    def record(self, origin: PartialDownloadOrigin) -> None:
        """The bytes that follow come from ``origin`` (written before they are)."""
        self.origin = origin
        if self.resumable and origin.validator is not None:
            blob = {
                "url": origin.url,
                "sha256": origin.sha256,
                "etag": origin.etag,
                "last_modified": origin.last_modified,
            }
            atomic_write_bytes(self.sidecar, json.dumps(blob, sort_keys=True).encode())
        else:
            self.sidecar.unlink(missing_ok=True)


def _read_origin(sidecar: Path) -> PartialDownloadOrigin | None:
    try:
        with sidecar.open("rb") as fh:
            data = fh.read(MAX_SIDECAR_BYTES + 1)
        if len(data) > MAX_SIDECAR_BYTES:
            return None
        raw = json.loads(data)
        origin = PartialDownloadOrigin(
            url=raw["url"],
            sha256=raw["sha256"],
            etag=raw.get("etag"),
            last_modified=raw.get("last_modified"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    fields = (origin.url, origin.sha256, origin.etag or "", origin.last_modified or "")
    if not all(isinstance(f, str) for f in fields):
        return None
    return origin


class FileStore:
    """The file store at ``root``. ``note`` reports what the cache removed (the console's note)."""

    def __init__(self, root: Path, *, note: Callable[[str], None] | None = None) -> None:
        self.root = root
        self.note: Callable[[str], None] = note or (lambda _text: None)
        self._verified: dict[str, tuple[int, int, int]] = {}  # sha256 -> (size, mtime, inode)
        self._lock = threading.Lock()
        self._swept = False

    def prepare(self) -> None:
        """Make the cache's root and staging directory, and write (then remove) a file there:
        a cache that cannot be written fails now (an ``OSError`` naming the path), before
        any work rather than after the first download."""
        directory = self.staging_dir()
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, prefix=".probe-", suffix=".tmp")
        os.close(fd)
        Path(name).unlink()

    def file_path(self, sha256: str) -> Path:
        check_key(sha256)
        return self.root / "files" / "sha256" / sha256[:2] / sha256

    def has_file(self, sha256: str) -> bool:
        """A file of that name is there (not checked: use ``verified_file`` to use it)."""
        return self.file_path(sha256).is_file()

    def verified_file(self, sha256: str) -> Path | None:
        """The cached file named ``sha256`` when its bytes hash to that name, else None. A file
        that does not is removed and reported, so that the caller fetches it again."""
        path = self.file_path(sha256)
        try:
            st = path.stat()
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            self.evict(sha256, "is not a regular file")
            return None
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        with self._lock:
            if self._verified.get(sha256) == key:
                return path
        got = sha256_of(path)
        if got != sha256:
            self.evict(sha256, f"does not hash to its name (its bytes hash to {got})")
            return None
        with self._lock:
            self._verified[sha256] = key
        return path

    def evict(self, sha256: str, reason: str) -> None:
        """Remove the cached file named ``sha256`` and report why."""
        path = self.file_path(sha256)
        with self._lock:
            self._verified.pop(sha256, None)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:  # a directory planted at the path: adopting over it fails loudly
            self.note(f"note: the cached file {path} {reason}, and cannot be removed: {exc}")
            return
        self.note(f"note: the cached file {path} {reason}; removed it from the cache")

    def staging_dir(self) -> Path:
        return self.root / "tmp"

    @contextlib.contextmanager
    def staging_file(self) -> Iterator[tuple[Path, BinaryIO]]:
        """A new ``.part`` file in the staging directory, open for writing and locked while
        the block runs; removed at the end unless ``adopt_file`` moved it away."""
        directory = self.staging_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._sweep(directory)
        fd, name = tempfile.mkstemp(dir=directory, suffix=".part")
        path = Path(name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            fh = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        try:
            yield path, fh
        finally:
            fh.close()  # releases the lock
            path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def download_part(self, url: str, *, sha256: str | None) -> Iterator[PartialDownload]:
        """The ``.part`` of a download of ``url``: resumable (named by the URL, with what an
        earlier run left of it when its sidecar names this URL and ``sha256``) when the index
        gives the file's ``sha256``, else anonymous. Locked while the block runs; at its end a
        resumable part marked ``keep`` stays for the next try, anything else is removed."""
        if sha256 is not None:
            part = self._resumable_part(url, sha256)
            if part is not None:
                adopted = False
                try:
                    yield part
                    adopted = not part.path.exists()
                finally:
                    keep = part.keep and part.origin is not None and part.resume_from() > 0
                    part.fh.close()  # releases the lock
                    if adopted or not keep:
                        part.sidecar.unlink(missing_ok=True)
                        if not adopted:
                            part.path.unlink(missing_ok=True)
                return
        with self.staging_file() as (path, fh):
            yield PartialDownload(path, fh, resumable=False, origin=None)

    def _resumable_part(self, url: str, sha256: str) -> PartialDownload | None:
        """The locked ``.part`` named by ``url``; None when another run holds it or something
        other than a regular file is in its place (the download then uses an anonymous one)."""
        directory = self.staging_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._sweep(directory)
        path = directory / (hashlib.sha256(f"part\0{url}".encode()).hexdigest() + ".part")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            return None  # a link or a directory planted there: never written through
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                return None
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None  # another run downloads it now
        except BaseException:
            os.close(fd)
            raise
        part = PartialDownload(path, os.fdopen(fd, "r+b"), resumable=True, origin=None)
        origin = _read_origin(part.sidecar)
        if origin is not None and origin.url == url and origin.sha256 == sha256:
            part.origin = origin
        else:
            part.restart()  # bytes of unknown origin are never resumed
        return part

    def adopt_file(self, tmp: Path, sha256: str) -> Path:
        """Move a fully downloaded and verified file into place (read-only)."""
        dest = self.file_path(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.chmod(0o400)
        tmp.replace(dest)
        st = dest.stat()
        with self._lock:  # hashed while it was written
            self._verified[sha256] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return dest

    def _sweep(self, directory: Path) -> None:
        """Remove the ``.part`` files no running download holds (once per FileStore)."""
        with self._lock:
            if self._swept:
                return
            self._swept = True
        now = time.time()
        for part in directory.glob("*.part"):
            try:
                fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                age = now - os.fstat(fd).st_mtime
                sidecar = part.with_name(part.name + ".json")
                resumable = _RESUMABLE.fullmatch(part.name) is not None and sidecar.is_file()
                if age < (RESUME_KEEP_SECONDS if resumable else STALE_PART_SECONDS):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a download of another run, in progress
                part.unlink(missing_ok=True)
                sidecar.unlink(missing_ok=True)
            finally:
                os.close(fd)
        for sidecar in directory.glob("*.part.json"):  # the sidecar of a part that is gone
            with contextlib.suppress(OSError):
                if not sidecar.with_suffix("").exists() and (
                    now - sidecar.lstat().st_mtime >= STALE_PART_SECONDS
                ):
                    sidecar.unlink()
