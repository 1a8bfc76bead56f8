"""Signatures and attestations in cosign's formats, as bytes in and bytes out (no I/O).

**Signatures** (sigstore/cosign ``specs/SIGNATURE_SPEC.md``). The signed payload is a "simple
signing" document (media type ``application/vnd.dev.cosign.simplesigning.v1+json``), written
as Go's ``json.Marshal`` writes sigstore/sigstore's ``payload.SimpleContainerImage``
(``pkg/signature/payload/payload.go``): the fields in that order, no spaces, no claims
(``"optional":null``)::

    {"critical":{"identity":{"docker-reference":"<repository>"},
     "image":{"docker-manifest-digest":"sha256:<hex>"},"type":"cosign container image signature"},
     "optional":null}

The signature over those exact bytes is carried base64-encoded in the layer annotation
``dev.cosignproject.cosign/signature`` of an image manifest tagged ``sha256-<hex>.sig`` next to
the image. A verifier checks the signature, then that ``critical.type`` is cosign's and that
``critical.image.docker-manifest-digest`` is the image's digest; the spec says the
``docker-reference`` is ignored, so it is returned, not checked.

**Attestations** (``specs/ATTESTATION_SPEC.md``). An in-toto Statement is signed in a DSSE
envelope (media type ``application/vnd.dsse.envelope.v1+json``; secure-systems-lab/dsse
``envelope.md`` and ``protocol.md``): the signature is over the pre-authentication encoding
``PAE = "DSSEv1" SP len(type) SP type SP len(body) SP body``, and the envelope is written as
sigstore/sigstore's ``dsse.WrapSigner`` writes it (``pkg/signature/dsse/dsse.go``):
``{"payloadType":...,"payload":"<base64>","signatures":[{"keyid":"","sig":"<base64>"}]}``.
The envelope is a layer of a manifest tagged ``sha256-<hex>.att``, annotated with the
statement's ``predicateType``. A verifier accepts the envelope when any one signature verifies
over the PAE (the ``keyid`` is an unauthenticated hint and is not used), then reads the
statement's subjects; the image's digest must be one of them.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from core.errors import AttestationError, SignatureError
from images.attest.keys import PublicKey, SigningKey

SIMPLE_SIGNING_MEDIA_TYPE = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
SIMPLE_SIGNING_TYPE = "cosign container image signature"
DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
PREDICATE_TYPE_ANNOTATION = "predicateType"
IN_TOTO_STATEMENT_TYPES = ("https://in-toto.io/Statement/v0.1", "https://in-toto.io/Statement/v1")
MAX_PAYLOAD_BYTES = 1 << 20  # a simple-signing payload is about 250 bytes
MAX_ENVELOPE_BYTES = 16 << 20  # a provenance of a large image is some hundred KiB

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REFERENCE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-/:]*")
_URLSAFE = str.maketrans("-_", "+/")


@dataclass(frozen=True, kw_only=True)
class SimpleSigningClaims:
    """What a verified simple-signing payload claims."""

    docker_reference: str
    digest: str
    optional: dict[str, Any] | None


def signature_tag(digest: str) -> str:
    """The tag cosign stores the signatures of ``digest`` under: ``sha256-<hex>.sig``."""
    return _tag_stem(digest) + ".sig"


def attestation_tag(digest: str) -> str:
    """The tag cosign stores the attestations of ``digest`` under: ``sha256-<hex>.att``."""
    return _tag_stem(digest) + ".att"


def simple_signing_payload(docker_reference: str, digest: str) -> bytes:
    """The bytes ``cosign sign`` signs for the image ``digest`` in the repository
    ``docker_reference`` (cosign writes the repository: no tag, no digest)."""
    _tag_stem(digest)
    if not _REFERENCE.fullmatch(docker_reference):
        raise ValueError(f"not a repository reference: {docker_reference!r}")
    document = {
        "critical": {
            "identity": {"docker-reference": docker_reference},
            "image": {"docker-manifest-digest": digest},
            "type": SIMPLE_SIGNING_TYPE,
        },
        "optional": None,
    }
    # Go's json.Marshal and this agree byte for byte here: the strings hold no character Go
    # escapes differently (<, >, &, U+2028, U+2029, control characters).
    return json.dumps(document, separators=(",", ":")).encode("ascii")


def sign_payload(key: SigningKey, payload: bytes) -> str:
    """The signature of ``payload`` as the signature annotation carries it (base64)."""
    return base64.b64encode(key.sign(payload)).decode("ascii")


def verify_simple_signing(
    payload: bytes, signature_b64: str, key: PublicKey, *, digest: str, reference: str
) -> SimpleSigningClaims:
    """Check a cosign signature of the image ``digest`` (``reference`` names the image in
    messages): the signature verifies with ``key`` over ``payload``, the payload is cosign's
    simple-signing document and it names ``digest``. Returns its claims."""
    image = f"{reference}@{digest}"
    signature = _b64decode(signature_b64)
    if signature is None:
        raise SignatureError(f"{image}: the signature annotation is not base64")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise SignatureError(
            f"{image}: the signed payload is {len(payload)} bytes, more than a simple-signing"
            f" payload can be ({MAX_PAYLOAD_BYTES} bytes)"
        )
    if not key.verify(signature, payload):
        raise SignatureError(
            f"{image}: the signature does not verify with the key {key.fingerprint()}: another"
            " key made it, or the payload was changed after signing"
        )
    doc = _json_object(payload)
    if doc is None:
        raise SignatureError(f"{image}: the signed payload is not a JSON object")
    critical = doc.get("critical")
    kind = critical.get("type") if isinstance(critical, dict) else None
    if not isinstance(critical, dict) or kind != SIMPLE_SIGNING_TYPE:
        raise SignatureError(
            f"{image}: the signed payload is not a cosign simple-signing document:"
            f" critical.type is {kind!r}, not {SIMPLE_SIGNING_TYPE!r}"
        )
    identity, claimed = critical.get("identity"), critical.get("image")
    docker_reference = identity.get("docker-reference") if isinstance(identity, dict) else None
    claimed_digest = claimed.get("docker-manifest-digest") if isinstance(claimed, dict) else None
    if not isinstance(docker_reference, str) or not isinstance(claimed_digest, str):
        raise SignatureError(
            f"{image}: the signed payload has no critical.identity.docker-reference or no"
            " critical.image.docker-manifest-digest string"
        )
    if claimed_digest != digest:
        raise SignatureError(
            f"{image}: the signature is for another image: its payload names the digest"
            f" {claimed_digest}, not {digest}"
        )
    optional = doc.get("optional")
    return SimpleSigningClaims(
        docker_reference=docker_reference,
        digest=claimed_digest,
        optional=optional if isinstance(optional, dict) else None,
    )


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding (``protocol.md``): what a DSSE signature signs."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def dsse_envelope(
    statement: bytes, key: SigningKey, *, payload_type: str = IN_TOTO_PAYLOAD_TYPE
) -> bytes:
    """``statement`` signed in a DSSE envelope, as ``cosign attest`` writes it."""
    signature = key.sign(pae(payload_type, statement))
    envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(statement).decode("ascii"),
        "signatures": [{"keyid": "", "sig": base64.b64encode(signature).decode("ascii")}],
    }
    return json.dumps(envelope, separators=(",", ":")).encode("ascii")


def open_dsse_envelope(
    envelope: bytes,
    key: PublicKey,
    *,
    source: str = "the DSSE envelope",
    payload_type: str = IN_TOTO_PAYLOAD_TYPE,
) -> bytes:
    """The payload of ``envelope`` once one of its signatures verifies with ``key`` over the
    PAE; ``source`` names the envelope in refusals."""
    if len(envelope) > MAX_ENVELOPE_BYTES:
        raise SignatureError(
            f"{source}: {len(envelope)} bytes, more than an envelope this tool reads"
            f" ({MAX_ENVELOPE_BYTES >> 20} MiB)"
        )
    doc = _json_object(envelope)
    if doc is None:
        raise SignatureError(f"{source}: not a DSSE envelope (not a JSON object)")
    if doc.get("payloadType") != payload_type:
        raise SignatureError(
            f"{source}: the payloadType is {doc.get('payloadType')!r}, not {payload_type!r}"
        )
    body = doc.get("payload")
    payload = _b64decode(body, urlsafe=True) if isinstance(body, str) else None
    if payload is None:
        raise SignatureError(f"{source}: the payload is missing or not base64")
    signatures = doc.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SignatureError(f"{source}: the envelope holds no signature")
    message = pae(payload_type, payload)
    for entry in signatures:
        sig = entry.get("sig") if isinstance(entry, dict) else None
        raw = _b64decode(sig, urlsafe=True) if isinstance(sig, str) else None
        if raw is None:
            raise SignatureError(f"{source}: a signature is missing its sig or is not base64")
        if key.verify(raw, message):
            return payload
    raise SignatureError(
        f"{source}: no signature of the envelope ({len(signatures)}) verifies with the key"
        f" {key.fingerprint()}: another key signed it, or its payload was changed after signing"
    )


def statement_subject_digests(statement: bytes, *, source: str = "the statement") -> list[str]:
    """The ``sha256:<hex>`` digests of the subjects of an in-toto Statement (v0.1 or v1), in
    their order; subjects without a sha256 digest are skipped, but one must have it."""
    subjects = _statement(statement, source).get("subject")
    if not isinstance(subjects, list) or not subjects:
        raise AttestationError(f"{source}: the in-toto statement has no subject")
    digests = []
    for i, subject in enumerate(subjects):
        digest = subject.get("digest") if isinstance(subject, dict) else None
        if not isinstance(digest, dict):
            raise AttestationError(f"{source}: subject {i} has no digest object")
        value = digest.get("sha256")
        if value is None:
            continue
        if not isinstance(value, str) or not _DIGEST.fullmatch("sha256:" + value):
            raise AttestationError(f"{source}: subject {i}: {value!r} is not a sha256 hex digest")
        digests.append("sha256:" + value)
    if not digests:
        raise AttestationError(f"{source}: no subject of the in-toto statement has a sha256")
    return digests


def statement_predicate_type(statement: bytes, *, source: str = "the statement") -> str:
    """The ``predicateType`` of an in-toto Statement (v0.1 or v1)."""
    predicate_type = _statement(statement, source).get("predicateType")
    if not isinstance(predicate_type, str) or not predicate_type:
        raise AttestationError(f"{source}: the in-toto statement has no predicateType string")
    return predicate_type


def _statement(statement: bytes, source: str) -> dict[str, Any]:
    doc = _json_object(statement)
    if doc is None:
        raise AttestationError(f"{source}: the in-toto statement is not a JSON object")
    if doc.get("_type") not in IN_TOTO_STATEMENT_TYPES:
        raise AttestationError(
            f"{source}: _type is {doc.get('_type')!r}, not an in-toto Statement"
            f" ({' or '.join(IN_TOTO_STATEMENT_TYPES)})"
        )
    return doc


def _tag_stem(digest: str) -> str:
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a sha256:<64 hex> digest: {digest!r}")
    return digest.replace(":", "-", 1)


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; deep nesting
        return None
    return doc if isinstance(doc, dict) else None


def _b64decode(text: str, *, urlsafe: bool = False) -> bytes | None:
    """Standard base64, or (DSSE allows both) URL-safe base64; None when it is neither."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        pass
    if urlsafe:
        try:
            return base64.b64decode(text.translate(_URLSAFE), validate=True)
        except (binascii.Error, ValueError):
            pass
    return None
