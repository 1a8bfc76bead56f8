"""The ``verify`` command of ``build_image.py``, and the checks ``verify-pins`` adds for the
recorded digests: what vouches for a published image (``images.publish.verify``), against a
public key, the release record and its lock.

The public key is ``--public-key FILE``, else the stack's ``image.public_key`` (a path in the
repository). The record is the latest of the digest in the stack's release log; its lock is
the lock directory at hand (``--lock``, else the manifest's ``<stem>.lock/``) when that is
the recorded one, by the sha256 of its ``pylock.toml``.
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.console import Console, add_json_argument
from core.errors import ExitCode, SignatureError, UsageError

if TYPE_CHECKING:
    from images.attest.keys import PublicKey
    from images.attest.provenance import LockedFile
    from images.builder.tags import ImageReference
    from images.publish.registry import Registry
    from images.publish.verify import Verification
    from images.records import ReleaseRecord
    from manifest import Manifest


def add_public_key(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--public-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="the PEM public key (cosign.pub) the signatures are checked with (default: the "
        "stack's image.public_key)",
    )


def add_compared_lock(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="DIR",
        help="the lock directory the provenances are compared with, when it is the recorded "
        "lock (default: the manifest's <stem>.lock/)",
    )


def add_verify(
    sub: Any, *, add_registry_options: Callable[[argparse.ArgumentParser], None]
) -> None:
    p = sub.add_parser(
        "verify",
        help="check a published image's signature, attestations, SBOM and provenance",
        description="Check what vouches for the image REF names (a tag, or REPO@sha256:...): "
        "cosign's signature (sha256-<hex>.sig) with the public key, the signed attestations "
        "(sha256-<hex>.att) of its SLSA provenance and its SBOM, the SBOM and provenance "
        "artifacts its referrers tag (sha256-<hex>) lists, and, with the stack's release "
        "record, that they are the recorded ones and that the provenance lists the recorded "
        "lock. Exit 0 when every check passes, 1 naming each one that failed.",
    )
    p.add_argument("ref", help="REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:...")
    p.add_argument(
        "--stack",
        type=Path,
        default=None,
        metavar="STACK",
        help="the stack manifest: its image.public_key, its release record and its lock",
    )
    add_public_key(p)
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="the release record (default: releases/<stack name>.json around STACK)",
    )
    add_compared_lock(p)
    add_registry_options(p)
    add_json_argument(p, "each check and its outcome")
    p.set_defaults(handler=cmd_verify)


def cmd_verify(args: argparse.Namespace, console: Console) -> int:
    from images.builder.tags import parse_reference
    from images.publish.commands import registry_of

    ref = parse_reference(args.ref, default_tag="latest")
    registry = registry_of(args)
    digest = ref.digest or registry.require(ref).digest
    manifest = record = None
    if args.stack is not None:
        from images.builder.workspace import Workspace
        from images.records import load_release_log
        from manifest import load_manifest

        manifest = load_manifest(args.stack)
        path = args.record or Workspace.of(manifest.path).release_record(manifest.name)
        log = load_release_log(path, stack=manifest.name)
        record = next((r for r in reversed(log.records) if r.digest == digest), None)
    elif args.record is not None:
        raise UsageError("--record is read with its stack: give --stack STACK too")
    key = public_key(args.public_key, manifest)
    if key is None:
        raise UsageError(
            "verify checks the signatures with a public key, and none was given",
            hint="give --public-key FILE (cosign.pub), or --stack STACK whose image.public_key "
            "names it",
        )
    checked = verify_one(
        registry, ref, digest, key=key, record=record, manifest=manifest, lock_dir=args.lock
    )
    if args.json:
        from images.publish.documents import verify_document

        console.json(verify_document(checked))
    say = console.note if args.json else console.print
    for line in render(checked):
        say(line)
    if record is None:
        say("        (no release record of this digest, --stack: the lock was not compared)")
    if not checked.ok:
        raise failed(checked)
    return ExitCode.OK


def public_key(given: Path | None, manifest: Manifest | None) -> PublicKey | None:
    """``--public-key``, else the stack's ``image.public_key`` (a path in its repository)."""
    from images.attest.keys import load_public_key

    if given is not None:
        return load_public_key(given)
    if manifest is None or manifest.image is None or manifest.image.public_key is None:
        return None
    from images.builder.workspace import Workspace

    return load_public_key(Workspace.of(manifest.path).root / manifest.image.public_key)


def verify_one(
    registry: Registry,
    ref: ImageReference,
    digest: str,
    *,
    key: PublicKey | None,
    record: ReleaseRecord | None,
    manifest: Manifest | None,
    lock_dir: Path | None,
) -> Verification:
    """The checks of ``digest`` of ``ref``'s repository, against ``record`` when there is one."""
    from images.publish.verify import Expected, verify_digest

    lock_sha256 = record.lock_sha256 if record is not None else None
    locked = None
    if lock_sha256 is not None and manifest is not None:
        locked = recorded_lock(lock_dir or manifest.default_lock_dir(), lock_sha256)
    want = Expected(
        key=key,
        recorded=record.attestations if record is not None else None,
        lock_sha256=lock_sha256,
        locked=locked,
    )
    return verify_digest(registry, ref, digest, want)


def recorded_lock(lock_dir: Path, lock_sha256: str) -> tuple[LockedFile, ...] | None:
    """The files of the lock in ``lock_dir`` if it is the recorded one; else None (the
    provenance is then compared with the record by the lock's sha256 only)."""
    from images.attest.provenance import locked_files_of
    from resolver.lockfile import PYLOCK, parse_pylock

    path = lock_dir / PYLOCK
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if hashlib.sha256(data).hexdigest() != lock_sha256:
        return None
    return locked_files_of(parse_pylock(data.decode("utf-8"), where=str(path)))


def render(checked: Verification) -> list[str]:
    """One line per check: ``ok`` or ``FAILED``, its name and what it found."""
    return [f"{'ok' if c.ok else 'FAILED':<7} {c.name}: {c.detail}" for c in checked.checks]


def failed(checked: Verification) -> SignatureError:
    failures = checked.failures()
    return SignatureError(
        f"{checked.reference}: {len(failures)} of {len(checked.checks)} checks failed:\n  "
        + "\n  ".join(failures),
        hint="do not deploy this digest: find out who changed what the registry serves next "
        "to it; publish again to attach and sign it anew",
    )


def verify_records(
    registry: Registry,
    records: Iterable[ReleaseRecord],
    *,
    manifest: Manifest,
    key: PublicKey | None,
    lock_dir: Path | None,
) -> list[Verification]:
    """``verify-pins``: the checks of each digest of ``records`` that carries attachments
    (the latest record of each), signatures checked where the record says it was signed, and
    for every release of a stack whose ``image.require_signature`` is true."""
    from images.builder.tags import parse_reference

    required = manifest.image is not None and manifest.image.require_signature
    latest: dict[str, ReleaseRecord] = {}
    for r in records:
        if r.attestations is not None or (required and r.channel == "release"):
            latest[r.digest] = r
    out = []
    for digest, r in sorted(latest.items()):
        signed = r.attestations is not None and r.attestations.signature is not None
        signed = signed or (required and r.channel == "release")
        if signed and key is None:
            raise UsageError(
                f"{r.repository}@{digest} is signed, and no public key was given to check it",
                hint="give --public-key FILE, or set image.public_key in the stack",
            )
        out.append(
            verify_one(
                registry,
                parse_reference(r.repository),
                digest,
                key=key if signed else None,
                record=r,
                manifest=manifest,
                lock_dir=lock_dir,
            )
        )
    return out
