"""Rollback: plans that undo the moves of the latest nightly record, to a digest this tool
published; applied through the registry (a fake here) and recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.errors import DriftError, RegistryError, RollbackError
from images.builder.tags import ImageReference
from images.engine.skopeo import DOCKER_MANIFEST, ManifestInfo
from images.publish.rollback import apply_rollback
from images.records import ReleaseRecord, RollbackPlan, TagMove, load_release_log, plan_rollback
from tests.support.publishing import D1, D2, D3, REPO, record


def test_rollback_undoes_the_moves_of_the_latest_record() -> None:
    first = record(D1, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=None, to_digest=D1),))
    second = record(
        D2,
        tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261130"),
        moves=(
            TagMove(tag=f"{REPO}:nightly", from_digest=D1, to_digest=D2),
            TagMove(tag=f"{REPO}:nightly-20261130", from_digest=None, to_digest=D2),
        ),
    )
    plan = plan_rollback([first, second], target=None)
    assert plan.digest == D1
    assert plan.previous is first
    assert plan.tags == (f"{REPO}:nightly",)


def test_rollback_without_a_moved_tag_is_refused() -> None:
    only = record(D1, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=None, to_digest=D1),))
    with pytest.raises(RollbackError) as exc:
        plan_rollback([only], target=None)
    assert exc.value.message == (
        f"the latest record (nightly 2026-11-30T00:00:00Z, {D1}) moved no existing tag, so "
        "there is nothing to roll back"
    )


def test_rollback_to_an_unrecorded_digest_is_refused() -> None:
    moved = record(D2, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=D3, to_digest=D2),))
    with pytest.raises(RollbackError) as exc:
        plan_rollback([moved], target=None)
    assert exc.value.message == (
        f"{D3} (where {REPO}:nightly pointed before) is in no earlier record: it was not "
        "published by this tool"
    )


def test_rollback_of_an_unknown_target() -> None:
    with pytest.raises(RollbackError) as exc:
        plan_rollback([record(D1)], target="final")
    assert exc.value.message == (
        "no nightly record for target 'final' (release tags never move, so only nightly tags "
        "roll back)"
    )


def test_rollback_ignores_release_records() -> None:
    first = record(D1)
    second = record(D2, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=D1, to_digest=D2),))
    release = record(D3, channel="release", tags=(f"{REPO}:v0.28.0",), target="final")
    assert plan_rollback([first, second, release], target=None).digest == D1


# ------------------------------------------------------------------------------ apply


@dataclass
class FakeRegistry:
    """Tags -> digests, of manifests it has (every digest given); ``retag`` re-points a tag."""

    tags: dict[str, str]
    has: set[str] = field(default_factory=lambda: {D1, D2, D3})
    retags: list[str] = field(default_factory=list)

    def lookup(self, ref: ImageReference) -> ManifestInfo | None:
        digest = ref.digest if ref.digest in self.has else self.tags.get(ref.tag or "")
        return ManifestInfo(digest=digest, media_type=DOCKER_MANIFEST) if digest else None

    def retag(self, ref: ImageReference, digest: str) -> None:
        self.retags.append(f"{ref.repository}:{ref.tag}")
        self.tags[ref.tag or ""] = digest


def _moved_plan() -> RollbackPlan:
    first = record(D1, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=None, to_digest=D1),))
    second = record(D2, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=D1, to_digest=D2),))
    return plan_rollback([first, second], target=None)


def _apply(registry: FakeRegistry, path: Path) -> ReleaseRecord:
    """The moved plan applied to ``registry``, recorded at ``path``."""
    return apply_rollback(
        _moved_plan(),
        registry=registry,  # type: ignore[arg-type]
        record_path=path,
        now="2026-12-01T00:00:00Z",
        tool_version="test",
        progress=lambda _line: None,
    )


def test_apply_rollback_re_points_the_tags_and_records_it(tmp_path: Path) -> None:
    registry = FakeRegistry(tags={"nightly": D2})
    path = tmp_path / "releases" / "pubtest.json"
    done = _apply(registry, path)
    assert registry.retags == ["mcconline/vllm:nightly"]
    assert registry.tags == {"nightly": D1}
    assert (done.channel, done.digest, done.time) == ("rollback", D1, "2026-12-01T00:00:00Z")
    assert done.moves == (TagMove(tag=f"{REPO}:nightly", from_digest=D2, to_digest=D1),)
    assert load_release_log(path, stack="pubtest").records == (done,)


def test_apply_rollback_refuses_a_drifted_tag(tmp_path: Path) -> None:
    registry = FakeRegistry(tags={"nightly": D3})
    path = tmp_path / "releases" / "pubtest.json"
    with pytest.raises(DriftError) as exc:
        _apply(registry, path)
    assert exc.value.message == (
        f"{REPO}:nightly serves {D3}, not the recorded {D2}; nothing was re-pointed"
    )
    assert registry.retags == []
    assert not path.exists()


def test_apply_rollback_refuses_a_previous_image_the_registry_lost(tmp_path: Path) -> None:
    registry = FakeRegistry(tags={"nightly": D2}, has={D2})
    path = tmp_path / "releases" / "pubtest.json"
    with pytest.raises(RegistryError) as exc:
        _apply(registry, path)
    assert exc.value.message == (f"{REPO}@{D1}: the registry no longer has the previous image")
    assert exc.value.hint == "it may have been garbage-collected; publish that image again"
    assert registry.retags == []
    assert not path.exists()
