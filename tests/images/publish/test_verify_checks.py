"""What ``publish`` attaches and what ``verify`` checks, against a stand-in registry (a
dictionary of manifests and blobs that takes the OCI layouts ``publish`` writes, as skopeo
copies them): the documents made from the demo-v028 stack and its lock, attached, signed and
verified; attaching twice changes nothing; and each way the registry can disagree with the
release record is named. The real registry and skopeo run in test_signed_release.py."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import cast

import pytest

from images.attest.artifacts import attached_artifact, manifest_descriptor, referrers_tag
from images.attest.keys import SigningKey, generate_cosign_key_pair, load_signing_key
from images.attest.provenance import locked_files_of
from images.builder.labels import TOOLING_REVISION_LABEL
from images.builder.tags import ImageReference, parse_reference
from images.publish.attach import AttachInputs, prepare
from images.publish.registry import Registry
from images.publish.verify import Expected, Verification, verify_digest
from images.records import Attestations
from resolver.lockfile import load_lock
from tests.images.attest.test_provenance import (
    COMMIT,
    LOCK_DIR,
    LOCK_SHA256,
    NUMPY,
    NUMPY_SHA256,
    STACK,
    sbom,
    write_report,
)

REPO = parse_reference("registry.example:5000/vllm-musa/vllm")
IMAGE = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": "sha256:" + "c" * 64,
            "size": 2,
        },
        "layers": [],
    }
).encode()
DIGEST = "sha256:" + hashlib.sha256(IMAGE).hexdigest()


class StandIn:
    """A registry as ``Registry`` is to ``publish`` and ``verify``: layouts copied in as
    skopeo copies them, manifests read back by tag or digest, blobs fetched by manifest."""

    def __init__(self) -> None:
        self.manifests: dict[str, bytes] = {}  # "tag" or "sha256:..." -> bytes
        self.blobs: dict[str, bytes] = {}

    def _copy(self, layout: Path, tag: str, ref: ImageReference) -> str:
        index = json.loads((layout / "index.json").read_bytes())
        [entry] = [
            m
            for m in index["manifests"]
            if m["annotations"]["org.opencontainers.image.ref.name"] == tag
        ]
        raw = (layout / "blobs" / "sha256" / entry["digest"][7:]).read_bytes()
        for path in (layout / "blobs" / "sha256").iterdir():
            self.blobs["sha256:" + path.name] = path.read_bytes()
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        self.manifests[digest] = raw
        if ref.tag:
            self.manifests[ref.tag] = raw
        return digest

    push_manifest = _copy
    push_index = _copy

    def read_raw(self, ref: ImageReference) -> bytes | None:
        return self.manifests.get(ref.tag or ref.digest or "")

    def fetch_blobs(self, ref: ImageReference, directory: Path) -> dict[str, bytes]:
        doc = json.loads(self.manifests[ref.digest or ""])
        wanted = [doc["config"], *doc["layers"]]
        return {d["digest"]: self.blobs[d["digest"]] for d in wanted}


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    private, _ = generate_cosign_key_pair(b"pw")
    (tmp_path / "cosign.key").write_bytes(private)
    return load_signing_key(tmp_path / "cosign.key", b"pw")


def _attach(tmp_path: Path, registry: StandIn, key: SigningKey) -> Attestations:
    inputs = AttachInputs(
        repository=REPO,
        report_path=write_report(tmp_path, digest=DIGEST),
        manifest_path=STACK,
        lock_dir=LOCK_DIR,
        sbom=sbom(),
        labels={TOOLING_REVISION_LABEL: COMMIT},
        source_date_epoch=1764633600,
        release=True,
        tool_version="0.1.0",
    )
    made = prepare(IMAGE, inputs, key)
    return made.push(cast(Registry, registry), progress=lambda _line: None)


def _verify(registry: StandIn, key: SigningKey, recorded: Attestations | None) -> Verification:
    want = Expected(
        key=key.public_key(),
        recorded=recorded,
        lock_sha256=LOCK_SHA256,
        locked=locked_files_of(load_lock(LOCK_DIR)),
    )
    return verify_digest(cast(Registry, registry), REPO, DIGEST, want)


def test_attached_and_signed_documents_verify_and_attaching_again_changes_nothing(
    tmp_path: Path, key: SigningKey
) -> None:
    registry = StandIn()
    first = _attach(tmp_path, registry, key)
    held = dict(registry.manifests)
    assert _attach(tmp_path, registry, key) == first  # the same bytes, the same digests
    assert registry.manifests == held
    checked = _verify(registry, key, first)
    assert checked.ok, checked.failures()
    fingerprint = key.public_key().fingerprint()
    files = len(load_lock(LOCK_DIR).packages)
    assert [(c.name, c.detail) for c in checked.checks] == [
        ("signature", f"signed with key {fingerprint}"),
        ("attestations", f"the provenance and the SBOM attested with key {fingerprint}"),
        ("sbom", f"attached as {first.sbom}"),
        ("provenance", f"attached as {first.provenance}"),
        ("lock", f"the provenance records the lock {LOCK_SHA256}, its {files} files"),
    ]


def test_nothing_attached_is_named(tmp_path: Path, key: SigningKey) -> None:
    registry = StandIn()
    recorded = _attach(tmp_path, registry, key)
    del registry.manifests[referrers_tag(DIGEST)]
    failed = {c.name: c.detail for c in _verify(registry, key, recorded).checks if not c.ok}
    nothing = (
        f"{REPO.name}:{referrers_tag(DIGEST)} does not exist: nothing is attached to the digest"
    )
    assert failed == {"sbom": nothing, "provenance": nothing}


def test_an_artifact_of_another_digest_and_a_record_of_another_artifact_are_named(
    tmp_path: Path, key: SigningKey
) -> None:
    registry = StandIn()
    recorded = _attach(tmp_path, registry, key)
    elsewhere = attached_artifact(
        manifest_descriptor(IMAGE), "application/vnd.cyclonedx+json", b"{}", annotations={}
    )
    other = json.loads(elsewhere.manifest)
    other["subject"]["digest"] = "sha256:" + "0" * 64
    raw = json.dumps(other).encode()
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    registry.manifests[digest] = raw
    index = json.loads(registry.manifests[referrers_tag(DIGEST)])
    index["manifests"].append(
        {
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": len(raw),
        }
    )
    registry.manifests[referrers_tag(DIGEST)] = json.dumps(index).encode()
    failed = {c.name: c.detail for c in _verify(registry, key, recorded).checks if not c.ok}
    assert failed["sbom"] == (
        f"the application/vnd.cyclonedx+json artifact {digest} is attached to "
        f"sha256:{'0' * 64}, not {DIGEST}"
    )
    forged = dataclasses.replace(recorded, provenance="sha256:" + "1" * 64)
    registry.manifests[referrers_tag(DIGEST)] = json.dumps(
        index | {"manifests": index["manifests"][:-1]}
    ).encode()
    failed = {c.name: c.detail for c in _verify(registry, key, forged).checks if not c.ok}
    assert failed == {
        "provenance": f"the release record's application/vnd.in-toto+json artifact "
        f"sha256:{'1' * 64} is not attached (attached: {recorded.provenance})"
    }


def test_a_provenance_of_another_lock_is_named_file_by_file(
    tmp_path: Path, key: SigningKey
) -> None:
    registry = StandIn()
    recorded = _attach(tmp_path, registry, key)
    locked = [
        dataclasses.replace(f, sha256="2" * 64) if f.filename == NUMPY else f
        for f in locked_files_of(load_lock(LOCK_DIR))
    ]
    want = Expected(key=None, recorded=recorded, lock_sha256="3" * 64, locked=locked)
    checked = verify_digest(cast(Registry, registry), REPO, DIGEST, want)
    [lock] = [c for c in checked.checks if c.name == "lock"]
    where = f"the attached provenance {recorded.provenance}"
    assert (lock.ok, lock.detail.splitlines()) == (
        False,
        [
            "the provenance is not of the recorded lock:",
            f"    {where} records the lock {LOCK_SHA256}, the release record {'3' * 64}",
            f"    {where}: {NUMPY}: the provenance records sha256 {NUMPY_SHA256}, the lock "
            f"{'2' * 64}",
        ],
    )
