"""The interpreter gates (pure): python3-is-target and python-h, each failing with its output."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from images.builder.gates import evaluate_gates
from manifest import Manifest
from resolver.lockfile import Lock
from tests.images.builder.test_gates import GOOD
from tests.support.images import lock_for, manifest


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Manifest, Lock]:
    m = manifest(tmp_path)
    return m, lock_for(m)


def _outputs(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> dict[str, tuple[bool, str]]:
    results = evaluate_gates(facts, *stack)
    return {
        r.name: (r.ok, r.output) for r in results if r.name in ("python3-is-target", "python-h")
    }


def _with(**changes: Any) -> dict[str, Any]:
    facts = copy.deepcopy(GOOD)
    facts.update(changes)
    return facts


def test_a_good_image_passes_both(stack: tuple[Manifest, Lock]) -> None:
    assert _outputs(GOOD, stack) == {
        "python3-is-target": (True, "python3 and python run /usr/bin/python3.11 (Python 3.11)"),
        "python-h": (True, "/usr/include/python3.11/Python.h is present"),
    }


def test_python3_of_the_distribution_is_not_the_target(stack: tuple[Manifest, Lock]) -> None:
    facts = _with(
        python_commands={
            "python3": {"version": [3, 10, 12], "realpath": "/usr/bin/python3.10"},
            "python": {"error": "not on PATH"},
        }
    )
    assert _outputs(facts, stack)["python3-is-target"] == (
        False,
        "python3 is Python 3.10.12, the target is 3.11\n"
        "python3 runs /usr/bin/python3.10, not the target /usr/bin/python3.11\n"
        "python: not on PATH",
    )


def test_python3_of_the_target_version_elsewhere_is_not_the_target(
    stack: tuple[Manifest, Lock],
) -> None:
    other = {"version": [3, 11, 9], "realpath": "/usr/local/bin/python3.11"}
    facts = _with(python_commands={"python3": other, "python": other})
    assert _outputs(facts, stack)["python3-is-target"] == (
        False,
        "python3 runs /usr/local/bin/python3.11, not the target /usr/bin/python3.11\n"
        "python runs /usr/local/bin/python3.11, not the target /usr/bin/python3.11",
    )


def test_not_probed(stack: tuple[Manifest, Lock]) -> None:
    facts = _with()
    del facts["python_commands"], facts["python_h"]
    assert _outputs(facts, stack) == {
        "python3-is-target": (False, "python3: not probed\npython: not probed"),
        "python-h": (
            False,
            "(include dir not reported)/Python.h is missing: install python3.11-dev (Triton "
            "and Inductor compile against it)",
        ),
    }


def test_python_h_missing(stack: tuple[Manifest, Lock]) -> None:
    facts = _with(python_h={"include": "/usr/include/python3.11", "present": False})
    assert _outputs(facts, stack)["python-h"] == (
        False,
        "/usr/include/python3.11/Python.h is missing: install python3.11-dev (Triton and "
        "Inductor compile against it)",
    )
