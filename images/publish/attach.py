"""What ``publish`` attaches to the image's digest, and signs (docs/publishing.md, "Signed,
attested releases").

``prepare`` makes everything before anything is pushed: the SBOM (the CycloneDX document the
build wrote into the image) and the SLSA provenance (``images.attest.provenance``), each an
OCI artifact whose subject is the image manifest; with a signing key, cosign's simple-signing
payload of the digest, signed, and both documents as in-toto statements in DSSE envelopes.
Every document carries the build's time, never the clock: two builds of the same inputs
attach the same bytes under the same digests (and ECDSA signs deterministically, RFC 6979).

``Attachments.push`` runs once every tag serves the digest: the two artifacts by digest, the
referrers index at ``sha256-<hex>`` merged with what it held, then cosign's signature manifest
(``sha256-<hex>.sig``) and attestation manifest (``sha256-<hex>.att``), each keeping the layers
another signer left there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import socket
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import AttestationError
from core.fsutil import atomic_write_text
from images.attest.artifacts import (
    CREATED,
    PREDICATE_TYPE,
    PROVENANCE_ARTIFACT,
    SBOM_ARTIFACT,
    Artifact,
    Blob,
    Descriptor,
    attached_artifact,
    cosign_attestation_manifest,
    cosign_signature_manifest,
    manifest_descriptor,
    merge_referrers,
    referrers_tag,
    sha256_digest,
    write_layout,
)
from images.attest.artifacts import (
    Manifest as OciManifest,
)
from images.attest.cosign import (
    DSSE_MEDIA_TYPE,
    PREDICATE_TYPE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
    attestation_tag,
    dsse_envelope,
    sign_payload,
    signature_tag,
    simple_signing_payload,
)
from images.attest.keys import SigningKey
from images.attest.provenance import (
    PREDICATE_TYPE as SLSA_PREDICATE_TYPE,
)
from images.attest.provenance import (
    STATEMENT_TYPE,
    TOOL_REPOSITORY,
    canonical_json,
    gather,
    run_record,
    statement_bytes,
)
from images.builder.labels import BASE_DIGEST_LABEL
from images.builder.tags import ImageReference
from images.publish.registry import Registry
from images.records import Attestations

SBOM_PREDICATE_TYPE = "https://cyclonedx.org/bom"  # what `cosign attest --type cyclonedx` says


@dataclass(frozen=True, kw_only=True)
class AttachInputs:
    """What the documents of one published image are made from (read by the caller)."""

    repository: ImageReference  # registry/repository, no tag
    report_path: Path
    manifest_path: Path  # the stack manifest
    lock_dir: Path | None  # None: the manifest's <stem>.lock/
    sbom: bytes  # the CycloneDX document in the image
    labels: dict[str, str]  # the image's
    source_date_epoch: int  # the build's time
    release: bool  # a release: the base must be pinned by digest
    tool_version: str


@dataclass(frozen=True, kw_only=True)
class Attachments:
    """Everything ``publish`` attaches to ``subject``, made and signed, not yet pushed."""

    repository: ImageReference
    subject: Descriptor
    sbom: Artifact
    provenance: Artifact
    signature: tuple[bytes, str] | None  # (simple-signing payload, base64 signature)
    envelopes: tuple[tuple[bytes, str], ...]  # (DSSE envelope, predicate type)
    public_key: str | None  # the fingerprint of the key that signed

    def push(self, registry: Registry, progress: Callable[[str], None]) -> Attestations:
        """Push the artifacts, the referrers index and (signed) cosign's manifests."""
        repo, digest = self.repository, self.subject.digest
        with tempfile.TemporaryDirectory(prefix="build-image-attach-") as tmp:
            work = Path(tmp)
            manifests = {"sbom": self.sbom.manifest, "provenance": self.provenance.manifest}
            blobs: list[Blob] = [*self.sbom.blobs, *self.provenance.blobs]
            index_ref = repo.with_tag(referrers_tag(digest))
            index = merge_referrers(
                registry.read_raw(index_ref),
                [self.sbom.referrer, self.provenance.referrer],
                tag=str(index_ref),
            )
            manifests["referrers"] = index
            if self.signature is not None:
                sig = _merged_signatures(registry, repo, digest, self.signature, work / "sig")
                att = _merged_attestations(registry, repo, digest, self.envelopes, work / "att")
                manifests |= {"sig": sig.manifest, "att": att.manifest}
                blobs += [*sig.blobs, *att.blobs]
            write_layout(work / "layout", manifests, blobs)
            layout = work / "layout"
            progress(f"attaching the SBOM and the provenance to {repo.name}@{digest}")
            for name, artifact in (("sbom", self.sbom), ("provenance", self.provenance)):
                registry.push_manifest(layout, name, _at(repo, artifact.digest))
            registry.push_index(layout, "referrers", index_ref)
            signed = {}
            if self.signature is not None:
                progress(f"signing {repo.name}@{digest}")
                for name, tag in (("sig", signature_tag(digest)), ("att", attestation_tag(digest))):
                    signed[name] = registry.push_manifest(layout, name, repo.with_tag(tag))
        return Attestations(
            sbom=self.sbom.digest,
            sbom_document=sha256_digest(self.sbom.document(_blobs(self.sbom))),
            provenance=self.provenance.digest,
            provenance_document=sha256_digest(self.provenance.document(_blobs(self.provenance))),
            signature=signed.get("sig"),
            attestation=signed.get("att"),
            public_key=self.public_key,
        )


def write_run_record(path: Path, attachments: Attachments, *, started: str) -> None:
    """What varied in this run, kept out of the provenance (docs/json.md, "The run record"):
    the host, when the publish that made the statement began and ended, and which statement;
    beside the build report, never in a pushed document or the release record."""
    statement = attachments.provenance.document(_blobs(attachments.provenance))
    record = run_record(
        socket.gethostname(),
        dt.datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc),
        dt.datetime.now(dt.timezone.utc).replace(microsecond=0),
        statement=statement,
    )
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


def prepare(manifest: bytes, inputs: AttachInputs, signer: SigningKey | None) -> Attachments:
    """The documents of the image whose manifest is ``manifest`` (as the build's layout holds
    it), attached to it and (with ``signer``) signed."""
    repo = inputs.repository
    subject = manifest_descriptor(manifest)
    provenance = provenance_statement(inputs, subject.digest)
    created = dt.datetime.fromtimestamp(inputs.source_date_epoch, tz=dt.timezone.utc)
    when = {CREATED: f"{created:%Y-%m-%dT%H:%M:%SZ}"}
    sbom_artifact = attached_artifact(subject, SBOM_ARTIFACT, inputs.sbom, annotations=when)
    provenance_artifact = attached_artifact(
        subject,
        PROVENANCE_ARTIFACT,
        provenance,
        annotations={**when, PREDICATE_TYPE: SLSA_PREDICATE_TYPE},
    )
    signature = None
    envelopes: tuple[tuple[bytes, str], ...] = ()
    if signer is not None:
        payload = simple_signing_payload(repo.name, subject.digest)
        signature = (payload, sign_payload(signer, payload))
        sbom_statement = statement_of(inputs.sbom, SBOM_PREDICATE_TYPE, repo, subject.digest)
        envelopes = (
            (dsse_envelope(provenance, signer), SLSA_PREDICATE_TYPE),
            (dsse_envelope(sbom_statement, signer), SBOM_PREDICATE_TYPE),
        )
    return Attachments(
        repository=repo,
        subject=subject,
        sbom=sbom_artifact,
        provenance=provenance_artifact,
        signature=signature,
        envelopes=envelopes,
        public_key=signer.public_key().fingerprint() if signer is not None else None,
    )


def provenance_statement(inputs: AttachInputs, digest: str) -> bytes:
    """The SLSA provenance of the image ``digest`` (the build report's, checked)."""
    made = gather(
        report_path=inputs.report_path,
        manifest_path=inputs.manifest_path,
        sbom=inputs.sbom,
        labels=inputs.labels,
        repository=inputs.repository.name,
        builder_id=f"{TOOL_REPOSITORY}@{inputs.tool_version}",
        lock_dir=inputs.lock_dir,
        base_digest=inputs.labels.get(BASE_DIGEST_LABEL) or None,
        require_base_digest=inputs.release,
    )
    if made.image_digest != digest:
        raise AttestationError(
            f"{inputs.report_path}: the build report is of image {made.image_digest}, the "
            f"layout's manifest is {digest}",
            hint="the report and the layout do not belong together: build again",
        )
    return statement_bytes(made)


def statement_of(document: bytes, predicate_type: str, repo: ImageReference, digest: str) -> bytes:
    """``document`` (JSON) as the predicate of an in-toto Statement v1 about ``digest``, as
    ``cosign attest --predicate`` wraps one: canonical JSON, so the same document gives the
    same bytes."""
    try:
        predicate = json.loads(document)
    except (ValueError, RecursionError):
        raise AttestationError(
            f"the {predicate_type} document of {repo.name}@{digest} is not JSON",
            hint="build the image again: its SBOM is written by the build",
        ) from None
    return canonical_json(
        {
            "_type": STATEMENT_TYPE,
            "subject": [{"name": repo.name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
            "predicateType": predicate_type,
            "predicate": predicate,
        }
    )


# ------------------------------------------------------------------------------ merging


def _at(repo: ImageReference, digest: str) -> ImageReference:
    return dataclasses.replace(repo, tag=None, digest=digest)


def _blobs(artifact: Artifact) -> dict[str, bytes]:
    return {b.digest: b.data for b in artifact.blobs}


def tagged_layers(
    registry: Registry, repo: ImageReference, tag: str, media_type: str, work: Path
) -> list[tuple[bytes, dict[str, str]]] | None:
    """The layers of ``media_type`` (their bytes, fetched and checked, and annotations) of the
    manifest at ``tag`` (cosign's ``.sig`` or ``.att``); None when the tag does not exist. A tag
    that holds anything but a manifest of layers is refused, naming it."""
    raw = registry.read_raw(repo.with_tag(tag))
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        doc = None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise AttestationError(
            f"{repo.name}:{tag} is not a manifest of layers: it is not cosign's, and it is "
            "left as it is",
            hint=f"move what {repo.name}:{tag} holds to another tag",
        )
    blobs = registry.fetch_blobs(_at(repo, sha256_digest(raw)), work)
    out = []
    for layer in layers:
        if not isinstance(layer, dict) or layer.get("mediaType") != media_type:
            continue
        notes = layer.get("annotations") or {}
        data = blobs.get(str(layer.get("digest")))
        if data is not None and isinstance(notes, dict):
            out.append((data, {str(k): str(v) for k, v in notes.items()}))
    return out


def _merged_signatures(
    registry: Registry,
    repo: ImageReference,
    digest: str,
    ours: tuple[bytes, str],
    work: Path,
) -> OciManifest:
    """cosign's signature manifest of ``digest``: the signatures it held, then ours (once)."""
    payload, signature = ours
    kept = [
        (data, notes)
        for data, notes in tagged_layers(
            registry, repo, signature_tag(digest), SIMPLE_SIGNING_MEDIA_TYPE, work
        )
        or []
        if notes.get(SIGNATURE_ANNOTATION) != signature
    ]
    return cosign_signature_manifest([*kept, (payload, {SIGNATURE_ANNOTATION: signature})])


def _merged_attestations(
    registry: Registry,
    repo: ImageReference,
    digest: str,
    ours: Sequence[tuple[bytes, str]],
    work: Path,
) -> OciManifest:
    """cosign's attestation manifest of ``digest``: the envelopes it held, then ours (once)."""
    mine = {sha256_digest(envelope) for envelope, _ in ours}
    kept = [
        (data, notes.get(PREDICATE_TYPE_ANNOTATION, ""))
        for data, notes in tagged_layers(
            registry, repo, attestation_tag(digest), DSSE_MEDIA_TYPE, work
        )
        or []
        if sha256_digest(data) not in mine and notes.get(PREDICATE_TYPE_ANNOTATION)
    ]
    return cosign_attestation_manifest([*kept, *ours])


@dataclass(frozen=True, kw_only=True)
class AttachPlan:
    """How ``publish`` attaches: with which key (None: unsigned) and the lock directory the
    image was built from (None: the manifest's ``<stem>.lock/``)."""

    signer: SigningKey | None
    lock_dir: Path | None


def render_attestations(a: Attestations) -> list[str]:
    """What ``publish`` prints of what it attached."""
    lines = [f"attached the SBOM {a.sbom} and the provenance {a.provenance}"]
    if a.signature is not None:
        lines.append(
            f"signed with key {a.public_key}: signature {a.signature}, attestations {a.attestation}"
        )
    return lines
