"""Host-side inputs: pinned downloads fail closed, retries name the URL, proxies are
explicit, and an offline fetch names what is missing. A real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import http.server
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import FetchError, HashMismatchError, OfflineMissingError
from core.file_store import FileStore
from core.network import NetworkOptions, Proxy, network_from_env
from images.builder.inputs import ensure_by_url, ensure_pinned, fetch_url
from manifest import PinnedFile
from tests.support.http_handlers import serving

RUSTUP = b"#!/bin/sh\necho fake rustup-init\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    failures_left = 0
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        if self.path == "/flaky" and type(self).failures_left > 0:
            type(self).failures_left -= 1
            self.send_error(503)
            return
        if self.path in ("/rustup-init", "/flaky", "/key.asc"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(RUSTUP)))
            self.end_headers()
            self.wfile.write(RUSTUP)
            return
        self.send_error(404)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Handler.failures_left = 0
    _Handler.hits = 0
    with serving(_Handler) as url:
        yield url


STACK = "stack/demo.yaml"


def _options(**kw: object) -> NetworkOptions:
    sleeps: list[float] = []
    base = {"attempts": 3, "timeout": 5.0, "sleep": sleeps.append}
    return NetworkOptions(**{**base, **kw})  # type: ignore[arg-type]


def test_rustup_init_with_a_wrong_hash_fails_closed(server: str, tmp_path: Path) -> None:
    cache = FileStore(tmp_path)
    wrong = "f" * 64
    pinned = PinnedFile(url=f"{server}/rustup-init", sha256=wrong)
    with pytest.raises(HashMismatchError) as info:
        ensure_pinned(cache, "components.vllm-rs.rustup_init", pinned, _options(), stack=STACK)
    got = hashlib.sha256(RUSTUP).hexdigest()
    assert info.value.message == (
        f"components.vllm-rs.rustup_init: {server}/rustup-init hashes to {got}, "
        f"the manifest pins {wrong}"
    )
    assert not (tmp_path / "files").exists()  # nothing lands in the cache


def test_rustup_init_with_the_right_hash_is_cached(server: str, tmp_path: Path) -> None:
    cache = FileStore(tmp_path)
    sha = hashlib.sha256(RUSTUP).hexdigest()
    pinned = PinnedFile(url=f"{server}/rustup-init", sha256=sha)
    path = ensure_pinned(cache, "rustup-init", pinned, _options(), stack=STACK)
    assert path == cache.file_path(sha)
    assert path.read_bytes() == RUSTUP
    hits = _Handler.hits
    ensure_pinned(cache, "rustup-init", pinned, _options(offline=True), stack=STACK)
    assert _Handler.hits == hits  # from the cache


def test_transient_failures_are_retried_with_backoff(server: str) -> None:
    _Handler.failures_left = 2
    sleeps: list[float] = []
    assert fetch_url(f"{server}/flaky", _options(sleep=sleeps.append)) == RUSTUP
    assert sleeps == [2.0, 4.0]


def test_after_the_retries_the_url_is_named(server: str) -> None:
    _Handler.failures_left = 5
    with pytest.raises(FetchError) as info:
        fetch_url(f"{server}/flaky", _options())
    assert info.value.message == (
        f"cannot fetch {server}/flaky (without a proxy) after 3 attempt(s): HTTP 503"
    )


def test_a_404_is_not_retried(server: str) -> None:
    with pytest.raises(FetchError) as info:
        fetch_url(f"{server}/missing", _options())
    assert _Handler.hits == 1
    assert info.value.message.endswith("after 3 attempt(s): HTTP 404")


def test_an_inherited_proxy_is_not_used(server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert fetch_url(f"{server}/key.asc", _options()) == RUSTUP


def test_the_commands_proxy_is_used(server: str) -> None:
    network = network_from_env({"HTTP_PROXY": "http://user:secret@127.0.0.1:9"})
    with pytest.raises(FetchError) as info:
        fetch_url(f"{server}/key.asc", _options(network=network, attempts=1))
    assert info.value.message.startswith(
        f"cannot fetch {server}/key.asc (through the proxy http://127.0.0.1:9 (HTTP_PROXY)) "
        "after 1 attempt(s): through the proxy http://127.0.0.1:9 (HTTP_PROXY): "
    )
    assert "secret" not in info.value.message


def test_mirrors_proxy_serves_the_host_only_when_the_command_names_none() -> None:
    env = network_from_env({})
    assert env.or_proxy("http://build-proxy:3128", "mirrors.proxy").proxy_for(
        "https://x/"
    ) == Proxy(url="http://build-proxy:3128", source="mirrors.proxy")
    own = network_from_env({"HTTPS_PROXY": "http://host-proxy:8080"})
    assert own.or_proxy("http://build-proxy:3128", "mirrors.proxy") is own
    assert env.or_proxy(None, "mirrors.proxy") is env


def test_offline_names_the_missing_input(tmp_path: Path) -> None:
    cache = FileStore(tmp_path)
    url = "https://keyserver.example/key.asc"
    with pytest.raises(OfflineMissingError) as info:
        ensure_by_url(cache, "the Deadsnakes key", url, _options(offline=True), stack=STACK)
    assert info.value.message == f"offline build: the Deadsnakes key ({url}) is not fetched"
    assert info.value.hint == "run `build_image.py fetch stack/demo.yaml` with network access first"
    pinned = PinnedFile(url="https://x.example/rustup-init", sha256="ab" * 32)
    with pytest.raises(OfflineMissingError) as info:
        ensure_pinned(
            cache, "components.vllm-rs.rustup_init", pinned, _options(offline=True), stack=STACK
        )
    assert info.value.message == (
        "offline build: components.vllm-rs.rustup_init (https://x.example/rustup-init, "
        "sha256 abababababababab...) is not fetched"
    )


def test_a_key_fetched_once_is_reused_by_url(server: str, tmp_path: Path) -> None:
    cache = FileStore(tmp_path)
    first = ensure_by_url(cache, "the Deadsnakes key", f"{server}/key.asc", _options(), stack=STACK)
    again = ensure_by_url(
        cache, "the Deadsnakes key", f"{server}/key.asc", _options(offline=True), stack=STACK
    )
    assert first == again
    assert again.read_bytes() == RUSTUP


def test_a_cached_input_whose_bytes_changed_is_removed_and_fetched_again(
    server: str, tmp_path: Path
) -> None:
    # the cache is content-addressed: a file is used by its name only if it still hashes to it
    notes: list[str] = []
    cache = FileStore(tmp_path, note=notes.append)
    path = ensure_by_url(cache, "the Deadsnakes key", f"{server}/key.asc", _options(), stack=STACK)
    path.write_bytes(b"other bytes")
    other = hashlib.sha256(b"other bytes").hexdigest()
    removed = (
        f"note: the cached file {path} does not hash to its name (its bytes hash to {other}); "
        "removed it from the cache"
    )
    hits = _Handler.hits
    again = ensure_by_url(cache, "the Deadsnakes key", f"{server}/key.asc", _options(), stack=STACK)
    assert (again, again.read_bytes(), _Handler.hits) == (path, RUSTUP, hits + 1)
    assert notes == [removed]
    sha = hashlib.sha256(RUSTUP).hexdigest()
    pinned = PinnedFile(url=f"{server}/rustup-init", sha256=sha)

    def by_url() -> Path:
        return ensure_by_url(
            cache, "the Deadsnakes key", f"{server}/key.asc", _offline(), stack=STACK
        )

    def by_pin() -> Path:
        return ensure_pinned(cache, "rustup-init", pinned, _offline(), stack=STACK)

    for fetch in (by_url, by_pin):
        FileStore(tmp_path).file_path(sha).write_bytes(b"other bytes")
        notes.clear()
        with pytest.raises(OfflineMissingError) as info:
            fetch()
        assert notes == [removed]
        assert info.value.message.endswith(" is not fetched")
        assert not path.exists()


def _offline() -> NetworkOptions:
    return _options(offline=True)


def test_a_record_with_a_bad_hash_is_not_fetched_not_a_traceback(tmp_path: Path) -> None:
    import json

    cache = FileStore(tmp_path)
    url = "https://keyserver.example/key.asc"
    record = tmp_path / "inputs" / f"{hashlib.sha256(url.encode()).hexdigest()}.json"
    record.parent.mkdir(parents=True)
    for bad in ("../../../etc/passwd", None, ["x"]):
        record.write_text(json.dumps({"url": url, "sha256": bad}))
        with pytest.raises(OfflineMissingError):
            ensure_by_url(cache, "the Deadsnakes key", url, _options(offline=True), stack=STACK)
    record.write_text("[1]")
    with pytest.raises(OfflineMissingError):
        ensure_by_url(cache, "the Deadsnakes key", url, _options(offline=True), stack=STACK)
