"""The ``--json`` documents of ``publish``, ``pin``, ``verify``, ``verify-pins``, ``rollback``
and ``verify-rebuild``: pure
functions of what those commands already computed (docs/json.md describes each shape).
Nothing here holds a credential: the results they are made from never carry one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.json_output import document
from images.builder.tags import ImageReference, parse_reference
from images.engine.skopeo import ManifestInfo
from images.oci.diff import ImageDiff
from images.publish.push import PublishRequest, PublishResult
from images.publish.rebuild import Verdict
from images.publish.tag_digests import PinCheck
from images.publish.verify import Verification
from images.records import ReleaseRecord, RollbackPlan


def publish_document(request: PublishRequest, result: PublishResult) -> dict[str, Any]:
    """``build-image/publish/1``: what was pushed under which tags, the digest each serves,
    the nightly tags' moves, what the copy uploaded and reused, and the release record
    (None: already published, nothing pushed or recorded)."""
    record = result.record
    return document(
        "publish",
        {
            "attestations": (
                record.attestations.to_json() if record and record.attestations else None
            ),
            "channel": request.channel,
            "digest": record.digest if record else None,
            "image_id": request.report.image_id,
            "moves": record.to_json()["moves"] if record else [],
            "published": record is not None,
            "record": str(request.record_path) if record else None,
            "repository": request.repository,
            "serve_check": dict(request.serve_check) if request.serve_check else None,
            "stack": request.manifest.name,
            "tags": dict(sorted(result.tags.items())),
            "target": request.target,
            "upload": result.upload.to_json(),
        },
    )


def pin_document(ref: ImageReference, info: ManifestInfo) -> dict[str, Any]:
    """``build-image/pin/1``: the digest a tag serves, pinned; per platform for an index."""
    return document(
        "pin",
        {
            "digest": info.digest,
            "index": info.is_index,
            "media_type": info.media_type,
            "pinned": ref.pinned(info.digest),
            "platforms": [
                {"digest": p.digest, "pinned": ref.pinned(p.digest), "platform": p.platform}
                for p in info.platforms
            ],
            "reference": str(ref),
        },
    )


def verify_document(checked: Verification) -> dict[str, Any]:
    """``build-image/verify/1``: the image checked, ``ok``, and each check (name, ok, what it
    found or why it failed)."""
    return document("verify", _verification(checked))


def _verification(checked: Verification) -> dict[str, Any]:
    return {
        "checks": [{"detail": c.detail, "name": c.name, "ok": c.ok} for c in checked.checks],
        "ok": checked.ok,
        "reference": checked.reference,
    }


def verify_pins_document(
    checked: PinCheck, *, stack: str, record: str, verified: Sequence[Verification] = ()
) -> dict[str, Any]:
    """``build-image/verify-pins/1``: every recorded tag, the digest recorded and the digest
    served (None: the tag is gone), and the checks of each recorded digest with attachments
    (``verified``); ``ok`` when every tag serves its recorded digest and every check passed."""
    drifted = {d.tag: d for d in checked.drifts}
    tags = []
    for tag, digest in checked.expected.items():
        drift = drifted.get(tag)
        served = drift.served if drift is not None else digest
        tags.append({"ok": drift is None, "recorded": digest, "served": served, "tag": tag})
    return document(
        "verify-pins",
        {
            "digests": [_verification(v) for v in verified],
            "ok": not drifted and all(v.ok for v in verified),
            "record": record,
            "stack": stack,
            "tags": tags,
        },
    )


def _record(r: ReleaseRecord) -> dict[str, Any]:
    return {
        "channel": r.channel,
        "digest": r.digest,
        "image_id": r.image_id,
        "pinned": parse_reference(r.repository).pinned(r.digest),
        "time": r.time,
    }


def rollback_document(
    plan: RollbackPlan, *, stack: str, record: str, applied: ReleaseRecord | None
) -> dict[str, Any]:
    """``build-image/rollback/1``: the record rolled back, the one its tags go back to, and
    each tag's move; ``applied`` is the rollback record written (None: a dry run)."""
    return document(
        "rollback",
        {
            "applied": _record(applied) if applied is not None else None,
            "current": _record(plan.current),
            "previous": _record(plan.previous),
            "record": record,
            "stack": stack,
            "tags": [{"from": plan.current.digest, "tag": t, "to": plan.digest} for t in plan.tags],
            "target": plan.current.target,
        },
    )


def verify_rebuild_document(verdict: Verdict, diff: ImageDiff | None) -> dict[str, Any]:
    """``build-image/verify-rebuild/1`` (docs/json.md): the recorded and rebuilt digests, and
    (when they differ) the file-level comparison of the two images."""
    record = verdict.record
    return document(
        "verify-rebuild",
        {
            "stack": record.stack,
            "target": record.target,
            "recorded": record.digest,
            "rebuilt": verdict.rebuilt_digest,
            "same": verdict.same,
            "same_content": verdict.same_content,
            "compressor": {
                "recorded": verdict.record.compressor,
                "rebuilt": verdict.rebuilt_compressor or None,
            },
            "diff": None if diff is None else diff.to_json(),
        },
    )
