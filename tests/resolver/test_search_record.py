"""A re-lock whose inputs did not change replays its recorded search, end to end through
the CLI on real indexes; anything changed, or a record that is not one, runs the search."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from resolver.lockfile import load_lock
from resolver.search_record import decode
from testbed.distributions import WheelSpec, build_wheel
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, refused


def world(case: Case) -> Path:
    """torch (vendor) requiring filelock, numpy and filelock on the public index; the stack
    pins torch and asks for numpy."""
    torch = case.wheel("torch", TORCH, NATIVE, requires_dist=("filelock",))
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE), case.wheel("filelock", "3.17.0"))
    return case.stack(PIN_TORCH, ["numpy"])


def lock(case: Case, stack: Path, *extra: str) -> str:
    """Lock with -v; the search's line."""
    result = case.run("lock", stack, "-v", *extra)
    assert result.code == 0, result.err
    lines = [line for line in result.err.splitlines() if line.startswith("search: ")]
    assert len(lines) == 1, result.err
    return lines[0]


def lock_bytes(case: Case) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(case.lock_dir().iterdir())}


def versions(case: Case) -> dict[str, str]:
    return {p.name: p.version for p in load_lock(case.lock_dir()).packages}


def records(case: Case) -> list[Path]:
    directory = case.cache / "searches"
    return sorted(directory.iterdir()) if directory.is_dir() else []


def record_payload(path: Path) -> object:
    head, _, payload = path.read_bytes().partition(b"\n")
    assert head == f"search-record 1 {hashlib.sha256(payload).hexdigest()}".encode()
    return json.loads(payload)


def write_record(path: Path, payload: object) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    path.write_bytes(f"search-record 1 {hashlib.sha256(body).hexdigest()}\n".encode() + body)


def test_an_unchanged_relock_replays_and_locks_the_bytes_of_a_cold_lock(case: Case) -> None:
    stack = world(case)
    assert lock(case, stack) == "search: ran (no record)"
    assert len(records(case)) == 1
    replayed = lock(case, stack)
    assert replayed == "search: replayed (the 2 pages it read are unchanged)"
    warm = lock_bytes(case)
    shutil.rmtree(case.cache)  # a cold lock into an empty cache
    assert lock(case, stack) == "search: ran (no record)"
    assert lock_bytes(case) == warm
    assert versions(case) == {"filelock": "3.17.0", "numpy": "1.26.4", "torch": TORCH}


def test_a_replay_does_not_rewrite_the_record(case: Case) -> None:
    stack = world(case)
    lock(case, stack)
    (path,) = records(case)
    before = path.stat().st_mtime_ns, path.stat().st_ino
    assert lock(case, stack).startswith("search: replayed")
    assert (path.stat().st_mtime_ns, path.stat().st_ino) == before


def test_a_new_release_runs_the_search(case: Case) -> None:
    stack = world(case)
    lock(case, stack)
    case.publish(case.pypi, case.wheel("numpy", "1.26.5", NATIVE))
    assert lock(case, stack) == "search: ran (1 page changed)"
    assert versions(case)["numpy"] == "1.26.5"
    assert lock(case, stack) == "search: replayed (the 2 pages it read are unchanged)"


def test_a_yanked_file_runs_the_search(case: Case) -> None:
    stack = world(case)
    newer = case.wheel("numpy", "1.26.5", NATIVE)
    case.publish(case.pypi, newer)
    lock(case, stack)
    assert versions(case)["numpy"] == "1.26.5"
    case.publish(case.pypi, Listing(path=newer, yanked="broken build"))
    assert lock(case, stack) == "search: ran (1 page changed)"
    assert versions(case)["numpy"] == "1.26.4"


def test_a_requirement_added_runs_the_search(case: Case) -> None:
    stack = world(case)
    lock(case, stack)
    case.publish(case.pypi, case.wheel("six", "1.16.0"))
    assert lock(case, case.stack(PIN_TORCH, ["numpy", "six"])) == "search: ran (inputs changed)"
    assert versions(case)["six"] == "1.16.0"


def test_a_reuploaded_file_without_a_hash_has_its_metadata_read_again(case: Case) -> None:
    """The page lists no sha256 for six, so its bytes do not change the page: the METADATA
    the search read is read again, and a re-upload that changes it runs the search."""
    six = case.wheel("six", "1.16.0")
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, Listing(path=six, hash="none"), case.wheel("filelock", "3.17.0"))
    stack = case.stack(PIN_TORCH, ["six"])
    lock(case, stack)
    assert versions(case) == {"six": "1.16.0", "torch": TORCH}
    again = build_wheel(
        WheelSpec(name="six", version="1.16.0", requires_dist=("filelock",)), case.tmp / "new"
    )
    assert again.name == six.name
    case.pypi.replace(f"/files/{six.name}", again.read_bytes())
    assert lock(case, stack) == "search: ran (the METADATA of 1 file changed)"
    assert versions(case) == {"filelock": "3.17.0", "six": "1.16.0", "torch": TORCH}


def _garbage(path: Path) -> None:
    path.write_bytes(b"\x00not a record{")


def _truncated(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _wrong_sum(path: Path) -> None:
    _, _, payload = path.read_bytes().partition(b"\n")
    json.loads(payload)  # valid JSON, under a sum that is not its own
    path.write_bytes(b"search-record 1 " + b"0" * 64 + b"\n" + payload)


def _bad_row_hash(path: Path) -> None:
    payload = record_payload(path)
    assert isinstance(payload, dict)
    row = next(c for c in payload["entries"][0]["chosen"] if c[0] == "numpy")[3]
    row[2] = {"sha256": "not-a-digest"}
    write_record(path, payload)


def _other_version(path: Path) -> None:
    """Well-formed, under its own sum, but the version is not the one its row's file is."""
    payload = record_payload(path)
    assert isinstance(payload, dict)
    next(c for c in payload["entries"][0]["chosen"] if c[0] == "numpy")[1] = "1.26.5"
    write_record(path, payload)


def _huge(path: Path) -> None:
    with path.open("r+b") as fh:
        fh.truncate(33 << 20)  # sparse: larger than any record is read


@pytest.mark.parametrize(
    "spoil", [_garbage, _truncated, _wrong_sum, _bad_row_hash, _other_version, _huge]
)
def test_a_record_that_is_not_one_is_ignored_and_rewritten(case: Case, spoil: object) -> None:
    stack = world(case)
    lock(case, stack)
    good = lock_bytes(case)
    (path,) = records(case)
    spoil(path)  # type: ignore[operator]
    assert lock(case, stack) == "search: ran (the record is unusable)"
    assert lock_bytes(case) == good
    assert decode(record_payload(path)) is not None  # rewritten whole
    assert lock(case, stack) == "search: replayed (the 2 pages it read are unchanged)"


def test_a_failed_lock_writes_no_record(case: Case) -> None:
    world(case)
    refused(case, case.stack(PIN_TORCH, ["numpy", "nosuch"]))
    assert records(case) == []


def test_a_failed_relock_keeps_the_record_of_the_last_lock(case: Case) -> None:
    stack = world(case)
    lock(case, stack)
    (path,) = records(case)
    before = path.read_bytes()
    case.pypi.fail("/simple/numpy/", 404, times=5)
    assert case.run("lock", stack, "--retries", "0").code == 1
    assert path.read_bytes() == before
    case.pypi.clear_faults()
    assert lock(case, stack) == "search: replayed (the 2 pages it read are unchanged)"


def test_the_search_again_after_a_line_map_pin_is_recorded_and_replayed(case: Case) -> None:
    """numpy's line, chosen by the search, maps compressed-tensors: a second search."""
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(
        case.pypi,
        case.wheel("numpy", "1.26.4", NATIVE),
        case.wheel("compressed-tensors", "0.17.0", requires_dist=("filelock",)),
        case.wheel("compressed-tensors", "0.18.0"),
        case.wheel("filelock", "3.17.0"),
    )
    rules = '  line_map:\n    compressed-tensors: {follows: numpy, versions: {"1.26": "0.17.0"}}'
    stack = case.stack(PIN_TORCH, ["numpy"], rules=rules)
    assert lock(case, stack) == "search: ran (no record)"
    (path,) = records(case)
    payload = record_payload(path)
    assert isinstance(payload, dict)
    assert len(payload["entries"]) == 2
    first = lock_bytes(case)
    assert versions(case)["compressed-tensors"] == "0.17.0"
    assert lock(case, stack) == "search: replayed (the 2 pages it read are unchanged)"
    assert lock_bytes(case) == first
    case.publish(case.pypi, case.wheel("numpy", "1.26.5", NATIVE))
    assert lock(case, stack) == "search: ran (1 page changed)"
    assert versions(case) == {
        "compressed-tensors": "0.17.0",
        "filelock": "3.17.0",
        "numpy": "1.26.5",
        "torch": TORCH,
    }


def _spoil_bodies(case: Case) -> None:
    """Change the body of numpy's cached page (the one page that names numpy), keeping its
    head line (digest and validators)."""
    for page in (case.cache / "pages").glob("*.page"):
        line, _, body = page.read_bytes().partition(b"\n")
        page.write_bytes(line + b"\n" + body.replace(b"numpy", b"nump0"))


def test_a_replay_reads_no_page_body_and_a_search_checks_each_body_it_reads(case: Case) -> None:
    stack = world(case)
    lock(case, stack)
    cold = lock_bytes(case)
    _spoil_bodies(case)  # what a replay never reads cannot mislead it
    result = case.run("lock", stack, "-v")
    assert result.code == 0, result.err
    assert "search: replayed (the 2 pages it read are unchanged)" in result.err
    # the 3 pages revalidated (all 304) and the public index's torch (a 404: the note on a
    # name two indexes have asks for it); none of the bodies is read, so none is fetched again
    assert _network(result.err).startswith(
        "network: 4 index pages read (0 fresh in the cache, 3 not modified)"
    )
    assert lock_bytes(case) == cold
    # a search that runs reads the bodies: each is checked against its digest, and numpy's,
    # not the page the index said is current, is asked for again without validators
    more = case.stack(PIN_TORCH, ["numpy", "filelock==3.17.0"])
    result = case.run("lock", more, "-v")
    assert result.code == 0, result.err
    assert "search: ran (inputs changed)" in result.err
    assert versions(case) == {"filelock": "3.17.0", "numpy": "1.26.4", "torch": TORCH}
    # the same 4 requests, then numpy's page once more, whole
    assert _network(result.err).startswith(
        "network: 5 index pages read (0 fresh in the cache, 3 not modified)"
    )


def _network(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("network: "))


def _page_requests(case: Case) -> list[tuple[str, bool]]:
    """(path, conditional) of every page request the public index saw, in order of path."""
    return sorted(
        (r.path, "If-None-Match" in r.headers or "If-Modified-Since" in r.headers)
        for r in case.pypi.requests
        if r.path.startswith("/simple/")
    )


def test_a_relock_asks_once_for_each_page_and_a_changed_one_whole(case: Case) -> None:
    stack = world(case)
    lock(case, stack)
    case.pypi.clear_requests()
    assert lock(case, stack).startswith("search: replayed")
    # the record's pages revalidated together, one conditional request each; torch is the
    # note on a name two indexes have (a 404 is never cached, so asked plainly)
    assert _page_requests(case) == [
        ("/simple/filelock/", True),
        ("/simple/numpy/", True),
        ("/simple/torch/", False),
    ]
    case.publish(
        case.pypi, case.wheel("numpy", "1.26.4", NATIVE), case.wheel("numpy", "2.0.0", NATIVE)
    )
    case.pypi.clear_requests()
    assert lock(case, stack) == "search: ran (1 page changed)"
    assert _page_requests(case) == [  # numpy's 200 is read as it arrives: one request
        ("/simple/filelock/", True),
        ("/simple/numpy/", True),
        ("/simple/torch/", False),
    ]
    assert versions(case)["numpy"] == "2.0.0"
