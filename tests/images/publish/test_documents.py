"""The ``--json`` documents of ``publish``, ``pin``, ``verify-pins`` and ``rollback``, each
through its command against the stand-in registry (``FakeSkopeo``), and ``publish`` with the
publishing tests' stand-in inspector."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import build_image
import images.engine.docker_inspect
from core.tables import human_size
from images.builder.report import BuildReport
from images.engine.port import LocalImage
from images.engine.skopeo import OCI_INDEX
from images.oci.layout import find_manifest
from images.publish.documents import publish_document
from images.publish.push import PublishRequest, PublishResult
from images.records import UPLOAD_KEYS, ReleaseLog, ReleaseRecord, TagMove, render_release_log
from tests.images.publish.test_push import (
    DIGEST,
    IMAGE_ID,
    FakeInspector,
    built_layout,
    current_labels,
)
from tests.support.publishing import (
    AMD,
    ARM,
    INDEX_DIGEST,
    TAGGED_STACK,
    FakeSkopeo,
    record,
    write_manifest,
)


def _cli(*argv: str | Path) -> tuple[int, Any, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main([str(a) for a in argv], out=out, err=err)
    text = out.getvalue()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n", text
    return code, json.loads(text), err.getvalue()


@pytest.fixture
def tags(fake: str) -> str:
    """The stand-in registry, with no tag of ``team/app``."""
    return fake


# ------------------------------------------------------------------------------ pin


def test_pin_json_of_a_multi_arch_index(fake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_USER", "bot")
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_PASSWORD", "right")
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_HOST", fake)
    code, doc, err = _cli("pin", f"{fake}/x:multi", "--json")
    assert code == 0, err
    assert doc == {
        "digest": INDEX_DIGEST,
        "index": True,
        "media_type": OCI_INDEX,
        "pinned": f"{fake}/x@{INDEX_DIGEST}",
        "platforms": [
            {"digest": AMD, "pinned": f"{fake}/x@{AMD}", "platform": "linux/amd64"},
            {"digest": ARM, "pinned": f"{fake}/x@{ARM}", "platform": "linux/arm64/v8"},
        ],
        "reference": f"{fake}/x:multi",
        "schema": "build-image/pin/1",
    }
    assert err.splitlines()[0] == f"{fake}/x@{INDEX_DIGEST}"  # the text goes to stderr
    assert "right" not in json.dumps(doc) + err
    assert FakeSkopeo.calls == [("lookup", f"{fake}/x:multi", "bot")]  # the environment's login


def test_pin_json_of_a_missing_tag_is_an_error_document(tags: str) -> None:
    code, doc, err = _cli("pin", f"{tags}/team/app:gone", "--json")
    assert code == 1
    assert doc == {
        "command": "pin",
        "error": {
            "code": "tag-not-found",
            "exit_code": 1,
            "hint": f"check the spelling (`skopeo list-tags --tls-verify=false "
            f"docker://{tags}/team/app` lists the tags)",
            "message": f"{tags}/team/app:gone: the registry has no such tag",
        },
        "schema": "build-image/error/1",
    }
    assert err.startswith(f"error[tag-not-found]: {tags}/team/app:gone: the registry has no")


# ------------------------------------------------------------------------------ records


def _records(tmp_path: Path, address: str) -> tuple[Path, Path, list[ReleaseRecord], str, str]:
    """A stack, its release record file (two nightlies: ``nightly`` moved D1 -> D2) and the
    two digests, each a manifest the registry holds."""
    m = write_manifest(tmp_path, TAGGED_STACK)
    repo = f"{address}/team/app"
    d1, d2 = FakeSkopeo.add(b"one"), FakeSkopeo.add(b"two")
    first = record(
        d1,
        tags=(f"{repo}:nightly", f"{repo}:nightly-1"),
        moves=(TagMove(tag=f"{repo}:nightly", from_digest=None, to_digest=d1),),
        time="2026-11-29T00:00:00Z",
    )
    second = record(
        d2,
        tags=(f"{repo}:nightly",),
        moves=(TagMove(tag=f"{repo}:nightly", from_digest=d1, to_digest=d2),),
    )
    records = [replace(r, repository=repo) for r in (first, second)]
    path = tmp_path / "releases" / "pubtest.json"
    path.parent.mkdir()
    raw = tuple(r.to_json() for r in records)
    path.write_text(render_release_log(ReleaseLog(stack="pubtest", records=(), raw=raw)))
    return m.path, path, records, d1, d2


def test_verify_pins_json_lists_every_tag(tmp_path: Path, tags: str) -> None:
    stack, path, _, d1, d2 = _records(tmp_path, tags)
    FakeSkopeo.tags.update({"nightly": d2, "nightly-1": d1})
    code, doc, err = _cli("verify-pins", stack, "--record", path, "--json")
    assert code == 0, err
    assert doc == {
        "digests": [],  # no record carries attachments
        "ok": True,
        "record": str(path),
        "schema": "build-image/verify-pins/1",
        "stack": "pubtest",
        "tags": [
            {"ok": True, "recorded": d2, "served": d2, "tag": f"{tags}/team/app:nightly"},
            {"ok": True, "recorded": d1, "served": d1, "tag": f"{tags}/team/app:nightly-1"},
        ],
    }


def test_verify_pins_json_of_a_drift_is_the_document_and_exit_1(tmp_path: Path, tags: str) -> None:
    stack, path, _, d1, _ = _records(tmp_path, tags)
    FakeSkopeo.tags.update({"nightly": d1})  # moved behind the tool's back; nightly-1 gone
    code, doc, err = _cli("verify-pins", stack, "--record", path, "--json")
    assert code == 1
    assert (doc["schema"], doc["ok"]) == ("build-image/verify-pins/1", False)
    assert doc["tags"] == [
        {"ok": False, "recorded": doc["tags"][0]["recorded"], "served": d1}
        | {"tag": f"{tags}/team/app:nightly"},
        {"ok": False, "recorded": d1, "served": None, "tag": f"{tags}/team/app:nightly-1"},
    ]
    assert err.startswith(f"error[drift]: 2 of 2 tags drifted from {path}:\n")


def test_rollback_json_dry_run_and_apply(tmp_path: Path, tags: str) -> None:
    stack, path, records, d1, d2 = _records(tmp_path, tags)
    FakeSkopeo.tags.update({"nightly": d2})
    repo = f"{tags}/team/app"

    def summary(r: ReleaseRecord) -> dict[str, str]:
        return {
            "channel": r.channel,
            "digest": r.digest,
            "image_id": r.image_id,
            "pinned": f"{repo}@{r.digest}",
            "time": r.time,
        }

    expected = {
        "applied": None,
        "current": summary(records[1]),
        "previous": summary(records[0]),
        "record": str(path),
        "schema": "build-image/rollback/1",
        "stack": "pubtest",
        "tags": [{"from": d2, "tag": f"{repo}:nightly", "to": d1}],
        "target": "vllm-openai",
    }
    code, doc, err = _cli("rollback", stack, "--record", path, "--json")
    assert code == 0, err
    assert doc == expected
    assert err.splitlines()[-1] == "dry run; re-run with --apply to re-point these tags"
    code, doc, err = _cli("rollback", stack, "--record", path, "--json", "--apply")
    assert code == 0, err
    assert FakeSkopeo.tags["nightly"] == d1
    written = json.loads(path.read_text())["records"][-1]
    assert doc == expected | {
        "applied": {
            "channel": "rollback",
            "digest": d1,
            "image_id": written["image_id"],
            "pinned": f"{repo}@{d1}",
            "time": written["time"],
        }
    }
    assert err.splitlines()[-1] == f"re-pointed 1 tags; recorded in {path}"


# ------------------------------------------------------------------------------ publish


def test_publish_json_names_the_tags_digest_and_record(
    tmp_path: Path, tags: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = write_manifest(tmp_path, TAGGED_STACK)
    repo = f"{tags}/team/app"
    layout = built_layout(tmp_path)
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            {
                "image_id": IMAGE_ID,
                "digest": DIGEST,
                "oci_layout": str(layout),
                "target": "vllm-openai",
                "gates": {"imports": True},
                "lock_inputs_sha256": m.lock_inputs_sha256,
            }
        )
    )
    before = FakeSkopeo.add(b"yesterday")
    FakeSkopeo.tags["nightly"] = before

    class Inspector(FakeInspector):
        def __enter__(self) -> Inspector:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    inspector = Inspector(LocalImage(id=IMAGE_ID, labels=current_labels(m)))
    monkeypatch.setattr(images.engine.docker_inspect, "DockerInspector", lambda: inspector)
    record_path = tmp_path / "releases" / "pubtest.json"
    argv: list[str | Path] = [
        "publish",
        m.path,
        "--target",
        "vllm-openai",
        "--nightly",
        "--repository",
        repo,
    ]
    argv += ["--build-report", report, "--date", "20261201", "--record", record_path, "--json"]
    argv += ["--no-attach"]  # a stand-in image: no SBOM, no lock to attach
    code, doc, err = _cli(*argv)
    assert code == 0, err
    today = DIGEST
    _, manifest_doc = find_manifest(layout, "vllm-openai")
    sizes = [manifest_doc["config"]["size"], *(x["size"] for x in manifest_doc["layers"])]
    refs = [f"{repo}:nightly", f"{repo}:nightly-20261201", f"{repo}:py3.12-x86_64"]
    assert doc == {
        "attestations": None,  # --no-attach
        "channel": "nightly",
        "digest": today,
        "image_id": IMAGE_ID,
        "moves": [
            {"from": before, "tag": refs[0], "to": today},
            {"from": None, "tag": refs[1], "to": today},
            {"from": None, "tag": refs[2], "to": today},
        ],
        "published": True,
        "record": str(record_path),
        "repository": repo,
        "serve_check": None,
        "stack": "pubtest",
        "tags": dict.fromkeys(refs, today),
        "target": "vllm-openai",
        # the registry has none of the blobs: the copy uploads them all
        "upload": {
            "blobs_mounted": 0, "blobs_reused": 0, "blobs_uploaded": len(sizes),
            "bytes_mounted": 0, "bytes_reused": 0, "bytes_uploaded": sum(sizes),
        },
    } | {"schema": "build-image/publish/1"}  # fmt: skip
    assert (
        err.splitlines()[-2] == f"uploaded 2 blobs ({human_size(sum(sizes))}); reused 0 blobs (0 B)"
    )
    assert sorted(ref for call, ref, _ in FakeSkopeo.calls if call == "push") == refs
    again_code, again, _ = _cli(*argv)  # nightly tags on this very image: pushed again
    assert again_code == 0
    assert again["published"] is True
    assert again["moves"] == []


def test_a_release_already_published_is_not_published_again(tmp_path: Path) -> None:
    m = write_manifest(tmp_path, TAGGED_STACK)
    digest = "sha256:" + "d" * 64
    request = PublishRequest(
        manifest=m,
        manifest_bytes=b"",
        target="vllm-openai",
        channel="release",
        repository="r.example/team/app",
        record_path=tmp_path / "releases" / "pubtest.json",
        date="20261201",
        now="2026-12-01T00:00:00Z",
        tool_version="0.1.0",
        report=BuildReport(target="vllm-openai", image_id=IMAGE_ID),
        report_path=tmp_path / "report.json",
        root=tmp_path,
        serve_check={"reason": "--no-serve-check", "status": "skipped"},
    )
    result = PublishResult(record=None, lines=(), tags={"r.example/team/app:v0.28.0": digest})
    assert publish_document(request, result) == {
        "attestations": None,
        "channel": "release",
        "digest": None,
        "image_id": IMAGE_ID,
        "moves": [],
        "published": False,
        "record": None,
        "repository": "r.example/team/app",
        "schema": "build-image/publish/1",
        "serve_check": {"reason": "--no-serve-check", "status": "skipped"},
        "stack": "pubtest",
        "tags": {"r.example/team/app:v0.28.0": digest},
        "target": "vllm-openai",
        "upload": dict.fromkeys(UPLOAD_KEYS, 0),  # nothing pushed
    }
