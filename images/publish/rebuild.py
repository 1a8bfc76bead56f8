"""What ``verify-rebuild`` rebuilds and how it judges the result.

A release record says which image was published (its manifest digest), from which stack
manifest (its sha256), lock (its sha256) and tooling commit. ``find_record`` finds the record
of an operand (a release log file: its latest record; an image reference: the latest record
of the digest it serves), ``find_stack`` the stack manifest whose bytes the record names, and
``check_commit`` that this checkout is the recorded commit. The rebuild itself is an ordinary
``build --no-cache`` (``images.builder.pipeline``); ``judge`` compares its report with the
record. All of it is pure but for reading files.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import NotReproducedError, ReleaseRecordError, UsageError
from images.builder.labels import TOOLING_KEY
from images.builder.report import BuildReport
from images.builder.tags import parse_reference
from images.records import ReleaseRecord, load_release_log

RELEASES_DIR = "releases"
STACKS_DIR = "stack"


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The rebuild against its record: ``same`` when the digests are equal."""

    record: ReleaseRecord
    rebuilt_digest: str
    rebuilt_image_id: str = ""
    rebuilt_compressor: str = ""

    @property
    def same(self) -> bool:
        return self.rebuilt_digest == self.record.digest

    @property
    def same_content(self) -> bool:
        """The image IDs (the config, with the uncompressed layers' diff_ids) are equal: what
        differs is how the layers were compressed, or where the base's blobs came from."""
        return self.rebuilt_image_id == self.record.image_id

    def compressed_apart(self) -> str:
        """Why the same content has another digest, in words (``same_content`` only)."""
        recorded = self.record.compressor or "a compressor the record does not name"
        if self.rebuilt_compressor and self.rebuilt_compressor != recorded:
            return (
                f"the same content (image {self.record.image_id}) compressed by another "
                f"compressor: {self.rebuilt_compressor}, the record's {recorded}"
            )
        return (
            f"the same content (image {self.record.image_id}) with other layer blobs: the "
            "base's layers came from elsewhere (its registry's blobs, or the local daemon's "
            "layers compressed on this host)"
        )


def find_record(
    operand: str,
    *,
    root: Path,
    served: Callable[[str], str],
    logs: Sequence[Path] | None = None,
) -> ReleaseRecord:
    """The record ``operand`` names: a release log file (its latest record), or an image
    reference (the latest record, in ``logs`` (default: ``root/releases/*.json``), of the
    digest it names or that ``served`` says the registry serves for it)."""
    path = Path(operand)
    if path.is_file():
        log = load_release_log(path, stack=None)
        if not log.records:
            raise ReleaseRecordError(
                f"{path}: no release record in it",
                hint="publish first (`build_image.py publish`), or name an image reference",
            )
        return log.records[-1]
    ref = parse_reference(operand)
    digest = ref.digest or served(operand)
    searched = sorted((root / RELEASES_DIR).glob("*.json")) if logs is None else logs
    found = [
        r
        for log in searched
        for r in load_release_log(log, stack=None).records
        if r.digest == digest
    ]
    if not found:
        where = (
            f"under {root / RELEASES_DIR}" if logs is None else "in " + ", ".join(map(str, logs))
        )
        raise ReleaseRecordError(
            f"{operand} is {digest}, which no release record {where} names",
            hint="name the release log that recorded it (--record releases/<stack>.json)",
        )
    return max(found, key=lambda r: r.time)


def find_stack(record: ReleaseRecord, *, root: Path, given: Path | None) -> Path:
    """The stack manifest with the bytes the record names (``manifest_sha256``): ``given``, or
    the one under ``root/stack/`` that has them."""
    candidates = [given] if given is not None else sorted((root / STACKS_DIR).glob("*.yaml"))
    for path in candidates:
        try:
            if hashlib.sha256(path.read_bytes()).hexdigest() == record.manifest_sha256:
                return path
        except FileNotFoundError:
            raise UsageError(f"{path}: no such stack manifest") from None
    where = str(given) if given is not None else f"no manifest under {root / STACKS_DIR}"
    raise NotReproducedError(
        f"the record of {record.digest} was built from a stack manifest with sha256 "
        f"{record.manifest_sha256}; {where} has those bytes",
        hint=_checkout_hint(record),
    )


def check_commit(record: ReleaseRecord, head: str) -> None:
    """This checkout (``head``) must be the commit that built the recorded image."""
    commit = record.source_revisions.get(TOOLING_KEY)
    if commit is not None and commit != head:
        raise NotReproducedError(
            f"the record of {record.digest} was built by commit {commit}; this checkout is {head}",
            hint=_checkout_hint(record),
        )


def judge(record: ReleaseRecord, report: BuildReport) -> Verdict:
    """The rebuild against the record; refused when it did not use the recorded lock (its
    digest would say nothing)."""
    if record.lock_sha256 and report.lock_sha256 != record.lock_sha256:
        raise NotReproducedError(
            f"the rebuild used lock {report.lock_sha256}, but the record of {record.digest} "
            f"names lock {record.lock_sha256}",
            hint=_checkout_hint(record),
        )
    return Verdict(
        record=record,
        rebuilt_digest=report.digest,
        rebuilt_image_id=report.image_id,
        rebuilt_compressor=report.compressor,
    )


def _checkout_hint(record: ReleaseRecord) -> str:
    commit = record.source_revisions.get(TOOLING_KEY)  # the tool's commit, when known
    if commit is None:
        return "rebuild from the checkout that published it"
    return (
        f"rebuild from that commit: `git worktree add ../verify {commit}`, then run "
        "verify-rebuild in ../verify"
    )
