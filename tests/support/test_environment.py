"""The rule for tests that need Docker or the registries: skip locally, fail when CI=true."""

from __future__ import annotations

import pytest

from tests.support.environment import NEEDS, unavailable


def test_a_missing_need_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        unavailable("no Docker daemon answers", marker="docker")
    assert info.value.msg == "no Docker daemon answers"


@pytest.mark.parametrize("value", ["", "false", "1"])
def test_only_ci_true_turns_a_skip_into_a_failure(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception):
        unavailable("skopeo is not installed", marker="registry")


def test_a_missing_need_fails_when_ci_is_true(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception) as info:
        unavailable("skopeo is not installed", marker="registry")
    assert info.value.msg == (
        "skopeo is not installed; CI=true, so the tests marked 'registry' must run"
    )


def test_every_declared_marker_that_needs_the_machine_has_a_probe(
    pytestconfig: pytest.Config,
) -> None:
    declared = {line.split(":", 1)[0] for line in pytestconfig.getini("markers")}
    assert set(NEEDS) == {"docker", "registry"} <= declared
