"""Documents attached to an image digest, against the real registries (distribution 2.8, no
referrers API: the distribution-spec's referrers tag schema) and skopeo 1.9: a tiny image is
pushed, an SBOM and a provenance artifact (subject = the image) are pushed by digest, the
``sha256-<hex>`` referrers index is written, then everything is read back by the tag schema
and the documents fetched and re-hashed; a second attach merges into the index; a blob the
registry serves with other bytes is refused. Both the open registry (:5000) and the htpasswd
one (:5001, with credentials) are used.

The ``registry`` tests are skipped without the registries, the daemon and skopeo (failing
when CI=true; tests/conftest.py). The corrupted-blob test rewrites a blob of the open
registry's storage (ci/start-registry.sh: /var/lib/vllm-musa-ci/registry-PORT/storage; set
BUILD_IMAGE_TEST_REGISTRY_STORAGE to move it) and is skipped where that is not writable. The
tests without the mark drive ``SkopeoArtifacts`` with a stand-in skopeo (a script), to reach
the re-hash that a real skopeo makes first."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.errors import AttestationError, RegistryAuthError, RegistryError
from images.attest.artifacts import (
    CREATED,
    PREDICATE_TYPE,
    PROVENANCE_ARTIFACT,
    SBOM_ARTIFACT,
    Artifact,
    attached_artifact,
    cosign_signature_manifest,
    manifest_descriptor,
    merge_referrers,
    parse_artifact,
    parse_referrers,
    referrers_tag,
    write_layout,
)
from images.attest.cosign import (
    SIGNATURE_ANNOTATION,
    signature_tag,
)
from images.engine.port import Credentials, RegistryTarget
from images.engine.skopeo_artifacts import SkopeoArtifacts
from tests.images.publish.layouts import Image, layer, write_image
from tests.support.environment import AUTH_REGISTRY, REGISTRY

USER = os.environ.get("CI_REGISTRY_AUTH_USER", "ci")
PASSWORD = os.environ.get("CI_REGISTRY_AUTH_PASSWORD", "ci-password")
WHEN = "2024-05-01T12:00:00Z"
SLSA = "https://slsa.dev/provenance/v1"
STORAGE = os.environ.get(
    "BUILD_IMAGE_TEST_REGISTRY_STORAGE",
    f"/var/lib/vllm-musa-ci/registry-{REGISTRY.rpartition(':')[2]}/storage",
)


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Where:
    registry: str
    repository: str  # host/path
    credentials: Credentials | None
    skopeo: SkopeoArtifacts

    def at(self, ref: str) -> RegistryTarget:
        """``:tag`` or ``@sha256:...`` of the repository."""
        return RegistryTarget(
            registry=self.registry, reference=self.repository + ref, plain_http=True
        )


def _skopeo(tmp: Path, binary: str = "skopeo", **extra: str) -> SkopeoArtifacts:
    """skopeo with no credentials of the host's (an empty Docker config)."""
    config = tmp / "docker-config"
    config.mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(tmp),
        "DOCKER_CONFIG": str(config),
    }
    return SkopeoArtifacts(env={**env, **extra}, binary=binary)


@pytest.fixture(params=["open", "htpasswd"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    registry = REGISTRY if request.param == "open" else AUTH_REGISTRY
    credentials = None
    if request.param == "htpasswd":
        credentials = Credentials(username=USER, password=PASSWORD, source="the test")
    repository = f"{registry}/attach-tests/{uuid.uuid4().hex[:12]}"
    return Where(registry, repository, credentials, _skopeo(tmp_path))


def _push_image(where: Where, tmp: Path) -> Image:
    image = write_image(tmp / "image", "t", [layer({"etc/id": uuid.uuid4().bytes})])
    report = where.skopeo.push_layout(image.layout, "t", where.at(":v1"), where.credentials)
    assert report.digest == image.manifest_digest
    return image


def _attach(where: Where, tmp: Path, subject: str, artifacts: list[Artifact]) -> str:
    """Push ``artifacts`` by digest, then merge them into the referrers index of ``subject``:
    the digest the registry serves for the index."""
    tag = referrers_tag(subject)
    existing = where.skopeo.read_raw(where.at(f":{tag}"), where.credentials)
    index = merge_referrers(existing, [a.referrer for a in artifacts], tag=tag)
    layout = tmp / f"attach-{uuid.uuid4().hex[:6]}"
    manifests = {f"a{n}": a.manifest for n, a in enumerate(artifacts)}
    write_layout(layout, {**manifests, tag: index}, [b for a in artifacts for b in a.blobs])
    for n, artifact in enumerate(artifacts):
        target = where.at(f"@{artifact.digest}")
        assert (
            where.skopeo.push_manifest(layout, f"a{n}", target, where.credentials)
            == artifact.digest
        )
    return where.skopeo.push_index(layout, tag, where.at(f":{tag}"), where.credentials)


def _read_back(where: Where, tmp: Path, subject: str) -> dict[str, tuple[Artifact, bytes]]:
    """By the tag schema: each referrer of ``subject`` (digest -> the artifact, its document)."""
    tag = referrers_tag(subject)
    index = where.skopeo.read_raw(where.at(f":{tag}"), where.credentials)
    assert index is not None
    found = {}
    for n, desc in enumerate(parse_referrers(index, tag=tag)):
        target = where.at(f"@{desc.digest}")
        raw = where.skopeo.read_raw(target, where.credentials)
        assert raw is not None
        artifact = parse_artifact(raw, digest=desc.digest)
        # skopeo 1.9 writes the index without artifactType; the artifact itself has it
        assert desc.artifact_type in (None, artifact.artifact_type)
        assert dict(desc.annotations) == dict(artifact.annotations)
        blobs = where.skopeo.fetch_blobs(target, where.credentials, tmp / f"fetch-{n}")
        found[desc.digest] = (artifact, artifact.document(blobs))
    return found


@pytest.mark.registry
def test_an_sbom_and_a_provenance_attached_read_back_by_the_tag_schema(
    where: Where, tmp_path: Path
) -> None:
    image = _push_image(where, tmp_path)
    served = where.skopeo.read_raw(where.at(":v1"), where.credentials)
    assert served == image.manifest
    subject = manifest_descriptor(served)
    sbom_doc = json.dumps({"bomFormat": "CycloneDX", "serialNumber": uuid.uuid4().urn}).encode()
    statement = json.dumps(
        {"_type": "https://in-toto.io/Statement/v1", "predicateType": SLSA}
    ).encode()
    sbom = attached_artifact(subject, SBOM_ARTIFACT, sbom_doc, annotations={CREATED: WHEN})
    provenance = attached_artifact(
        subject, PROVENANCE_ARTIFACT, statement, annotations={CREATED: WHEN, PREDICATE_TYPE: SLSA}
    )

    index_digest = _attach(where, tmp_path, subject.digest, [sbom, provenance])

    tag = referrers_tag(subject.digest)
    raw_index = where.skopeo.read_raw(where.at(f":{tag}"), where.credentials)
    assert raw_index is not None
    assert sha256(raw_index) == index_digest
    found = _read_back(where, tmp_path, subject.digest)
    assert set(found) == {sbom.digest, provenance.digest}
    assert found[sbom.digest][1] == sbom_doc
    assert found[provenance.digest][1] == statement
    for artifact, _ in found.values():
        assert artifact.subject == subject
    assert found[sbom.digest][0].artifact_type == SBOM_ARTIFACT
    assert found[provenance.digest][0].artifact_type == PROVENANCE_ARTIFACT
    assert dict(found[provenance.digest][0].annotations) == {CREATED: WHEN, PREDICATE_TYPE: SLSA}
    # the artifacts are pushed by digest: the only tags are the image's and the index's
    assert where.skopeo.read_raw(where.at(f"@{sbom.digest}"), where.credentials) == sbom.manifest

    # a second attach merges into the index the registry serves: the first two are kept
    later = "2024-06-01T00:00:00Z"
    sbom_2 = attached_artifact(
        subject,
        SBOM_ARTIFACT,
        b'{"bomFormat":"CycloneDX","version":2}',
        annotations={CREATED: later},
    )
    second = _attach(where, tmp_path, subject.digest, [sbom_2])
    assert second != index_digest
    again = _read_back(where, tmp_path / "again", subject.digest)
    assert set(again) == {sbom.digest, provenance.digest, sbom_2.digest}
    assert again[sbom_2.digest][1] == b'{"bomFormat":"CycloneDX","version":2}'
    assert again[sbom.digest][1] == sbom_doc

    # cosign's signature manifest goes to its tag byte for byte
    signed = cosign_signature_manifest([(b'{"critical":{}}', {SIGNATURE_ANNOTATION: "MEUC"})])
    layout = tmp_path / "sig"
    write_layout(layout, {"sig": signed.manifest}, signed.blobs)
    sig_tag = signature_tag(subject.digest)
    assert (
        where.skopeo.push_manifest(layout, "sig", where.at(f":{sig_tag}"), where.credentials)
        == signed.digest
    )
    assert where.skopeo.read_raw(where.at(f":{sig_tag}"), where.credentials) == signed.manifest


@pytest.mark.registry
def test_a_referrers_tag_that_holds_no_index_is_refused(where: Where, tmp_path: Path) -> None:
    image = _push_image(where, tmp_path)
    tag = referrers_tag(sha256(b"another image"))
    where.skopeo.push_layout(image.layout, "t", where.at(f":{tag}"), where.credentials)
    existing = where.skopeo.read_raw(where.at(f":{tag}"), where.credentials)
    with pytest.raises(AttestationError) as info:
        merge_referrers(existing, [], tag=tag)
    assert info.value.message == (
        f"the tag {tag} holds a manifest of type 'application/vnd.oci.image.manifest.v1+json', "
        "not an image index: it is no referrers index, and it is left as it is"
    )
    assert where.skopeo.read_raw(where.at(":absent"), where.credentials) is None


@pytest.mark.registry
def test_a_blob_served_with_other_bytes_is_refused(tmp_path: Path) -> None:
    where = Where(
        REGISTRY, f"{REGISTRY}/attach-tests/{uuid.uuid4().hex[:12]}", None, _skopeo(tmp_path)
    )
    image = _push_image(where, tmp_path)
    document = json.dumps({"bomFormat": "CycloneDX", "serialNumber": uuid.uuid4().urn}).encode()
    sbom = attached_artifact(
        manifest_descriptor(image.manifest), SBOM_ARTIFACT, document, annotations={}
    )
    _attach(where, tmp_path, image.manifest_digest, [sbom])
    blob = sha256(document).removeprefix("sha256:")
    data = Path(STORAGE) / "docker/registry/v2/blobs/sha256" / blob[:2] / blob / "data"
    if not os.access(data, os.W_OK):
        pytest.skip(f"the registry's storage {data} is not writable here")
    altered = document.replace(b"CycloneDX", b"CycloneDY")  # the same size
    data.write_bytes(altered)
    target = where.at(f"@{sbom.digest}")
    with pytest.raises(RegistryError) as info:
        where.skopeo.fetch_blobs(target, None, tmp_path / "fetched")
    assert info.value.message == (
        f"{target.reference}: the registry sent other bytes for the blob {sha256(document)} "
        f"(their sha256 is {sha256(altered)}); they are refused"
    )
    assert (
        info.value.hint
        == "the registry or a proxy in between alters what it serves; do not trust it"
    )


@pytest.mark.registry
def test_the_htpasswd_registry_refuses_a_wrong_password_without_showing_it(tmp_path: Path) -> None:
    wrong = Credentials(username=USER, password="not-the-password-8812", source="the test")
    where = Where(AUTH_REGISTRY, f"{AUTH_REGISTRY}/attach-tests/x", wrong, _skopeo(tmp_path))
    with pytest.raises(RegistryAuthError) as info:
        where.skopeo.read_raw(where.at(f":{referrers_tag(sha256(b'x'))}"), wrong)
    assert info.value.message == (
        f"the registry {AUTH_REGISTRY} refused the credentials of user {USER!r} (from the test): "
        "HTTP 401"
    )
    assert "not-the-password-8812" not in f"{info.value.message} {info.value.hint}"


# ------------------------------------------------------------------------------ a stand-in skopeo

FAKE = """#!/bin/sh
# skopeo inspect --raw: the manifest; skopeo copy ... dir:DIR: its blobs, as FAKE_BLOBS says
for last; do :; done
case "$1" in
  inspect) cat "$FAKE_MANIFEST" ;;
  copy) dir="${last#dir:}"; mkdir -p "$dir"; cp -R "$FAKE_BLOBS"/. "$dir"/ ;;
esac
"""


def _stand_in(tmp: Path, manifest: bytes, blobs: dict[str, bytes]) -> SkopeoArtifacts:
    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / "fake-skopeo"
    script.write_text(FAKE, encoding="utf-8")
    script.chmod(0o755)
    (tmp / "manifest").write_bytes(manifest)
    (tmp / "blobs").mkdir()
    for name, data in blobs.items():
        (tmp / "blobs" / name).write_bytes(data)
    paths = {"FAKE_MANIFEST": str(tmp / "manifest"), "FAKE_BLOBS": str(tmp / "blobs")}
    return _skopeo(tmp, str(script), **paths)


def test_the_blobs_fetched_are_re_hashed_whatever_skopeo_says(tmp_path: Path) -> None:
    subject = manifest_descriptor(b'{"mediaType":"application/vnd.oci.image.manifest.v1+json"}')
    sbom = attached_artifact(subject, SBOM_ARTIFACT, b'{"bomFormat":"CycloneDX"}', annotations={})
    empty, document = sbom.blobs
    hexes = {b.digest.removeprefix("sha256:"): b.data for b in sbom.blobs}
    target = RegistryTarget(
        registry="reg.example", reference=f"reg.example/r@{sbom.digest}", plain_http=False
    )

    good = _stand_in(tmp_path / "good", sbom.manifest, hexes)
    assert good.fetch_blobs(target, None, tmp_path / "good" / "out") == {
        empty.digest: b"{}",
        document.digest: b'{"bomFormat":"CycloneDX"}',
    }

    swapped = {**hexes, document.digest.removeprefix("sha256:"): b"[]"}
    bad = _stand_in(tmp_path / "bad", sbom.manifest, swapped)
    with pytest.raises(RegistryError) as info:
        bad.fetch_blobs(target, None, tmp_path / "bad" / "out")
    assert info.value.message == (
        f"{target.reference}: the registry sent other bytes for the blob {document.digest} "
        f"(their sha256 is {sha256(b'[]')} (2 bytes)); they are refused"
    )

    missing = _stand_in(tmp_path / "missing", sbom.manifest, {})
    with pytest.raises(RegistryError) as info:
        missing.fetch_blobs(target, None, tmp_path / "missing" / "out")
    assert info.value.message == f"{target.reference}: skopeo copied no blob {empty.digest}"


def test_a_manifest_that_is_not_the_digest_asked_for_is_refused(tmp_path: Path) -> None:
    manifest = b'{"config":{},"layers":[]}'
    skopeo = _stand_in(tmp_path, manifest, {})
    target = RegistryTarget(
        registry="reg.example", reference=f"reg.example/r@sha256:{'0' * 64}", plain_http=False
    )
    with pytest.raises(RegistryError) as info:
        skopeo.fetch_blobs(target, None, tmp_path / "out")
    assert info.value.message == (
        f"{target.reference}: the registry sent a manifest whose sha256 is {sha256(manifest)}"
    )
    tagged = RegistryTarget(registry="reg.example", reference="reg.example/r:t", plain_http=False)
    with pytest.raises(RegistryError) as info:
        skopeo.fetch_blobs(tagged, None, tmp_path / "out")
    assert info.value.message == "reg.example/r:t: blobs are fetched by digest only"


def test_a_blob_larger_than_the_bound_is_not_copied(tmp_path: Path) -> None:
    manifest = json.dumps(
        {
            "config": {"digest": sha256(b"{}"), "size": 2},
            "layers": [{"digest": sha256(b"x"), "size": 10**9}],
        }
    ).encode()
    skopeo = _stand_in(tmp_path, manifest, {})
    target = RegistryTarget(
        registry="reg.example", reference=f"reg.example/r@{sha256(manifest)}", plain_http=False
    )
    with pytest.raises(RegistryError) as info:
        skopeo.fetch_blobs(target, None, tmp_path / "out", max_bytes=1024)
    assert info.value.message == (
        f"{target.reference}: the blob {sha256(b'x')} of 1000000000 bytes is refused "
        "(a sha256 digest, at most 1024 bytes)"
    )
    assert not (tmp_path / "out").exists()  # nothing was copied
