"""The on-disk cache: content-addressed files, wheel metadata, and revalidatable pages.

Layout under the cache root::

    files/sha256/ab/abcdef...        the bytes of a downloaded file, named by their sha256
    metadata/abcdef...               a wheel's METADATA (or a download record), by a sha256 key
    pages/<sha256 of url>.json       an index page: url, validators, content type, body
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from core.fsutil import atomic_write_bytes


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


@dataclass(frozen=True)
class CachedPage:
    url: str
    content_type: str
    body: bytes
    etag: str | None
    last_modified: str | None
    fresh_until: float = 0.0  # from the server's Cache-Control max-age; 0: revalidate always


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root

    # files -------------------------------------------------------------------------
    def file_path(self, sha256: str) -> Path:
        _check_key(sha256)
        return self.root / "files" / "sha256" / sha256[:2] / sha256

    def has_file(self, sha256: str) -> bool:
        return self.file_path(sha256).is_file()

    def staging_dir(self) -> Path:
        return self.root / "tmp"

    def adopt_file(self, tmp: Path, sha256: str) -> Path:
        """Move a fully downloaded and verified file into place."""
        dest = self.file_path(sha256)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(dest)
        return dest

    # metadata ----------------------------------------------------------------------
    def metadata_path(self, key: str) -> Path:
        _check_key(key)
        return self.root / "metadata" / key  # one directory: no mkdir per new prefix

    def get_metadata(self, key: str) -> bytes | None:
        try:
            return self.metadata_path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put_metadata(self, key: str, data: bytes) -> None:
        atomic_write_bytes(self.metadata_path(key), data)

    # pages -------------------------------------------------------------------------
    def _page_path(self, key: str) -> Path:
        return self.root / "pages" / (hashlib.sha256(key.encode()).hexdigest() + ".json")

    def get_page(self, url: str) -> CachedPage | None:
        try:
            raw = json.loads(self._page_path(url).read_bytes())
        except (FileNotFoundError, ValueError):
            return None
        return CachedPage(
            url=raw["url"],
            content_type=raw["content_type"],
            body=base64.b64decode(raw["body"]),
            etag=raw.get("etag"),
            last_modified=raw.get("last_modified"),
            fresh_until=float(raw.get("fresh_until", 0.0)),
        )

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
