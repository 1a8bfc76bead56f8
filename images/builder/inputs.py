"""The build's non-wheel inputs, fetched on the host into the content-addressed cache.

The image build downloads nothing that can be fetched beforehand: ``rustup-init`` (pinned by
the manifest's sha256) and the archive keys (checked against their fingerprints) are fetched
here, through the command's ``NetworkOptions``, and land in the cache only once their hash is
known. ``offline`` never touches the network: a missing input is an error naming the stack to
fetch. An input with no pinned hash (a key) is recorded by URL in
``<cache>/inputs/<sha256(url)>.json``. A download is read whole into memory, so it is bounded
by ``MAX_INPUT_BYTES``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from core.errors import FetchError, HashMismatchError, OfflineMissingError, TransportError
from core.file_store import FileStore
from core.fsutil import atomic_write_bytes, atomic_write_text
from core.network import NetworkOptions
from core.transport import RetryPolicy, Transport
from manifest import PinnedFile

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
FETCH_HINT = "run `build_image.py fetch {stack}` with network access first"
MAX_INPUT_BYTES = 256 << 20  # one downloaded input (rustup-init, an archive key)


def fetch_url(url: str, options: NetworkOptions) -> bytes:
    """GET ``url`` through the network's proxy for it, connection failures, 429 and 5xx
    retried with backoff; any other answer that is not a 2xx is final."""
    retry = RetryPolicy(attempts=options.attempts, backoff=2.0, max_delay=30.0, retry_after=False)
    try:
        with (
            Transport(
                timeout=options.timeout,
                network=options.network,
                sleep=options.sleep,
                deadline=options.deadline,
            ) as http,
            http.request("GET", url, retry=retry, max_body=MAX_INPUT_BYTES) as resp,
        ):
            if 200 <= resp.status < 300:
                return resp.content
            last = f"HTTP {resp.status}"
    except TransportError as exc:
        last = exc.detail
    proxy = options.network.proxy_for(url)
    via = f"through {proxy.describe()}" if proxy is not None else "without a proxy"
    raise FetchError(
        f"cannot fetch {url} ({via}) after {options.attempts} attempt(s): {last}",
        hint="check the URL, the mirror (--mirror NAME=URL) and the host's proxy (--proxy URL, "
        "HTTPS_PROXY)",
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ensure_pinned(
    cache: FileStore, label: str, pinned: PinnedFile, options: NetworkOptions, *, stack: str
) -> Path:
    """The cached file with ``pinned.sha256``, downloaded and verified if missing."""
    found = cache.verified_file(pinned.sha256)
    if found is not None:
        return found
    shown = f"{pinned.url}, sha256 {pinned.sha256[:16]}..."
    data = _fetch_missing(label, shown, pinned.url, options, stack)
    got = _sha256(data)
    if got != pinned.sha256:
        raise HashMismatchError(
            f"{label}: {pinned.url} hashes to {got}, the manifest pins {pinned.sha256}",
            hint="the URL serves other bytes than were pinned; do not build from them",
        )
    path = cache.file_path(got)
    atomic_write_bytes(path, data)
    return path


def _fetch_missing(label: str, shown: str, url: str, options: NetworkOptions, stack: str) -> bytes:
    """The bytes of an input the cache does not have: fetched, or offline refused."""
    if options.offline:
        raise OfflineMissingError(
            f"offline build: {label} ({shown}) is not fetched",
            hint=FETCH_HINT.format(stack=stack),
        )
    return fetch_url(url, options)


def recorded_file(cache: FileStore, record: Path) -> Path | None:
    """The cached file a record (a JSON object with a ``sha256``) points at, if it is there
    and still has that sha256; an unreadable record is no record."""
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sha = data.get("sha256") if isinstance(data, dict) else None
    if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
        return None
    return cache.verified_file(sha)


def ensure_by_url(
    cache: FileStore, label: str, url: str, options: NetworkOptions, *, stack: str
) -> Path:
    """An input without a pinned hash (it is verified otherwise): cached by URL record."""
    record = cache.root / "inputs" / f"{_sha256(url.encode())}.json"
    found = recorded_file(cache, record)
    if found is not None:
        return found
    data = _fetch_missing(label, url, url, options, stack)
    sha = _sha256(data)
    path = cache.file_path(sha)
    atomic_write_bytes(path, data)
    atomic_write_text(record, json.dumps({"url": url, "sha256": sha}, sort_keys=True) + "\n")
    return path
