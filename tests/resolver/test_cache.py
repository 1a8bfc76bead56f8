"""The resolver's cache is never trusted, end to end through the CLI on real HTTP indexes:
bytes planted behind a download record are removed, reported and fetched again; a download
cut short is never kept, and a record of one is removed; a page or a parse that is not what
was stored is read again (the file store's own checks: tests/core/test_file_store.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from urllib.parse import unquote

from resolver.cache import Cache as CacheStore
from resolver.endpoints import IndexEndpoint
from resolver.index_client import IndexClient
from testbed.distributions import WheelSpec, build_wheel
from testbed.http_rules import Request
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, read_toml

PIN_TORCH_NO_DEPS = f'  torch: {{version: "{TORCH}", index: mthreads, wheel: native, deps: false}}'


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached(case: Case, sha: str) -> Path:
    return case.cache / "files" / "sha256" / sha[:2] / sha


def records(case: Case) -> dict[Path, dict[str, object]]:
    """The download records in the cache (the metadata entries that are JSON records)."""
    out: dict[Path, dict[str, object]] = {}
    for path in (case.cache / "metadata").glob("*"):
        try:
            data = json.loads(path.read_bytes())
        except ValueError:
            continue
        if isinstance(data, dict) and "etag" in data:
            out[path] = data
    return out


def downloads(case: Case, name: str) -> list[Request]:
    """The GETs of the whole file ``name`` on the vendor index (range reads left out)."""
    return [
        r
        for r in case.vendor.requests
        if unquote(r.path) == f"/files/{name}" and r.method == "GET" and "Range" not in r.headers
    ]


def plant(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o600)
    path.write_bytes(data)


def removed(path: Path, why: str) -> str:
    return f"note: the cached file {path} {why}; removed it from the cache\n"


def locked_names(case: Case) -> list[str]:
    doc = read_toml((case.lock_dir() / "pylock.toml").read_text())
    return sorted(p["name"] for p in doc["packages"])


def test_planted_bytes_behind_a_download_record_are_fetched_again(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=torch, hash="none"))  # revalidated by its ETag
    stack = case.stack(PIN_TORCH)
    assert case.run("lock", stack).code == 0
    evil = build_wheel(
        WheelSpec(name="torch", version=TORCH, tags=NATIVE, requires_dist=("evil",)),
        case.tmp / "planted",
    )
    target = cached(case, sha256(torch))
    plant(target, evil.read_bytes())
    case.vendor.clear_requests()
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == removed(
        target, f"does not hash to its name (its bytes hash to {sha256(evil)})"
    )
    assert locked_names(case) == ["torch"]
    gets = downloads(case, torch.name)
    assert ["If-None-Match" in r.headers for r in gets] == [False]  # it went with the bytes
    assert target.read_bytes() == torch.read_bytes()


def test_a_download_cut_short_is_never_kept(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, payload_bytes=200_000)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    stack = case.stack(PIN_TORCH_NO_DEPS)
    case.vendor.cut(f"/files/{torch.name}", after=100_000)
    result = case.run("lock", stack, "--retries", "0")
    assert result.code == 1
    assert result.err == (
        f"error[index]: torch: index mthreads: the 100000 bytes that arrived for {torch.name} "
        "(no Content-Length) are not a complete zip; nothing was kept\n"
        "hint: the server cut the download short; run the command again\n"
    )
    assert not case.lock_dir().exists()
    assert not any(p.is_file() for p in (case.cache / "files").rglob("*"))
    assert records(case) == {}
    assert list((case.cache / "tmp").iterdir()) == []
    case.vendor.clear_requests()
    again = case.run("lock", stack)  # no 304 for a copy that was never kept
    assert again.code == 0, again.err
    assert ["If-None-Match" in r.headers for r in downloads(case, torch.name)] == [False]


def test_a_server_without_ranges_that_cuts_the_wheel_short(case: Case) -> None:
    case.vendor.ranges = False  # the metadata read gets the whole wheel
    torch = case.wheel("torch", TORCH, NATIVE, payload_bytes=200_000)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    case.vendor.cut(f"/files/{torch.name}", after=150_000, times=2)  # the download's too
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "0")
    assert result.code == 1
    assert result.err.startswith(
        f"error[index]: torch: index mthreads: the 150000 bytes that arrived for {torch.name} "
        "(no Content-Length) are not a complete zip; nothing was kept\n"
    )
    kept = [p for p in (case.cache / "files").rglob("*") if p.is_file()]
    assert {sha256(p) for p in kept} <= {sha256(torch)}  # a whole copy, if a later GET got one


def test_a_record_of_bytes_cut_short_is_removed_and_the_file_fetched_again(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, payload_bytes=200_000)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    stack = case.stack(PIN_TORCH)
    assert case.run("lock", stack).code == 0
    # a cache that kept a response cut short: the bytes, under their own sha256, and a
    # record with the server's ETag (so every later run would get a 304 for them)
    [record] = records(case)
    cut = torch.read_bytes()[:120_000]
    short = cached(case, hashlib.sha256(cut).hexdigest())
    plant(short, cut)
    fields = json.loads(record.read_bytes())
    record.write_text(json.dumps({**fields, "sha256": short.name, "size": len(cut)}))
    case.vendor.clear_requests()
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == removed(short, f"is not a complete copy of {torch.name}")
    assert "If-None-Match" not in downloads(case, torch.name)[0].headers
    assert json.loads(record.read_bytes())["sha256"] == sha256(torch)


# ----------------------------------------------------------------------------- parsed pages


def _page_client(case: Case) -> tuple[IndexClient, IndexEndpoint]:
    client = IndexClient(CacheStore(case.cache), concurrency=2)
    return client, IndexEndpoint(name="pypi", url=case.pypi.simple_url)


def _files(case: Case, name: str) -> tuple[list[str], dict[str, int]]:
    client, endpoint = _page_client(case)
    try:
        files = client.project_files(endpoint, name)
        assert files is not None
        return [f"{f.filename} {f.hashes.get('sha256')}" for f in files], dict(client.stats)
    finally:
        client.close()


def test_a_page_parsed_again_after_a_304_keeps_its_parse_for_the_next_run(case: Case) -> None:
    case.publish(case.pypi, case.wheel("mate", "0.2.7"), case.wheel("mate", "0.2.8"), json=True)
    first, stats = _files(case, "mate")
    assert (stats["not_modified"], stats["parsed_cached"]) == (0, 0)
    assert list((case.cache / "pages").glob("*.rows")) == []  # just arrived: not kept
    again, stats = _files(case, "mate")
    assert again == first
    assert (stats["not_modified"], stats["parsed_cached"]) == (1, 0)  # a 304, parsed, kept
    assert len(list((case.cache / "pages").glob("*.rows"))) == 1
    third, stats = _files(case, "mate")
    assert third == first
    assert (stats["not_modified"], stats["parsed_cached"]) == (1, 1)  # a 304, nothing parsed


def test_a_changed_page_is_parsed_again(case: Case) -> None:
    case.publish(case.pypi, case.wheel("mate", "0.2.7"), json=True)
    _files(case, "mate")
    case.publish(case.pypi, case.wheel("mate", "0.2.7"), case.wheel("mate", "0.2.9"), json=True)
    files, stats = _files(case, "mate")
    assert [f.split()[0] for f in files] == [
        "mate-0.2.7-py3-none-any.whl",
        "mate-0.2.9-py3-none-any.whl",
    ]
    assert stats["parsed_cached"] == 0


def _restamp(payload: bytes, digest: str) -> bytes:
    """A parsed page with a sum that matches ``payload``: what a deliberate edit looks like."""
    return f"parsed-page 1 {digest} {hashlib.sha256(payload).hexdigest()}\n".encode() + payload


def test_a_broken_or_planted_parsed_page_is_never_used(case: Case) -> None:
    case.publish(case.pypi, case.wheel("mate", "0.2.7"), json=True)
    first, _ = _files(case, "mate")
    assert _files(case, "mate")[0] == first  # parsed again after a 304: now kept
    [parsed] = (case.cache / "pages").glob("*.rows")
    head, _, payload = parsed.read_bytes().partition(b"\n")
    digest = head.split()[2].decode()
    rows = json.loads(payload)
    unsafe = [["../../x-1.0-py3-none-any.whl", *rows[0][1:]]]  # a path, with no problem set
    bad_hash = [[rows[0][0], rows[0][1], {"sha256": "../" * 21 + "x"}, *rows[0][3:]]]
    for planted in [
        b"\0garbage",
        head + b"\n" + payload.replace(b"0.2.7", b"0.2.6"),  # edited: the sum no longer holds
        _restamp(json.dumps(unsafe).encode(), digest),
        _restamp(json.dumps(bad_hash).encode(), digest),
        _restamp(json.dumps([rows[0][:5]]).encode(), digest),
        _restamp(b'{"rows": 1}', digest),
        _restamp(b"[" * 100_000, digest),
    ]:
        parsed.chmod(0o600)
        parsed.write_bytes(planted)
        files, stats = _files(case, "mate")
        assert files == first
        assert (stats["not_modified"], stats["parsed_cached"]) == (1, 0)  # parsed again


def test_a_cached_page_that_is_not_what_was_stored_is_fetched_again(case: Case) -> None:
    case.publish(case.pypi, case.wheel("mate", "0.2.7"), json=True)
    first, _ = _files(case, "mate")
    [page] = (case.cache / "pages").glob("*.page")
    line, _, body = page.read_bytes().partition(b"\n")
    assert line.startswith(b"page 1 ")
    assert body.startswith(b"{")  # the bytes as served
    for planted in [
        line + b"\n" + body.replace(b"0.2.7", b"0.2.6"),  # edited: the digest no longer holds
        line.replace(b'"url":"http', b'"url":"ftp') + b"\n" + body,  # edited field
        line.replace(b'"etag":"', b'"etag":["') + b"\n" + body,  # not JSON any more
        line.replace(b'"etag":"', b'"etag":"\\r\\nX-Planted: 1') + b"\n" + body,  # a header
        line + body,  # no line break
        b"\0garbage",
        b"",
    ]:
        page.write_bytes(planted)
        files, stats = _files(case, "mate")
        assert files == first
        # asked for without validators, so a 200 (never a 304 against a page it cannot read)
        assert (stats["pages"], stats["not_modified"]) == (1, 0)
    _, stats = _files(case, "mate")
    assert stats["not_modified"] == 1  # rewritten whole: revalidated again
