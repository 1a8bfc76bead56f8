"""cosign's formats: the simple-signing payload byte for byte, signatures cosign made verified
here, DSSE envelopes both ways (cosign's own envelopes among them), in-toto statements, and
refusals that say what failed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from core.errors import AttestationError, SignatureError
from images.attest.cosign import (
    DSSE_MEDIA_TYPE,
    IN_TOTO_PAYLOAD_TYPE,
    PREDICATE_TYPE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
    SimpleSigningClaims,
    attestation_tag,
    dsse_envelope,
    open_dsse_envelope,
    pae,
    sign_payload,
    signature_tag,
    simple_signing_payload,
    statement_predicate_type,
    statement_subject_digests,
    verify_simple_signing,
)
from images.attest.keys import (
    PublicKey,
    SigningKey,
    generate_pkcs8_key_pair,
    load_public_key,
    load_signing_key,
    public_key_from_pem,
)

FIXTURES = Path(__file__).parent / "fixtures" / "cosign"
D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
REPO = "registry.example.com/vllm-musa"
BLOB_SHA256 = "sha256:658781cd4ed9bca60dacd09f7bb914bb51502e8b5d619f57f39a1d652596cc24"


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    path = tmp_path_factory.mktemp("k") / "k.pem"
    path.write_bytes(generate_pkcs8_key_pair("ecdsa-p256")[0])
    return load_signing_key(path, None)


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    path = tmp_path_factory.mktemp("k") / "other.pem"
    path.write_bytes(generate_pkcs8_key_pair("ecdsa-p256")[0])
    return load_signing_key(path, None)


def certificate_key(pem_or_der: bytes) -> PublicKey:
    """The public key of a certificate (keyless cosign signs with the certificate's key)."""
    if pem_or_der.startswith(b"-----"):
        cert = x509.load_pem_x509_certificate(pem_or_der)
    else:
        cert = x509.load_der_x509_certificate(pem_or_der)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return public_key_from_pem(spki, "certificate")


def statement(*digests: str, kind: str = "https://in-toto.io/Statement/v1") -> bytes:
    subjects = [{"name": REPO, "digest": {"sha256": d.removeprefix("sha256:")}} for d in digests]
    doc = {"_type": kind, "subject": subjects, "predicateType": "https://slsa.dev/provenance/v1"}
    return json.dumps(doc, separators=(",", ":")).encode()


def test_names_and_tags_are_cosigns() -> None:
    assert SIMPLE_SIGNING_MEDIA_TYPE == "application/vnd.dev.cosign.simplesigning.v1+json"
    assert SIGNATURE_ANNOTATION == "dev.cosignproject.cosign/signature"
    assert DSSE_MEDIA_TYPE == "application/vnd.dsse.envelope.v1+json"
    assert IN_TOTO_PAYLOAD_TYPE == "application/vnd.in-toto+json"
    assert PREDICATE_TYPE_ANNOTATION == "predicateType"
    digest = "sha256:97fc222cee7991b5b061d4d4afdb5f3428fcb0c9054e1690313786befa1e4e36"
    # SIGNATURE_SPEC.md, "Tag-based Discovery", the example mapping
    assert signature_tag(digest) == (
        "sha256-97fc222cee7991b5b061d4d4afdb5f3428fcb0c9054e1690313786befa1e4e36.sig"
    )
    assert attestation_tag(digest) == (
        "sha256-97fc222cee7991b5b061d4d4afdb5f3428fcb0c9054e1690313786befa1e4e36.att"
    )
    with pytest.raises(ValueError, match="not a sha256:<64 hex> digest: 'sha256:abc'"):
        signature_tag("sha256:abc")


def test_payload_is_the_bytes_gos_json_marshal_writes() -> None:
    digest = "sha256:d34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33f"
    expected = (FIXTURES / "sigstore.payload_test.no-claims.json").read_bytes()
    assert simple_signing_payload("example.com/test/image", digest) == expected
    with pytest.raises(ValueError, match="not a repository reference"):
        simple_signing_payload('x"}', digest)


def test_signatures_cosign_made_verify_here() -> None:
    # A key-based signature: the payload bytes are also exactly the ones this tool writes.
    digest = "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"
    payload = (FIXTURES / "sigstore-rs.busybox.payload.json").read_bytes()
    assert simple_signing_payload("registry-testing.svc.lan/busybox", digest) == payload
    pub = load_public_key(FIXTURES / "sigstore-rs.busybox.pub")
    signature = (FIXTURES / "sigstore-rs.busybox.sig").read_text()
    claims = verify_simple_signing(payload, signature, pub, digest=digest, reference="busybox")
    assert claims == SimpleSigningClaims(
        docker_reference="registry-testing.svc.lan/busybox", digest=digest, optional=None
    )
    # A keyless one, with the key of its certificate.
    name = "sigstore-rs.disallow-service-nodeport"
    digest = "sha256:5f481572d088dc4023afb35fced9530ced3d9b03bf7299c6f492163cb9f0452e"
    cert_key = certificate_key((FIXTURES / f"{name}.crt").read_bytes())
    payload = (FIXTURES / f"{name}.payload.json").read_bytes()
    signature = (FIXTURES / f"{name}.sig").read_text()
    assert (
        verify_simple_signing(payload, signature, cert_key, digest=digest, reference="x").digest
        == digest
    )
    with pytest.raises(SignatureError, match="does not verify with the key"):
        verify_simple_signing(payload, signature, pub, digest=digest, reference="x")


def test_sign_and_verify_round_trip(key: SigningKey) -> None:
    payload = simple_signing_payload(REPO, D1)
    signature = sign_payload(key, payload)
    assert signature == sign_payload(key, payload)  # deterministic ECDSA
    claims = verify_simple_signing(payload, signature, key.public_key(), digest=D1, reference=REPO)
    assert claims == SimpleSigningClaims(docker_reference=REPO, digest=D1, optional=None)


def test_signature_by_another_key_is_refused(key: SigningKey, other: SigningKey) -> None:
    payload = simple_signing_payload(REPO, D1)
    signature = sign_payload(other, payload)
    with pytest.raises(SignatureError) as info:
        verify_simple_signing(payload, signature, key.public_key(), digest=D1, reference=REPO)
    assert str(info.value) == (
        f"{REPO}@{D1}: the signature does not verify with the key"
        f" {key.public_key().fingerprint()}: another key made it, or the payload was changed"
        " after signing"
    )


def test_signature_for_another_digest_is_refused(key: SigningKey) -> None:
    payload = simple_signing_payload(REPO, D2)
    with pytest.raises(SignatureError) as info:
        verify_simple_signing(
            payload, sign_payload(key, payload), key.public_key(), digest=D1, reference=REPO
        )
    assert str(info.value) == (
        f"{REPO}@{D1}: the signature is for another image: its payload names the digest {D2},"
        f" not {D1}"
    )


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"not json", "the signed payload is not a JSON object"),
        (b"[1]", "the signed payload is not a JSON object"),
        (
            b'{"critical":{"type":"atomic container signature"}}',
            "the signed payload is not a cosign simple-signing document: critical.type is"
            " 'atomic container signature', not 'cosign container image signature'",
        ),
        (
            b'{"critical":{"type":"cosign container image signature","image":{}}}',
            "the signed payload has no critical.identity.docker-reference or no"
            " critical.image.docker-manifest-digest string",
        ),
    ],
)
def test_signed_payloads_of_the_wrong_shape_are_refused(
    key: SigningKey, payload: bytes, reason: str
) -> None:
    with pytest.raises(SignatureError) as info:
        verify_simple_signing(
            payload, sign_payload(key, payload), key.public_key(), digest=D1, reference=REPO
        )
    assert str(info.value) == f"{REPO}@{D1}: {reason}"


def test_a_signature_that_is_not_base64_is_refused(key: SigningKey) -> None:
    with pytest.raises(SignatureError) as info:
        verify_simple_signing(b"{}", "@@@", key.public_key(), digest=D1, reference=REPO)
    assert str(info.value) == f"{REPO}@{D1}: the signature annotation is not base64"


def test_pae_is_dssev1() -> None:
    assert pae(IN_TOTO_PAYLOAD_TYPE, b"{}") == b"DSSEv1 28 application/vnd.in-toto+json 2 {}"
    assert pae("t\u00e9", b"") == "DSSEv1 3 t\u00e9 0 ".encode()  # lengths count bytes


def test_dsse_round_trip_in_the_shape_cosign_writes(key: SigningKey) -> None:
    body = statement(D1)
    envelope = dsse_envelope(body, key)
    assert envelope == dsse_envelope(body, key)
    assert open_dsse_envelope(envelope, key.public_key()) == body
    theirs = (FIXTURES / "verify_blob_attestation_test.blob-slsa-provenance.dsse.json").read_bytes()
    for env in (envelope, theirs):  # compact JSON, the same fields in the same order
        assert json.dumps(json.loads(env), separators=(",", ":")).encode() == env
    ours_doc, their_doc = json.loads(envelope), json.loads(theirs)
    assert list(ours_doc) == list(their_doc) == ["payloadType", "payload", "signatures"]
    assert [list(s) for s in ours_doc["signatures"]] == [["keyid", "sig"]]
    assert ours_doc["signatures"][0]["keyid"] == their_doc["signatures"][0]["keyid"] == ""
    assert statement_subject_digests(body) == [D1]
    assert statement_predicate_type(body) == "https://slsa.dev/provenance/v1"


def test_envelopes_cosign_made_verify_here() -> None:
    pub = load_public_key(FIXTURES / "verify_blob_attestation_test.pub")
    name = "verify_blob_attestation_test.{}.dsse.json"
    body = open_dsse_envelope((FIXTURES / name.format("blob-slsa-provenance")).read_bytes(), pub)
    assert statement_subject_digests(body) == [BLOB_SHA256]
    assert statement_predicate_type(body) == "https://slsa.dev/provenance/v0.2"
    multiple = (FIXTURES / name.format("dsse-predicate-multiple-subjects")).read_bytes()
    assert statement_subject_digests(open_dsse_envelope(multiple, pub)) == [
        BLOB_SHA256,
        "sha256:0da559c2f127230a1fabcfbb20d5db8dba765923c6efc6f483165119c4c2c5d4",
    ]
    empty = open_dsse_envelope(
        (FIXTURES / name.format("dsse-predicate-empty-subject")).read_bytes(), pub
    )
    with pytest.raises(AttestationError) as info:
        statement_subject_digests(empty, source="empty")
    assert str(info.value) == "empty: the in-toto statement has no subject"
    no_sha = open_dsse_envelope(
        (FIXTURES / name.format("dsse-predicate-missing-sha256")).read_bytes(), pub
    )
    with pytest.raises(AttestationError) as info:
        statement_subject_digests(no_sha, source="no-sha")
    assert str(info.value) == "no-sha: no subject of the in-toto statement has a sha256"


def test_an_image_attestation_cosign_made_verifies_with_its_certificate_key() -> None:
    bundle = json.loads((FIXTURES / "oci-attestation.sigstore.json").read_bytes())
    cert_key = certificate_key(
        base64.b64decode(bundle["verificationMaterial"]["certificate"]["rawBytes"])
    )
    envelope = json.dumps(bundle["dsseEnvelope"]).encode()  # protobuf JSON: no keyid
    body = open_dsse_envelope(envelope, cert_key)
    assert statement_subject_digests(body) == [
        "sha256:732112270d7e59418a8c080b134b24cabd67d250d0d0147a97ed95ba5c280aa4"
    ]
    assert statement_predicate_type(body) == "https://cosign.sigstore.dev/attestation/v1"
    other_key = load_public_key(FIXTURES / "verify_blob_attestation_test.pub")
    with pytest.raises(SignatureError) as info:
        open_dsse_envelope(envelope, other_key, source="oci-attestation")
    assert str(info.value) == (
        f"oci-attestation: no signature of the envelope (1) verifies with the key"
        f" {other_key.fingerprint()}: another key signed it, or its payload was changed after"
        " signing"
    )


def test_tampered_or_foreign_envelopes_are_refused(key: SigningKey, other: SigningKey) -> None:
    envelope = json.loads(dsse_envelope(statement(D1), key))
    tampered = {**envelope, "payload": base64.b64encode(statement(D2)).decode()}
    fingerprint = key.public_key().fingerprint()
    refused = (
        f"att: no signature of the envelope (1) verifies with the key {fingerprint}: another key"
        " signed it, or its payload was changed after signing"
    )
    for env in (json.dumps(tampered).encode(), dsse_envelope(statement(D1), other)):
        with pytest.raises(SignatureError) as info:
            open_dsse_envelope(env, key.public_key(), source="att")
        assert str(info.value) == refused
    # Either signature may verify; the keyid is a hint and is not used.
    both = {**envelope, "signatures": [{"keyid": "x", "sig": "AAAA"}, *envelope["signatures"]]}
    assert open_dsse_envelope(json.dumps(both).encode(), key.public_key()) == statement(D1)


@pytest.mark.parametrize(
    ("envelope", "reason"),
    [
        (b"[]", "not a DSSE envelope (not a JSON object)"),
        (b"[" * 100000, "not a DSSE envelope (not a JSON object)"),
        (
            b'{"payloadType":"text/plain","payload":"","signatures":[]}',
            "the payloadType is 'text/plain', not 'application/vnd.in-toto+json'",
        ),
        (
            b'{"payloadType":"application/vnd.in-toto+json","payload":"@@","signatures":[]}',
            "the payload is missing or not base64",
        ),
        (
            b'{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[]}',
            "the envelope holds no signature",
        ),
        (
            b'{"payloadType":"application/vnd.in-toto+json","payload":"e30=","signatures":[{}]}',
            "a signature is missing its sig or is not base64",
        ),
        (
            b" " * (16 * 1024 * 1024 + 1),
            "16777217 bytes, more than an envelope this tool reads (16 MiB)",
        ),
    ],
)
def test_malformed_envelopes_are_refused(key: SigningKey, envelope: bytes, reason: str) -> None:
    with pytest.raises(SignatureError) as info:
        open_dsse_envelope(envelope, key.public_key(), source="att")
    assert str(info.value) == f"att: {reason}"


def test_url_safe_base64_is_read(key: SigningKey) -> None:
    body = b'{"_type":"https://in-toto.io/Statement/v0.1","x":"\xff\xfe?>"}'
    envelope = json.loads(dsse_envelope(body, key))
    envelope["payload"] = base64.urlsafe_b64encode(body).decode()
    assert "-" in envelope["payload"] or "_" in envelope["payload"]
    assert open_dsse_envelope(json.dumps(envelope).encode(), key.public_key()) == body


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"nope", "st: the in-toto statement is not a JSON object"),
        (
            b'{"_type":"https://in-toto.io/Statement/v2"}',
            "st: _type is 'https://in-toto.io/Statement/v2', not an in-toto Statement"
            " (https://in-toto.io/Statement/v0.1 or https://in-toto.io/Statement/v1)",
        ),
        (
            b'{"_type":"https://in-toto.io/Statement/v1","subject":[{"name":"x"}]}',
            "st: subject 0 has no digest object",
        ),
        (
            b'{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":"AB"}}]}',
            "st: subject 0: 'AB' is not a sha256 hex digest",
        ),
    ],
)
def test_statements_of_the_wrong_shape_are_refused(body: bytes, message: str) -> None:
    with pytest.raises(AttestationError) as info:
        statement_subject_digests(body, source="st")
    assert str(info.value) == message


def test_statement_versions_and_predicate_type() -> None:
    assert statement_subject_digests(
        statement(D1, D2, kind="https://in-toto.io/Statement/v0.1")
    ) == [D1, D2]
    with pytest.raises(AttestationError) as info:
        statement_predicate_type(b'{"_type":"https://in-toto.io/Statement/v1"}', source="st")
    assert str(info.value) == "st: the in-toto statement has no predicateType string"
