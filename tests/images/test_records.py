"""Release records: deterministic rendering, an append that keeps earlier records verbatim,
bad files named by key, and which digest every tag is expected to serve (drift)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import ReleaseRecordError
from images.records import (
    ReleaseLog,
    UploadStats,
    append_release_record,
    expected_digests,
    load_release_log,
    parse_release_log,
    render_release_log,
)
from tests.support.publishing import D1, D2, REPO, record


def test_record_serialization_is_deterministic_and_sorted() -> None:
    log = ReleaseLog(stack="pubtest").appended(record(D1))
    text = render_release_log(log)
    assert text == render_release_log(parse_release_log(text, where="r.json", stack="pubtest"))
    doc = json.loads(text)
    assert list(doc) == ["records", "schema", "stack"]
    assert list(doc["records"][0]) == sorted(doc["records"][0])
    assert doc["records"][0]["digest"] == D1
    assert doc["records"][0]["tags"] == [f"{REPO}:nightly"]
    assert text.endswith("}\n")
    assert json.dumps(doc, indent=2, sort_keys=True) + "\n" == text


def test_append_keeps_earlier_records_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "releases" / "pubtest.json"
    append_release_record(path, record(D1))
    doc = json.loads(path.read_text())
    doc["records"][0]["note"] = "added by a release engineer"  # a key this tool does not know
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    append_release_record(path, record(D2, time="2026-12-01T00:00:00Z"))
    again = json.loads(path.read_text())
    assert again["records"][0]["note"] == "added by a release engineer"
    assert [r["digest"] for r in again["records"]] == [D1, D2]
    assert [p.name for p in path.parent.iterdir()] == ["pubtest.json"]  # no temp or lock file


def test_missing_record_file_is_an_empty_log(tmp_path: Path) -> None:
    assert load_release_log(tmp_path / "none.json", stack="pubtest").records == ()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema=2), "r.json: schema: unsupported schema 2; expected 1"),
        (lambda d: d.update(stack="other"), "r.json: stack: is 'other', but this is the stack 'pubtest'"),
        (lambda d: d["records"][0].update(digest="abc"), "r.json: records.0.digest: 'abc' is not a sha256:... digest"),
        (lambda d: d["records"][0].pop("tags"), "r.json: records.0.tags: missing"),
        (lambda d: d["records"][0].update(channel="weekly"), "r.json: records.0.channel: 'weekly' is not one of ('release', 'nightly', 'rollback')"),
    ],
)  # fmt: skip
def test_bad_record_files_name_the_key(mutate: object, message: str) -> None:
    doc = json.loads(render_release_log(ReleaseLog(stack="pubtest").appended(record(D1))))
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ReleaseRecordError) as exc:
        parse_release_log(json.dumps(doc), where="r.json", stack="pubtest")
    assert exc.value.message == message
    assert exc.value.hint == (
        "the file is written by `build_image.py publish`; restore it from version control"
    )


UPLOAD = UploadStats(
    blobs_uploaded=2, bytes_uploaded=1234, blobs_reused=3, bytes_reused=40_000_000_000,
    blobs_mounted=2, bytes_mounted=39_000_000_000,
)  # fmt: skip
COMPRESSOR = "gzip/zlib-1.2.13/level-6/block-1048576"


def test_upload_and_compressor_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "releases" / "pubtest.json"
    written = replace(record(D1), upload=UPLOAD, compressor=COMPRESSOR)
    append_release_record(path, written)
    raw = json.loads(path.read_text())["records"][0]
    assert raw["upload"] == {
        "blobs_mounted": 2, "blobs_reused": 3, "blobs_uploaded": 2,
        "bytes_mounted": 39_000_000_000, "bytes_reused": 40_000_000_000, "bytes_uploaded": 1234,
    }  # fmt: skip
    assert raw["compressor"] == COMPRESSOR
    [read] = load_release_log(path, stack="pubtest").records
    assert read == written
    assert (read.upload, read.compressor) == (UPLOAD, COMPRESSOR)


def test_a_record_written_before_upload_and_compressor_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "releases" / "pubtest.json"
    append_release_record(path, record(D1))
    raw = json.loads(path.read_text())["records"][0]
    assert "upload" not in raw
    assert "compressor" not in raw
    [read] = load_release_log(path, stack="pubtest").records
    assert (read.upload, read.compressor) == (None, None)
    assert read == record(D1)
    # null is read as absent too
    doc = json.loads(path.read_text())
    doc["records"][0] |= {"upload": None, "compressor": None}
    [nulls] = parse_release_log(json.dumps(doc), where="r.json", stack="pubtest").records
    assert (nulls.upload, nulls.compressor) == (None, None)
    # a key a later version adds to an upload is left alone
    doc["records"][0]["upload"] = UPLOAD.to_json() | {"seconds": 12}
    [later] = parse_release_log(json.dumps(doc), where="r.json", stack="pubtest").records
    assert later.upload == UPLOAD


def _with(**keys: object) -> object:
    return lambda d: d["records"][0].update(keys)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_with(upload=[]), "r.json: records.0.upload: must be an object"),
        (_with(upload=UPLOAD.to_json() | {"bytes_reused": -1}), "r.json: records.0.upload.bytes_reused: must be a count, 0 or more: -1"),
        (_with(upload=UPLOAD.to_json() | {"blobs_uploaded": True}), "r.json: records.0.upload.blobs_uploaded: must be a count, 0 or more: True"),
        (_with(upload={k: v for k, v in UPLOAD.to_json().items() if k != "blobs_mounted"}), "r.json: records.0.upload.blobs_mounted: must be a count, 0 or more: None"),
        (_with(upload=UPLOAD.to_json() | {"blobs_mounted": 4}), "r.json: records.0.upload: mounts more than it reuses (mounted blobs are reused)"),
        (_with(compressor=""), "r.json: records.0.compressor: must be a non-empty string, got ''"),
    ],
)  # fmt: skip
def test_a_bad_upload_or_compressor_names_the_key(mutate: object, message: str) -> None:
    test_bad_record_files_name_the_key(mutate, message)


# ------------------------------------------------------------------------------ drift


def test_expected_digest_is_the_latest_record_of_each_tag() -> None:
    records = [
        record(D1, tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261129")),
        record(D2, tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261130")),
    ]
    assert expected_digests(records) == {
        f"{REPO}:nightly": D2,
        f"{REPO}:nightly-20261129": D1,
        f"{REPO}:nightly-20261130": D2,
    }
