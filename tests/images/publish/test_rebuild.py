"""verify-rebuild's choices, without Docker: which record, which stack, which commit, and the
verdict on a rebuild's report."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from core.errors import NotReproducedError, ReleaseRecordError
from images.builder.report import BuildReport
from images.publish.rebuild import check_commit, find_record, find_stack, judge
from images.records import append_release_record
from tests.support.publishing import D1, D2, D3, REPO, record

COMMIT = "1" * 40
STACK_TEXT = "schema: 1\nname: pubtest\n"


def _recorded(tmp_path: Path, *digests: str) -> Path:
    log = tmp_path / "releases" / "pubtest.json"
    for n, digest in enumerate(digests):
        r = record(digest, time=f"2026-11-3{n}T00:00:00Z")
        r = dataclasses.replace(
            r,
            manifest_sha256=hashlib.sha256(STACK_TEXT.encode()).hexdigest(),
            source_revisions={**r.source_revisions, "(tooling)": COMMIT},
        )
        append_release_record(log, r)
    return log


def _unused(ref: str) -> str:
    raise AssertionError(f"the registry was asked for {ref}")


def _report(digest: str, lock: str = "f" * 64) -> BuildReport:
    return BuildReport(
        stack="stack/pubtest.yaml",
        target="vllm-openai",
        image_id="sha256:" + "c" * 64,
        base_image="debian:bookworm-slim",
        lock_sha256=lock,
        lock_inputs_sha256="a" * 64,
        dockerfile_sha256="b" * 64,
        digest=digest,
    )


def test_a_release_log_names_its_latest_record(tmp_path: Path) -> None:
    log = _recorded(tmp_path, D1, D2)
    assert find_record(str(log), root=tmp_path, served=_unused).digest == D2


def test_a_reference_names_the_record_of_the_digest_it_serves(tmp_path: Path) -> None:
    _recorded(tmp_path, D1, D2)
    found = find_record(f"{REPO}:nightly", root=tmp_path, served=lambda _ref: D1)
    assert found.digest == D1
    pinned = find_record(f"{REPO}@{D2}", root=tmp_path, served=_unused)
    assert pinned.digest == D2


def test_a_digest_no_record_names_is_refused(tmp_path: Path) -> None:
    _recorded(tmp_path, D1)
    with pytest.raises(ReleaseRecordError) as info:
        find_record(f"{REPO}:nightly", root=tmp_path, served=lambda _ref: D3)
    assert info.value.message == (
        f"{REPO}:nightly is {D3}, which no release record under {tmp_path / 'releases'} names"
    )


def test_the_stack_is_found_by_the_recorded_bytes(tmp_path: Path) -> None:
    record_ = find_record(str(_recorded(tmp_path, D1)), root=tmp_path, served=_unused)
    (tmp_path / "stack").mkdir()
    (tmp_path / "stack" / "other.yaml").write_text("schema: 1\nname: other\n")
    (tmp_path / "stack" / "pubtest.yaml").write_text(STACK_TEXT)
    assert find_stack(record_, root=tmp_path, given=None) == tmp_path / "stack" / "pubtest.yaml"
    (tmp_path / "stack" / "pubtest.yaml").write_text(STACK_TEXT + "release: changed\n")
    with pytest.raises(NotReproducedError) as info:
        find_stack(record_, root=tmp_path, given=None)
    assert info.value.message == (
        f"the record of {D1} was built from a stack manifest with sha256 "
        f"{record_.manifest_sha256}; no manifest under {tmp_path / 'stack'} has those bytes"
    )
    assert info.value.hint == (
        f"rebuild from that commit: `git worktree add ../verify {COMMIT}`, then run "
        "verify-rebuild in ../verify"
    )


def test_another_commit_is_refused_before_any_build(tmp_path: Path) -> None:
    record_ = find_record(str(_recorded(tmp_path, D1)), root=tmp_path, served=_unused)
    check_commit(record_, COMMIT)
    with pytest.raises(NotReproducedError) as info:
        check_commit(record_, "2" * 40)
    assert info.value.message == (
        f"the record of {D1} was built by commit {COMMIT}; this checkout is {'2' * 40}"
    )


def test_the_verdict_compares_digests_of_the_recorded_lock(tmp_path: Path) -> None:
    record_ = find_record(str(_recorded(tmp_path, D1)), root=tmp_path, served=_unused)
    assert judge(record_, _report(D1)).same
    assert not judge(record_, _report(D2)).same
    with pytest.raises(NotReproducedError) as info:
        judge(record_, _report(D1, lock="9" * 64))
    assert info.value.message == (
        f"the rebuild used lock {'9' * 64}, but the record of {D1} names lock {'f' * 64}"
    )


def test_the_same_content_compressed_apart_says_so() -> None:
    """The image IDs are equal (the same uncompressed layers and config), the digests not:
    the verdict tells another compressor from another base blob source, with no file diff."""
    recorded = dataclasses.replace(record(D1), compressor="gzip/zlib-1.2.13/level-6/block-1")
    same_id = dataclasses.replace(_report(D2), image_id=recorded.image_id)
    other = judge(
        recorded, dataclasses.replace(same_id, compressor="gzip/zlib-1.3/level-6/block-1")
    )
    assert (other.same, other.same_content) == (False, True)
    assert other.compressed_apart() == (
        f"the same content (image {recorded.image_id}) compressed by another compressor: "
        "gzip/zlib-1.3/level-6/block-1, the record's gzip/zlib-1.2.13/level-6/block-1"
    )
    base = judge(recorded, dataclasses.replace(same_id, compressor=recorded.compressor or ""))
    assert base.compressed_apart() == (
        f"the same content (image {recorded.image_id}) with other layer blobs: the base's "
        "layers came from elsewhere (its registry's blobs, or the local daemon's layers "
        "compressed on this host)"
    )
    assert not judge(recorded, _report(D2)).same_content  # another image id: a file differs
