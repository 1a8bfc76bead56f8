"""The shipped v0.28.0 stacks against vllm-musa's real requirements files (the fixtures of
tests/sources/fixtures/vllm-musa-1df06c8/, upstream's bytes): no exact version of a stack
contradicts a line of them unless ``overrides`` declares it, and each override says which
file and line it departs from.

These stacks cannot be locked here (no vendor index, no GitHub), so this reads the manifests
and the fixture files only, with the check the lock runs (``sources.contradictions``). The
lock itself reads the files at the pinned commit and runs the same check before it asks any
index, so a release commit whose files say otherwise than these fixtures is refused there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.utils import canonicalize_name as N

from manifest import Manifest, load_manifest
from resolver.target import marker_environment
from sources.contradictions import (
    SourceLine,
    exact_versions,
    find_contradictions,
    source_lines,
)
from sources.read import read_source_requirements
from tests.support.upstream_requirements import RELEASE_COMMIT, fixture_reader, override_versions

REPO = Path(__file__).resolve().parents[2]
STACKS = ["vllm-musa-0.28.0-py312.yaml", "vllm-musa-0.28.0-py310.yaml"]


def upstream_lines(m: Manifest) -> tuple[SourceLine, ...]:
    """The vllm-musa source's requirements files, read from the fixtures instead of its
    commit (the stack names the release commit, which the fixtures are not: see their
    headers)."""
    source = m.source("vllm-musa")
    assert source is not None
    assert source.rev == RELEASE_COMMIT
    assert source.requirements_files == ("requirements/musa.txt", "requirements/test.txt")
    assert not source.build_requirements_files
    got = read_source_requirements(source, fixture_reader())
    return source_lines("vllm-musa", got.runtime.requirements)


@pytest.mark.parametrize("stack", STACKS)
def test_no_undeclared_contradiction_remains(stack: str) -> None:
    m = load_manifest(REPO / "stack" / stack)
    env = marker_environment(m.target)
    found = find_contradictions(exact_versions(m, env), upstream_lines(m), env)
    assert [c.message() for c in found] == []


@pytest.mark.parametrize("stack", STACKS)
def test_each_override_departs_from_a_line_and_its_reason_cites_it(stack: str) -> None:
    m = load_manifest(REPO / "stack" / stack)
    env = marker_environment(m.target)
    departs = find_contradictions(override_versions(m), upstream_lines(m), env)
    cited = {(c.manifest.name, c.line.item.location) for c in departs}
    assert cited == {
        ("numpy", "requirements/common.txt:4"),  # numpy==1.26: 1.26.0 only
        ("torchada", "requirements/common.txt:2"),  # torchada==0.1.81
        ("opencv-python-headless", "requirements/vllm_common.txt:39"),  # >= 4.13.0: numpy 2
    }
    for name, location in cited:
        reason = m.overrides[name].reason
        assert f"vllm-musa {location}" in reason, (name, reason)
    # every override departs from something in upstream's files (none is left over)
    assert {n for n, _ in cited} == set(m.overrides)


@pytest.mark.parametrize("stack", STACKS)
def test_the_decisions(stack: str) -> None:
    """numpy keeps the 1.26 line at 1.26.4 (not the 1.26.0 that ==1.26 is); torchada is the
    version upstream pairs with this torch, pinned with its kind and deps, and declared."""
    m = load_manifest(REPO / "stack" / stack)
    assert str(m.overrides[N("numpy")].version) == "1.26.4"
    assert "numpy" not in {r.name for r in m.requirements}
    pin = m.packages[N("torchada")]
    assert (pin.version_text, pin.index, pin.wheel, pin.deps) == ("0.1.90", "pypi", "pure", False)
    assert m.overrides[N("torchada")].version_text == pin.version_text
    assert str(m.packages[N("torch")].version) == "2.11.0.post2+musa5.2.0"


@pytest.mark.parametrize("stack", STACKS)
def test_the_vendor_pins_are_musa_private_txt(stack: str) -> None:
    """Every line of musa_private.txt (the vendor wheels) is a pin of the stack, allowed as
    the pin is: the check above compares them, this says none is left unpinned."""
    m = load_manifest(REPO / "stack" / stack)
    private = [
        line for line in upstream_lines(m) if line.item.file == "requirements/musa_private.txt"
    ]
    assert len(private) == 16
    assert {line.item.name for line in private} <= set(m.packages)
    for line in private:
        assert m.packages[line.item.name].index == "mthreads"
