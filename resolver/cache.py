"""The on-disk cache: content-addressed files, wheel metadata, and revalidatable pages.

Layout under the cache root::

    files/sha256/ab/abcdef...        the bytes of a downloaded file, named by their sha256
    metadata/abcdef...               a wheel's METADATA (or a download record), by a sha256 key
    pages/<sha256 of url>.json       an index page: url, validators, content type, body
    tmp/*.part                       downloads in progress

The cache is never trusted. A file is used only when its bytes hash to its name:
``verified_file`` re-hashes it each run before it is used (once per ``Cache``: a file already
hashed is not hashed again while its size, mtime and inode stay the same), and a file that does
not hash to its name is removed and reported (``note``) so that the caller fetches it again.
Re-hashing rather than trusting a record of an earlier check, because whatever can plant a
file in the cache can plant its record too: only the bytes themselves are evidence. The cost is
one streaming sha256 of each cached file a run uses, read from the page cache at about 1.5 GB/s
(``bench/lock_download.py`` measures a warm re-lock of the 1.1 GB vendor stack with it). Files
are made read-only when adopted, so that a hard link into a build context is never written
through by accident.

A download is written to ``tmp/`` (``staging_file``: the ``.part`` file is ``flock``-ed while
its download runs) and moved into ``files/`` by ``adopt_file`` only once verified. The first
staging of a ``Cache`` removes the ``.part`` files that no running download holds: what a
killed run left behind.
"""

from __future__ import annotations

import base64
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


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """``$BUILD_IMAGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vllm-musa-image``, else ``~/.cache/``."""
    if env.get("BUILD_IMAGE_CACHE_DIR"):
        return Path(env["BUILD_IMAGE_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "vllm-musa-image"


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _check_key(key: str) -> None:
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


@dataclass(frozen=True)
class CachedPage:
    url: str
    content_type: str
    body: bytes
    etag: str | None
    last_modified: str | None
    fresh_until: float = 0.0  # from the server's Cache-Control max-age; 0: revalidate always


class Cache:
    """The cache at ``root``. ``note`` reports what the cache removed (the console's note)."""

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

    # files -------------------------------------------------------------------------
    def file_path(self, sha256: str) -> Path:
        _check_key(sha256)
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
        """Remove the ``.part`` files no running download holds (once per Cache)."""
        with self._lock:
            if self._swept:
                return
            self._swept = True
        now = time.time()
        for part in directory.glob("*.part"):
            try:
                fd = os.open(part, os.O_RDONLY)
            except OSError:
                continue
            try:
                if now - os.fstat(fd).st_mtime < STALE_PART_SECONDS:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a download of another run, in progress
                part.unlink(missing_ok=True)
            finally:
                os.close(fd)

    # metadata ----------------------------------------------------------------------
    def metadata_path(self, key: str) -> Path:
        _check_key(key)
        return self.root / "metadata" / key  # one directory: no mkdir per new prefix

    def get_metadata(self, key: str, *, max_bytes: int | None = None) -> bytes | None:
        """The entry ``key``; None when absent, or larger than ``max_bytes``."""
        path = self.metadata_path(key)
        try:
            with path.open("rb") as fh:
                if max_bytes is None:
                    return fh.read()
                data = fh.read(max_bytes + 1)
        except OSError:
            return None
        return data if len(data) <= max_bytes else None

    def put_metadata(self, key: str, data: bytes) -> None:
        atomic_write_bytes(self.metadata_path(key), data)

    def drop_metadata(self, key: str) -> None:
        self.metadata_path(key).unlink(missing_ok=True)

    # pages -------------------------------------------------------------------------
    def _page_path(self, key: str) -> Path:
        return self.root / "pages" / (hashlib.sha256(key.encode()).hexdigest() + ".json")

    def get_page(self, url: str, *, max_bytes: int | None = None) -> CachedPage | None:
        """The page cached for ``url``; None when absent, unreadable, or (with ``max_bytes``,
        the largest body allowed) too large to be a page this run would accept."""
        path = self._page_path(url)
        try:
            if max_bytes is not None and path.stat().st_size > max_bytes * 4 // 3 + (1 << 16):
                return None  # base64 makes 4 of 3, plus the fields around it
            raw = json.loads(path.read_bytes())
            return CachedPage(
                url=raw["url"],
                content_type=raw["content_type"],
                body=base64.b64decode(raw["body"]),
                etag=raw.get("etag"),
                last_modified=raw.get("last_modified"),
                fresh_until=float(raw.get("fresh_until", 0.0)),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put_page(self, page: CachedPage, *, key: str) -> None:
        """Store ``page`` (whose ``url`` is the final one, after redirects) under ``key``,
        the URL that was asked for."""
        blob = {
            "url": page.url,
            "content_type": page.content_type,
            "etag": page.etag,
            "last_modified": page.last_modified,
            "fresh_until": page.fresh_until,
            "body": base64.b64encode(page.body).decode(),
        }
        atomic_write_bytes(self._page_path(key), json.dumps(blob).encode())
