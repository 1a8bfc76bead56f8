"""docs/json.md describes every ``--json`` document the tool prints, and stays in step.

Each section of docs/json.md is headed by a schema name (``build-image/<command>/1``) and holds
one JSON example and a table of its keys. The documents are made here the way the commands
make them (the same pure functions, from fixed inputs), and for each one: the example's key
paths equal the emitted document's, and the table names every top-level key. Maps whose keys
the user chooses (gate names, tags, labels) are compared as maps, not key by key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from core.errors import LockError
from core.json_output import error_document_of
from images.builder.report import STAGES, BuildReport, ReportLayer, build_document
from images.builder.tags import parse_reference
from images.engine.skopeo import OCI_INDEX, ManifestInfo, PlatformManifest
from images.oci.diff import ConfigChange, FileDiff, ImageDiff, ImageSide, LayerDiff
from images.publish.diff import DiffSide, diff_document
from images.publish.documents import (
    pin_document,
    publish_document,
    rollback_document,
    verify_document,
    verify_pins_document,
    verify_rebuild_document,
)
from images.publish.push import PublishRequest, PublishResult
from images.publish.rebuild import Verdict
from images.publish.tag_digests import PinCheck
from images.publish.verify import Check, Verification
from images.records import Attestations, Drift, TagMove, plan_rollback
from manifest import Target
from resolver.lock_report import lock_changes, lock_document
from resolver.lockfile import Lock, LockedPackage
from tests.support.publishing import D1, D2, REPO, TAGGED_STACK, record, write_manifest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "json.md"
SCHEMAS = [
    f"build-image/{command}/1"
    for command in (
        *("lock", "build", "publish", "pin", "verify", "verify-pins", "rollback", "diff"),
        *("verify-rebuild", "error"),
    )
]
# maps whose keys are names the user chooses: compared as maps
OPEN_MAPS = {
    "build-image/build/1": {"gates", "stages_s"},
    "build-image/publish/1": {"tags", "serve_check"},
    "build-image/diff/1": {"a.image.built_from", "a.image.labels"}
    | {"b.image.built_from", "b.image.labels"},
}


def _pkg(name: str, version: str, sha: str = "0", size: int | None = 1000) -> LockedPackage:
    return LockedPackage(
        name=canonicalize_name(name),
        version=version,
        index="pypi",
        index_url="https://pypi.org/simple/",
        filename=f"{name}-{version}-py3-none-any.whl",
        url=f"https://files.example/{name}-{version}-py3-none-any.whl",
        sha256=sha * 64,
        size=size,
        kind="pure",
        origin="requirement",
        required_by=(),
    )


def _lock(*packages: LockedPackage, inputs: str = "a") -> Lock:
    return Lock(
        stack="demo",
        target=Target(python=(3, 12), arch="x86_64", glibc=(2, 35)),
        lock_inputs_sha256=inputs * 64,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
    )


def emitted(tmp_path: Path) -> dict[str, dict[str, Any]]:
    """One document of each schema, made as the commands make them."""
    old = _lock(_pkg("numpy", "1.26.4"), _pkg("gone", "1.0"))
    new = _lock(_pkg("numpy", "1.26.5", "1"), _pkg("filelock", "3.17.0"), inputs="b")
    lock = lock_document(
        new, lock_changes(old, new), stack="stack/demo.yaml", lock_dir="stack/demo.lock",
        check=False, current=False,
    )  # fmt: skip
    build = build_document(
        BuildReport(
            stack="stack/demo.yaml", target="final", image_id="sha256:" + "e" * 64,
            base_image="debian:bookworm-slim", lock_sha256="1" * 64,
            lock_inputs_sha256="2" * 64, dockerfile_sha256="3" * 64, tags=("demo:final",),
            gates={"imports": True}, durations_s=dict.fromkeys((*STAGES, "total"), 1.0),
            size_bytes=10, cache={"wheels_cached": 1}, stages_s={"deps": 1.0},
            digest="sha256:" + "d" * 64, oci_layout="build/images/demo-final",
            source_date_epoch=1764633600, compressor="gzip/zlib-1.2.13/level-6/block-1048576",
            layers=(
                ReportLayer(
                    digest="sha256:" + "c" * 64, size=10, diff_id="sha256:" + "b" * 64,
                    origin="normalized", clamp=1764633600, step="RUN /bin/sh -c true",
                ),
            ),
        ),
        report_path="build/reports/demo-final.json",
    )  # fmt: skip
    m = write_manifest(tmp_path, TAGGED_STACK)
    moved = TagMove(tag=f"{REPO}:nightly", from_digest=D1, to_digest=D2)
    attested = Attestations(
        sbom=D1, sbom_document=D1, provenance=D2, provenance_document=D2, signature=D1,
        attestation=D2, public_key=D1,
    )  # fmt: skip
    published = replace(record(D2, moves=(moved,)), channel="release", attestations=attested)
    request = PublishRequest(
        manifest=m, manifest_bytes=b"", target="vllm-openai", channel="release",
        repository=REPO, record_path=Path("releases/pubtest.json"), date="20261201",
        now="2026-12-01T00:00:00Z", tool_version="0.1.0",
        report=BuildReport(target="vllm-openai", image_id="sha256:" + "e" * 64),
        report_path=Path("r.json"), root=Path(),
        serve_check={"status": "passed", "bundle_sha256": "5" * 64},
    )  # fmt: skip
    publish = publish_document(
        request, PublishResult(record=published, lines=(), tags={f"{REPO}:nightly": D2})
    )
    ref = parse_reference(f"{REPO}:nightly")
    platforms = (PlatformManifest(digest=D1, platform="linux/amd64"),)
    pin = pin_document(ref, ManifestInfo(digest=D2, media_type=OCI_INDEX, platforms=platforms))
    checked = PinCheck(
        expected={f"{REPO}:nightly": D2, f"{REPO}:v1": D1},
        drifts=(Drift(tag=f"{REPO}:v1", recorded=D1, served=None),),
    )
    verified = Verification(
        reference=f"{REPO}@{D2}",
        checks=(Check("signature", True, "signed"), Check("lock", False, "differs")),
    )
    pins = verify_pins_document(
        checked, stack="pubtest", record="releases/pubtest.json", verified=(verified,)
    )
    verify = verify_document(verified)
    first = record(D1, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=None, to_digest=D1),))
    second = record(D2, moves=(moved,), time="2026-12-01T00:00:00Z")
    plan = plan_rollback([first, second], target=None)
    rollback = rollback_document(
        plan, stack="pubtest", record="releases/pubtest.json",
        applied=replace(first, channel="rollback"),
    )  # fmt: skip
    image = {"image_id": "sha256:" + "1" * 64, "labels": {"x": "1"}, "built_from": {"v": "r"}}
    diff = diff_document(
        DiffSide(name="a", lock=old, **image),  # type: ignore[arg-type]
        DiffSide(name="b", lock=new, **image),  # type: ignore[arg-type]
    )
    error = error_document_of(
        "lock", LockError("stack/demo.lock: no lock", hint="lock"), exit_code=1
    )
    rebuilt = verify_rebuild_document(
        Verdict(record=first, rebuilt_digest=D2),
        _image_diff(),
    )
    docs = [lock, build, publish, pin, verify, pins, rollback, diff, rebuilt, error]
    return {d["schema"]: d for d in docs}


def _image_diff() -> ImageDiff:
    a, b = (
        ImageSide(layout=Path("l"), tag="t", manifest_digest=d, config_digest=d, layers=(D1, D2))
        for d in (D1, D2)
    )
    return ImageDiff(
        a=a,
        b=b,
        config=(ConfigChange(key="rootfs.diff_ids[2]", a=D1, b=D2),),
        layers=(
            LayerDiff(
                number=2,
                a_digest=D1,
                b_digest=D2,
                files=(FileDiff(path="x", what=("content",), a_size=1, b_size=1),),
            ),
        ),
    )


def key_paths(doc: Any, open_maps: set[str], prefix: str = "") -> Iterator[str]:
    """Every key path of ``doc``: ``changes.added[].name``; a list's items are merged."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            path = f"{prefix}.{key}" if prefix else key
            yield path
            if path not in open_maps:
                yield from key_paths(value, open_maps, path)
    elif isinstance(doc, list):
        for item in doc:
            yield from key_paths(item, open_maps, f"{prefix}[]")


def sections() -> dict[str, str]:
    """Each ``## `build-image/...` `` section, up to the next ``## `` heading of any kind."""
    text = REFERENCE.read_text(encoding="utf-8")
    parts = re.split(r"^## (.*)$", text, flags=re.MULTILINE)
    out = {}
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        schema = re.fullmatch(r"`(build-image/[a-z-]+/\d+)`.*", heading)
        if schema is not None:
            out[schema.group(1)] = body
    return out


def example(section: str) -> dict[str, Any]:
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert block is not None, "no ```json example"
    doc = json.loads(block.group(1))
    assert isinstance(doc, dict)
    return doc


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    return emitted(tmp_path_factory.mktemp("json"))


def test_every_schema_has_a_section_and_no_section_is_stale(
    documents: dict[str, dict[str, Any]],
) -> None:
    assert sorted(sections()) == sorted(documents)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_example_has_the_keys_the_tool_emits(
    schema: str, documents: dict[str, dict[str, Any]]
) -> None:
    doc = example(sections()[schema])
    assert doc["schema"] == schema
    open_maps = OPEN_MAPS.get(schema, set())
    assert sorted(set(key_paths(doc, open_maps))) == sorted(
        set(key_paths(documents[schema], open_maps))
    )


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_table_names_every_top_level_key(schema: str) -> None:
    section = sections()[schema]
    named = set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.MULTILINE))
    assert named == set(example(section))


def test_the_examples_are_printed_as_the_tool_prints_them() -> None:
    for schema, section in sections().items():
        block = re.search(r"```json\n(.*?)```", section, re.DOTALL)
        assert block is not None
        assert block.group(1) == json.dumps(example(section), indent=2, sort_keys=True) + "\n", (
            schema
        )
