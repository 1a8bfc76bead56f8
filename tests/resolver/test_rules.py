"""The lock rules: same_line and line_map, what they enforce and the names they must find."""

from __future__ import annotations

from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, refused


def test_same_line_rule(case: Case) -> None:
    case.publish(
        case.vendor,
        Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"),
        Listing(path=case.wheel("torch-musa", "2.9.1+musa5.2.0", NATIVE), hash="none"),
    )
    stack = case.stack(
        PIN_TORCH + '\n  torch-musa: {version: "2.9.1+musa5.2.0", index: mthreads, wheel: native}',
        rules="  same_line: [[torch, torch-musa]]",
    )
    err = refused(case, stack)
    assert err == (
        "error[resolution]: rules.same_line: torch, torch-musa must share major.minor, but the lock "
        f"would have torch {TORCH} (line 2.11), torch-musa 2.9.1+musa5.2.0 (line 2.9)\n"
        "hint: pin them to builds of the same line\n"
    )


def test_line_map_unsupported_line(case: Case) -> None:
    case.publish(
        case.vendor, Listing(path=case.wheel("torch", "2.10.0+musa5.2.0", NATIVE), hash="none")
    )
    stack = case.stack(
        '  torch: {version: "2.10.0+musa5.2.0", index: mthreads, wheel: native}',
        rules='  line_map:\n    compressed-tensors: {follows: torch, versions: {"2.9": "0.15.0", "2.11": "0.17.0"}}',
    )
    err = refused(case, stack)
    assert err == (
        "error[resolution]: rules.line_map.compressed-tensors: unsupported torch line 2.10; "
        "supported: 2.9, 2.11\n"
        "hint: add a 2.10 entry to rules.line_map.compressed-tensors.versions, or pin torch to a "
        "supported line\n"
    )


def test_line_map_adds_its_version_as_a_pin(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(
        case.pypi,
        case.wheel("compressed-tensors", "0.17.0"),
        case.wheel("compressed-tensors", "0.18.0"),
    )
    stack = case.stack(
        PIN_TORCH,
        rules='  line_map:\n    compressed-tensors: {follows: torch, versions: {"2.9": "0.15.0", "2.11": "0.17.0"}}',
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert "compressed-tensors==0.17.0" in (case.lock_dir() / "constraints.txt").read_text()


def test_line_map_following_an_unknown_package_is_an_error(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, case.wheel("compressed-tensors", "0.17.0"))
    rules = (
        "  line_map:\n"
        '    compressed-tensors: {follows: torhc, versions: {"2.9": "0.15.0", "2.11": "0.17.0"}}'
    )
    result = case.run("lock", case.stack(PIN_TORCH, rules=rules), "--retries", "0")
    assert result.code == 1, "locked without compressed-tensors: " + result.out
    assert result.err == (
        "error[resolution]: rules.line_map.compressed-tensors: follows torhc, which is not in "
        "the lock\nhint: fix the name in follows, or remove the rule\n"
    )


def test_same_line_naming_an_unknown_package_is_an_error(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(
        case.vendor,
        Listing(path=case.wheel("torch-musa", "2.9.0+musa5.2.0", NATIVE), hash="none"),
    )
    packages = (
        PIN_TORCH + '\n  torch-musa: {version: "2.9.0+musa5.2.0", index: mthreads, wheel: native}'
    )
    rules = "  same_line: [[torch, torch-mus]]"  # typo: the 2.11 / 2.9 clash goes unseen
    result = case.run("lock", case.stack(packages, rules=rules), "--retries", "0")
    assert result.code == 1, "the same_line rule checked nothing"
    assert result.err == (
        "error[resolution]: rules.same_line.0: torch-mus is not in the lock, so the rule would "
        "check nothing\nhint: fix the name, or remove the rule\n"
    )
