"""Gates of a driving source (pure): the driven tree is the installed one and the patched one,
the series' marker is there, and pip check forgives exactly the declared overrides."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from images.builder.gates import evaluate_gates, probe_args
from manifest import Manifest
from resolver.lockfile import Lock
from tests.images.builder.test_gates import GOOD
from tests.support.images import MANIFEST, lock_for, manifest

REV = "2cf0a6915ce544dc493a0990f2ea38d81601128a"
DRIVEN = MANIFEST.replace(
    "sources:\n"
    "  vllm: {path: demo/vllm, env: {VLLM_TARGET_DEVICE: empty}}\n"
    "  vllm-musa: {path: demo/vllm-musa}\n",
    "sources:\n"
    f'  vllm: {{git: "https://github.com/vllm-project/vllm.git", rev: "{REV}"}}\n'
    "  vllm-musa:\n"
    "    path: demo/vllm-musa\n"
    "    product: true\n"
    "    third_party:\n"
    "      vllm: {source: vllm, pin: VLLM_COMMIT, patches: vllm_musa/patches/series}\n"
    "overrides:\n"
    '  opencv-python-headless: {version: "4.11.0.86", reason: "numpy 1.26 for the MUSA stack"}\n',
).replace(
    "gates:\n  imports: [torch, mate, vllm_musa]\n",
    "gates:\n  imports: [torch, mate, vllm_musa]\n"
    "  markers: {vllm: vllm/platforms/musa_series.py}\n",
)
ROOT = "/vllm-workspace/third_party/vllm"
TREE: dict[str, Any] = {
    "source": "vllm",
    "dir": ROOT,
    "packages": {"vllm": {"found": f"{ROOT}/vllm", "owners": ["vllm"], "copies": []}},
    "checked": 2400,
    "exempt": 7,
    "series": ["0001-a.patch", "0002-b.patch"],
    "changed": [],
    "missing": [],
}
OPENCV = (
    "vllm 0.28.0 has requirement opencv-python-headless>=4.13.0, but you have "
    "opencv-python-headless 4.11.0.86."
)


def _with_override(lock: Lock) -> Lock:
    """The lock with the override as the resolver records it: its reason, and what it ignores."""
    base = lock.by_name()[canonicalize_name("mate")]
    opencv = dataclasses.replace(
        base,
        name=canonicalize_name("opencv-python-headless"),
        version="4.11.0.86",
        filename="opencv_python_headless-4.11.0.86-cp37-abi3-manylinux_2_17_x86_64.whl",
        origin="override",
        override_reason="numpy 1.26 for the MUSA stack",
        override_ignores=(
            "vllm 0.28.0 (sources.vllm:requirements/common.txt) requires "
            "opencv-python-headless>=4.13.0",
        ),
    )
    return dataclasses.replace(lock, packages=(*lock.packages, opencv))


@pytest.fixture
def driven(tmp_path: Path) -> tuple[Manifest, Lock]:
    assert DRIVEN != MANIFEST
    m = manifest(tmp_path, DRIVEN)
    return m, _with_override(lock_for(m))


def _facts(**changes: Any) -> dict[str, Any]:
    facts = copy.deepcopy(GOOD)
    facts["third_party"] = {"trees": [copy.deepcopy(TREE)]}
    facts["markers"] = {"vllm": {"path": f"{ROOT}/vllm/platforms/musa_series.py", "found": True}}
    facts.update(changes)
    return facts


def _results(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.ok, r.output) for r in evaluate_gates(facts, *stack)}


def test_a_good_driven_tree_passes(driven: tuple[Manifest, Lock]) -> None:
    results = _results(_facts(), driven)
    assert results["third-party"] == (
        True,
        f"vllm in {ROOT}: 2400 files as staged, 7 changed by the series (2 patches) or written "
        "by the build; one owner",
    )
    assert results["markers"] == (True, f"present: vllm: {ROOT}/vllm/platforms/musa_series.py")


def test_a_second_owner_a_stray_copy_and_a_changed_file_fail(
    driven: tuple[Manifest, Lock],
) -> None:
    tree = copy.deepcopy(TREE)
    tree["packages"]["vllm"] = {
        "found": "/usr/local/lib/python3.11/dist-packages/vllm",
        "owners": ["vllm", "vllm-musa"],
        "copies": ["/usr/local/lib/python3.11/dist-packages/vllm"],
    }
    tree["changed"] = ["vllm/envs.py"]
    tree["missing"] = ["vllm/py.typed"]
    ok, output = _results(_facts(third_party={"trees": [tree]}), driven)["third-party"]
    assert not ok
    assert output == (
        "vllm: owned by vllm, vllm-musa; exactly one distribution, vllm, must provide it\n"
        f"vllm is found at /usr/local/lib/python3.11/dist-packages/vllm, not in the driven tree "
        f"{ROOT}/vllm\n"
        "vllm: another copy is on sys.path: /usr/local/lib/python3.11/dist-packages/vllm\n"
        f"{ROOT}/vllm/envs.py: differs from the staged source, and the series does not touch it\n"
        f"{ROOT}/vllm/py.typed: missing from the image"
    )


def test_no_record_fails(driven: tuple[Manifest, Lock]) -> None:
    ok, output = _results(_facts(third_party={"trees": []}), driven)["third-party"]
    assert (ok, output) == (False, "sources.vllm (third_party/vllm): no record in the image")


def test_a_missing_marker_fails(driven: tuple[Manifest, Lock]) -> None:
    facts = _facts(
        markers={"vllm": {"path": f"{ROOT}/vllm/platforms/musa_series.py", "found": False}}
    )
    assert _results(facts, driven)["markers"] == (
        False,
        f"marker of vllm: {ROOT}/vllm/platforms/musa_series.py is not in the image; the "
        "installed vllm is not the patched tree",
    )


def test_pip_check_forgives_exactly_the_declared_override(driven: tuple[Manifest, Lock]) -> None:
    facts = _facts(pip_check={"returncode": 1, "output": OPENCV})
    assert _results(facts, driven)["pip-check"] == (
        True,
        "pip check: clean apart from the declared overrides\n"
        "forgiven (overrides.opencv-python-headless: numpy 1.26 for the MUSA stack): " + OPENCV,
    )


def test_pip_check_does_not_forgive_what_the_lock_does_not_record(
    driven: tuple[Manifest, Lock],
) -> None:
    other_version = OPENCV.replace("4.11.0.86.", "4.10.0.84.")
    other_package = "vllm 0.28.0 has requirement numpy>=2, but you have numpy 1.26.4."
    other_requirer = OPENCV.replace("vllm 0.28.0", "mistral-common 1.11.6")
    other_requirement = OPENCV.replace(">=4.13.0", ">=4.14")
    lines = [other_version, other_package, other_requirer, other_requirement]
    facts = _facts(pip_check={"returncode": 1, "output": "\n".join(lines)})
    assert _results(facts, driven)["pip-check"] == (
        False,
        "pip check exited 1:\n" + "\n".join(lines),
    )


def test_probe_args_name_the_marker(driven: tuple[Manifest, Lock]) -> None:
    assert probe_args(driven[0])[-3:] == [
        "--marker=vllm=vllm/platforms/musa_series.py",
        "--third-party=/opt/vllm-musa/third-party.json",
        "--base-record=/opt/vllm-musa/base-distributions.json",
    ]
