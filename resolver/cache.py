"""The on-disk cache: content-addressed files, wheel metadata, and revalidatable pages.

Layout under the cache root::

    files/sha256/ab/abcdef...        the bytes of a downloaded file, named by their sha256
    metadata/abcdef...               a wheel's METADATA (or a download record), by a sha256 key
    pages/<sha256 of url>.page       an index page: a line of its digest, url, validators and
                                     content type, then its body as served
    pages/<sha256 of url>.rows       that page parsed, keyed by the sha256 of what it parsed
    pages/<sha256 of url>.<key>.rows that page parsed for one target (its files the target may
                                     run), keyed by the sha256 of what it parsed and the key
    searches/<slot>.json             a stack's search record (``resolver.search_record``)
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

A search record (one per slot: the sha256 of a stack's name, target and index URLs) is
written atomically after a successful lock, with the sha256 of its payload on its first
line, as a kept parse is (``put_search``); one that does not read back whole is None, and its
payload is checked as untrusted input by ``resolver.search_record``.

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

The first staging of a ``Cache`` sweeps what no running download holds: anonymous ``.part``
files, ``.part`` files without a sidecar and sidecars without a ``.part`` (older than
``STALE_PART_SECONDS``), and resumable ones older than ``RESUME_KEEP_SECONDS``. A kept ``.part``
is never larger than the download's size cap, so the staging directory holds at most one
capped file per URL whose download broke off within that week.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from core.fsutil import atomic_write_bytes

STALE_PART_SECONDS = 60.0  # a .part file younger than this is never swept (being created)
RESUME_KEEP_SECONDS = 7 * 24 * 3600.0  # a resumable .part untouched this long is swept
MAX_SIDECAR_BYTES = 64 << 10


def _str(value: object) -> str:
    if type(value) is not str:
        raise TypeError("not a string")
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)


def _read_summed(path: Path, max_bytes: int, head_of: Callable[[bytes], bytes]) -> object | None:
    """The JSON payload of a file written as a head line and the payload, when it reads back
    whole (at most ``max_bytes``) and its head is ``head_of(payload)``; else None."""
    try:
        with path.open("rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError:
        return None
    if len(data) > max_bytes:
        return None
    head, newline, payload = data.partition(b"\n")
    if not newline or head != head_of(payload):
        return None
    try:
        loaded: object = json.loads(payload)
        return loaded
    except (ValueError, RecursionError):
        return None


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _header_value(value: object) -> str | None:
    """A validator as it is sent back in a request header: no control character (a CR or
    LF planted in the cache would end the header early and add one of its own)."""
    text = _opt_str(value)
    if text is not None and _CONTROL.search(text):
        raise ValueError("a control character in a header value")
    return text


def _page_head(line: bytes) -> PageHead | None:
    m = _PAGE_HEAD.fullmatch(line)
    if m is None:
        return None
    try:
        head = json.loads(m.group(2))
        return PageHead(
            url=_str(head["url"]),
            content_type=_str(head["content_type"]),
            etag=_header_value(head.get("etag")),
            last_modified=_header_value(head.get("last_modified")),
            fresh_until=float(head.get("fresh_until", 0.0)),
            digest=m.group(1).decode(),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        return None


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """``$BUILD_IMAGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/vllm-musa-image``, else ``~/.cache/``."""
    if env.get("BUILD_IMAGE_CACHE_DIR"):
        return Path(env["BUILD_IMAGE_CACHE_DIR"])
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "vllm-musa-image"


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_RESUMABLE = re.compile(r"[0-9a-f]{64}\.part")


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


@dataclass(frozen=True, kw_only=True)
class PartOrigin:
    """Where the bytes of a resumable ``.part`` came from (its sidecar)."""

    url: str
    sha256: str  # the sha256 the index gives for the whole file
    etag: str | None  # a strong ETag of the response, or None
    last_modified: str | None

    @property
    def validator(self) -> str | None:
        """What ``If-Range`` sends: the strong ETag, else the Last-Modified date."""
        return self.etag or self.last_modified


def usable_validator(etag: str | None, last_modified: str | None) -> tuple[str | None, str | None]:
    """The (ETag, Last-Modified) that ``If-Range`` may carry: a weak ETag may not (RFC 9110)."""
    strong = etag if etag and not etag.startswith("W/") else None
    return strong, last_modified or None


def conditional_headers(etag: str | None, last_modified: str | None) -> dict[str, str]:
    """The headers of a conditional GET for a copy kept with these validators; none: the
    request is a plain GET."""
    headers: dict[str, str] = {}
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    return headers


class Part:
    """A download's ``.part`` file, open for reading and writing and locked. ``resumable``:
    named by its URL, kept when the download breaks off (``keep``) with its ``origin``;
    else anonymous. ``adopt_file`` moves it into the store."""

    def __init__(
        self, path: Path, fh: BinaryIO, *, resumable: bool, origin: PartOrigin | None
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

    def record(self, origin: PartOrigin) -> None:
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


_VARIANT = re.compile(r"[A-Za-z0-9_-]{1,80}")


def _parsed_head(digest: str, payload: bytes) -> bytes:
    """The first line of a parsed page: what it was parsed from, and the sum of the rest."""
    return f"parsed-page 1 {digest} {hashlib.sha256(payload).hexdigest()}".encode()


def _search_head(payload: bytes) -> bytes:
    """The first line of a search record: its format and the sum of the rest."""
    return f"search-record 1 {hashlib.sha256(payload).hexdigest()}".encode()


def _read_origin(sidecar: Path) -> PartOrigin | None:
    try:
        with sidecar.open("rb") as fh:
            data = fh.read(MAX_SIDECAR_BYTES + 1)
        if len(data) > MAX_SIDECAR_BYTES:
            return None
        raw = json.loads(data)
        origin = PartOrigin(
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


def page_digest(url: str, content_type: str, body: bytes) -> str:
    """The sha256 that names one version of a page: its URL, content type and bytes."""
    return hashlib.sha256(b"\0".join((url.encode(), content_type.encode(), body))).hexdigest()


@dataclass(frozen=True)
class CachedPage:
    url: str
    content_type: str
    body: bytes
    etag: str | None
    last_modified: str | None
    fresh_until: float = 0.0  # from the server's Cache-Control max-age; 0: revalidate always
    # ``page_digest`` of the page, computed when not given
    digest: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.digest:
            digest = page_digest(self.url, self.content_type, self.body)
            object.__setattr__(self, "digest", digest)

    @property
    def head(self) -> PageHead:
        """The page without its body: every field of ``PageHead`` is one of the page's."""
        return PageHead(**{f.name: getattr(self, f.name) for f in dataclasses.fields(PageHead)})


@dataclass(frozen=True)
class PageHead:
    """What the line before a cached page's body says: enough to revalidate the page and to
    know which version of it the cache holds, without reading the body."""

    url: str
    content_type: str
    etag: str | None
    last_modified: str | None
    fresh_until: float
    digest: str


_PAGE_HEAD = re.compile(rb"page 1 ([0-9a-f]{64}) (\{[^\n]*\})")


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

    @contextlib.contextmanager
    def download_part(self, url: str, *, sha256: str | None) -> Iterator[Part]:
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
            yield Part(path, fh, resumable=False, origin=None)

    def _resumable_part(self, url: str, sha256: str) -> Part | None:
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
        part = Part(path, os.fdopen(fd, "r+b"), resumable=True, origin=None)
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
        """Remove the ``.part`` files no running download holds (once per Cache)."""
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
        return self.root / "pages" / (hashlib.sha256(key.encode()).hexdigest() + ".page")

    def get_page_head(self, url: str) -> PageHead | None:
        """The head line of the page cached for ``url``, its body unread (and so unchecked:
        ``get_page`` checks it when it is used); None when absent or unreadable."""
        try:
            with self._page_path(url).open("rb") as fh:
                line = fh.readline(1 << 16)
        except OSError:
            return None
        return _page_head(line.rstrip(b"\n")) if line.endswith(b"\n") else None

    def get_page(self, url: str, *, max_bytes: int | None = None) -> CachedPage | None:
        """The page cached for ``url``; None when absent, unreadable, not what was stored
        (its digest does not match), or (with ``max_bytes``, the largest body allowed) too
        large to be a page this run would accept."""
        path = self._page_path(url)
        limit = None if max_bytes is None else max_bytes + (1 << 16)  # the head line, too
        try:
            with path.open("rb") as fh:
                data = fh.read() if limit is None else fh.read(limit + 1)
        except OSError:
            return None
        if limit is not None and len(data) > limit:
            return None
        line, newline, body = data.partition(b"\n")
        head = _page_head(line) if newline else None
        if head is None:
            return None
        page = CachedPage(
            url=head.url,
            content_type=head.content_type,
            body=body,
            etag=head.etag,
            last_modified=head.last_modified,
            fresh_until=head.fresh_until,
        )
        return page if page.digest == head.digest else None

    def _parsed_path(self, url: str, variant: str | None) -> Path:
        if variant is None:
            return self._page_path(url).with_suffix(".rows")
        if _VARIANT.fullmatch(variant) is None:
            raise ValueError(f"not a parsed-page variant: {variant!r}")
        return self._page_path(url).with_suffix(f".{variant}.rows")

    def get_parsed(
        self, url: str, digest: str, *, max_bytes: int, variant: str | None = None
    ) -> object | None:
        """What ``put_parsed`` stored for ``url`` (and ``variant``) when it was stored for
        ``digest`` (the sha256 of the bytes it was parsed from) and reads back whole: a
        payload that does not hash to the sum stored with it, or any other file, is None.
        The caller checks the payload as untrusted input."""
        path = self._parsed_path(url, variant)
        return _read_summed(path, max_bytes, functools.partial(_parsed_head, digest))

    def put_parsed(
        self, url: str, digest: str, payload: object, *, variant: str | None = None
    ) -> None:
        """Keep ``payload`` (JSON types) beside the page of ``url``, for the bytes whose
        sha256 is ``digest``; it replaces what an earlier version of the page left. A
        ``variant`` (a target's key: letters, digits, ``_`` and ``-``) has a file of its
        own, so that the parses of one page for two targets are both kept."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        path = self._parsed_path(url, variant)
        atomic_write_bytes(path, _parsed_head(digest, body) + b"\n" + body)

    # search records ------------------------------------------------------------------
    def search_path(self, slot: str) -> Path:
        _check_key(slot)
        return self.root / "searches" / f"{slot}.json"

    def get_search(self, slot: str, *, max_bytes: int) -> object | None:
        """What ``put_search`` stored for ``slot`` when it reads back whole (at most
        ``max_bytes``, and the payload hashes to the sum stored with it); else None. The
        caller checks the payload as untrusted input."""
        return _read_summed(self.search_path(slot), max_bytes, _search_head)

    def put_search(self, slot: str, payload: object) -> None:
        """Keep ``payload`` (JSON types) as the search record of ``slot``, replacing any."""
        body = json.dumps(payload, separators=(",", ":")).encode()
        atomic_write_bytes(self.search_path(slot), _search_head(body) + b"\n" + body)

    def put_page(self, page: CachedPage, *, key: str) -> None:
        """Store ``page`` (whose ``url`` is the final one, after redirects) under ``key``,
        the URL that was asked for: one line of its digest and fields, then its bytes."""
        head = dataclasses.asdict(page.head)
        del head["digest"]  # the line names it before the fields
        line = f"page 1 {page.digest} {json.dumps(head, separators=(',', ':'))}\n"
        atomic_write_bytes(self._page_path(key), line.encode() + page.body)
