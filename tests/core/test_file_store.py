"""The file store is never trusted, end to end through the CLI on real HTTP indexes: bytes
planted under ``files/sha256/`` are removed, reported and fetched again; cached files are
read-only; the leftovers of a killed run are swept (a resumable ``.part`` with its sidecar is
kept for a week)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from pathlib import Path

from core.file_store import FileStore
from testbed.distributions import WheelSpec, build_wheel
from tests.resolver.test_cache import cached, locked_names, plant, removed, sha256
from tests.support.lockcase import NATIVE, Case


def test_planted_bytes_of_a_hashed_file_never_decide_the_lock(case: Case) -> None:
    numpy = case.wheel("numpy", "1.26.4", NATIVE)
    case.publish(case.pypi, numpy)  # with its sha256
    evil = build_wheel(
        WheelSpec(name="numpy", version="1.26.4", tags=NATIVE, requires_dist=("evil",)),
        case.tmp / "planted",
    )
    target = cached(case, sha256(numpy))
    plant(target, evil.read_bytes())
    result = case.run("lock", case.stack(requirements=["numpy==1.26.4"]))
    assert result.code == 0, result.err
    assert result.err == removed(
        target, f"does not hash to its name (its bytes hash to {sha256(evil)})"
    )
    assert locked_names(case) == ["numpy"]  # the planted METADATA asked for evil
    assert target.read_bytes() == numpy.read_bytes()
    whole = [r for r in case.pypi.requests if r.path.endswith(".whl") and "Range" not in r.headers]
    assert len(whole) == 1


def test_leftovers_of_a_killed_run_are_swept_and_live_downloads_kept(case: Case) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    staging = case.cache / "tmp"
    staging.mkdir(parents=True)
    old = time.time() - 3600
    dead, live, young = staging / "dead.part", staging / "live.part", staging / "young.part"
    for part in (dead, live, young):
        part.write_bytes(b"partial")
    for part in (dead, live):
        os.utime(part, (old, old))
    with live.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as a download of another run holds its file
        result = case.run("lock", case.stack(requirements=["numpy==1.26.4"]))
    assert result.code == 0, result.err
    assert sorted(p.name for p in staging.iterdir()) == ["live.part", "young.part"]


def test_the_sweep_keeps_a_resumable_part_for_a_week_and_nothing_else(case: Case) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    staging = case.cache / "tmp"
    staging.mkdir(parents=True)
    hour, week = time.time() - 3600, time.time() - 8 * 24 * 3600
    kept, stale, bare, lone = (hashlib.sha256(n.encode()).hexdigest() for n in "abcd")
    for name, age, sidecar in ((kept, hour, True), (stale, week, True), (bare, hour, False)):
        part = staging / f"{name}.part"
        part.write_bytes(b"partial")
        if sidecar:
            (staging / f"{name}.part.json").write_text("{}")
            os.utime(staging / f"{name}.part.json", (age, age))
        os.utime(part, (age, age))
    (staging / f"{lone}.part.json").write_text("{}")  # its part is gone
    os.utime(staging / f"{lone}.part.json", (hour, hour))
    result = case.run("lock", case.stack(requirements=["numpy==1.26.4"]))
    assert (result.code, result.err) == (0, "")
    assert sorted(p.name for p in staging.iterdir()) == [f"{kept}.part", f"{kept}.part.json"]


def test_cached_files_are_read_only(case: Case) -> None:
    numpy = case.wheel("numpy", "1.26.4", NATIVE)
    case.publish(case.pypi, numpy)
    assert case.run("lock", case.stack(requirements=["numpy==1.26.4"])).code == 0
    assert cached(case, sha256(numpy)).stat().st_mode & 0o777 == 0o400


def test_a_file_that_does_not_hash_to_its_name_is_removed_and_reported(tmp_path: Path) -> None:
    notes: list[str] = []
    store = FileStore(tmp_path, note=notes.append)
    with store.staging_file() as (part, fh):
        fh.write(b"wheel")
        fh.flush()
        adopted = store.adopt_file(part, hashlib.sha256(b"wheel").hexdigest())
    assert store.verified_file(adopted.name) == adopted
    assert adopted.stat().st_mode & 0o777 == 0o400
    adopted.chmod(0o600)
    adopted.write_bytes(b"planted")
    assert store.verified_file(adopted.name) is None
    got = hashlib.sha256(b"planted").hexdigest()
    assert notes == [
        f"note: the cached file {adopted} does not hash to its name (its bytes hash to {got}); "
        "removed it from the cache"
    ]
    assert not adopted.exists()
