"""Checking what vouches for a published digest (``verify``, and ``verify-pins`` for every
recorded digest): cosign's signature, the attestations, the attached SBOM and provenance, and
the provenance against the recorded lock.

Each check reads the registry through skopeo (``Registry``) and returns a ``Check``; nothing
here raises for a failed check, so that every failure is named, not only the first:

- ``signature``: ``sha256-<hex>.sig`` has a simple-signing layer that the public key verifies
  and that names this digest;
- ``attestations``: ``sha256-<hex>.att`` has a DSSE envelope the key verifies for each of the
  SLSA provenance and the CycloneDX SBOM, each a statement about this digest;
- ``sbom``, ``provenance``: the referrers (``sha256-<hex>``) list an artifact of each type,
  attached to this digest, carrying the documents the release record names;
- ``lock``: every provenance found (attached, and attested) lists the files of the recorded
  lock, and only those.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import AttestationError, BuildImageError, SignatureError
from images.attest.artifacts import (
    PROVENANCE_ARTIFACT,
    SBOM_ARTIFACT,
    parse_artifact,
    parse_referrers,
    referrers_tag,
    sha256_digest,
)
from images.attest.cosign import (
    DSSE_MEDIA_TYPE,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
    attestation_tag,
    open_dsse_envelope,
    signature_tag,
    statement_predicate_type,
    statement_subject_digests,
    verify_simple_signing,
)
from images.attest.keys import PublicKey
from images.attest.provenance import PREDICATE_TYPE as SLSA_PREDICATE_TYPE
from images.attest.provenance import LockedFile, lock_differences, read_statement
from images.builder.tags import ImageReference
from images.publish.attach import SBOM_PREDICATE_TYPE, tagged_layers
from images.publish.registry import Registry
from images.records import Attestations


@dataclass(frozen=True)
class Check:
    name: str  # "signature", "attestations", "sbom", "provenance" or "lock"
    ok: bool
    detail: str


@dataclass(frozen=True, kw_only=True)
class Verification:
    reference: str  # repository@digest
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]


@dataclass(frozen=True, kw_only=True)
class Expected:
    """What the digest must carry: signed by ``key`` (None: signatures are not checked), the
    documents the release record names (None: no record), the record's lock (the sha256 of
    its ``pylock.toml``; None: no record) and that lock's files (None: the lock at hand is not
    the recorded one, so only its sha256 is compared)."""

    key: PublicKey | None
    recorded: Attestations | None
    lock_sha256: str | None
    locked: Sequence[LockedFile] | None


def verify_digest(
    registry: Registry, repo: ImageReference, digest: str, want: Expected
) -> Verification:
    """Every check of the module's docstring, for ``repo@digest``."""
    at = dataclasses.replace(repo, tag=None, digest=digest)
    recorded = want.recorded
    with tempfile.TemporaryDirectory(prefix="build-image-verify-") as tmp:
        reader = _Reader(registry, repo, digest, Path(tmp))
        checks: list[Check] = []
        statements: list[tuple[str, bytes]] = []  # (where it was found, provenance statement)
        if want.key is not None:
            key = want.key
            checks.append(_run("signature", lambda: reader.signature(key)))
            checks.append(_run("attestations", lambda: reader.attestations(key, statements)))
        documents: dict[str, list[tuple[str, bytes]]] = {}  # type -> [(digest, document)]
        read = _run("sbom", lambda: reader.referrers(documents))
        if not read.ok:
            checks += [read, dataclasses.replace(read, name="provenance")]
        else:
            sbom, provenance = (recorded.sbom, recorded.provenance) if recorded else (None, None)
            checks.append(_attached("sbom", SBOM_ARTIFACT, sbom, documents))
            checks.append(_attached("provenance", PROVENANCE_ARTIFACT, provenance, documents))
            for where, data in documents.get(PROVENANCE_ARTIFACT, []):
                statements.append((f"the attached provenance {where}", data))
        if want.lock_sha256 is not None:
            checks.append(_lock(statements, digest, want.lock_sha256, want.locked))
    return Verification(reference=str(at), checks=tuple(checks))


def _run(name: str, run: Callable[[], str]) -> Check:
    """The check ``name``: passed with what ``run`` says, or failed with what it raised."""
    try:
        return Check(name, True, run())
    except BuildImageError as exc:
        return Check(name, False, exc.message)


def _attached(
    name: str, kind: str, recorded: str | None, documents: dict[str, list[tuple[str, bytes]]]
) -> Check:
    """An artifact of ``kind`` is attached, and the recorded one is among them."""
    found = [where for where, _ in documents.get(kind, [])]
    if not found:
        return Check(name, False, f"no {kind} artifact is attached")
    if recorded is not None and recorded not in found:
        return Check(
            name,
            False,
            f"the release record's {kind} artifact {recorded} is not attached (attached: "
            f"{', '.join(found)})",
        )
    return Check(name, True, "attached as " + ", ".join(found))


def _lock(
    statements: list[tuple[str, bytes]],
    digest: str,
    lock_sha256: str,
    locked: Sequence[LockedFile] | None,
) -> Check:
    """Every provenance found is of ``digest`` and records the lock ``lock_sha256`` (and,
    when given, exactly its files ``locked``)."""
    if not statements:
        return Check("lock", False, "no provenance was found to compare with the recorded lock")
    problems = []
    for where, data in statements:
        try:
            provenance = read_statement(data)
        except AttestationError as exc:
            problems.append(f"{where}: {exc.message}")
            continue
        if provenance.inputs.image_digest != digest:
            problems.append(f"{where} is the provenance of {provenance.inputs.image_digest}")
        if provenance.inputs.lock_sha256 != lock_sha256:
            problems.append(
                f"{where} records the lock {provenance.inputs.lock_sha256}, the release record "
                f"{lock_sha256}"
            )
        if locked is not None:
            problems += [f"{where}: {line}" for line in lock_differences(provenance, locked)]
    if problems:
        lines = "\n    ".join(problems)
        return Check("lock", False, f"the provenance is not of the recorded lock:\n    {lines}")
    files = f", its {len(locked)} files" if locked is not None else ""
    return Check("lock", True, f"the provenance records the lock {lock_sha256}{files}")


class _Reader:
    """The registry's view of one digest, read once per check."""

    def __init__(self, registry: Registry, repo: ImageReference, digest: str, work: Path) -> None:
        self.registry = registry
        self.repo = repo
        self.digest = digest
        self.work = work
        self._n = 0

    def _layers(self, tag: str, media_type: str) -> list[tuple[bytes, dict[str, str]]] | None:
        self._n += 1
        return tagged_layers(self.registry, self.repo, tag, media_type, self.work / str(self._n))

    def signature(self, key: PublicKey | None) -> str:
        assert key is not None
        tag = signature_tag(self.digest)
        layers = self._layers(tag, SIMPLE_SIGNING_MEDIA_TYPE)
        if layers is None:
            raise SignatureError(f"{self.repo.name}:{tag} does not exist: the digest is not signed")
        if not layers:
            raise SignatureError(f"{self.repo.name}:{tag} holds no simple-signing layer")
        reasons = []
        for payload, notes in layers:
            try:
                verify_simple_signing(
                    payload,
                    notes.get(SIGNATURE_ANNOTATION, ""),
                    key,
                    digest=self.digest,
                    reference=self.repo.name,
                )
            except BuildImageError as exc:
                reasons.append(exc.message)
                continue
            return f"signed with key {key.fingerprint()}"
        raise SignatureError(
            f"no signature in {self.repo.name}:{tag} verifies with key {key.fingerprint()} "
            f"({len(layers)} there): " + "; ".join(sorted(set(reasons)))
        )

    def attestations(self, key: PublicKey | None, statements: list[tuple[str, bytes]]) -> str:
        assert key is not None
        tag = attestation_tag(self.digest)
        layers = self._layers(tag, DSSE_MEDIA_TYPE)
        if layers is None:
            raise SignatureError(
                f"{self.repo.name}:{tag} does not exist: the digest has no attestations"
            )
        seen: set[str] = set()
        reasons = []
        for envelope, _ in layers:
            try:
                statement = open_dsse_envelope(envelope, key)
                subjects = statement_subject_digests(statement)
                predicate = statement_predicate_type(statement)
            except BuildImageError as exc:
                reasons.append(exc.message)
                continue
            if self.digest not in subjects:
                reasons.append(
                    f"an attestation of {predicate} is about {', '.join(subjects)}, "
                    f"not {self.digest}"
                )
                continue
            seen.add(predicate)
            if predicate == SLSA_PREDICATE_TYPE:
                statements.append(
                    (f"the attested provenance {sha256_digest(statement)}", statement)
                )
        missing = [p for p in (SLSA_PREDICATE_TYPE, SBOM_PREDICATE_TYPE) if p not in seen]
        if missing:
            why = f" ({'; '.join(sorted(set(reasons)))})" if reasons else ""
            raise SignatureError(
                f"{self.repo.name}:{tag} has no attestation of {' and '.join(missing)} signed by "
                f"key {key.fingerprint()} about {self.digest}{why}"
            )
        if reasons:
            raise SignatureError(f"{self.repo.name}:{tag}: " + "; ".join(sorted(set(reasons))))
        return f"the provenance and the SBOM attested with key {key.fingerprint()}"

    def referrers(self, documents: dict[str, list[tuple[str, bytes]]]) -> str:
        tag = referrers_tag(self.digest)
        raw = self.registry.read_raw(self.repo.with_tag(tag))
        if raw is None:
            raise AttestationError(
                f"{self.repo.name}:{tag} does not exist: nothing is attached to the digest"
            )
        for descriptor in parse_referrers(raw, tag=tag):
            ref = dataclasses.replace(self.repo, tag=None, digest=descriptor.digest)
            manifest = self.registry.read_raw(ref)
            if manifest is None:
                raise AttestationError(
                    f"{ref}: listed in {tag}, but the registry has no such manifest"
                )
            artifact = parse_artifact(manifest, digest=descriptor.digest)
            if artifact.subject.digest != self.digest:
                raise AttestationError(
                    f"the {artifact.artifact_type} artifact {artifact.digest} is attached to "
                    f"{artifact.subject.digest}, not {self.digest}"
                )
            if artifact.artifact_type in (SBOM_ARTIFACT, PROVENANCE_ARTIFACT):
                self._n += 1
                blobs = self.registry.fetch_blobs(ref, self.work / str(self._n))
                found = (artifact.digest, artifact.document(blobs))
                documents.setdefault(artifact.artifact_type, []).append(found)
        return "read"
