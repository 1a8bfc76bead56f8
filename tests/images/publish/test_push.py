"""Publishing refuses what it cannot stand behind: an image built from other pins than the
tags are rendered from, a push that fails halfway; and tags planned from the manifest.
No daemon, no registry: the ports are fakes."""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import build_image
from core.errors import BuildReportError, PublishError, RegistryError, StaleImageError
from images.build.workspace import Workspace
from images.publish.push import (
    LOCK_INPUTS_LABEL,
    TITLE_LABEL,
    VERSION_LABEL,
    BuiltImage,
    PublishRequest,
    built_image_from_report,
    plan_tags,
    publish,
)
from images.publish.registry import Credentials
from manifest import Manifest, parse_manifest
from tests.support.publishing import TAGGED_STACK, write_manifest

STACK = """\
schema: 1
name: pubtest
release: "0.28.0"
target: {python: "3.12", arch: x86_64, glibc: "2.35"}
indexes:
  vendor: {url: "http://127.0.0.1:9/simple"}
default_index: vendor
packages:
  torch: {version: "2.11.0.post2+musa5.2.0", index: vendor, wheel: native}
image:
  repository: "127.0.0.1:5000/mcconline/vllm"
  release_tags: ["vllm-openai:v{release}"]
  nightly_tags: ["vllm-openai:nightly"]
"""
DIGEST = "sha256:" + "d" * 64
IMAGE_ID = "sha256:" + "e" * 64


def manifest(tmp_path: Path, text: str = STACK) -> Manifest:
    return write_manifest(tmp_path, text)


@dataclass
class FakeImage:
    id: str
    labels: Mapping[str, str]
    repo_digests: tuple[str, ...] = ()


@dataclass
class FakePusher:
    image: FakeImage
    pushed: list[str] = field(default_factory=list)

    def inspect(self, ref: str) -> FakeImage | None:
        return self.image if ref == self.image.id else None

    def tag(self, image_id: str, name: str, tag: str) -> None:
        pass

    def push(self, name: str, tag: str, credentials: Credentials | None) -> str:
        self.pushed.append(f"{name}:{tag}")
        return DIGEST

    def read_file(self, ref: str, path: str) -> bytes:
        raise AssertionError("not used")


@dataclass
class FakeRegistry:
    served: dict[str, str] = field(default_factory=dict)

    def lookup(self, repository: str, reference: str) -> Any:
        from images.publish.registry import ManifestInfo

        digest = self.served.get(reference)
        return ManifestInfo(digest=digest, media_type="x") if digest else None


def run_publish(
    tmp_path: Path, m: Manifest, labels: Mapping[str, str], **built: str
) -> tuple[FakePusher, FakeRegistry, Path]:
    pusher = FakePusher(FakeImage(id=IMAGE_ID, labels=labels))
    registry = FakeRegistry()
    original_push = pusher.push

    def push(name: str, tag: str, credentials: Credentials | None) -> str:
        registry.served[tag] = original_push(name, tag, credentials)
        return DIGEST

    pusher.push = push  # type: ignore[method-assign]
    record = tmp_path / "releases" / "pubtest.json"
    request = PublishRequest(
        manifest=m,
        manifest_bytes=m.path.read_bytes(),
        target="vllm-openai",
        channel="nightly",
        repository="127.0.0.1:5000/mcconline/vllm",
        record_path=record,
        date="20260101",
        now="2026-01-01T00:00:00Z",
        tool_version="test",
        built=BuiltImage(image_id=IMAGE_ID, report=tmp_path / "report.json", **built),
    )
    publish(
        request,
        pusher=pusher,
        registry=registry,  # type: ignore[arg-type]
        credentials=None,
        progress=lambda _line: None,
    )
    return pusher, registry, record


def current_labels(m: Manifest) -> dict[str, str]:
    return {
        LOCK_INPUTS_LABEL: m.lock_inputs_sha256,
        VERSION_LABEL: m.release,
        TITLE_LABEL: m.name,
    }


def test_an_image_of_the_current_manifest_is_published(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    pusher, _, record = run_publish(
        tmp_path, m, current_labels(m), lock_inputs_sha256=m.lock_inputs_sha256
    )
    assert pusher.pushed == ["127.0.0.1:5000/mcconline/vllm:nightly"]
    assert record.is_file()


def test_an_image_built_from_other_pins_is_refused_before_any_push(tmp_path: Path) -> None:
    old = manifest(tmp_path)
    new = manifest(tmp_path, STACK.replace("musa5.2.0", "musa5.2.0s5000"))
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, new, current_labels(old))
    assert f"was built from lock inputs {old.lock_inputs_sha256[:12]}" in exc.value.message
    assert f"now has lock inputs {new.lock_inputs_sha256[:12]}" in exc.value.message
    assert not (tmp_path / "releases" / "pubtest.json").exists()


def test_a_build_report_of_other_pins_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, {}, lock_inputs_sha256="f" * 64)
    assert "build report lock_inputs_sha256" in exc.value.message


def test_an_image_of_another_release_is_refused(tmp_path: Path) -> None:
    # release: is not a lock input, but it is what the release tags say
    old = manifest(tmp_path)
    new = manifest(tmp_path, STACK.replace('release: "0.28.0"', 'release: "0.28.1"'))
    assert old.lock_inputs_sha256 == new.lock_inputs_sha256
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, new, current_labels(old))
    assert "org.opencontainers.image.version='0.28.0'" in exc.value.message
    assert "release: '0.28.1'" in exc.value.message


def test_a_push_failing_halfway_names_the_tags_that_already_moved(tmp_path: Path) -> None:

    text = STACK.replace(
        'nightly_tags: ["vllm-openai:nightly"]',
        'nightly_tags: ["vllm-openai:nightly-{date}", "vllm-openai:nightly"]',
    )
    m = manifest(tmp_path, text)
    calls: list[str] = []

    def flaky_push(self: FakePusher, name: str, tag: str, credentials: Credentials | None) -> str:
        calls.append(tag)
        if len(calls) == 2:
            raise RegistryError("the registry 127.0.0.1:5000 answered HTTP 503 to the push")
        return DIGEST

    original = FakePusher.push
    FakePusher.push = flaky_push  # type: ignore[method-assign]
    try:
        with pytest.raises(PublishError) as exc:
            run_publish(tmp_path, m, current_labels(m), lock_inputs_sha256=m.lock_inputs_sha256)
    finally:
        FakePusher.push = original  # type: ignore[method-assign]
    first = sorted(["nightly", "nightly-20260101"])[0]
    assert exc.value.message == (
        "the registry 127.0.0.1:5000 answered HTTP 503 to the push\n"
        f"these tags were pushed before the failure: 127.0.0.1:5000/mcconline/vllm:{first} -> "
        f"{DIGEST} (was absent); nothing was recorded"
    )
    assert not (tmp_path / "releases" / "pubtest.json").exists()


# ------------------------------------------------------------------------------ tag planning


def test_plan_tags_from_the_manifest(tmp_path: Path) -> None:
    m = parse_manifest(TAGGED_STACK, path=tmp_path / "s.yaml")
    assert plan_tags(m, target="vllm-openai", channel="release", date="20261130") == [
        "v0.28.0-amd64-ph1-musa5.2.0"
    ]
    assert plan_tags(m, target="vllm-openai", channel="nightly", date="20261130") == [
        "nightly",
        "nightly-20261130",
        "py3.12-x86_64",
    ]


# ------------------------------------------------------------------------------ build report


def _report(tmp_path: Path, **fields: object) -> Path:
    doc: dict[str, object] = {"image_id": IMAGE_ID, "target": "vllm-openai", **fields}
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_build_report_names_the_gated_image(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    path = _report(
        tmp_path,
        gates={"imports": True, "smoke": True},
        base_image=f"debian:bookworm-slim@{DIGEST}",
        lock_sha256="f" * 64,
    )
    built = built_image_from_report(path, target="vllm-openai", dockerfile=dockerfile)
    assert built == BuiltImage(
        image_id=IMAGE_ID,
        report=path,
        dockerfile_sha256=hashlib.sha256(b"FROM scratch\n").hexdigest(),
        base_image=f"debian:bookworm-slim@{DIGEST}",
        lock_sha256="f" * 64,
    )
    assert built.base_image_digest == DIGEST
    stated = _report(tmp_path, dockerfile_sha256="a" * 64)
    assert built_image_from_report(stated, target="vllm-openai", dockerfile=dockerfile) == (
        BuiltImage(image_id=IMAGE_ID, report=stated, dockerfile_sha256="a" * 64)
    )


def test_a_build_report_of_another_target_is_refused(tmp_path: Path) -> None:
    path = _report(tmp_path)
    with pytest.raises(PublishError) as exc:
        built_image_from_report(path, target="final")
    assert exc.value.message == (
        f"{path}: the build report is for target 'vllm-openai', not 'final'"
    )
    assert exc.value.hint == "pass the report of a --target final build"


def test_an_image_that_failed_a_gate_is_refused(tmp_path: Path) -> None:
    path = _report(tmp_path, gates={"smoke": False, "imports": True, "abi": False})
    with pytest.raises(PublishError) as exc:
        built_image_from_report(path, target="vllm-openai")
    assert exc.value.message == f"{path}: image {IMAGE_ID} failed the gates abi, smoke"
    assert exc.value.hint == "only a gated image is published; fix the build and gate it again"


def test_a_missing_build_report_is_named(tmp_path: Path) -> None:
    with pytest.raises(BuildReportError) as exc:
        built_image_from_report(tmp_path / "none.json", target="vllm-openai")
    assert exc.value.message == f"{tmp_path / 'none.json'}: no build report"


# ------------------------------------------------------------------------------ release record


def test_the_release_record_defaults_to_the_releases_directory_of_the_workspace(
    tmp_path: Path,
) -> None:
    m = manifest(tmp_path)
    err = io.StringIO()
    code = build_image.main(["verify-pins", str(m.path)], out=io.StringIO(), err=err)
    assert code == 1
    record = Workspace.of(m.path).release_record("pubtest")
    assert record == tmp_path.resolve() / "releases" / "pubtest.json"
    assert err.getvalue().splitlines()[0] == (
        f"error[drift]: {record}: no release records for pubtest"
    )
