"""Docker and registry tests: the demo published signed, its SBOM and provenance attached, then
verified, and refused once the registry serves something else next to it.

The session's demo (``make demo``, the ``demo`` fixture) is published as a nightly to a fresh
repository of the local registry (distribution 2.8: the referrers tag schema) with a cosign
key the test makes. ``verify`` accepts it with the key's public half and refuses it with
another key; then, each on its own publish, what an attacker (or a mistake) could do to the
registry is done with the same tools (skopeo, the attest module's formats), and ``verify`` or
``verify-pins`` names what differs: a signature by another key in place of ours, the signature
deleted, an attestation about another digest, a provenance of another lock signed with the
right key.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import uuid
from collections.abc import Iterable
from pathlib import Path

import pytest

import build_image
from images.attest.artifacts import (
    CREATED,
    PREDICATE_TYPE,
    PROVENANCE_ARTIFACT,
    Blob,
    attached_artifact,
    cosign_attestation_manifest,
    cosign_signature_manifest,
    manifest_descriptor,
    merge_referrers,
    parse_artifact,
    referrers_tag,
    sha256_digest,
    write_layout,
)
from images.attest.cosign import (
    SIGNATURE_ANNOTATION,
    attestation_tag,
    dsse_envelope,
    sign_payload,
    signature_tag,
    simple_signing_payload,
)
from images.attest.keys import (
    SigningKey,
    generate_cosign_key_pair,
    load_public_key,
    load_signing_key,
)
from images.attest.provenance import PREDICATE_TYPE as SLSA
from images.attest.provenance import canonical_json
from images.builder.tags import ImageReference, parse_reference
from images.engine.skopeo import Skopeo
from images.engine.skopeo_artifacts import SkopeoArtifacts
from images.publish.registry import Registry
from tests.support.demo_build import ROOT, Demo
from tests.support.environment import REGISTRY

pytestmark = [pytest.mark.docker, pytest.mark.registry]

STACK = ROOT / "stack" / "demo.yaml"
PASSPHRASE = b"release passphrase"


@dataclasses.dataclass(frozen=True)
class Published:
    repo: ImageReference  # the repository, no tag
    digest: str
    record: Path
    key: SigningKey
    public: Path  # the key's public half, PEM
    other_public: Path  # another key's
    other: SigningKey
    lock: Path

    def cli(self, *argv: str | Path) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        code = build_image.main([str(a) for a in argv], out=out, err=err)
        return code, out.getvalue(), err.getvalue()

    def verify(self, public: Path | None = None) -> tuple[int, str, str]:
        return self.cli(
            "verify", f"{self.repo.name}:nightly-final", "--public-key", public or self.public,
            "--stack", STACK, "--record", self.record, "--lock", self.lock,
        )  # fmt: skip

    def verify_pins(self) -> tuple[int, str, str]:
        return self.cli(
            "verify-pins", STACK, "--record", self.record, "--public-key", self.public,
            "--lock", self.lock,
        )  # fmt: skip

    @property
    def registry(self) -> Registry:
        env = {**os.environ, "DOCKER_CONFIG": str(self.record.parent)}
        return Registry(
            Skopeo(env=env),
            env=env,
            docker_config=None,
            timeout=30,
            artifacts=SkopeoArtifacts(env=env),
        )

    def push(self, tmp: Path, tag: str, manifest: bytes, blobs: Iterable[Blob]) -> None:
        """Put ``manifest`` (and its blobs) at ``tag`` of the repository, as anyone could."""
        layout = tmp / f"layout-{uuid.uuid4().hex[:8]}"
        write_layout(layout, {"m": manifest}, blobs)
        self.registry.push_manifest(layout, "m", self.repo.with_tag(tag))


def _keys(tmp: Path, name: str) -> tuple[SigningKey, Path]:
    private, public = generate_cosign_key_pair(PASSPHRASE)
    (tmp / f"{name}.key").write_bytes(private)
    (tmp / f"{name}.pub").write_bytes(public)
    return load_signing_key(tmp / f"{name}.key", PASSPHRASE), tmp / f"{name}.pub"


@pytest.fixture
def published(demo: Demo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Published:
    """The demo's final image published as a nightly, signed, to a fresh repository."""
    key, public = _keys(tmp_path, "cosign")
    other, other_public = _keys(tmp_path, "other")
    record = tmp_path / "releases" / "vllm-musa-demo.json"
    record.parent.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(record.parent))  # no host credentials
    monkeypatch.setenv("COSIGN_PASSWORD", PASSPHRASE.decode())
    repository = f"{REGISTRY}/signed-tests/{uuid.uuid4().hex[:12]}"
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main(
        [
            "publish", str(STACK), "--target", "final", "--nightly", "--repository", repository,
            "--record", str(record), "--date", "20261205", "--lock", str(demo.lock_dir),
            "--sign-key", str(tmp_path / "cosign.key"),
        ],
        out=out,
        err=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    return Published(
        repo=parse_reference(repository),
        digest=demo.digests["final"],
        record=record,
        key=key,
        public=public,
        other=other,
        other_public=other_public,
        lock=demo.lock_dir,
    )


def _attestations(p: Published) -> dict[str, str]:
    records = json.loads(p.record.read_text(encoding="utf-8"))["records"]
    attached: dict[str, str] = records[-1]["attestations"]
    return attached


def test_verify_accepts_the_signed_demo_and_refuses_another_key(published: Published) -> None:
    p = published
    attached = _attestations(p)
    fingerprint = load_public_key(p.public).fingerprint()
    assert attached["public_key"] == fingerprint
    code, out, err = p.verify()
    assert code == 0, err
    lock_sha256 = json.loads(p.record.read_text())["records"][-1]["lock_sha256"]
    assert out.splitlines() == [
        f"ok      signature: signed with key {fingerprint}",
        f"ok      attestations: the provenance and the SBOM attested with key {fingerprint}",
        f"ok      sbom: attached as {attached['sbom']}",
        f"ok      provenance: attached as {attached['provenance']}",
        f"ok      lock: the provenance records the lock {lock_sha256}, its 8 files",
    ]
    # what varied in the run (host, times) is beside the build report, not in a document
    run = json.loads((ROOT / "build" / "reports" / "demo-final.run.json").read_text())
    assert run["schema"] == "build-image/provenance-run/1"
    assert "sha256:" + run["statement_sha256"] == attached["provenance_document"]
    code, out, err = p.verify(p.other_public)
    assert code == 1
    other = load_public_key(p.other_public).fingerprint()
    sig = f"{p.repo.name}:{signature_tag(p.digest)}"
    assert err.splitlines()[:3] == [
        f"error[signature]: {p.repo.name}@{p.digest}: 2 of 5 checks failed:",
        f"  signature: no signature in {sig} verifies with key {other} (1 there): "
        f"{p.repo.name}@{p.digest}: the signature does not verify with the key {other}: another "
        "key made it, or the payload was changed after signing",
        f"  attestations: {p.repo.name}:{attestation_tag(p.digest)} has no attestation of "
        f"{SLSA} and https://cyclonedx.org/bom signed by key {other} about {p.digest} (the DSSE "
        f"envelope: no signature of the envelope (1) verifies with the key {other}: another key "
        "signed it, or its payload was changed after signing)",
    ]


def test_verify_pins_names_a_signature_replaced_by_another_keys(
    published: Published, tmp_path: Path
) -> None:
    p = published
    assert p.verify_pins()[0] == 0
    payload = simple_signing_payload(p.repo.name, p.digest)
    forged = cosign_signature_manifest(
        [(payload, {SIGNATURE_ANNOTATION: sign_payload(p.other, payload)})]
    )
    p.push(tmp_path, signature_tag(p.digest), forged.manifest, forged.blobs)
    code, _, err = p.verify_pins()
    assert code == 1
    fingerprint = load_public_key(p.public).fingerprint()
    assert err.splitlines()[:2] == [
        f"error[signature]: {p.repo.name}@{p.digest}: 1 of 5 checks failed:",
        f"  signature: no signature in {p.repo.name}:{signature_tag(p.digest)} verifies with "
        f"key {fingerprint} (1 there): {p.repo.name}@{p.digest}: the signature does not verify "
        f"with the key {fingerprint}: another key made it, or the payload was changed after "
        "signing",
    ]


def test_a_deleted_signature_and_an_attestation_of_another_digest_are_named(
    published: Published, tmp_path: Path
) -> None:
    p = published
    subprocess.run(
        [
            "skopeo",
            "delete",
            "--tls-verify=false",
            f"docker://{p.repo.name}:{signature_tag(p.digest)}",
        ],
        check=True,
        env={**os.environ, "DOCKER_CONFIG": str(p.record.parent)},
    )
    elsewhere = "sha256:" + "0" * 64
    statement = canonical_json(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": p.repo.name, "digest": {"sha256": "0" * 64}}],
            "predicateType": SLSA,
            "predicate": {},
        }
    )
    att = cosign_attestation_manifest([(dsse_envelope(statement, p.key), SLSA)])
    p.push(tmp_path, attestation_tag(p.digest), att.manifest, att.blobs)
    code, _, err = p.verify()
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == f"error[signature]: {p.repo.name}@{p.digest}: 2 of 5 checks failed:"
    assert lines[1] == (
        f"  signature: {p.repo.name}:{signature_tag(p.digest)} does not exist: the digest is "
        "not signed"
    )
    assert lines[2].startswith(
        f"  attestations: {p.repo.name}:{attestation_tag(p.digest)} has no attestation of "
        f"{SLSA} and https://cyclonedx.org/bom signed by key "
    )
    assert lines[2].endswith(f"(an attestation of {SLSA} is about {elsewhere}, not {p.digest})")
    assert lines[3].startswith("hint: ")  # the attached SBOM, provenance and lock still agree


def test_verify_pins_names_a_provenance_of_another_lock(
    published: Published, tmp_path: Path
) -> None:
    p = published
    registry = p.registry
    attached = _attestations(p)
    at = dataclasses.replace(p.repo, tag=None, digest=attached["provenance"])
    artifact = parse_artifact(registry.read_raw(at) or b"")
    document = artifact.document(registry.fetch_blobs(at, tmp_path / "blobs"))
    doc = json.loads(document)
    definition = doc["predicate"]["buildDefinition"]
    recorded_lock = definition["externalParameters"]["lock"]["sha256"]
    definition["externalParameters"]["lock"]["sha256"] = "1" * 64
    locked = next(
        d for d in definition["resolvedDependencies"] if d["annotations"]["kind"] == "locked-file"
    )
    was = locked["digest"]["sha256"]
    locked["digest"]["sha256"] = "2" * 64
    tampered = canonical_json(doc)
    # signed with the right key, attached and attested in place of the real one
    subject = manifest_descriptor(
        registry.read_raw(dataclasses.replace(p.repo, tag=None, digest=p.digest)) or b""
    )
    forged = attached_artifact(
        subject, PROVENANCE_ARTIFACT, tampered,
        annotations={CREATED: "2026-12-05T00:00:00Z", PREDICATE_TYPE: SLSA},
    )  # fmt: skip
    p.push(tmp_path, f"forged-{uuid.uuid4().hex[:6]}", forged.manifest, forged.blobs)
    index_tag = referrers_tag(p.digest)
    index = merge_referrers(registry.read_raw(p.repo.with_tag(index_tag)), [forged.referrer])
    layout = tmp_path / "index"
    write_layout(layout, {"i": index}, [])
    registry.push_index(layout, "i", p.repo.with_tag(index_tag))
    att = cosign_attestation_manifest([(dsse_envelope(tampered, p.key), SLSA)])
    p.push(tmp_path, attestation_tag(p.digest), att.manifest, att.blobs)
    code, _, err = p.verify_pins()
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == f"error[signature]: {p.repo.name}@{p.digest}: 2 of 5 checks failed:"
    attested = f"the attested provenance {sha256_digest(tampered)}"
    forged_at = f"the attached provenance {forged.digest}"
    text = "\n".join(lines)
    for where in (attested, forged_at):
        assert (
            f"    {where} records the lock {'1' * 64}, the release record {recorded_lock}"
        ) in lines
        assert (
            f"    {where}: {locked['name']}: the provenance records sha256 {'2' * 64}, the lock {was}"
            in lines
        )
    assert f"the attached provenance {attached['provenance']}" not in text  # the real one agrees
