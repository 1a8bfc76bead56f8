"""Publishing refuses what it cannot stand behind: an image built from other pins than the
tags are rendered from, a push that fails halfway; and tags planned from the manifest.
No daemon, no registry: the ports are fakes."""

from __future__ import annotations

import hashlib
import io
import json
import re
import shlex
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import build_image
from core.errors import (
    BuildImageError,
    BuildReportError,
    PublishError,
    RegistryError,
    StaleImageError,
)
from images.builder.labels import (
    LICENSES_LABEL,
    LOCK_INPUTS_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    TITLE_LABEL,
    TOOLING_REVISION_LABEL,
    VERSION_LABEL,
    VLLM_REVISION_LABEL,
)
from images.builder.report import BuildReport
from images.builder.tags import Channel, ImageReference
from images.builder.workspace import Workspace
from images.engine.port import LocalImage
from images.engine.skopeo import CopyReport, ManifestInfo
from images.oci.layout import find_manifest, manifest_parts
from images.publish.push import (
    PublishRequest,
    gated_report,
    plan_tags,
    publish,
    source_revisions,
)
from manifest import Manifest, parse_manifest
from tests.support.publishing import TAGGED_STACK, write_manifest
from tests.support.saved_images import normalized_image

IMAGE_FILES = {"etc/image-name": b"pubtest\n"}

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
BASE_DIGEST = "sha256:" + "d" * 64  # a base image's digest
# the image a build normalized: the same files give the same digests in every run
with tempfile.TemporaryDirectory() as _scratch:
    _SAMPLE = normalized_image(Path(_scratch), IMAGE_FILES, tag="vllm-openai")
IMAGE_ID, DIGEST = _SAMPLE.config_digest, _SAMPLE.manifest_digest


def manifest(tmp_path: Path, text: str = STACK) -> Manifest:
    return write_manifest(tmp_path, text)


def built_layout(tmp_path: Path) -> Path:
    """The build's normalized image of IMAGE_ID / DIGEST, tagged vllm-openai."""
    image = normalized_image(tmp_path / "image", IMAGE_FILES, tag="vllm-openai")
    assert (image.config_digest, image.manifest_digest) == (IMAGE_ID, DIGEST)
    return image.layout


@dataclass
class FakeInspector:
    image: LocalImage

    def inspect(self, ref: str) -> LocalImage | None:
        return self.image if ref == self.image.id else None

    def read_file(self, ref: str, path: str) -> bytes:
        raise AssertionError("not used")

    def close(self) -> None:
        pass


@dataclass
class FakeRegistry:
    served: dict[str, str] = field(default_factory=dict)

    def lookup(self, ref: ImageReference) -> ManifestInfo | None:
        digest = self.served.get(ref.reference)
        return ManifestInfo(digest=digest, media_type="x") if digest else None


@dataclass
class FakeCopier:
    """Copies a layout's image to the fake registry (which has none of its blobs): the tag
    serves the layout's digest."""

    registry: FakeRegistry
    pushed: list[str] = field(default_factory=list)

    def lookup(self, ref: ImageReference) -> ManifestInfo | None:
        return self.registry.lookup(ref)

    def push(self, layout: Path, tag: str, ref: ImageReference) -> CopyReport:
        digest, manifest = find_manifest(layout, tag)
        self.pushed.append(str(ref))
        self.registry.served[ref.reference] = digest
        config, layers = manifest_parts(manifest, where=digest)
        return CopyReport(digest=digest, uploaded=frozenset(b.digest for b in (config, *layers)))


SERVE_CHECKED = {"status": "passed", "bundle_sha256": "5" * 64}


def run_publish(
    tmp_path: Path,
    m: Manifest,
    labels: Mapping[str, str],
    channel: Channel = "nightly",
    **report: str,
) -> tuple[FakeCopier, FakeRegistry, Path]:
    inspector = FakeInspector(LocalImage(id=IMAGE_ID, labels=labels))
    registry = FakeRegistry()
    copier = FakeCopier(registry)
    record = tmp_path / "releases" / "pubtest.json"
    request = PublishRequest(
        manifest=m,
        manifest_bytes=m.path.read_bytes(),
        target="vllm-openai",
        channel=channel,
        repository="127.0.0.1:5000/mcconline/vllm",
        record_path=record,
        date="20260101",
        now="2026-01-01T00:00:00Z",
        tool_version="test",
        report=BuildReport(
            target="vllm-openai",
            image_id=IMAGE_ID,
            digest=DIGEST,
            oci_layout=str(built_layout(tmp_path)),
            **report,  # type: ignore[arg-type]
        ),
        report_path=tmp_path / "report.json",
        root=tmp_path,
        serve_check=SERVE_CHECKED if channel == "release" else None,
    )
    publish(
        request,
        inspector=inspector,
        registry=copier,  # type: ignore[arg-type]
        progress=lambda _line: None,
    )
    return copier, registry, record


def current_labels(m: Manifest) -> dict[str, str]:
    return {
        LOCK_INPUTS_LABEL: m.lock_inputs_sha256,
        VERSION_LABEL: f"v{m.release}",
        TITLE_LABEL: m.name,
    }


def test_an_image_of_the_current_manifest_is_published(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    pusher, _, record = run_publish(
        tmp_path,
        m,
        current_labels(m),
        lock_inputs_sha256=m.lock_inputs_sha256,
        compressor="gzip/zlib-1.2.13/level-6/block-1048576",
    )
    assert pusher.pushed == ["127.0.0.1:5000/mcconline/vllm:nightly"]
    [written] = json.loads(record.read_text())["records"]
    assert written["compressor"] == "gzip/zlib-1.2.13/level-6/block-1048576"
    # the fake repository had none of the image's blobs: the copy uploads them all
    _, manifest_doc = find_manifest(built_layout(tmp_path / "again"), "vllm-openai")
    sizes = [manifest_doc["config"]["size"], *(x["size"] for x in manifest_doc["layers"])]
    assert written["upload"] == {
        "blobs_mounted": 0, "blobs_reused": 0, "blobs_uploaded": len(sizes),
        "bytes_mounted": 0, "bytes_reused": 0, "bytes_uploaded": sum(sizes),
    }  # fmt: skip


BASE_TAG = "registry.example/musa-sdk:5.2.0-ubuntu22.04"


def test_a_release_refuses_a_base_image_pinned_by_tag_only(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    with pytest.raises(PublishError) as exc:
        run_publish(tmp_path, m, current_labels(m), "release", base_image=BASE_TAG)
    assert exc.value.message == (
        f"a release needs a base image pinned by digest, and image {IMAGE_ID} was built FROM "
        f"'{BASE_TAG}', a tag that can move"
    )
    assert exc.value.hint == (
        f"run `build_image.py pin-base {m.path}` (or set base_image: {BASE_TAG}@sha256:<digest> "
        "in it), build and publish again (--nightly publishes a tagged base)"
    )
    assert not (tmp_path / "releases" / "pubtest.json").exists()


def test_a_release_reads_the_base_from_the_label_when_the_report_has_none(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    labels = {
        **current_labels(m),
        "org.opencontainers.image.base.name": BASE_TAG,
        "org.opencontainers.image.base.digest": DIGEST,  # read from the tag: it does not count
    }
    with pytest.raises(PublishError) as exc:
        run_publish(tmp_path, m, labels, "release")
    assert f"was built FROM '{BASE_TAG}', a tag that can move" in exc.value.message


def test_a_release_refuses_an_image_without_a_known_base(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    with pytest.raises(PublishError) as exc:
        run_publish(tmp_path, m, current_labels(m), "release")
    assert exc.value.message == (
        f"a release needs a base image pinned by digest, and image {IMAGE_ID} names no base "
        f"image (its build report {tmp_path / 'report.json'} has no base_image, the image no "
        "org.opencontainers.image.base.name label)"
    )


def test_a_release_of_a_digest_pinned_base_is_published(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    pusher, _, record = run_publish(
        tmp_path, m, current_labels(m), "release", base_image=f"{BASE_TAG}@{DIGEST}"
    )
    assert pusher.pushed == ["127.0.0.1:5000/mcconline/vllm:v0.28.0"]
    [written] = json.loads(record.read_text())["records"]
    # what the report leaves empty is recorded as not known
    assert [written[k] for k in ("base_image_digest", "dockerfile_sha256", "lock_sha256")] == [
        DIGEST,
        None,
        None,
    ]
    assert "compressor" not in written


def test_a_nightly_keeps_accepting_a_tagged_base(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    pusher, _, _ = run_publish(tmp_path, m, current_labels(m), base_image=BASE_TAG)
    assert pusher.pushed == ["127.0.0.1:5000/mcconline/vllm:nightly"]


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
    assert "org.opencontainers.image.version='v0.28.0'" in exc.value.message
    assert "release: '0.28.1', labelled 'v0.28.1'" in exc.value.message


VLLM_REV = "2cf0a6915ce544dc493a0990f2ea38d81601128a"
MUSA_REV = "070c0ea09ec266972fd6097937fde97d400d70ed"
SOURCES = f"""\
sources:
  vllm: {{git: "https://github.com/vllm-project/vllm.git", rev: "{VLLM_REV}"}}
  vllm-musa: {{git: "git@github.com:MooreThreads/vllm-musa.git", rev: "{MUSA_REV}"}}
"""
TOOLING_REV = "1" * 40


def rendered_labels(m: Manifest, **args: str) -> dict[str, str]:
    """The labels an image built from the render of ``m`` carries, its ARGs set to ``args``."""
    from images.builder.render import build_render_context, render_dockerfile
    from tests.support.images import lock_for

    text = render_dockerfile(build_render_context(m, lock_for(m), lock_sha256="ab" * 32))
    block = text.split("\nLABEL ", 1)[1].split("\n\n", 1)[0].replace("\\\n", " ")
    labels = {}
    for word in shlex.split(block):
        key, _, value = word.partition("=")
        labels[key] = re.sub(r"\$\{(\w+)\}", lambda v: args[v.group(1)], value)
    return labels


def test_labels_of_the_render_publish_and_the_record_has_no_path_of_the_machine(
    tmp_path: Path,
) -> None:
    m = manifest(
        tmp_path,
        STACK.replace(
            "image:\n",
            "base_image: debian:bookworm-slim\n" + SOURCES + "requirements: [pip]\nimage:\n",
        ),
    )
    labels = rendered_labels(m, TOOLING_REVISION=TOOLING_REV, IMAGE_CREATED="2026-01-02T03:04:05Z")
    assert labels[SOURCE_LABEL] == "https://github.com/MooreThreads/vllm-musa"  # no .git
    assert labels[REVISION_LABEL] == MUSA_REV
    assert labels[VLLM_REVISION_LABEL] == VLLM_REV
    _, _, record = run_publish(tmp_path, m, labels, lock_inputs_sha256=m.lock_inputs_sha256)
    text = record.read_text(encoding="utf-8")
    assert str(tmp_path) not in text
    [rec] = json.loads(text)["records"]
    assert rec["source_revisions"] == {
        "(tooling)": TOOLING_REV,
        "vllm": VLLM_REV,
        "vllm-musa": MUSA_REV,
    }
    assert rec["labels"]["io.vllm-musa.tooling.revision"] == TOOLING_REV
    assert rec["labels"]["org.opencontainers.image.revision"] == MUSA_REV


def test_source_revisions_leave_out_an_unknown_tooling_revision(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    assert source_revisions(m, {TOOLING_REVISION_LABEL: "unknown"}) == {}
    assert source_revisions(m, {TOOLING_REVISION_LABEL: "abc"}) == {"(tooling)": "abc"}


def test_an_image_of_another_product_commit_is_refused(tmp_path: Path) -> None:
    # sources are no lock input: the revision label is what tells the images apart
    m = manifest(tmp_path, STACK + SOURCES)
    labels = {**current_labels(m), REVISION_LABEL: "f" * 40}
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, labels)
    assert exc.value.message == (
        f"image {IMAGE_ID} (build report {tmp_path / 'report.json'}) is labelled "
        f"org.opencontainers.image.revision='{'f' * 40}', but {m.path} has "
        f"sources.vllm-musa.rev: '{MUSA_REV}'"
    )


def test_an_image_of_another_vllm_commit_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path, STACK + SOURCES)
    labels = {**current_labels(m), VLLM_REVISION_LABEL: "f" * 40}
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, labels)
    assert exc.value.message.endswith(
        f"is labelled io.vllm-musa.vllm.revision='{'f' * 40}', but {m.path} has "
        f"sources.vllm.rev: '{VLLM_REV}'"
    )


def test_an_image_of_another_product_repository_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path, STACK + SOURCES)
    labels = {**current_labels(m), SOURCE_LABEL: "https://github.com/fork/vllm-musa.git"}
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, labels)
    assert exc.value.message.endswith(
        "is labelled org.opencontainers.image.source='https://github.com/fork/vllm-musa.git', "
        f"but {m.path} has sources.vllm-musa.git: 'git@github.com:MooreThreads/vllm-musa.git'"
    )


def test_an_image_labelled_with_other_licenses_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    labels = {**current_labels(m), LICENSES_LABEL: "MIT"}
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, labels)
    assert exc.value.message.endswith(
        f"is labelled org.opencontainers.image.licenses='MIT', but {m.path} has "
        "image.licenses: 'Apache-2.0'"
    )
    labels[LICENSES_LABEL] = "Apache-2.0"
    run_publish(tmp_path, m, labels, lock_inputs_sha256=m.lock_inputs_sha256)


def test_a_revision_label_without_a_product_source_is_refused(tmp_path: Path) -> None:
    # an image whose revision names a commit this manifest does not pin is not its build
    m = manifest(tmp_path)
    labels = {**current_labels(m), REVISION_LABEL: "f" * 40}
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, labels)
    assert exc.value.message.endswith(
        f"is labelled org.opencontainers.image.revision='{'f' * 40}', but {m.path} has "
        "no product source"
    )


def test_a_revision_label_of_a_path_product_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path, STACK + "sources:\n  vllm-musa: {path: demo/vllm-musa}\n")
    labels = {**current_labels(m), REVISION_LABEL: "f" * 40}
    with pytest.raises(StaleImageError) as exc:
        run_publish(tmp_path, m, labels)
    assert exc.value.message.endswith(
        f"but {m.path} has sources.vllm-musa as a path source, which is not labelled"
    )


def test_a_push_failing_halfway_names_the_tags_that_already_moved(tmp_path: Path) -> None:

    text = STACK.replace(
        'nightly_tags: ["vllm-openai:nightly"]',
        'nightly_tags: ["vllm-openai:nightly-{date}", "vllm-openai:nightly"]',
    )
    m = manifest(tmp_path, text)
    calls: list[str] = []

    original = FakeCopier.push

    def flaky_push(self: FakeCopier, layout: Path, tag: str, ref: ImageReference) -> CopyReport:
        calls.append(str(ref))
        if len(calls) == 2:
            raise RegistryError("the registry 127.0.0.1:5000 answered HTTP 503 to the push")
        return original(self, layout, tag, ref)

    FakeCopier.push = flaky_push  # type: ignore[method-assign]
    try:
        with pytest.raises(PublishError) as exc:
            run_publish(tmp_path, m, current_labels(m), lock_inputs_sha256=m.lock_inputs_sha256)
    finally:
        FakeCopier.push = original  # type: ignore[method-assign]
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
    assert gated_report(path, target="vllm-openai", dockerfile=dockerfile) == BuildReport(
        target="vllm-openai",
        image_id=IMAGE_ID,
        dockerfile_sha256=hashlib.sha256(b"FROM scratch\n").hexdigest(),
        base_image=f"debian:bookworm-slim@{DIGEST}",
        lock_sha256="f" * 64,
        gates={"imports": True, "smoke": True},
    )
    stated = _report(tmp_path, dockerfile_sha256="a" * 64)
    assert gated_report(stated, target="vllm-openai", dockerfile=dockerfile) == (
        BuildReport(target="vllm-openai", image_id=IMAGE_ID, dockerfile_sha256="a" * 64)
    )


def test_a_build_report_of_another_target_is_refused(tmp_path: Path) -> None:
    path = _report(tmp_path)
    with pytest.raises(PublishError) as exc:
        gated_report(path, target="final")
    assert exc.value.message == (
        f"{path}: the build report is for target 'vllm-openai', not 'final'"
    )
    assert exc.value.hint == "pass the report of a --target final build"


def test_an_image_that_failed_a_gate_is_refused(tmp_path: Path) -> None:
    path = _report(tmp_path, gates={"smoke": False, "imports": True, "abi": False})
    with pytest.raises(PublishError) as exc:
        gated_report(path, target="vllm-openai")
    assert exc.value.message == f"{path}: image {IMAGE_ID} failed the gates abi, smoke"
    assert exc.value.hint == "only a gated image is published; fix the build and gate it again"


def test_a_missing_build_report_is_named(tmp_path: Path) -> None:
    with pytest.raises(BuildReportError) as exc:
        gated_report(tmp_path / "none.json", target="vllm-openai")
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


def _request_of(tmp_path: Path, report: BuildReport) -> PublishRequest:
    m = manifest(tmp_path)
    return PublishRequest(
        manifest=m,
        manifest_bytes=m.path.read_bytes(),
        target="vllm-openai",
        channel="nightly",
        repository="127.0.0.1:5000/mcconline/vllm",
        record_path=tmp_path / "releases" / "pubtest.json",
        date="20260101",
        now="2026-01-01T00:00:00Z",
        tool_version="test",
        report=report,
        report_path=tmp_path / "report.json",
        root=tmp_path,
    )


def _publish_refused(tmp_path: Path, report: BuildReport) -> tuple[BuildImageError, FakeCopier]:
    m = manifest(tmp_path)
    copier = FakeCopier(FakeRegistry())
    with pytest.raises(BuildImageError) as info:
        publish(
            _request_of(tmp_path, report),
            inspector=FakeInspector(LocalImage(id=IMAGE_ID, labels=current_labels(m))),
            registry=copier,  # type: ignore[arg-type]
            progress=lambda _line: None,
        )
    return info.value, copier


def test_a_report_without_a_normalized_image_is_refused(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    error, copier = _publish_refused(tmp_path, BuildReport(target="vllm-openai", image_id=IMAGE_ID))
    assert error.message == (
        f"the build report {report} names no normalized image (digest, oci_layout)"
    )
    assert copier.pushed == []


def test_a_layout_that_is_not_the_reports_image_is_refused(tmp_path: Path) -> None:
    other = normalized_image(tmp_path / "other", {"etc/other": b"x\n"}, tag="vllm-openai")
    report = tmp_path / "report.json"
    built = BuildReport(
        target="vllm-openai", image_id=IMAGE_ID, digest=DIGEST, oci_layout=str(other.layout)
    )
    error, copier = _publish_refused(tmp_path, built)
    assert isinstance(error, StaleImageError)
    assert error.message == (
        f"{other.layout}: the layout's image vllm-openai is {other.manifest_digest} (config "
        f"{other.config_digest}), but the build report {report} says {DIGEST} (image "
        f"{IMAGE_ID})"
    )
    assert copier.pushed == []
