"""Applying a rollback: re-point the moved nightly tags to the previous digest (the manifest
copied by digest, with skopeo) and record it. The plan itself is pure and lives with the
release records (``records.plan_rollback``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from core.errors import DigestMismatchError, DriftError, RegistryError
from images.builder.tags import parse_reference
from images.publish.registry import Registry
from images.records import ReleaseRecord, RollbackPlan, TagMove, append_release_record


def apply_rollback(
    plan: RollbackPlan,
    *,
    registry: Registry,
    record_path: Path,
    now: str,
    tool_version: str,
    progress: Callable[[str], None],
) -> ReleaseRecord:
    """Re-point the plan's tags to the previous digest (manifest copied by digest)."""
    refs = [parse_reference(t) for t in plan.tags]
    for ref in refs:  # refuse before anything moves
        served = registry.lookup(ref)
        if served is None or served.digest != plan.current.digest:
            raise DriftError(
                f"{ref} serves {served.digest if served else 'nothing'}, not the recorded "
                f"{plan.current.digest}; nothing was re-pointed",
                hint="the tag was moved behind the tool's back: run `build_image.py verify-pins "
                "STACK` and settle that first",
            )
        if registry.lookup(dataclasses.replace(ref, tag=None, digest=plan.digest)) is None:
            raise RegistryError(
                f"{ref.name}@{plan.digest}: the registry no longer has the previous image",
                hint="it may have been garbage-collected; publish that image again",
            )
    for ref in refs:
        progress(f"re-pointing {ref} -> {plan.digest}")
        registry.retag(ref, plan.digest)
        served = registry.lookup(ref)
        if served is None or served.digest != plan.digest:
            raise DigestMismatchError(
                f"{ref}: after the re-point the registry serves "
                f"{served.digest if served else 'nothing'}, expected {plan.digest}"
            )
    # the previous image, as its record has it, under the tags that moved back to it
    record = dataclasses.replace(
        plan.previous,
        channel="rollback",
        repository=plan.current.repository,
        tags=plan.tags,
        tool_version=tool_version,
        time=now,
        moves=tuple(
            TagMove(tag=t, from_digest=plan.current.digest, to_digest=plan.digest)
            for t in plan.tags
        ),
        serve_check=None,
        upload=None,  # nothing copied: the tags are re-pointed to a manifest it has
    )
    append_release_record(record_path, record)
    return record
