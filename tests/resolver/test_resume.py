"""Resumable downloads, end to end through the CLI on a real index server that drops the
connection mid-body: the next request asks for the rest only (``Range: bytes=N-`` with
``If-Range`` on the ETag), about one file crosses the wire in all, and the whole file is
hashed at the end. Bytes kept from before are never trusted: a tampered ``.part``, a sidecar
of another URL, a server that ignores ranges or answers 416 all end in a clean download from
zero and the right file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import unquote

from testbed.http_rules import Request
from tests.support.lockcase import NATIVE, Case

SIZE = 400_000
CUT = 150_000


def _numpy(case: Case) -> tuple[Path, Path]:
    wheel = case.wheel("numpy", "1.26.4", NATIVE, payload_bytes=SIZE)
    case.publish(case.pypi, wheel)
    return wheel, case.stack(requirements=["numpy==1.26.4"])


def _gets(case: Case, wheel: Path) -> list[Request]:
    """The GETs of the whole file or of its rest (not the METADATA range reads from its end)."""
    return [
        r
        for r in case.pypi.requests
        if unquote(r.path) == f"/files/{wheel.name}"
        and r.method == "GET"
        and not (r.headers.get("Range") or "").startswith("bytes=-")
    ]


def _sent(case: Case, wheel: Path) -> int:
    return case.pypi.bytes_sent.get(f"/files/{wheel.name}", 0)


def _cached(case: Case, wheel: Path) -> Path:
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return case.cache / "files" / "sha256" / sha[:2] / sha


def _etag(wheel: Path) -> str:
    return f'"{hashlib.sha256(wheel.read_bytes()).hexdigest()}"'


def _parts(case: Case) -> list[str]:
    return sorted(p.suffix for p in (case.cache / "tmp").iterdir())


def _broken_run(case: Case, wheel: Path, stack: Path) -> None:
    """A run whose download breaks off after CUT bytes, with no attempt left to resume."""
    case.pypi.break_off(f"/files/{wheel.name}", after=CUT)
    result = case.run("lock", stack, "--retries", "0")
    broke = f"IncompleteRead({CUT} bytes read, {wheel.stat().st_size - CUT} more expected)"
    assert (result.code, result.err) == (
        1,
        f"error[index]: numpy: index pypi: download of {wheel.name} broke off after {CUT} "
        f"bytes (('Connection broken: {broke}', {broke}))\n"
        f"hint: run the command again: it resumes from the {CUT} bytes kept in the cache\n",
    )


def test_a_dropped_download_resumes_in_the_same_run(case: Case) -> None:
    wheel, stack = _numpy(case)
    case.pypi.break_off(f"/files/{wheel.name}", after=CUT)
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    first, second = _gets(case, wheel)
    assert "Range" not in first.headers
    assert (second.headers.get("Range"), second.headers.get("If-Range")) == (
        f"bytes={CUT}-",
        _etag(wheel),
    )
    size = wheel.stat().st_size
    assert size <= _sent(case, wheel) < size + 70_000  # the file once, plus the METADATA tail
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()
    assert _parts(case) == []


def test_a_download_dropped_in_one_run_resumes_in_the_next(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    assert _parts(case) == [".json", ".part"]
    [sidecar] = (case.cache / "tmp").glob("*.part.json")
    assert json.loads(sidecar.read_bytes())["etag"] == _etag(wheel)
    case.pypi.clear_requests()
    case.pypi.bytes_sent.clear()
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    [rest] = _gets(case, wheel)
    assert rest.headers.get("Range") == f"bytes={CUT}-"
    assert _sent(case, wheel) - (wheel.stat().st_size - CUT) < 70_000  # the rest, the tail
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()
    assert _parts(case) == []


def test_a_tampered_part_is_downloaded_again_from_zero(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    [part] = (case.cache / "tmp").glob("*.part")
    part.write_bytes(b"\0" * CUT)  # same length, other bytes
    case.pypi.clear_requests()
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == (
        f"note: numpy: the {CUT} bytes kept from an earlier download of {wheel.name} do not "
        "complete it to its sha256; downloading it again\n"
    )
    assert [r.headers.get("Range") for r in _gets(case, wheel)] == [f"bytes={CUT}-", None]
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()
    assert _parts(case) == []


def test_a_part_whose_sidecar_names_another_url_is_not_resumed(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    [sidecar] = (case.cache / "tmp").glob("*.part.json")
    fields = json.loads(sidecar.read_bytes())
    sidecar.write_text(json.dumps({**fields, "url": "http://127.0.0.1:1/files/other.whl"}))
    case.pypi.clear_requests()
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    assert [r.headers.get("Range") for r in _gets(case, wheel)] == [None]
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()


def test_a_server_that_ignores_ranges_sends_the_whole_file_again(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    case.pypi.ranges = False
    case.pypi.clear_requests()
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()
    assert _parts(case) == []


def test_a_416_restarts_the_download_from_zero_once(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    case.pypi.clear_requests()
    case.pypi.answer(f"/files/{wheel.name}", b"", status=416)
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    assert [r.headers.get("Range") for r in _gets(case, wheel)] == [f"bytes={CUT}-", None]
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()


def test_a_file_changed_on_the_server_is_not_spliced(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    other = case.wheel("numpy", "1.26.4", NATIVE, payload_bytes=SIZE + 1)
    case.pypi.replace(f"/files/{wheel.name}", other.read_bytes())
    case.publish(case.pypi, other)  # the index now advertises the new bytes
    case.pypi.clear_requests()
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    assert [r.headers.get("Range") for r in _gets(case, other)] == [None]  # another sha256
    assert _cached(case, other).read_bytes() == other.read_bytes()


def test_bytes_kept_survive_a_server_that_is_down_for_a_run(case: Case) -> None:
    wheel, stack = _numpy(case)
    _broken_run(case, wheel, stack)
    case.pypi.fail(f"/files/{wheel.name}", status=503, times=1)
    down = case.run("lock", stack, "--retries", "0")
    assert down.code == 1
    assert down.err.startswith("error[index]: index pypi: GET ")
    assert _parts(case) == [".json", ".part"]
    case.pypi.clear_requests()
    result = case.run("lock", stack)
    assert (result.code, result.err) == (0, "")
    assert [r.headers.get("Range") for r in _gets(case, wheel)] == [f"bytes={CUT}-"]
    assert _cached(case, wheel).read_bytes() == wheel.read_bytes()


def test_a_wrong_download_keeps_nothing(case: Case) -> None:
    wheel, stack = _numpy(case)
    other = case.wheel("numpy", "1.26.4", NATIVE, payload_bytes=SIZE - 1)
    case.pypi.replace(f"/files/{wheel.name}", other.read_bytes())  # the index still says wheel
    result = case.run("lock", stack, "--retries", "0")
    assert result.code == 1
    assert result.err.startswith("error[hash-mismatch]: ")
    assert _parts(case) == []


def test_verbose_tells_each_download_and_its_resume(case: Case) -> None:
    wheel, stack = _numpy(case)
    case.pypi.break_off(f"/files/{wheel.name}", after=CUT)
    result = case.run("lock", stack, "-v")
    assert result.code == 0, result.err
    assert result.err.splitlines()[:3] == [
        f"downloading {wheel.name}",
        f"resuming {wheel.name} after {CUT} bytes",
        f"downloaded {wheel.name} ({wheel.stat().st_size} bytes)",
    ]
