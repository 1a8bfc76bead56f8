"""Release records (``releases/<stack name>.json``): the model, pure rendering and
parsing, drift and rollback planning, and the one write (an atomic append).

The file is a JSON object ``{"records": [...], "schema": 1, "stack": NAME}`` with records
oldest first. Each record's ``tags`` are full references (``registry/repo:tag``) and
``digest`` is ``sha256:...``, so other tools can read it. Rendering is deterministic: sorted
keys, two-space indent, a trailing newline. Appending keeps every earlier record exactly as it
was on disk (parsed only to be validated), so nothing written before is ever rewritten.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from core.digests import is_digest
from core.errors import ReleaseRecordError, RollbackError
from core.fsutil import atomic_write_bytes

SCHEMA = 1
RecordChannel = Literal["release", "nightly", "rollback"]
RECORD_CHANNELS = ("release", "nightly", "rollback")


@dataclass(frozen=True, kw_only=True)
class TagMove:
    tag: str  # full reference
    from_digest: str | None  # None: the tag did not exist
    to_digest: str

    def to_json(self) -> dict[str, Any]:
        return {"from": self.from_digest, "tag": self.tag, "to": self.to_digest}


UPLOAD_KEYS = (
    "blobs_mounted", "blobs_reused", "blobs_uploaded", "bytes_mounted", "bytes_reused",
    "bytes_uploaded",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class UploadStats:
    """What copying an image to a repository cost, over the image's blobs (its config and its
    layers, each distinct digest once): ``reused``, the blobs the repository already had or
    got by a cross-repository mount (of which ``mounted``), and ``uploaded``, the rest, whose
    bytes the copy sent. Counted before the first copy: later tags reuse everything."""

    blobs_uploaded: int = 0
    bytes_uploaded: int = 0
    blobs_reused: int = 0
    bytes_reused: int = 0
    blobs_mounted: int = 0  # of the reused: mounted from another repository of the registry
    bytes_mounted: int = 0

    def to_json(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in UPLOAD_KEYS}

    @classmethod
    def from_json(cls, doc: object, *, where: str, keypath: str) -> UploadStats:
        """The counts of ``doc``: every key of ``to_json``, each a count of 0 or more (other
        keys are left alone, as a record's are: a later version may add some)."""
        if not isinstance(doc, dict):
            raise _fail(where, keypath, "must be an object")
        counts: dict[str, int] = {}
        for key in UPLOAD_KEYS:
            value = doc.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _fail(where, f"{keypath}.{key}", f"must be a count, 0 or more: {value!r}")
            counts[key] = value
        stats = cls(**counts)
        if stats.blobs_mounted > stats.blobs_reused or stats.bytes_mounted > stats.bytes_reused:
            raise _fail(where, keypath, "mounts more than it reuses (mounted blobs are reused)")
        return stats


@dataclass(frozen=True, kw_only=True)
class Attestations:
    """What a publish attached to the image's digest (docs/publishing.md, "Signed, attested
    releases"): the digests of the SBOM's and the provenance's artifact manifests (found
    through the referrers tag ``sha256-<hex>``) and of the documents they carry; with a
    signing key, the digests of cosign's signature (``.sig``) and attestation (``.att``)
    manifests as pushed, and the fingerprint of the public key that verifies them."""

    sbom: str  # the SBOM artifact's manifest digest
    sbom_document: str  # sha256:... of the CycloneDX document
    provenance: str  # the provenance artifact's manifest digest
    provenance_document: str  # sha256:... of the in-toto statement
    signature: str | None = None  # the .sig manifest's digest; None: not signed
    attestation: str | None = None  # the .att manifest's digest
    public_key: str | None = None  # sha256:<hex of the DER public key> that verifies them

    def to_json(self) -> dict[str, str | None]:
        return {key: getattr(self, key) for key in ATTESTATION_KEYS}

    @classmethod
    def from_json(cls, doc: object, *, where: str, keypath: str) -> Attestations:
        if not isinstance(doc, dict):
            raise _fail(where, keypath, "must be an object")
        values = {}
        for key in ATTESTATION_KEYS:
            optional = key in ("signature", "attestation", "public_key")
            values[key] = _digest(where, f"{keypath}.{key}", doc.get(key), optional=optional)
        return cls(**values)


ATTESTATION_KEYS = (
    "attestation", "provenance", "provenance_document", "public_key", "sbom", "sbom_document",
    "signature",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ReleaseRecord:
    stack: str
    channel: RecordChannel
    target: str
    repository: str  # registry/repository
    tags: tuple[str, ...]  # full references, sorted
    digest: str  # sha256:... of the manifest the tags point to
    image_id: str
    lock_sha256: str | None
    manifest_sha256: str
    dockerfile_sha256: str | None
    base_image: str | None  # the FROM reference the build used
    base_image_digest: str | None
    source_revisions: Mapping[str, str]
    tool_version: str
    time: str  # ISO 8601 UTC, e.g. 2026-11-30T01:02:03Z
    moves: tuple[TagMove, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    # release records: {"status": "passed", "bundle_sha256": ...} of the serve-check bundle,
    # or {"status": "skipped", "reason": "--no-serve-check"}; None: not asked (nightly)
    serve_check: Mapping[str, str] | None = None
    # what the copy to the registry uploaded and reused; None: not copied by this record's
    # command (a rollback re-points tags), or a record written before publish counted it
    upload: UploadStats | None = None
    # what compressed the image's own layers (the build report's compressor, e.g.
    # "gzip/zlib-1.2.13/level-6/block-1048576"); None: the build did not say
    compressor: str | None = None
    # the SBOM, provenance and signatures attached to the digest; None: none (--no-attach,
    # a rollback, or a record written before publish attached them)
    attestations: Attestations | None = None

    def to_json(self) -> dict[str, Any]:
        optional: dict[str, Any] = {}
        if self.attestations is not None:
            optional["attestations"] = self.attestations.to_json()
        if self.serve_check is not None:
            optional["serve_check"] = dict(sorted(self.serve_check.items()))
        if self.upload is not None:
            optional["upload"] = self.upload.to_json()
        if self.compressor is not None:
            optional["compressor"] = self.compressor
        return {
            "base_image": self.base_image,
            "base_image_digest": self.base_image_digest,
            "channel": self.channel,
            "digest": self.digest,
            "dockerfile_sha256": self.dockerfile_sha256,
            "image_id": self.image_id,
            "labels": dict(sorted(self.labels.items())),
            "lock_sha256": self.lock_sha256,
            "manifest_sha256": self.manifest_sha256,
            "moves": [m.to_json() for m in sorted(self.moves, key=lambda m: m.tag)],
            "repository": self.repository,
            "source_revisions": dict(sorted(self.source_revisions.items())),
            "stack": self.stack,
            "tags": sorted(self.tags),
            "target": self.target,
            "time": self.time,
            "tool_version": self.tool_version,
        } | optional


@dataclass(frozen=True, kw_only=True)
class ReleaseLog:
    stack: str
    records: tuple[ReleaseRecord, ...] = ()  # oldest first
    raw: tuple[Mapping[str, Any], ...] = ()  # the records as read, kept verbatim

    def appended(self, record: ReleaseRecord) -> ReleaseLog:
        return ReleaseLog(
            stack=self.stack, records=(*self.records, record), raw=(*self.raw, record.to_json())
        )


def render_release_log(log: ReleaseLog) -> str:
    doc = {"records": list(log.raw), "schema": SCHEMA, "stack": log.stack}
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


# ------------------------------------------------------------------------------ parsing


def _fail(where: str, keypath: str, message: str) -> ReleaseRecordError:
    return ReleaseRecordError(
        f"{where}: {keypath}: {message}",
        hint="the file is written by `build_image.py publish`; restore it from version control",
    )


def _str(where: str, keypath: str, value: object, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise _fail(where, keypath, f"must be a non-empty string, got {value!r}")
    return value


def _digest(where: str, keypath: str, value: object, *, optional: bool = False) -> Any:
    text = _str(where, keypath, value, optional=optional)
    if text is not None and not is_digest(text):
        raise _fail(where, keypath, f"{text!r} is not a sha256:... digest")
    return text


def _str_map(where: str, keypath: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _fail(where, keypath, "must be an object of strings")
    return dict(value)


def parse_record(doc: object, *, where: str, keypath: str) -> ReleaseRecord:
    if not isinstance(doc, dict):
        raise _fail(where, keypath, "must be an object")
    required = (
        "channel", "digest", "image_id", "manifest_sha256", "repository", "stack", "tags",
        "target", "time", "tool_version",
    )  # fmt: skip
    for key in required:
        if key not in doc:
            raise _fail(where, f"{keypath}.{key}", "missing")

    def text(key: str, *, optional: bool = False) -> Any:
        return _str(where, f"{keypath}.{key}", doc.get(key), optional=optional)

    channel = doc["channel"]
    if channel not in RECORD_CHANNELS:
        raise _fail(where, f"{keypath}.channel", f"{channel!r} is not one of {RECORD_CHANNELS}")
    tags = doc["tags"]
    if not isinstance(tags, list) or not tags:
        raise _fail(where, f"{keypath}.tags", "must be a non-empty list of references")
    moves = []
    raw_moves = doc.get("moves", [])
    if not isinstance(raw_moves, list):
        raise _fail(where, f"{keypath}.moves", "must be a list")
    for i, m in enumerate(raw_moves):
        mp = f"{keypath}.moves.{i}"
        if not isinstance(m, dict):
            raise _fail(where, mp, "must be an object")
        moves.append(
            TagMove(
                tag=_str(where, f"{mp}.tag", m.get("tag")),
                from_digest=_digest(where, f"{mp}.from", m.get("from"), optional=True),
                to_digest=_digest(where, f"{mp}.to", m.get("to")),
            )
        )
    return ReleaseRecord(
        stack=text("stack"),
        channel=channel,
        target=text("target"),
        repository=text("repository"),
        tags=tuple(_str(where, f"{keypath}.tags.{i}", t) for i, t in enumerate(tags)),
        digest=_digest(where, f"{keypath}.digest", doc["digest"]),
        image_id=text("image_id"),
        lock_sha256=text("lock_sha256", optional=True),
        manifest_sha256=text("manifest_sha256"),
        dockerfile_sha256=text("dockerfile_sha256", optional=True),
        base_image=text("base_image", optional=True),
        base_image_digest=text("base_image_digest", optional=True),
        source_revisions=_str_map(
            where, f"{keypath}.source_revisions", doc.get("source_revisions", {})
        ),
        tool_version=text("tool_version"),
        time=text("time"),
        moves=tuple(moves),
        labels=_str_map(where, f"{keypath}.labels", doc.get("labels", {})),
        serve_check=(
            _str_map(where, f"{keypath}.serve_check", doc["serve_check"])
            if doc.get("serve_check") is not None
            else None
        ),
        upload=(
            UploadStats.from_json(doc["upload"], where=where, keypath=f"{keypath}.upload")
            if doc.get("upload") is not None
            else None
        ),
        compressor=text("compressor", optional=True),
        attestations=(
            Attestations.from_json(
                doc["attestations"], where=where, keypath=f"{keypath}.attestations"
            )
            if doc.get("attestations") is not None
            else None
        ),
    )


def parse_release_log(text: str, *, where: str, stack: str | None) -> ReleaseLog:
    """``stack`` None: the log of whatever stack it says (a record given by path)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(
            where, "(top level)", f"not valid JSON: {exc.msg} at line {exc.lineno}"
        ) from None
    if not isinstance(doc, dict):
        raise _fail(where, "(top level)", "must be an object with a 'records' list")
    if doc.get("schema") != SCHEMA:
        raise _fail(where, "schema", f"unsupported schema {doc.get('schema')!r}; expected {SCHEMA}")
    if stack is not None and doc.get("stack") != stack:
        raise _fail(where, "stack", f"is {doc.get('stack')!r}, but this is the stack {stack!r}")
    if stack is None:
        stack = _str(where, "stack", doc.get("stack"))
    records = doc.get("records")
    if not isinstance(records, list):
        raise _fail(where, "records", "must be a list")
    parsed = tuple(
        parse_record(r, where=where, keypath=f"records.{i}") for i, r in enumerate(records)
    )
    return ReleaseLog(stack=stack, records=parsed, raw=tuple(records))


# ------------------------------------------------------------------------------ file I/O


def load_release_log(path: Path, *, stack: str | None) -> ReleaseLog:
    """The log on disk; a missing file is an empty log. ``stack`` None: any stack's."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ReleaseLog(stack=stack or "")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReleaseRecordError(f"{path}: cannot read: {exc}") from None
    return parse_release_log(text, where=str(path), stack=stack)


@contextlib.contextmanager
def _locked_dir(directory: Path) -> Iterator[None]:
    """An exclusive lock on the record directory (no stray lock file is left behind)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def append_release_record(path: Path, record: ReleaseRecord) -> ReleaseLog:
    """Append ``record`` under a lock, re-reading the file first; written atomically."""
    with _locked_dir(path.parent):
        log = load_release_log(path, stack=record.stack).appended(record)
        atomic_write_bytes(path, render_release_log(log).encode("utf-8"))
    return log


# ------------------------------------------------------------------------------ planning


def expected_digests(records: Sequence[ReleaseRecord]) -> dict[str, str]:
    """Tag -> the digest of the latest record that lists the tag."""
    out: dict[str, str] = {}
    for record in records:
        for tag in record.tags:
            out[tag] = record.digest
    return dict(sorted(out.items()))


@dataclass(frozen=True, kw_only=True)
class Drift:
    tag: str
    recorded: str
    served: str | None  # None: the tag is gone

    def describe(self) -> str:
        if self.served is None:
            return f"{self.tag}: recorded {self.recorded}, the registry no longer has the tag"
        return f"{self.tag}: recorded {self.recorded}, the registry serves {self.served}"


@dataclass(frozen=True, kw_only=True)
class RollbackPlan:
    current: ReleaseRecord
    previous: ReleaseRecord  # the latest earlier record of the digest the tags move back to
    tags: tuple[str, ...]  # the floating tags that move back

    @property
    def digest(self) -> str:
        return self.previous.digest


def plan_rollback(records: Sequence[ReleaseRecord], *, target: str | None) -> RollbackPlan:
    """Undo the tag moves of the latest nightly (or rollback) record (of ``target``, if given).

    A publish moves floating (nightly) tags from a digest to another and records it; rolling
    back moves those tags back to where they were. Rolling back twice undoes the rollback.
    """
    chosen = [
        i
        for i, r in enumerate(records)
        if r.channel != "release" and (target is None or r.target == target)
    ]
    if not chosen:
        where = f" for target {target!r}" if target else ""
        raise RollbackError(
            f"no nightly record{where} (release tags never move, so only nightly tags roll back)",
            hint="publish first: `build_image.py publish STACK --target T --nightly`",
        )
    position = chosen[-1]
    current = records[position]
    # the moves that re-pointed an existing tag, all from one digest
    moved = [m for m in current.moves if m.from_digest is not None and m.from_digest != m.to_digest]
    if not moved:
        raise RollbackError(
            f"the latest record ({current.channel} {current.time}, {current.digest}) moved no "
            "existing tag, so there is nothing to roll back",
            hint="release tags never move; a rollback re-points nightly tags a publish moved",
        )
    origins = sorted({m.from_digest for m in moved if m.from_digest})
    if len(origins) != 1:
        raise RollbackError(
            f"the tags of the latest record moved from different digests ({', '.join(origins)})",
            hint="re-point them one by one with `build_image.py pin` and a registry tool",
        )
    earlier = [r for r in records[:position] if r.digest == origins[0]]
    if not earlier:
        raise RollbackError(
            f"{origins[0]} (where {', '.join(m.tag for m in moved)} pointed before) is in no "
            "earlier record: it was not published by this tool",
            hint="a rollback only returns to a recorded release; publish that image instead",
        )
    return RollbackPlan(
        current=current, previous=earlier[-1], tags=tuple(sorted(m.tag for m in moved))
    )
