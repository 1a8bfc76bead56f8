"""Documents attached to an image digest, as a registry stores them: pure and deterministic
(canonical JSON); ``images.engine.skopeo_artifacts`` copies them. An OCI 1.1 artifact
(``attached_artifact``); cosign's ``.sig``/``.att`` manifests (sigstore/cosign
``specs/SIGNATURE_SPEC.md``, ``ATTESTATION_SPEC.md``); the index of the distribution-spec's
"Referrers Tag Schema" (``merge_referrers``, ``parse_referrers``: registries without the
referrers API); the OCI layout skopeo copies from (``write_layout``). What is read back is
bounded and checked field by field: an ``AttestationError`` names the document and the field.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn

from core.digests import is_digest
from core.errors import AttestationError
from images.attest.cosign import (
    DSSE_MEDIA_TYPE,
    PREDICATE_TYPE_ANNOTATION,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING_MEDIA_TYPE,
)
from images.oci.layout import canonical_json, shown_value

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
SUBJECT_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST)  # what an artifact may attach to
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_DATA = b"{}"
SBOM_ARTIFACT = "application/vnd.cyclonedx+json"
PROVENANCE_ARTIFACT = "application/vnd.in-toto+json"
PREDICATE_TYPE = "in-toto.io/predicate-type"  # an in-toto artifact's manifest annotation
CREATED = "org.opencontainers.image.created"
REF_NAME = "org.opencontainers.image.ref.name"
MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # distribution's own limit for a manifest
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024  # an SBOM, a provenance, a signature payload
MAX_REFERRERS = 4096  # descriptors in one referrers index
MAX_LAYERS = 1024  # layers of one manifest
_MEDIA_TYPE = re.compile(  # image-spec's schema for mediaType
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_GO_ZERO_TIME = "0001-01-01T00:00:00Z"
HINT_READ_BACK = (
    "the registry holds something else there than this tool writes: look at it with "
    "`skopeo inspect --raw docker://REPO@DIGEST`, then attach the documents again"
)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def referrers_tag(digest: str) -> str:
    """The tag of the referrers index of ``digest``: ``sha256-<hex>``."""
    if not is_digest(digest):
        raise AttestationError(f"{shown_value(digest)} is not a sha256 digest")
    return digest.replace(":", "-")


# ------------------------------------------------------------------------------ the model


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    """An OCI content descriptor; ``artifact_type`` and ``annotations`` as a referrers index
    lists them, ``data`` the content embedded (the empty config's ``{}``)."""

    media_type: str
    digest: str
    size: int
    artifact_type: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    data: bytes | None = None

    def __post_init__(self) -> None:
        for value in (self.media_type, self.artifact_type):
            if value is not None and not _MEDIA_TYPE.match(value):
                raise AttestationError(f"a descriptor: {shown_value(value)} is no media type")
        if not is_digest(self.digest):
            raise AttestationError(f"a descriptor: {shown_value(self.digest)} is no sha256 digest")
        if self.size < 0:
            raise AttestationError(f"a descriptor of {self.digest}: its size {self.size} < 0")
        notes = _annotations(self.annotations, "a descriptor's annotations")
        object.__setattr__(self, "annotations", MappingProxyType(dict(sorted(notes.items()))))

    def to_json(self) -> dict[str, Any]:
        data = None if self.data is None else base64.b64encode(self.data).decode("ascii")
        doc = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        more = {
            "artifactType": self.artifact_type,
            "annotations": dict(self.annotations),
            "data": data,
        }
        return {**doc, **{k: v for k, v in more.items() if v}}


@dataclass(frozen=True)
class Blob:
    """Content to upload: its media type and bytes."""

    media_type: str
    data: bytes

    @cached_property
    def digest(self) -> str:
        return sha256_digest(self.data)

    def descriptor(self, *, annotations: Mapping[str, str] | None = None) -> Descriptor:
        notes = annotations or {}
        size = len(self.data)
        return Descriptor(
            media_type=self.media_type, digest=self.digest, size=size, annotations=notes
        )


EMPTY_CONFIG = Blob(EMPTY_MEDIA_TYPE, EMPTY_DATA)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """An image manifest's exact bytes and the blobs it names (none when read back: they are
    in the registry)."""

    manifest: bytes
    blobs: tuple[Blob, ...] = ()

    @cached_property
    def digest(self) -> str:
        return sha256_digest(self.manifest)


@dataclass(frozen=True, kw_only=True)
class Artifact(Manifest):
    """An OCI 1.1 artifact manifest attached to ``subject``."""

    artifact_type: str
    subject: Descriptor
    config: Descriptor
    layers: tuple[Descriptor, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def referrer(self) -> Descriptor:
        """How the referrers index lists it."""
        return Descriptor(
            media_type=OCI_MANIFEST,
            digest=self.digest,
            size=len(self.manifest),
            artifact_type=self.artifact_type,
            annotations=self.annotations,
        )

    def document(self, blobs: Mapping[str, bytes]) -> bytes:
        """Its one layer's bytes out of ``blobs`` (digest -> bytes, as fetched), checked
        against the layer's digest and size."""
        where = f"the artifact {self.digest}"
        if len(self.layers) != 1:
            _bad(f"{where} has {len(self.layers)} layers, not the one of a document")
        layer = self.layers[0]
        data = blobs.get(layer.digest)
        if data is None:
            _bad(f"{where}: its layer {layer.digest} was not fetched")
        if len(data) != layer.size or sha256_digest(data) != layer.digest:
            _bad(f"{where}: the bytes of its layer are not {layer.digest} ({layer.size} bytes)")
        return data


# ------------------------------------------------------------------------------ building


def manifest_descriptor(raw: bytes) -> Descriptor:
    """The descriptor of the image manifest or index ``raw`` (a subject, as read)."""
    media_type = _load(raw, "the subject manifest").get("mediaType")
    if media_type not in SUBJECT_TYPES:
        _bad(f"the subject manifest: mediaType {shown_value(media_type)} is not an image's")
    return Descriptor(media_type=media_type, digest=sha256_digest(raw), size=len(raw))


def attached_artifact(
    subject: Descriptor, artifact_type: str, document: bytes, *, annotations: Mapping[str, str]
) -> Artifact:
    """``document`` attached to ``subject`` as an artifact of ``artifact_type``, which is also
    its one layer's media type; ``annotations`` are the manifest's (the caller gives
    ``org.opencontainers.image.created``, and ``in-toto.io/predicate-type`` for in-toto)."""
    if subject.media_type not in SUBJECT_TYPES:
        raise AttestationError(f"cannot attach to a {subject.media_type}: it is not an image")
    if not _MEDIA_TYPE.match(artifact_type):
        raise AttestationError(f"cannot attach: {shown_value(artifact_type)} is no media type")
    if len(document) > MAX_DOCUMENT_BYTES:
        raise AttestationError(f"cannot attach {len(document)} bytes: {MAX_DOCUMENT_BYTES} at most")
    notes = _annotations(annotations, "the artifact's annotations")
    if CREATED in notes and not _RFC3339.match(notes[CREATED]):
        raise AttestationError(f"{CREATED}: {shown_value(notes[CREATED])} is no RFC 3339 time")
    layer = Blob(artifact_type, document)
    empty = EMPTY_CONFIG.digest
    config = Descriptor(media_type=EMPTY_MEDIA_TYPE, digest=empty, size=2, data=EMPTY_DATA)
    doc: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": config.to_json(),
        "layers": [layer.descriptor().to_json()],
        "subject": {
            "mediaType": subject.media_type,
            "digest": subject.digest,
            "size": subject.size,
        },
    }
    if notes:
        doc["annotations"] = notes
    made = parse_artifact(canonical_json(doc))  # what it reads back as, by construction
    return replace(made, blobs=(EMPTY_CONFIG, layer), config=config)


def cosign_signature_manifest(layers: Sequence[tuple[bytes, Mapping[str, str]]]) -> Manifest:
    """cosign's signature manifest (``signature_tag``): one simple-signing payload per layer,
    each with its base64 signature in ``dev.cosignproject.cosign/signature`` and any other
    annotations given (``dev.sigstore.cosign/certificate``, ``.../chain``, ``.../bundle``)."""
    blobs = []
    for n, (payload, given) in enumerate(layers):
        notes = _annotations(given, f"signature {n}")
        if not notes.get(SIGNATURE_ANNOTATION):
            raise AttestationError(f"signature {n} has no {SIGNATURE_ANNOTATION} annotation")
        blobs.append((Blob(SIMPLE_SIGNING_MEDIA_TYPE, payload), notes))
    return _cosign_manifest(blobs, "signatures")


def cosign_attestation_manifest(envelopes: Sequence[tuple[bytes, str]]) -> Manifest:
    """cosign's attestation manifest (``attestation_tag``): one DSSE envelope per layer,
    annotated as cosign annotates it (an empty signature, its ``predicateType``)."""
    blobs = []
    for n, (envelope, predicate_type) in enumerate(envelopes):
        if not predicate_type:
            raise AttestationError(f"attestation {n} has no predicate type")
        notes = {SIGNATURE_ANNOTATION: "", PREDICATE_TYPE_ANNOTATION: predicate_type}
        blobs.append((Blob(DSSE_MEDIA_TYPE, envelope), notes))
    return _cosign_manifest(blobs, "attestations")


def _cosign_manifest(layers: list[tuple[Blob, dict[str, str]]], what: str) -> Manifest:
    if not 0 < len(layers) <= MAX_LAYERS:
        raise AttestationError(f"a cosign manifest of {len(layers)} {what} (1 to {MAX_LAYERS})")
    for blob, _ in layers:
        if len(blob.data) > MAX_DOCUMENT_BYTES:
            raise AttestationError(f"a cosign layer of {len(blob.data)} bytes")
    config = Blob(OCI_CONFIG, cosign_config([blob.digest for blob, _ in layers]))
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": config.descriptor().to_json(),
        "layers": [blob.descriptor(annotations=notes).to_json() for blob, notes in layers],
    }
    unique = {blob.digest: blob for blob, _ in layers}
    return Manifest(manifest=canonical_json(doc), blobs=(config, *unique.values()))


def cosign_config(diff_ids: Sequence[str]) -> bytes:
    """The config blob cosign writes for layers of these digests, byte for byte: the empty
    image of go-containerregistry with one zero-time history entry and one diff_id (the
    layer's digest: cosign's layers are not compressed) per layer, in Go's field order."""
    assert all(is_digest(d) for d in diff_ids)
    history = ",".join(f'{{"created":"{_GO_ZERO_TIME}"}}' for _ in diff_ids)
    ids = ",".join(f'"{d}"' for d in diff_ids)
    return (
        f'{{"architecture":"","created":"{_GO_ZERO_TIME}","history":[{history}],"os":"",'
        f'"rootfs":{{"type":"layers","diff_ids":[{ids}]}},"config":{{}}}}'
    ).encode()


# ------------------------------------------------------------------------------ referrers


def merge_referrers(
    existing_index: bytes | None, new: Sequence[Descriptor], *, tag: str | None = None
) -> bytes:
    """The referrers index of ``tag`` once ``new`` is added to ``existing_index`` (None: the
    tag is absent): every descriptor kept, one per digest (a new one replaces an old one),
    sorted by their ``org.opencontainers.image.created``, then digest (keys the index keeps
    when skopeo writes it again). A tag holding anything but an image index is refused, not
    overwritten: it is no referrers index."""
    where = f"the tag {tag}" if tag else "the referrers tag"
    kept: dict[str, Descriptor] = {}
    if existing_index is not None:
        media_type = _load(existing_index, where).get("mediaType")
        if media_type != OCI_INDEX:
            raise AttestationError(
                f"{where} holds a manifest of type {shown_value(media_type)}, not an image "
                "index: it is no referrers index, and it is left as it is",
                hint="that tag belongs to the referrers of the digest it names: move what it "
                "holds to another tag, then attach again",
            )
        kept = {d.digest: d for d in parse_referrers(existing_index, tag=tag)}
    for d in new:
        if d.media_type != OCI_MANIFEST or d.artifact_type is None:
            raise AttestationError(f"a referrer is an artifact manifest, not {d.to_json()}")
        kept[d.digest] = d
    if len(kept) > MAX_REFERRERS:
        raise AttestationError(f"{where}: {len(kept)} referrers, more than {MAX_REFERRERS}")
    ordered = sorted(kept.values(), key=lambda d: (d.annotations.get(CREATED, ""), d.digest))
    manifests = [d.to_json() for d in ordered]
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests})


def parse_referrers(index: bytes, *, tag: str | None = None) -> list[Descriptor]:
    """The descriptors of the referrers index ``index`` (read from ``tag``), in its order.
    One without ``artifactType`` has ``artifact_type`` None: skopeo 1.9 drops the field when
    it writes an index, so the caller reads the artifact itself (``parse_artifact``)."""
    where = f"the referrers index {tag}" if tag else "the referrers index"
    doc = _load(index, where)
    _expect(doc, where, media_type=OCI_INDEX)
    manifests = doc.get("manifests")
    if not isinstance(manifests, list) or len(manifests) > MAX_REFERRERS:
        _bad(f"{where}: manifests is not a list of at most {MAX_REFERRERS} descriptors")
    return [_descriptor(m, f"{where}: manifests[{n}]") for n, m in enumerate(manifests)]


def parse_artifact(manifest: bytes, *, digest: str | None = None) -> Artifact:
    """The artifact manifest ``manifest`` read back (by ``digest``, checked). Its type is its
    ``artifactType``, else its config's media type, as the distribution-spec says."""
    actual = sha256_digest(manifest)
    where = f"the artifact manifest {digest or actual}"
    if digest is not None and digest != actual:
        _bad(f"{where}: the bytes read have the sha256 {actual}")
    doc = _load(manifest, where)
    _expect(doc, where, media_type=OCI_MANIFEST)
    config = _descriptor(doc.get("config"), f"{where}: config")
    layers = doc.get("layers")
    if not isinstance(layers, list) or len(layers) > MAX_LAYERS:
        _bad(f"{where}: layers is not a list of at most {MAX_LAYERS} descriptors")
    if "subject" not in doc:
        _bad(f"{where} has no subject: it is attached to nothing")
    artifact_type = doc.get("artifactType", config.media_type)
    if not _is_media_type(artifact_type):
        _bad(f"{where}: artifactType {shown_value(artifact_type)} is no media type")
    return Artifact(
        manifest=manifest,
        artifact_type=artifact_type,
        subject=_descriptor(doc["subject"], f"{where}: subject"),
        config=config,
        layers=tuple(_descriptor(x, f"{where}: layers[{n}]") for n, x in enumerate(layers)),
        annotations=_annotations(doc.get("annotations", {}), f"{where}: annotations", read=True),
    )


# ------------------------------------------------------------------------------ the layout


def write_layout(directory: Path, manifests: Mapping[str, bytes], blobs: Iterable[Blob]) -> None:
    """An OCI image layout at ``directory`` (absent, or an empty directory): each manifest or
    index of ``manifests`` under its tag, and ``blobs``. Written in a sibling, then renamed
    into place whole; the caller removes it once skopeo has copied it."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise AttestationError(f"{directory} exists and is not an empty directory")
    entries = []
    for tag, raw in sorted(manifests.items()):
        if not _TAG.match(tag):
            raise AttestationError(f"{shown_value(tag)} is not a valid tag")
        media_type = _load(raw, f"the manifest tagged {tag}").get("mediaType")
        if media_type not in (OCI_MANIFEST, OCI_INDEX):
            raise AttestationError(f"the manifest tagged {tag} is a {shown_value(media_type)}")
        ref = {REF_NAME: tag}
        desc = Descriptor(media_type=media_type, digest=sha256_digest(raw), size=len(raw))
        entries.append(({**desc.to_json(), "annotations": ref}, raw))
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    try:
        store = staging / "blobs" / "sha256"
        store.mkdir(parents=True)
        for data in [*(b.data for b in blobs), *(raw for _, raw in entries)]:
            (store / sha256_digest(data).removeprefix("sha256:")).write_bytes(data)
        (staging / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
        index = {"schemaVersion": 2, "manifests": [entry for entry, _ in entries]}
        (staging / "index.json").write_bytes(canonical_json(index))
        staging.chmod(0o755)
        if directory.exists():
            directory.rmdir()
        staging.replace(directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# ------------------------------------------------------------------------------ checking


def _bad(message: str) -> NoReturn:
    """Refuse what was read back."""
    raise AttestationError(message, hint=HINT_READ_BACK)


def _load(raw: bytes, where: str) -> dict[str, Any]:
    """``raw`` as a JSON object: bounded, strict (no NaN, no key twice), never a traceback."""
    if len(raw) > MAX_MANIFEST_BYTES:
        _bad(f"{where} is {len(raw)} bytes, more than the {MAX_MANIFEST_BYTES} of a manifest")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        for key, value in items:
            if key in doc:
                raise ValueError(f"the key {shown_value(key)} appears twice")
            doc[key] = value
        return doc

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
    except RecursionError:
        _bad(f"{where} is not JSON: nested too deeply")
    except (UnicodeDecodeError, ValueError) as exc:
        _bad(f"{where} is not JSON: {exc}")
    if not isinstance(doc, dict):
        _bad(f"{where} is not a JSON object")
    return doc


def _expect(doc: dict[str, Any], where: str, *, media_type: str) -> None:
    if doc.get("schemaVersion") != 2 or doc.get("mediaType") != media_type:
        found = f"{shown_value(doc.get('mediaType'))}, schemaVersion {doc.get('schemaVersion')!r}"
        _bad(f"{where} is not an {media_type} of schemaVersion 2 ({found})")


def _descriptor(obj: object, where: str) -> Descriptor:
    """A descriptor read back, each field checked (an embedded ``data`` is not kept)."""
    if not isinstance(obj, dict):
        _bad(f"{where} is not a JSON object")
    for name in ("mediaType", "artifactType"):
        value = obj.get(name)
        if (value is not None or name == "mediaType") and not _is_media_type(value):
            _bad(f"{where}.{name}: {shown_value(value)} is no media type")
    if not isinstance(obj.get("digest"), str) or not is_digest(obj["digest"]):
        _bad(f"{where}.digest: {shown_value(obj.get('digest'))} is not a sha256 digest")
    size = obj.get("size")
    if type(size) is not int or not 0 <= size <= MAX_DOCUMENT_BYTES:
        _bad(f"{where}.size: {shown_value(size)} is not a size of at most {MAX_DOCUMENT_BYTES}")
    return Descriptor(
        media_type=obj["mediaType"],
        digest=obj["digest"],
        size=size,
        artifact_type=obj.get("artifactType"),
        annotations=_annotations(obj.get("annotations", {}), f"{where}.annotations", read=True),
    )


def _annotations(obj: object, where: str, *, read: bool = False) -> dict[str, str]:
    """Annotations: strings to strings (``read``: they were read back)."""
    if not isinstance(obj, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
    ):
        hint = HINT_READ_BACK if read else None
        raise AttestationError(f"{where}: not a map of strings to strings", hint=hint)
    return dict(obj)


def _is_media_type(value: object) -> bool:
    return isinstance(value, str) and bool(_MEDIA_TYPE.match(value))
