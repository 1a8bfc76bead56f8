"""The manifest against its sources' requirements files, end to end through the CLI on real
HTTP indexes: a contradiction is refused before any index is asked, naming the manifest's
file, line and key path and the file's line; an override with its reason settles it, and the
lock records what it ignores."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from core.errors import ManifestError
from manifest import parse_manifest
from testbed.simple_index import Listing
from tests.support.gitrepo import git as run_git
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, read_toml, refused
from tests.support.upstream_requirements import COMMITS, upstream_file

TORCHADA = '  torchada: {version: "0.1.95", index: pypi, wheel: pure, deps: false}'
VLLM_MUSA = (
    "sources:\n  vllm-musa: {path: demo/vllm-musa, requirements_files: [requirements/musa.txt]}\n"
)


def upstream_tree(case: Case) -> None:
    """vllm-musa's real requirements files (the fixtures' bodies) as a path source."""
    for path in COMMITS:
        target = case.tmp / "demo" / "vllm-musa" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(upstream_file(path).body)


def test_a_contradiction_is_refused_before_any_index_is_asked(case: Case) -> None:
    upstream_tree(case)  # nothing is published: an index asked would 404
    stack = case.stack(PIN_TORCH + "\n" + TORCHADA, ["numpy==1.26.4"], extra=VLLM_MUSA)
    err = refused(case, stack)
    assert err == (
        f"error[resolution]: {stack}:11: packages.torchada.version: torchada 0.1.95 is not "
        "allowed by sources.vllm-musa:requirements/common.txt:2 (included from "
        "requirements/musa.txt:2): torchada==0.1.81\n"
        f"{stack}:13: requirements.0: numpy==1.26.4 is not allowed by "
        "sources.vllm-musa:requirements/common.txt:4 (included from requirements/musa.txt:2): "
        "numpy==1.26 (PEP 440: ==1.26 is 1.26.0 only, not the 1.26 line; that would be "
        "==1.26.*)\n"
        "hint: torchada: follow the file (change packages.torchada.version to a version "
        "`torchada==0.1.81` allows), or declare the departure with its reason: "
        'overrides.torchada: {version: "0.1.95", reason: "<why, citing '
        'requirements/common.txt>"} beside packages.torchada\n'
        "numpy: follow the file (change requirements.0 to a version `numpy==1.26` allows), or "
        'declare the departure with its reason: overrides.numpy: {version: "1.26.4", reason: '
        '"<why, citing requirements/common.txt>"} in place of requirements.0\n'
    )
    assert case.vendor.requests == []
    assert case.pypi.requests == []
    # the lines of the stack the message names
    lines = stack.read_text().splitlines()
    assert lines[10].startswith('  torchada: {version: "0.1.95"')
    assert lines[12] == "  - 'numpy==1.26.4'"


def test_a_git_source_is_checked_at_its_pinned_commit_before_any_index(case: Case) -> None:
    repo = case.tmp / "upstream"
    repo.mkdir()
    git = functools.partial(run_git, repo)

    git("init", "-q")
    (repo / "requirements").mkdir()
    (repo / "requirements" / "common.txt").write_text("numpy==1.26\n")
    git("add", "-A")
    git("commit", "-qm", "pinned")
    rev = git("rev-parse", "HEAD")
    (repo / "requirements" / "common.txt").write_text("numpy>=1.26\n")  # later: no conflict
    git("commit", "-qam", "later")
    stack = case.stack(
        requirements=["numpy==1.26.4"],
        extra=f'sources:\n  lib: {{git: "file://{repo}", rev: "{rev}", '
        "requirements_files: [requirements/common.txt]}\n",
    )
    err = refused(case, stack)
    assert err.splitlines()[0] == (
        f"error[resolution]: {stack}:11: requirements.0: numpy==1.26.4 is not allowed by "
        "sources.lib:requirements/common.txt:1: numpy==1.26 (PEP 440: ==1.26 is 1.26.0 only, "
        "not the 1.26 line; that would be ==1.26.*)"
    )
    assert case.vendor.requests == []
    assert case.pypi.requests == []


def test_declared_departures_lock_and_are_recorded_with_their_reason(case: Case) -> None:
    tree = case.tmp / "demo" / "vllm-musa" / "requirements"
    tree.mkdir(parents=True)
    (tree / "musa.txt").write_text("# Common dependencies\n-r common.txt\n")
    (tree / "common.txt").write_text("torchada==0.1.81\nnumpy==1.26\n")
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(
        case.pypi,
        case.wheel("torchada", "0.1.95", requires_dist=("torch",)),
        case.wheel("torchada", "0.1.81", requires_dist=("torch",)),
        case.wheel("numpy", "1.26.4", NATIVE),
        case.wheel("numpy", "1.26.0", NATIVE),
    )
    stack = case.stack(
        PIN_TORCH + "\n" + TORCHADA,
        extra=VLLM_MUSA
        + "overrides:\n"
        + '  torchada: {version: "0.1.95", reason: "newer than requirements/common.txt:1"}\n'
        + '  numpy: {version: "1.26.4", reason: "the 1.26 line; requirements/common.txt:2 '
        'is 1.26.0"}\n',
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert "overrides nothing" not in result.err
    doc = read_toml((case.lock_dir() / "pylock.toml").read_text())
    packages = {p["name"]: p for p in doc["packages"]}
    torchada = packages["torchada"]
    assert torchada["version"] == "0.1.95"
    assert torchada["tool"]["vllm-musa-image"]["origin"] == "pin"  # kind and deps: the pin's
    assert torchada["tool"]["vllm-musa-image"]["kind"] == "pure"
    assert torchada["tool"]["vllm-musa-image"]["override"] == {
        "reason": "newer than requirements/common.txt:1",
        "ignores": ["sources.vllm-musa:requirements/common.txt requires torchada==0.1.81"],
    }
    numpy = packages["numpy"]
    assert numpy["version"] == "1.26.4"
    assert numpy["tool"]["vllm-musa-image"]["origin"] == "override"
    assert numpy["tool"]["vllm-musa-image"]["override"] == {
        "reason": "the 1.26 line; requirements/common.txt:2 is 1.26.0",
        "ignores": ["sources.vllm-musa:requirements/common.txt requires numpy==1.26"],
    }
    requirements = (case.lock_dir() / "requirements.txt").read_text()
    assert (
        "# override: newer than requirements/common.txt:1; ignores: "
        "sources.vllm-musa:requirements/common.txt requires torchada==0.1.81\n"
        "torchada==0.1.95 \\\n"
    ) in requirements


def test_an_override_of_a_pin_declares_the_pins_own_version_and_index(tmp_path: Path) -> None:
    head = (
        'schema: 1\nname: t\nrelease: "0.28.0"\n'
        'target: {python: "3.12", arch: x86_64, glibc: "2.35"}\n'
        'indexes: {pypi: {url: "https://pypi.example/simple/"}}\ndefault_index: pypi\n'
        "packages:\n"
        '  torchada: {version: "0.1.95", index: pypi, wheel: pure, deps: false}\n'
        "overrides:\n"
    )
    path = tmp_path / "t.yaml"
    ok = parse_manifest(head + '  torchada: {version: "0.1.95", reason: "newer"}\n', path=path)
    assert ok.overrides[canonicalize_name("torchada")].reason == "newer"
    assert ok.packages[canonicalize_name("torchada")].deps is False
    with pytest.raises(ManifestError) as info:
        parse_manifest(head + '  torchada: {version: "0.1.81", reason: "x"}\n', path=path)
    assert info.value.message == (
        f"{path}:10: overrides.torchada.version: '0.1.81' is not the version "
        "packages.torchada pins ('0.1.95'); an override of a pin declares the pin's own version"
    )
    with pytest.raises(ManifestError) as info:
        parse_manifest(
            head + '  torchada: {version: "0.1.95", reason: "x", index: pypi}\n', path=path
        )
    assert info.value.message == (
        f"{path}:10: overrides.torchada.index: torchada is pinned under packages.torchada, "
        "which binds it to index pypi"
    )
