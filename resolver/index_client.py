"""All HTTP of the resolver: index pages, metadata files, range reads and downloads.

Every request has a timeout; connection errors, 429 and 5xx are retried a bounded number of
times with exponential backoff, then reported naming the index. Pages are cached on disk and
revalidated (ETag / Last-Modified). Downloads are hashed while streaming and land in the
content-addressed cache only after their hash is verified.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import threading
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from core.errors import HashMismatchError, IndexError_, TransportError
from core.fsutil import atomic_write_bytes, temporary_file_in
from core.transport import (
    MAX_REDIRECTS,
    RETRY_STATUSES,
    OriginAuth,
    Response,
    RetryPolicy,
    Transport,
    basic_auth,
)
from core.urls import check_fetch_url, project_url, redact
from resolver import __version__
from resolver.cache import Cache, CachedPage, default_cache_dir
from resolver.endpoints import IndexEndpoint, auth_variable
from resolver.simple_page import (
    ACCEPT,
    IndexFile,
    PageParseError,
    parse_find_links_page,
    parse_project_page,
)

CHUNK = 1 << 20
USER_AGENT = f"vllm-musa-image/{__version__}"


@dataclass(frozen=True)
class Downloaded:
    sha256: str
    size: int
    path: Path


@dataclass(frozen=True)
class NetworkSettings:
    timeout: float = 30.0
    attempts: int = 4
    backoff: float = 0.5
    concurrency: int = 16
    refresh: bool = False  # revalidate every page, even one the server said is still fresh


__all__ = ["Downloaded", "IndexClient", "IndexEndpoint", "NetworkSettings", "open_client"]


def open_client(
    cache_dir: Path | None,
    env: Mapping[str, str],
    *,
    timeout: float = 30.0,
    retries: int = 3,
    refresh: bool = False,
) -> IndexClient:
    """A client on the cache at ``cache_dir`` (default: from ``env``, see ``default_cache_dir``)."""
    root = cache_dir or default_cache_dir(env)
    settings = NetworkSettings(timeout=timeout, attempts=max(1, retries + 1), refresh=refresh)
    return IndexClient(Cache(root), settings)


class IndexClient:
    def __init__(
        self,
        cache: Cache,
        settings: NetworkSettings | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cache = cache
        self.settings = settings or NetworkSettings()
        # one keep-alive pool for the hundreds of small pages a closure needs; proxies and
        # netrc are never read from the environment: they are configuration, passed on purpose
        self._transport = Transport(
            timeout=self.settings.timeout,
            user_agent=USER_AGENT,
            connections=max(self.settings.concurrency, 4),
            sleep=sleep,
        )
        self._retry = RetryPolicy(attempts=self.settings.attempts, backoff=self.settings.backoff)
        self._flat_pages: dict[str, list[IndexFile]] = {}
        self._flat_lock = threading.Lock()
        self.stats = {
            "pages": 0,
            "fresh": 0,
            "not_modified": 0,
            "downloads": 0,
            "metadata": 0,
            "ranges": 0,
        }
        self._stats_lock = threading.Lock()

    def close(self) -> None:
        self._transport.close()

    def _count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] += 1

    # ----------------------------------------------------------------- requests

    @contextmanager
    def _request(
        self,
        index: IndexEndpoint,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
        ok: frozenset[int] = frozenset({200}),
    ) -> Iterator[Response]:
        """GET with timeout and bounded retries; yields a response whose status is in ``ok``
        or 404 (callers decide what a 404 means).

        Redirects are followed by the transport, every hop checked: it must be https (or
        http on loopback), and the index's credentials go to the index's own origin only,
        never to a CDN or another host a file URL or a redirect names."""
        attempts = self.settings.attempts
        auth = None
        if index.auth is not None:
            auth = OriginAuth(origin=index.url, headers={"Authorization": basic_auth(*index.auth)})
        try:
            resp = self._transport.request(
                "GET",
                url,
                headers=headers,
                auth=auth,
                check_hop=partial(check_fetch_url, index.name),
                stream=stream,
                retry=self._retry,
            )
        except TransportError as exc:
            if exc.kind == "redirects":
                raise IndexError_(
                    f"index {index.name}: GET {redact(url)} redirected more than "
                    f"{MAX_REDIRECTS} times"
                ) from None
            raise IndexError_(
                f"index {index.name}: GET {redact(url)} failed after {attempts} attempts "
                f"({exc.name}: {exc.detail})",
                hint="check that the index is up and reachable; nothing was written",
            ) from None
        with resp:
            status = resp.status
            if status in ok or status == 404:
                yield resp
                return
        if status in RETRY_STATUSES:
            raise IndexError_(
                f"index {index.name}: GET {redact(url)} failed after {attempts} attempts "
                f"(HTTP {status})",
                hint="check that the index is up and reachable; nothing was written",
            )
        hint = None
        if status in (401, 403):
            hint = f"the index wants credentials: set {auth_variable(index.name)}=user:token"
        raise IndexError_(
            f"index {index.name}: GET {redact(url)} answered HTTP {status}", hint=hint
        )

    # ----------------------------------------------------------------- pages

    def project_files(self, index: IndexEndpoint, project: str) -> list[IndexFile] | None:
        """The files of ``project`` on ``index``; None when the index says 404."""
        if index.format == "find-links":
            return self._flat_files(index)
        url = project_url(index.url, project)
        page = self._get_page(index, url)
        if page is None:
            return None
        try:
            return parse_project_page(page.body, page.content_type, page.url)
        except PageParseError as exc:
            raise IndexError_(f"index {index.name}: {redact(url)}: {exc}") from None

    def _flat_files(self, index: IndexEndpoint) -> list[IndexFile]:
        with self._flat_lock:
            if index.url in self._flat_pages:
                return self._flat_pages[index.url]
            page = self._get_page(index, index.url)
            if page is None:
                raise IndexError_(f"index {index.name}: find-links page {redact(index.url)} is 404")
            try:
                files = parse_find_links_page(page.body, page.content_type, page.url)
            except PageParseError as exc:
                raise IndexError_(f"index {index.name}: {redact(index.url)}: {exc}") from None
            self._flat_pages[index.url] = files
            return files

    def _get_page(self, index: IndexEndpoint, url: str) -> CachedPage | None:
        cached = self.cache.get_page(url)
        now = time.time()
        if cached is not None and not self.settings.refresh and cached.fresh_until > now:
            self._count("fresh")
            return cached
        headers = {"Accept": ACCEPT}
        if cached is not None:
            if cached.etag:
                headers["If-None-Match"] = cached.etag
            if cached.last_modified:
                headers["If-Modified-Since"] = cached.last_modified
        self._count("pages")
        with self._request(index, url, headers=headers, ok=frozenset({200, 304})) as resp:
            if resp.status == 404:
                return None
            if resp.status == 304:
                if cached is None:
                    raise IndexError_(
                        f"index {index.name}: {redact(url)} answered 304 to a plain GET"
                    )
                self._count("not_modified")
                fresh_until = _fresh_until(resp.headers.get("Cache-Control"), now)
                if fresh_until > cached.fresh_until:
                    cached = dataclasses.replace(cached, fresh_until=fresh_until)
                    self.cache.put_page(cached, key=url)
                return cached
            page = CachedPage(
                url=resp.url,
                content_type=resp.headers.get("Content-Type", "text/html"),
                body=resp.content,
                etag=resp.headers.get("ETag"),
                last_modified=resp.headers.get("Last-Modified"),
                fresh_until=_fresh_until(resp.headers.get("Cache-Control"), now),
            )
        if page.etag or page.last_modified or page.fresh_until > now:
            self.cache.put_page(page, key=url)
        return page

    # ----------------------------------------------------------------- downloads

    def download(
        self, index: IndexEndpoint, file: IndexFile, *, label: str, max_size: int | None = None
    ) -> Downloaded:
        """The verified bytes of ``file`` in the cache; downloads only when missing or changed.

        ``label`` names the package for messages. The index's hashes, when given, must match.
        ``max_size``: a file the index says is larger, or that grows larger while streaming,
        is refused before it is read whole.
        """
        if max_size is not None and file.size is not None and file.size > max_size:
            raise IndexError_(_too_large(label, index, file, file.size, max_size))
        expected = file.hashes.get("sha256")
        if expected and self.cache.has_file(expected):
            return Downloaded(
                expected,
                self.cache.file_path(expected).stat().st_size,
                self.cache.file_path(expected),
            )
        record_key = _key("download-record", file.url)
        record = self._url_record(record_key)
        headers: dict[str, str] = {}
        if record and not expected and self.cache.has_file(record["sha256"]):
            if record.get("etag"):
                headers["If-None-Match"] = record["etag"]
            if record.get("last_modified"):
                headers["If-Modified-Since"] = record["last_modified"]
        with (
            temporary_file_in(self.cache.staging_dir()) as tmp,
            self._request(
                index, file.url, headers=headers, stream=True, ok=frozenset({200, 304})
            ) as resp,
        ):
            if resp.status == 404:
                raise IndexError_(
                    f"{label}: index {index.name} lists {file.filename}, "
                    f"but {redact(file.url)} is 404"
                )
            if resp.status == 304 and record is not None:
                sha = record["sha256"]
                return Downloaded(sha, int(record["size"]), self.cache.file_path(sha))
            self._count("downloads")
            announced = resp.headers.get("Content-Length", "")
            if max_size is not None and announced.isdigit() and int(announced) > max_size:
                raise IndexError_(_too_large(label, index, file, int(announced), max_size))
            algos = {a: hashlib.new(a) for a in file.hashes if a in hashlib.algorithms_guaranteed}
            algos.setdefault("sha256", hashlib.sha256())
            size = 0
            try:
                with tmp.open("wb") as out:
                    for chunk in resp.iter_bytes(CHUNK):
                        size += len(chunk)
                        if max_size is not None and size > max_size:
                            raise IndexError_(_too_large(label, index, file, size, max_size))
                        out.write(chunk)
                        for h in algos.values():
                            h.update(chunk)
            except TransportError as exc:
                raise IndexError_(
                    f"{label}: index {index.name}: download of {file.filename} broke off "
                    f"after {size} bytes ({exc.detail})",
                    hint="run the command again; nothing was written",
                ) from None
            for algo, want in sorted(file.hashes.items()):
                if algo in algos and algos[algo].hexdigest() != want:
                    raise HashMismatchError(
                        f"{label}: index {index.name} gives {algo}={want} for {file.filename}, "
                        f"but the downloaded bytes hash to {algos[algo].hexdigest()}",
                        hint="the index serves other bytes than it advertises; do not use them "
                        "until the index owner explains the change",
                    )
            if file.size is not None and file.size != size:
                raise HashMismatchError(
                    f"{label}: index {index.name} gives size {file.size} for {file.filename}, "
                    f"but {size} bytes arrived"
                )
            sha = algos["sha256"].hexdigest()
            path = self.cache.adopt_file(tmp, sha)
            validators = {
                "sha256": sha,
                "size": size,
                "etag": resp.headers.get("ETag"),
                "last_modified": resp.headers.get("Last-Modified"),
            }
        atomic_write_bytes(self.cache.metadata_path(record_key), json.dumps(validators).encode())
        return Downloaded(sha, size, path)

    def _have_downloaded(self, file: IndexFile) -> bool:
        record = self._url_record(_key("download-record", file.url))
        return record is not None and self.cache.has_file(record["sha256"])

    def _url_record(self, key: str) -> dict[str, str] | None:
        raw = self.cache.get_metadata(key)
        if raw is None:
            return None
        try:
            data: dict[str, str] = json.loads(raw)
        except ValueError:
            return None
        return data

    # ----------------------------------------------------------------- metadata

    def core_metadata(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        """The wheel's METADATA without downloading the wheel where possible.

        PEP 658/714 metadata file (hash verified), else HTTP range reads into the zip,
        else the whole wheel.
        """
        sha = file.hashes.get("sha256")
        # keyed by the URL and the advertised hash together: an index that lies about a hash
        # cannot plant metadata that another index's file with that hash would then read.
        # A file without a hash may be re-uploaded under its URL: its metadata is not kept.
        key = _key("metadata", file.url, sha) if sha else None
        cached = self.cache.get_metadata(key) if key else None
        if cached is not None:
            return cached
        if sha and self.cache.has_file(sha):
            data = metadata_from_wheel(self.cache.file_path(sha), file.filename)
        elif not sha and self._have_downloaded(file):
            # downloaded before: one conditional request says whether those bytes still stand
            data = metadata_from_wheel(self.download(index, file, label=label).path, file.filename)
        elif file.metadata_hashes is not None:
            data = self._metadata_file(index, file, label=label)
        else:
            data = self._metadata_by_range(index, file, label=label)
        if key is not None:
            self.cache.put_metadata(key, data)
        return data

    def _metadata_file(self, index: IndexEndpoint, file: IndexFile, *, label: str) -> bytes:
        assert file.metadata_hashes is not None
        url = file.metadata_url
        self._count("metadata")
        with self._request(index, url) as resp:
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
        self._count("ranges")
        reader = _RangeReader(self, index, file.url)
        if reader.whole is not None:  # the server ignores ranges: keep the bytes we now have
            self._adopt_bytes(index, file, reader.whole, label=label)
            return metadata_from_zip_bytes(reader.whole, file.filename, label=label)
        try:
            with zipfile.ZipFile(reader) as zf:
                return _metadata_member(zf, file.filename, label=label)
        except zipfile.BadZipFile as exc:
            raise IndexError_(
                f"{label}: {file.filename} on index {index.name} is not a zip: {exc}"
            ) from None

    def _adopt_bytes(
        self, index: IndexEndpoint, file: IndexFile, data: bytes, *, label: str
    ) -> None:
        sha = hashlib.sha256(data).hexdigest()
        want = file.hashes.get("sha256")
        if want is not None and want != sha:
            raise HashMismatchError(
                f"{label}: index {index.name} gives sha256={want} for {file.filename}, "
                f"but the downloaded bytes hash to {sha}"
            )
        if want is not None:  # only verified bytes enter the content-addressed store
            with temporary_file_in(self.cache.staging_dir()) as tmp:
                tmp.write_bytes(data)
                self.cache.adopt_file(tmp, sha)

    def range_get(self, index: IndexEndpoint, url: str, header: str) -> Response:
        """One range request; returns the (already read) response."""
        with self._request(
            index,
            url,
            headers={"Range": header, "Accept-Encoding": "identity"},
            ok=frozenset({200, 206}),
        ) as resp:
            if resp.status == 404:
                raise IndexError_(f"index {index.name}: {redact(url)} is 404")
            _ = resp.content
            return resp


class _RangeReader(io.RawIOBase):
    """A seekable read-only view of a remote file, backed by HTTP range requests."""

    TAIL = 64 * 1024

    def __init__(self, client: IndexClient, index: IndexEndpoint, url: str) -> None:
        super().__init__()
        self._client, self._index, self._url = client, index, url
        self.whole: bytes | None = None
        resp = client.range_get(index, url, f"bytes=-{self.TAIL}")
        if resp.status == 200:  # the server ignores ranges: we have the whole file
            self.whole = resp.content
            self.size = len(resp.content)
            self._chunks: dict[int, bytes] = {0: resp.content}
        else:
            total = resp.headers.get("Content-Range", "").rsplit("/", 1)[-1]
            self.size = int(total) if total.isdigit() else 0
            self._chunks = {self.size - len(resp.content): resp.content}
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
            resp = self._client.range_get(self._index, self._url, f"bytes={self._pos}-{fetch_end}")
            self._chunks[self._pos if resp.status == 206 else 0] = resp.content
            data = self._find(self._pos, end) or b""
        self._pos += len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _metadata_member(zf: zipfile.ZipFile, filename: str, *, label: str) -> bytes:
    names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(names) != 1:
        from core.errors import MetadataError

        found = "none" if not names else ", ".join(names)
        raise MetadataError(
            f"{label}: {filename} has no single .dist-info/METADATA (found {found})"
        )
    return zf.read(names[0])


def metadata_from_zip_bytes(data: bytes, filename: str, *, label: str) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return _metadata_member(zf, filename, label=label)


def metadata_from_wheel(path: Path, filename: str, *, label: str = "") -> bytes:
    try:
        with zipfile.ZipFile(path) as zf:
            return _metadata_member(zf, filename, label=label or filename)
    except zipfile.BadZipFile as exc:
        from core.errors import MetadataError

        raise MetadataError(
            f"{label or filename}: {filename} is not a valid wheel (zip): {exc}"
        ) from None


def _too_large(label: str, index: IndexEndpoint, file: IndexFile, size: int, limit: int) -> str:
    return (
        f"{label}: {file.filename} on index {index.name} has {size} bytes or more, more than "
        f"the {limit} this file may have"
    )


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _fresh_until(cache_control: str | None, now: float) -> float:
    """``now + max-age`` when the server allows reuse without revalidation, else 0."""
    if not cache_control:
        return 0.0
    directives = [d.strip().lower() for d in cache_control.split(",")]
    if any(d in ("no-cache", "no-store") for d in directives):
        return 0.0
    for d in directives:
        if d.startswith("max-age="):
            value = d.removeprefix("max-age=")
            if value.isdigit():
                return now + min(int(value), 24 * 3600)
    return 0.0
