"""The build's non-wheel inputs, fetched on the host into the content-addressed cache.

The image build downloads nothing itself that can be fetched beforehand: ``rustup-init``
(pinned by the manifest's sha256) and the Deadsnakes archive key (checked against its
fingerprint inside the build) are fetched here, land in ``Cache.file_path(sha256)`` only after
their hash is known good, and are placed into the build context's ``inputs/`` directory.

Requests go through the proxies and trust store of ``FetchSettings.network``, the command's
(``core.network``: ``--proxy``, ``--cert`` and the environment pip and uv read, with
``mirrors.proxy`` as the host's proxy too when it names none); the environment is never read
here. A transient failure is retried ``attempts`` times with backoff, then fails naming
the URL. ``offline`` never touches the network: a missing input is an error naming it.

An input with no pinned hash (the key) is recorded by URL: ``<cache>/inputs/<sha256(url)>.json``
holds the sha256 of the bytes fetched from that URL. A cached file is used only while its bytes
still hash to its name (``Cache.verified_file`` re-hashes it): one that does not is removed from
the cache, reported, and fetched again (offline: named as not fetched); an unreadable record
counts as not fetched. A download is read whole into memory, so it is bounded:
``MAX_INPUT_BYTES`` (rustup-init is about 20 MB, a key a few kB), and the command's network
deadline (``FetchSettings.deadline``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import FetchError, HashMismatchError, OfflineMissingError, TransportError
from core.fsutil import atomic_write_bytes, atomic_write_text
from core.network import DIRECT, NetworkConfig
from core.transport import Deadline, RetryPolicy, Transport
from manifest import PinnedFile
from resolver.cache import Cache

_SHA256_RE = re.compile(r"[0-9a-f]{64}")
FETCH_HINT = "run `build_image.py fetch {stack}` with network access first"
MAX_INPUT_BYTES = 256 << 20  # one downloaded input (rustup-init, an archive key)


@dataclass(frozen=True, kw_only=True)
class FetchSettings:
    stack: str  # for hints
    offline: bool = False
    network: NetworkConfig = DIRECT  # the host's proxies and trust store
    attempts: int = 3
    timeout: float = 30.0
    sleep: Callable[[float], None] = field(default=time.sleep)
    deadline: Deadline | None = None  # the command's network budget (None: its own default)


def fetch_url(url: str, settings: FetchSettings) -> bytes:
    """GET ``url`` through the network's proxy for it (or none), retried with backoff; name it
    on failure.

    Connection failures, 429 and 5xx are retried (2 s, 4 s, ... at most 30 s apart); any
    other answer that is not a 2xx is final."""
    retry = RetryPolicy(
        attempts=max(1, settings.attempts), backoff=2.0, max_delay=30.0, retry_after=False
    )
    try:
        with (
            Transport(
                timeout=settings.timeout,
                network=settings.network,
                sleep=settings.sleep,
                deadline=settings.deadline,
            ) as http,
            http.request("GET", url, retry=retry, max_body=MAX_INPUT_BYTES) as resp,
        ):
            if 200 <= resp.status < 300:
                return resp.content
            last = f"HTTP {resp.status}"
    except TransportError as exc:
        last = exc.detail
    proxy = settings.network.proxy_for(url)
    via = f"through {proxy.describe()}" if proxy is not None else "without a proxy"
    raise FetchError(
        f"cannot fetch {url} ({via}) after {settings.attempts} attempt(s): {last}",
        hint="check the URL, the mirror (--mirror NAME=URL) and the host's proxy (--proxy URL, "
        "HTTPS_PROXY)",
    )


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def ensure_pinned(cache: Cache, label: str, pinned: PinnedFile, settings: FetchSettings) -> Path:
    """The cached file with ``pinned.sha256``, downloaded and verified if missing (fail closed)."""
    found = cache.verified_file(pinned.sha256)
    if found is not None:
        return found
    shown = f"{pinned.url}, sha256 {pinned.sha256[:16]}..."
    data = _fetch_missing(label, shown, pinned.url, settings)
    got = _sha256(data)
    if got != pinned.sha256:
        raise HashMismatchError(
            f"{label}: {pinned.url} hashes to {got}, the manifest pins {pinned.sha256}",
            hint="the URL serves other bytes than were pinned; do not build from them",
        )
    path = cache.file_path(got)
    atomic_write_bytes(path, data)
    return path


def _fetch_missing(label: str, shown: str, url: str, settings: FetchSettings) -> bytes:
    """The bytes of an input the cache does not have: fetched from ``url``, or in an offline
    build refused, naming it as ``label (shown)``."""
    if settings.offline:
        raise OfflineMissingError(
            f"offline build: {label} ({shown}) is not fetched",
            hint=FETCH_HINT.format(stack=settings.stack),
        )
    return fetch_url(url, settings)


def _record_path(cache: Cache, url: str) -> Path:
    return cache.root / "inputs" / f"{_sha256(url.encode())}.json"


def recorded_file(
    cache: Cache, record: Path, *, label: str, settings: FetchSettings
) -> Path | None:
    """The cached file a record (a JSON object with a ``sha256``) points at, if it is there
    and still has that sha256 (one that does not is removed from the cache; an unreadable
    record is no record). ``label`` and ``settings`` are the caller's, for its messages."""
    del label, settings
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    sha = data.get("sha256") if isinstance(data, dict) else None
    if not isinstance(sha, str) or not _SHA256_RE.fullmatch(sha):
        return None
    return cache.verified_file(sha)


def ensure_by_url(cache: Cache, label: str, url: str, settings: FetchSettings) -> Path:
    """An input without a pinned hash (it is verified otherwise): cached by URL record."""
    record = _record_path(cache, url)
    found = recorded_file(cache, record, label=label, settings=settings)
    if found is not None:
        return found
    data = _fetch_missing(label, url, url, settings)
    sha = _sha256(data)
    path = cache.file_path(sha)
    atomic_write_bytes(path, data)
    atomic_write_text(record, json.dumps({"url": url, "sha256": sha}, sort_keys=True) + "\n")
    return path
