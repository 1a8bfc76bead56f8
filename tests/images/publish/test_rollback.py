"""Rollback plans: the moves of the latest nightly record undone, to a digest this tool
published."""

from __future__ import annotations

import pytest

from core.errors import (
    RollbackError,
)
from images.publish.records import (
    TagMove,
    plan_rollback,
)
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
