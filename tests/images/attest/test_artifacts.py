"""The layouts of documents attached to an image digest (images/attest/artifacts.py), without
a registry: the exact bytes of an SBOM artifact, cosign's ``.sig``/``.att`` manifests as its
specs and its code write them, the referrers index of the tag schema merged and read back, and
hostile or malformed JSON refused with a message naming the document and the field."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from core.errors import AttestationError
from images.attest.artifacts import (
    CREATED,
    EMPTY_CONFIG,
    HINT_READ_BACK,
    MAX_MANIFEST_BYTES,
    OCI_CONFIG,
    OCI_INDEX,
    OCI_MANIFEST,
    PREDICATE_TYPE,
    PROVENANCE_ARTIFACT,
    SBOM_ARTIFACT,
    Artifact,
    Descriptor,
    attached_artifact,
    cosign_attestation_manifest,
    cosign_config,
    cosign_signature_manifest,
    manifest_descriptor,
    merge_referrers,
    parse_artifact,
    parse_referrers,
    referrers_tag,
    write_layout,
)
from images.attest.cosign import (
    DSSE_MEDIA_TYPE,
    PREDICATE_TYPE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
    attestation_tag,
    signature_tag,
)
from images.oci.layout import find_manifest, read_index

HEX = "a" * 64
SUBJECT = Descriptor(media_type=OCI_MANIFEST, digest=f"sha256:{HEX}", size=1234)
SBOM = b'{"bomFormat":"CycloneDX"}'
SBOM_DIGEST = "sha256:2e01b8740d2b1c7ff47487ab94ff0f7f4d2853f3d985cd6d7e381c4aa5ef9afa"
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
WHEN = "2024-05-01T12:00:00Z"
SLSA = "https://slsa.dev/provenance/v1"
TAG = f"sha256-{HEX}"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def sbom() -> Artifact:
    return attached_artifact(SUBJECT, SBOM_ARTIFACT, SBOM, annotations={CREATED: WHEN})


def provenance() -> Artifact:
    notes = {PREDICATE_TYPE: SLSA, CREATED: WHEN}
    return attached_artifact(SUBJECT, PROVENANCE_ARTIFACT, b'{"_type":"x"}', annotations=notes)


def refused(call: object, *args: object, **kwargs: object) -> AttestationError:
    assert callable(call)
    with pytest.raises(AttestationError) as info:
        call(*args, **kwargs)
    return info.value


# ------------------------------------------------------------------------------ artifacts


def test_an_sbom_artifact_is_exactly_this_manifest() -> None:
    artifact = sbom()
    assert (
        artifact.manifest
        == (
            '{"annotations":{"org.opencontainers.image.created":"2024-05-01T12:00:00Z"},'
            '"artifactType":"application/vnd.cyclonedx+json",'
            '"config":{"data":"e30=","digest":"' + EMPTY_DIGEST + '",'
            '"mediaType":"application/vnd.oci.empty.v1+json","size":2},'
            '"layers":[{"digest":"'
            + SBOM_DIGEST
            + '","mediaType":"application/vnd.cyclonedx+json",'
            '"size":25}],"mediaType":"application/vnd.oci.image.manifest.v1+json","schemaVersion":2,'
            '"subject":{"digest":"sha256:' + HEX + '",'
            '"mediaType":"application/vnd.oci.image.manifest.v1+json","size":1234}}'
        ).encode()
    )
    assert artifact.digest == sha256(artifact.manifest)
    assert [(b.media_type, b.data) for b in artifact.blobs] == [
        ("application/vnd.oci.empty.v1+json", b"{}"),
        (SBOM_ARTIFACT, SBOM),
    ]
    assert EMPTY_CONFIG.digest == EMPTY_DIGEST
    assert artifact.referrer.to_json() == {
        "mediaType": OCI_MANIFEST,
        "digest": artifact.digest,
        "size": len(artifact.manifest),
        "artifactType": SBOM_ARTIFACT,
        "annotations": {CREATED: WHEN},
    }


def test_the_same_inputs_give_the_same_bytes_whatever_the_order_of_the_annotations() -> None:
    one = attached_artifact(
        SUBJECT, PROVENANCE_ARTIFACT, b"{}", annotations={CREATED: WHEN, PREDICATE_TYPE: SLSA}
    )
    two = attached_artifact(
        SUBJECT, PROVENANCE_ARTIFACT, b"{}", annotations={PREDICATE_TYPE: SLSA, CREATED: WHEN}
    )
    assert one.manifest == two.manifest
    assert sbom().manifest == sbom().manifest
    assert b" " not in one.manifest  # compact


def test_an_artifact_reads_back_as_it_was_made() -> None:
    made = provenance()
    read = parse_artifact(made.manifest, digest=made.digest)
    assert read.artifact_type == PROVENANCE_ARTIFACT
    assert read.subject == SUBJECT
    assert dict(read.annotations) == {CREATED: WHEN, PREDICATE_TYPE: SLSA}
    assert read.referrer == made.referrer
    assert read.blobs == ()  # they are in the registry
    assert read.document({sha256(b'{"_type":"x"}'): b'{"_type":"x"}'}) == b'{"_type":"x"}'


def test_the_subject_descriptor_is_read_from_the_image_manifest() -> None:
    raw = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
    assert manifest_descriptor(raw) == Descriptor(
        media_type=OCI_MANIFEST, digest=sha256(raw), size=len(raw)
    )
    config = json.dumps({"mediaType": OCI_CONFIG}).encode()
    assert refused(manifest_descriptor, config).message == (
        "the subject manifest: mediaType 'application/vnd.oci.image.config.v1+json' is not an "
        "image's"
    )


def test_what_the_caller_asks_for_is_checked() -> None:
    assert refused(attached_artifact, SUBJECT, "sbom", SBOM, annotations={}).message == (
        "cannot attach: 'sbom' is no media type"
    )
    config = Descriptor(media_type=OCI_CONFIG, digest=f"sha256:{HEX}", size=2)
    assert refused(attached_artifact, config, SBOM_ARTIFACT, SBOM, annotations={}).message == (
        "cannot attach to a application/vnd.oci.image.config.v1+json: it is not an image"
    )
    late = {CREATED: "yesterday"}
    assert refused(attached_artifact, SUBJECT, SBOM_ARTIFACT, SBOM, annotations=late).message == (
        "org.opencontainers.image.created: 'yesterday' is no RFC 3339 time"
    )
    numbers = {CREATED: 1}
    assert refused(
        attached_artifact, SUBJECT, SBOM_ARTIFACT, SBOM, annotations=numbers
    ).message == ("the artifact's annotations: not a map of strings to strings")
    assert refused(Descriptor, media_type=OCI_MANIFEST, digest="sha256:1", size=1).message == (
        "a descriptor: 'sha256:1' is no sha256 digest"
    )


def test_a_document_whose_fetched_bytes_differ_is_refused() -> None:
    artifact = sbom()
    assert artifact.document({SBOM_DIGEST: SBOM}) == SBOM
    error = refused(artifact.document, {SBOM_DIGEST: b'{"bomFormat":"CycloneDY"}'})
    assert error.message == (
        f"the artifact {artifact.digest}: the bytes of its layer are not {SBOM_DIGEST} (25 bytes)"
    )
    assert error.hint == HINT_READ_BACK
    assert refused(artifact.document, {}).message == (
        f"the artifact {artifact.digest}: its layer {SBOM_DIGEST} was not fetched"
    )


# ------------------------------------------------------------------------------ cosign


def test_tags_follow_the_digest() -> None:
    assert referrers_tag(f"sha256:{HEX}") == f"sha256-{HEX}"
    assert signature_tag(f"sha256:{HEX}") == f"sha256-{HEX}.sig"
    assert attestation_tag(f"sha256:{HEX}") == f"sha256-{HEX}.att"
    assert refused(referrers_tag, "sha256:ABC").message == "'sha256:ABC' is not a sha256 digest"


def test_the_cosign_signature_manifest_is_as_cosign_writes_it() -> None:
    payload = json.dumps(
        {
            "critical": {
                "identity": {"docker-reference": "registry.example/vllm"},
                "image": {"docker-manifest-digest": f"sha256:{HEX}"},
                "type": "cosign container image signature",
            },
            "optional": None,
        }
    ).encode()
    made = cosign_signature_manifest([(payload, {SIGNATURE_ANNOTATION: "MEUCIQ=="})])
    doc = json.loads(made.manifest)
    config, layer = made.blobs
    assert doc == {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": config.digest, "size": len(config.data)},
        "layers": [
            {
                "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                "digest": sha256(payload),
                "size": len(payload),
                "annotations": {"dev.cosignproject.cosign/signature": "MEUCIQ=="},
            }
        ],
    }
    assert SIMPLE_SIGNING_MEDIA_TYPE == "application/vnd.dev.cosign.simplesigning.v1+json"
    # go-containerregistry's empty image with the layer appended, in Go's field order
    assert (
        config.data
        == (
            '{"architecture":"","created":"0001-01-01T00:00:00Z",'
            '"history":[{"created":"0001-01-01T00:00:00Z"}],"os":"",'
            '"rootfs":{"type":"layers","diff_ids":["' + sha256(payload) + '"]},"config":{}}'
        ).encode()
    )
    assert layer.data == payload


def test_the_cosign_attestation_manifest_is_as_cosign_writes_it() -> None:
    envelopes = [(b'{"payloadType":"application/vnd.in-toto+json"}', SLSA), (b"{}", "https://x")]
    made = cosign_attestation_manifest(envelopes)
    doc = json.loads(made.manifest)
    assert [layer["mediaType"] for layer in doc["layers"]] == [DSSE_MEDIA_TYPE, DSSE_MEDIA_TYPE]
    assert DSSE_MEDIA_TYPE == "application/vnd.dsse.envelope.v1+json"
    assert [layer["annotations"] for layer in doc["layers"]] == [
        {"dev.cosignproject.cosign/signature": "", "predicateType": SLSA},
        {"dev.cosignproject.cosign/signature": "", "predicateType": "https://x"},
    ]
    assert PREDICATE_TYPE_ANNOTATION == "predicateType"
    assert made.blobs[0].data == cosign_config([sha256(e) for e, _ in envelopes])
    assert json.loads(made.blobs[0].data)["history"] == [{"created": "0001-01-01T00:00:00Z"}] * 2


def test_cosign_manifests_refuse_what_cosign_would_not_write() -> None:
    assert refused(cosign_signature_manifest, [(b"{}", {})]).message == (
        "signature 0 has no dev.cosignproject.cosign/signature annotation"
    )
    assert refused(cosign_signature_manifest, []).message == (
        "a cosign manifest of 0 signatures (1 to 1024)"
    )
    assert refused(cosign_attestation_manifest, [(b"{}", "")]).message == (
        "attestation 0 has no predicate type"
    )


# ------------------------------------------------------------------------------ referrers


def _referrer(digest_char: str, artifact_type: str | None, created: str = "") -> Descriptor:
    return Descriptor(
        media_type=OCI_MANIFEST,
        digest="sha256:" + digest_char * 64,
        size=600,
        artifact_type=artifact_type,
        annotations={CREATED: created} if created else {},
    )


def test_a_first_referrer_makes_the_index() -> None:
    artifact = sbom()
    assert merge_referrers(None, [artifact.referrer], tag=TAG) == (
        '{"manifests":[{"annotations":{"org.opencontainers.image.created":"2024-05-01T12:00:00Z"},'
        '"artifactType":"application/vnd.cyclonedx+json","digest":"' + artifact.digest + '",'
        '"mediaType":"application/vnd.oci.image.manifest.v1+json","size":' + str(len(artifact.manifest))
        + '}],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}'
    ).encode()  # fmt: skip


def test_a_merge_keeps_the_old_ones_dedups_by_digest_and_sorts_by_time() -> None:
    first = [_referrer("c", SBOM_ARTIFACT, "2024-01-02T00:00:00Z")]
    old = merge_referrers(None, [*first, _referrer("b", SBOM_ARTIFACT, "2024-01-03T00:00:00Z")])
    # skopeo 1.9 writes the index again without artifactType: such descriptors are kept
    served = json.loads(old)
    for desc in served["manifests"]:
        del desc["artifactType"]
    served["manifests"].append(
        {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "f" * 64, "size": 7}
    )
    new = [
        _referrer("c", SBOM_ARTIFACT, "2024-01-05T00:00:00Z"),  # the same digest: replaces
        _referrer("a", PROVENANCE_ARTIFACT, "2024-01-04T00:00:00Z"),
    ]
    merged = merge_referrers(json.dumps(served).encode(), new, tag=TAG)
    got = [(d.digest[7], d.artifact_type, dict(d.annotations)) for d in parse_referrers(merged)]
    assert got == [
        ("f", None, {}),
        ("b", None, {CREATED: "2024-01-03T00:00:00Z"}),
        ("a", PROVENANCE_ARTIFACT, {CREATED: "2024-01-04T00:00:00Z"}),
        ("c", SBOM_ARTIFACT, {CREATED: "2024-01-05T00:00:00Z"}),
    ]
    assert merge_referrers(merged, new, tag=TAG) == merged  # adding again changes nothing


def test_a_tag_that_holds_no_index_is_refused_by_name() -> None:
    error = refused(merge_referrers, sbom().manifest, [sbom().referrer], tag=TAG)
    assert error.message == (
        f"the tag {TAG} holds a manifest of type 'application/vnd.oci.image.manifest.v1+json', "
        "not an image index: it is no referrers index, and it is left as it is"
    )
    assert error.hint == (
        "that tag belongs to the referrers of the digest it names: move what it holds to "
        "another tag, then attach again"
    )
    index = merge_referrers(None, [])
    cosign = cosign_signature_manifest([(b"{}", {SIGNATURE_ANNOTATION: "x"})])
    assert refused(merge_referrers, index, [cosign_descriptor(cosign.manifest)]).message == (
        "a referrer is an artifact manifest, not {'mediaType': "
        "'application/vnd.oci.image.manifest.v1+json', 'digest': '"
        + sha256(cosign.manifest) + "', 'size': " + str(len(cosign.manifest)) + "}"
    )  # fmt: skip


def cosign_descriptor(raw: bytes) -> Descriptor:
    return Descriptor(media_type=OCI_MANIFEST, digest=sha256(raw), size=len(raw))


def _index(*manifests: object, media_type: object = OCI_INDEX) -> bytes:
    return json.dumps(
        {"schemaVersion": 2, "mediaType": media_type, "manifests": list(manifests)}
    ).encode()


GOOD = {"mediaType": OCI_MANIFEST, "digest": f"sha256:{HEX}", "size": 10}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"),
        (b'{"a":1,"a":2}', "is not JSON: the key 'a' appears twice"),
        (b'{"size": NaN}', "is not JSON: NaN is not JSON"),
        (b"[" * 100_000, "is not JSON: nested too deeply"),
        (b"\xff", "is not JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        (b"[]", "is not a JSON object"),
        (b" " * (MAX_MANIFEST_BYTES + 1), "is 4194305 bytes, more than the 4194304 of a manifest"),
        (
            _index(media_type="application/vnd.docker.distribution.manifest.list.v2+json"),
            "is not an application/vnd.oci.image.index.v1+json of schemaVersion 2 "
            "('application/vnd.docker.distribution.manifest.list.v2+json', schemaVersion 2)",
        ),
        (
            json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": {}}).encode(),
            ": manifests is not a list of at most 4096 descriptors",
        ),
        (_index([]), ": manifests[0] is not a JSON object"),
        (_index({**GOOD, "digest": "sha256:../../etc"}), ": manifests[0].digest: 'sha256:../../etc' is not a sha256 digest"),
        (_index({**GOOD, "digest": 5}), ": manifests[0].digest: 5 is not a sha256 digest"),
        (_index({**GOOD, "size": -1}), ": manifests[0].size: -1 is not a size of at most 67108864"),
        (_index({**GOOD, "size": True}), ": manifests[0].size: True is not a size of at most 67108864"),
        (_index({**GOOD, "size": 10**30}), f": manifests[0].size: {10**30} is not a size of at most 67108864"),
        (_index({**GOOD, "mediaType": "text"}), ": manifests[0].mediaType: 'text' is no media type"),
        (_index({**GOOD, "mediaType": None}), ": manifests[0].mediaType: None is no media type"),
        (_index({**GOOD, "artifactType": 3}), ": manifests[0].artifactType: 3 is no media type"),
        (_index({**GOOD, "annotations": {"a": 1}}), ": manifests[0].annotations: not a map of strings to strings"),
        (_index({**GOOD, "annotations": []}), ": manifests[0].annotations: not a map of strings to strings"),
    ],
)  # fmt: skip
def test_a_hostile_referrers_index_is_refused_by_what_is_wrong(raw: bytes, message: str) -> None:
    error = refused(parse_referrers, raw, tag=TAG)
    assert (
        error.message == f"the referrers index {TAG}" + ("" if message[0] == ":" else " ") + message
    )
    assert error.hint == HINT_READ_BACK
    # a merge refuses the same index, and writes nothing
    with pytest.raises(AttestationError):
        merge_referrers(raw, [_referrer("b", SBOM_ARTIFACT)], tag=TAG)


def _artifact(**fields: object) -> bytes:
    doc = {**json.loads(sbom().manifest), **fields}
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def test_an_artifact_without_artifact_type_has_its_config_media_type() -> None:
    raw = _artifact(artifactType=None, config={**GOOD, "mediaType": "application/vnd.example+json"})
    assert parse_artifact(raw).artifact_type == "application/vnd.example+json"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"subject": None}, " has no subject: it is attached to nothing"),
        ({"subject": {**GOOD, "digest": "md5:x"}}, ": subject.digest: 'md5:x' is not a sha256 digest"),
        ({"layers": "x"}, ": layers is not a list of at most 1024 descriptors"),
        ({"layers": [GOOD] * 1025}, ": layers is not a list of at most 1024 descriptors"),
        ({"layers": [GOOD, {**GOOD, "size": "1"}]}, ": layers[1].size: '1' is not a size of at most 67108864"),
        ({"config": None}, ": config is not a JSON object"),
        ({"artifactType": ""}, ": artifactType '' is no media type"),
        ({"annotations": {"k": None}}, ": annotations: not a map of strings to strings"),
        ({"schemaVersion": 1}, f" is not an {OCI_MANIFEST} of schemaVersion 2 ('{OCI_MANIFEST}', schemaVersion 1)"),
    ],
)  # fmt: skip
def test_a_malformed_artifact_is_refused_by_what_is_wrong(
    fields: dict[str, object], message: str
) -> None:
    raw = _artifact(**fields)
    error = refused(parse_artifact, raw)
    assert error.message == f"the artifact manifest {sha256(raw)}{message}"
    assert error.hint == HINT_READ_BACK


def test_an_artifact_read_by_digest_must_hash_to_it() -> None:
    raw = sbom().manifest
    assert refused(parse_artifact, raw, digest=f"sha256:{HEX}").message == (
        f"the artifact manifest sha256:{HEX}: the bytes read have the sha256 {sha256(raw)}"
    )


# ------------------------------------------------------------------------------ the layout


def test_the_layout_holds_each_manifest_under_its_tag(tmp_path: Path) -> None:
    artifact = sbom()
    index = merge_referrers(None, [artifact.referrer], tag=TAG)
    layout = tmp_path / "layout"
    write_layout(layout, {"sbom": artifact.manifest, TAG: index}, artifact.blobs)
    assert json.loads((layout / "oci-layout").read_bytes()) == {"imageLayoutVersion": "1.0.0"}
    assert [(d.ref_name, d.media_type, d.digest) for d in read_index(layout)] == [
        ("sbom", OCI_MANIFEST, artifact.digest),
        (TAG, OCI_INDEX, sha256(index)),
    ]
    digest, manifest = find_manifest(layout, "sbom")
    assert (digest, manifest["artifactType"]) == (artifact.digest, SBOM_ARTIFACT)
    blobs = sorted(p.name for p in (layout / "blobs" / "sha256").iterdir())
    expected = [EMPTY_DIGEST, SBOM_DIGEST, artifact.digest, sha256(index)]
    assert blobs == sorted(d.removeprefix("sha256:") for d in expected)
    for path in (layout / "blobs" / "sha256").iterdir():
        assert sha256(path.read_bytes()) == f"sha256:{path.name}"
    assert [p.name for p in tmp_path.iterdir()] == ["layout"]  # no staging left


def test_the_layout_refuses_what_it_would_overwrite_or_mislabel(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x", encoding="utf-8")
    assert refused(write_layout, tmp_path / "full", {}, []).message == (
        f"{tmp_path / 'full'} exists and is not an empty directory"
    )
    raw = sbom().manifest
    assert refused(write_layout, tmp_path / "new", {"a:b": raw}, []).message == (
        "'a:b' is not a valid tag"
    )
    assert refused(write_layout, tmp_path / "new", {"cfg": b'{"mediaType":"x/y"}'}, []).message == (
        "the manifest tagged cfg is a 'x/y'"
    )
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    write_layout(tmp_path / "empty", {"sbom": raw}, sbom().blobs)
    assert (tmp_path / "empty" / "index.json").is_file()
