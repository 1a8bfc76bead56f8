"""What the build stages is what was locked: the wheelhouse fill and the offline check hash the
cached bytes against the lock, and a cached file that does not match is removed from the cache,
reported, and fetched again (online) or named as not fetched (offline)."""

from __future__ import annotations

import dataclasses
import hashlib
from functools import partial
from pathlib import Path

import pytest

from core.errors import ContextError, HashMismatchError, OfflineMissingError
from core.file_store import FileStore
from core.network import NetworkOptions
from images.builder.context import fetch_inputs, fill_wheelhouse
from images.builder.plan import plan_inputs
from resolver.lockfile import Lock, LockedPackage
from tests.support.images import lock_for, manifest


def _locked(tmp_path: Path, notes: list[str]) -> tuple[Lock, FileStore]:
    """The demo lock with stand-in wheels whose bytes are their filenames, all cached."""
    lock = lock_for(manifest(tmp_path))
    cache = FileStore(tmp_path / "cache", note=notes.append)
    packages = []
    for p in lock.packages:
        data = p.filename.encode()
        sha = hashlib.sha256(data).hexdigest()
        path = cache.file_path(sha)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        packages.append(dataclasses.replace(p, sha256=sha, size=len(data)))
    return dataclasses.replace(lock, packages=tuple(packages)), cache


def _plant(cache: FileStore, p: LockedPackage, data: bytes) -> str:
    cache.file_path(p.sha256).write_bytes(data)
    return (
        f"note: the cached file {cache.file_path(p.sha256)} does not hash to its name (its "
        f"bytes hash to {hashlib.sha256(data).hexdigest()}); removed it from the cache"
    )


def test_a_planted_wheel_is_removed_fetched_again_and_reported(tmp_path: Path) -> None:
    notes: list[str] = []
    lock, cache = _locked(tmp_path, notes)
    torch = next(p for p in lock.packages if p.name == "torch")
    note = _plant(cache, torch, b"planted bytes")
    asked: list[str] = []

    def fetch(p: LockedPackage) -> Path:
        asked.append(p.name)
        path = cache.file_path(p.sha256)
        path.write_bytes(p.filename.encode())  # the index's bytes: the locked ones
        return path

    fetched = fill_wheelhouse(lock.packages, tmp_path / "ctx", cache, fetch)
    assert (asked, fetched, notes) == (["torch"], [torch.filename], [note])
    staged = tmp_path / "ctx" / "wheelhouse" / "runtime" / torch.filename
    assert staged.read_bytes() == torch.filename.encode()


def test_a_fetch_that_serves_other_bytes_is_refused(tmp_path: Path) -> None:
    notes: list[str] = []
    lock, cache = _locked(tmp_path, notes)
    torch = next(p for p in lock.packages if p.name == "torch")
    _plant(cache, torch, b"planted bytes")

    def fetch(p: LockedPackage) -> Path:
        path = tmp_path / "served"
        path.write_bytes(b"served bytes")
        return path

    with pytest.raises(HashMismatchError) as info:
        fill_wheelhouse(lock.packages, tmp_path / "ctx", cache, fetch)
    assert info.value.message == (
        f"torch {torch.version}: {torch.filename} hashes to "
        f"{hashlib.sha256(b'served bytes').hexdigest()}, the lock has {torch.sha256}"
    )
    assert not (tmp_path / "ctx" / "wheelhouse" / "runtime" / torch.filename).exists()


def test_without_a_network_a_planted_wheel_is_not_staged(tmp_path: Path) -> None:
    notes: list[str] = []
    lock, cache = _locked(tmp_path, notes)
    mate = next(p for p in lock.packages if p.name == "mate")
    note = _plant(cache, mate, b"planted bytes")
    with pytest.raises(ContextError) as info:
        fill_wheelhouse(lock.packages, tmp_path / "ctx", cache, None)
    assert info.value.message.startswith(f"mate 0.2.7: {mate.filename} (sha256 ")
    assert notes == [note]
    assert not cache.file_path(mate.sha256).exists()


def test_the_offline_check_hashes_what_is_cached(tmp_path: Path) -> None:
    notes: list[str] = []
    m = manifest(tmp_path)
    lock, cache = _locked(tmp_path, notes)
    plan = plan_inputs(m, lock)
    offline = NetworkOptions(offline=True)
    check = partial(fetch_inputs, plan, cache=cache, git_cache=tmp_path / "git", fetch=None)
    check(options=offline, stack=str(m.path))
    assert notes == []
    wheel = plan.wheels[0]
    note = _plant(cache, wheel, b"planted bytes")
    with pytest.raises(OfflineMissingError) as info:
        check(options=offline, stack=str(m.path))
    assert info.value.message == (
        f"offline build: wheel {wheel.name} {wheel.version} ({wheel.filename}) is not fetched"
    )
    assert notes == [note]
