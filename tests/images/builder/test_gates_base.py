"""The base image's own Python distributions (installed.py base) in the installed-equals-lock
gate: accepted exactly as recorded, refused by name, version and location otherwise (pure)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from images.builder.gates import evaluate_gates
from images.builder.installed_gate import base_distributions
from manifest import Manifest
from resolver.lockfile import Lock
from tests.images.builder.test_gates import GOOD
from tests.support.images import lock_for, manifest

SITE = "/usr/local/lib/python3.11/dist-packages"
DEBS = "/usr/lib/python3/dist-packages"


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Manifest, Lock]:
    m = manifest(tmp_path)
    return m, lock_for(m)


def _facts(base: Any, extra: list[list[str]] | None = None) -> dict[str, Any]:
    """GOOD with locations, ``extra`` distributions installed and ``base`` as the record."""
    facts = copy.deepcopy(GOOD)
    located = [[n, v, SITE] for n, v in facts["distributions"]] + (extra or [])
    facts["distribution_locations"] = sorted(located)
    facts["distributions"] = sorted([n, v] for n, v, _ in located)
    facts["base_distributions"] = base
    return facts


def _gate(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> tuple[bool, str]:
    result = next(r for r in evaluate_gates(facts, *stack) if r.name == "installed-equals-lock")
    return result.ok, result.output


def test_the_recorded_base_distributions_are_accepted_and_listed(
    stack: tuple[Manifest, Lock],
) -> None:
    base = [{"name": "six", "version": "1.16.0", "location": DEBS}]
    ok, output = _gate(_facts(base, [["six", "1.16.0", DEBS]]), stack)
    assert ok, output
    assert output == (
        "6 distributions, exactly the lock and the sources, and 1 from the base image: "
        f"six 1.16.0 ({DEBS})"
    )


def test_an_empty_record_changes_nothing(stack: tuple[Manifest, Lock]) -> None:
    assert _gate(_facts([]), stack) == (
        True,
        "5 distributions, exactly the lock and the sources",
    )


def test_a_distribution_neither_locked_nor_from_the_base_nor_built_is_refused(
    stack: tuple[Manifest, Lock],
) -> None:
    base = [{"name": "six", "version": "1.16.0", "location": DEBS}]
    facts = _facts(base, [["six", "1.16.0", DEBS], ["requests", "2.32.0", SITE]])
    assert _gate(facts, stack) == (
        False,
        f"requests 2.32.0 ({SITE}) is installed but is not in the lock, not from the base "
        "image and not built from a source",
    )


def test_a_base_distribution_at_another_version_or_location_is_refused(
    stack: tuple[Manifest, Lock],
) -> None:
    base = [
        {"name": "six", "version": "1.16.0", "location": DEBS},
        {"name": "idna", "version": "3.3", "location": DEBS},
    ]
    facts = _facts(base, [["six", "1.17.0", DEBS], ["idna", "3.3", SITE]])
    assert _gate(facts, stack) == (
        False,
        f"idna 3.3 ({SITE}) is installed, but the base image had idna 3.3 ({DEBS}); it is "
        "not in the lock nor built from a source\n"
        f"six 1.17.0 ({DEBS}) is installed, but the base image had six 1.16.0 ({DEBS}); it is "
        "not in the lock nor built from a source",
    )


def test_a_locked_name_at_another_version_is_refused_the_lock_wins(
    stack: tuple[Manifest, Lock],
) -> None:
    facts = _facts([])
    facts["distribution_locations"] = [
        ["mate", "0.2.6", SITE] if d[0] == "mate" else d for d in facts["distribution_locations"]
    ]
    assert _gate(facts, stack) == (
        False,
        f"mate 0.2.6 ({SITE}) is installed, but the lock has 0.2.7",
    )


def test_a_base_distribution_the_lock_also_installs_is_refused_as_shadowed(
    stack: tuple[Manifest, Lock],
) -> None:
    base = [{"name": "mate", "version": "0.2.5", "location": DEBS}]
    ok, output = _gate(_facts(base, [["mate", "0.2.5", DEBS]]), stack)
    assert not ok
    assert output.splitlines() == [
        f"mate 0.2.5 ({DEBS}) is from the base image, but the lock has mate 0.2.7: the base's "
        "copy is shadowed by (or stands in for) that one; remove it from the base image",
        f"mate is installed 2 times: 0.2.5 ({DEBS}), 0.2.7 ({SITE})",
        f"mate 0.2.5 ({DEBS}) is installed, but the lock has 0.2.7",
    ]


def test_a_base_distribution_a_source_builds_is_refused_even_when_pip_kept_it(
    stack: tuple[Manifest, Lock],
) -> None:
    # the same version: the source's wheel was never installed over it, yet it is refused
    base = [{"name": "vllm", "version": "0.28.0+demo", "location": SITE}]
    ok, output = _gate(_facts(base), stack)
    assert not ok
    assert output == (
        f"vllm 0.28.0+demo ({SITE}) is from the base image, but source vllm has vllm "
        "0.28.0+demo: the base's copy is shadowed by (or stands in for) that one; remove it "
        "from the base image"
    )


def test_an_image_without_the_record_fails_closed(stack: tuple[Manifest, Lock]) -> None:
    assert _gate(_facts(None), stack) == (
        False,
        "the image has no record of its base image's distributions "
        "(/opt/vllm-musa/base-distributions.json); build it again with this tool",
    )
    ok, output = _gate(_facts({"error": "Expecting value: line 1 column 1 (char 0)"}), stack)
    assert not ok
    assert output == (
        "the record of the base image's distributions (/opt/vllm-musa/base-distributions.json) "
        "is unreadable: Expecting value: line 1 column 1 (char 0)"
    )


def test_the_record_parses_and_refuses_a_malformed_entry() -> None:
    dists, problems = base_distributions(
        {"base_distributions": [{"name": "six", "version": "1.16.0", "location": DEBS}]}
    )
    assert problems == []
    assert [d.describe() for d in dists] == [f"six 1.16.0 ({DEBS})"]
    assert base_distributions({}) == ([], [])  # an older probe's facts
    dists, problems = base_distributions({"base_distributions": [{"name": "six"}]})
    assert dists == []
    assert problems == [
        "the record of the base image's distributions (/opt/vllm-musa/base-distributions.json) "
        "has an entry that is not {name, version, location}: {'name': 'six'}"
    ]
