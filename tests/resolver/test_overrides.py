"""Overrides, end to end on a vLLM-like conflict: vLLM's requirements file wants
opencv-python-headless>=4.13, whose releases need numpy 2, while the MUSA stack keeps numpy
1.26.4. Without an override that is an error naming both ends; with one, the lock records the
reason and exactly the requirements the override's version breaks."""

from __future__ import annotations

import hashlib
from pathlib import Path

from resolver.lockfile import load_lock
from testbed.simple_index import Listing
from tests.sources.sdistgen import write_sdist
from tests.support.lockcase import NATIVE, Case, read_toml, refused

OPENCV = "opencv-python-headless"
SOURCES = (
    "sources:\n"
    '  vllm: {sdist: {index: pypi, version: "0.28.0"}, '
    "requirements_files: [requirements/common.txt]}\n"
)
OVERRIDE = (
    f'overrides:\n  {OPENCV}: {{version: "4.11.0.86", reason: "numpy 1.26 for the MUSA stack"}}\n'
)


def publish(case: Case) -> None:
    common = (
        "numpy\n"
        "mistral_common[image] >= 1.11.6\n"
        "opencv-python-headless >= 4.13.0    # required for video IO\n"
    )
    case.publish(
        case.pypi,
        write_sdist(case.wheels, "vllm-0.28.0.tar.gz", {"requirements/common.txt": common}),
        case.wheel("numpy", "1.26.4", NATIVE),
        case.wheel("numpy", "2.2.6", NATIVE),
        case.wheel(OPENCV, "4.13.0.92", NATIVE, requires_dist=("numpy>=2",)),
        case.wheel(OPENCV, "4.11.0.86", NATIVE, requires_dist=("numpy>=1.21.2",)),
        case.wheel(
            "mistral-common",
            "1.11.6",
            requires_dist=(
                "pillow",
                f"{OPENCV}>=4.13.0; extra == 'image'",
                f"{OPENCV}>=4.0; extra == 'image'",
                f"{OPENCV}<4; sys_platform == 'win32'",
            ),
        ),
        case.wheel("pillow", "11.0.0"),
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_without_an_override_the_conflict_names_both_requirers(case: Case) -> None:
    publish(case)
    err = refused(case, case.stack(requirements=["numpy==1.26.4"], extra=SOURCES))
    assert err == (
        "error[resolution]: the dependencies cannot be satisfied together:\n"
        "  the manifest's requirements requires numpy==1.26.4; "
        "sources.vllm:requirements/common.txt:1 requires numpy (any version); "
        "sources.vllm:requirements/common.txt:3 -> opencv-python-headless==4.13.0.92 requires "
        "numpy>=2; no version satisfies all of them (newest usable: 2.2.6, 1.26.4)\n"
        "hint: if the stack must have these versions anyway, one possible fix is an override "
        'with its reason: overrides: {opencv-python-headless: {version: "...", reason: "..."}} '
        "(or of numpy); every requirement on an overridden package is ignored, and each one its "
        "version does not satisfy is recorded in the lock\n"
    )


def test_the_override_is_locked_with_its_reason_and_what_it_ignores(case: Case) -> None:
    publish(case)
    stack = case.stack(requirements=["numpy==1.26.4"], extra=SOURCES + OVERRIDE)
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == ""
    opencv = case.wheels / "opencv_python_headless-4.11.0.86-cp312-cp312-linux_x86_64.whl"
    reqs = (case.lock_dir() / "requirements.txt").read_text().splitlines()
    at = reqs.index(f"{OPENCV}==4.11.0.86 \\")
    assert reqs[at - 1 : at + 2] == [
        "# override: numpy 1.26 for the MUSA stack; ignores: mistral-common 1.11.6 requires "
        "opencv-python-headless>=4.13.0, vllm 0.28.0 (sources.vllm:requirements/common.txt) "
        "requires opencv-python-headless>=4.13.0",
        f"{OPENCV}==4.11.0.86 \\",
        f"    --hash=sha256:{sha256(opencv)}",
    ]
    assert [line for line in reqs if line.startswith("# override")] == [reqs[at - 1]]
    doc = read_toml((case.lock_dir() / "pylock.toml").read_text())
    entry = next(p for p in doc["packages"] if p["name"] == OPENCV)
    assert entry["tool"]["vllm-musa-image"] == {
        "index-name": "pypi",
        "kind": "native",
        "origin": "override",
        "required-by": ["(overrides)"],
        "override": {
            "reason": "numpy 1.26 for the MUSA stack",
            "ignores": [
                "mistral-common 1.11.6 requires opencv-python-headless>=4.13.0",
                "vllm 0.28.0 (sources.vllm:requirements/common.txt) requires "
                "opencv-python-headless>=4.13.0",
            ],
        },
    }
    lock = load_lock(case.lock_dir())
    assert list(lock.overrides()) == [OPENCV]
    assert {p.name: p.version for p in lock.runtime()} == {
        "mistral-common": "1.11.6",
        "numpy": "1.26.4",
        OPENCV: "4.11.0.86",
        "pillow": "11.0.0",
    }

    why = case.run("why", stack, OPENCV)
    assert (why.code, why.err) == (0, "")
    assert why.out == (
        "overrides: opencv-python-headless 4.11.0.86\n"
        "override: numpy 1.26 for the MUSA stack\n"
        "  ignores: mistral-common 1.11.6 requires opencv-python-headless>=4.13.0\n"
        "  ignores: vllm 0.28.0 (sources.vllm:requirements/common.txt) requires "
        "opencv-python-headless>=4.13.0\n"
    )
    explain = case.run("explain", stack, OPENCV)
    assert explain.code == 0, explain.err
    assert explain.out.splitlines()[:5] == [
        f"{OPENCV} on index pypi ({case.pypi.simple_url}{OPENCV}/)",
        "wanted: ==4.11.0.86, overridden at overrides.opencv-python-headless",
        "override: numpy 1.26 for the MUSA stack",
        "  ignores: mistral-common 1.11.6 requires opencv-python-headless>=4.13.0",
        "  ignores: vllm 0.28.0 (sources.vllm:requirements/common.txt) requires "
        "opencv-python-headless>=4.13.0",
    ]
    js = case.run("explain", stack, OPENCV, "--json")
    assert '"reason": "numpy 1.26 for the MUSA stack"' in js.out


def test_an_override_that_overrides_nothing_is_a_note(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel("app", "1.0", requires_dist=("six>=1.10",)),
        case.wheel("six", "1.16.0"),
        case.wheel("six", "1.17.0"),
    )
    stack = case.stack(
        requirements=["app"],
        extra='overrides:\n  six: {version: "1.16.0", reason: "older six"}\n',
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == (
        "note: overrides.six overrides nothing (every requirement on six accepts 1.16.0); "
        "remove it\n"
    )
    reqs = (case.lock_dir() / "requirements.txt").read_text()
    assert "# override: older six; ignores: nothing\nsix==1.16.0 \\\n" in reqs


def test_an_override_is_looked_up_on_its_own_index(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("triton", "3.2.0", NATIVE), hash="none"))
    case.publish(
        case.pypi,
        case.wheel("triton", "3.3.0", NATIVE),
        case.wheel("app", "1.0", requires_dist=("triton>=3.3",)),
    )
    stack = case.stack(
        requirements=["app"],
        extra='overrides:\n  triton: {version: "3.2.0", index: mthreads, reason: "MUSA build"}\n',
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    triton = next(p for p in load_lock(case.lock_dir()).packages if p.name == "triton")
    assert (triton.index, triton.version, triton.override_ignores) == (
        "mthreads",
        "3.2.0",
        ("app 1.0 requires triton>=3.3",),
    )


def test_the_built_project_cannot_be_overridden(case: Case) -> None:
    publish(case)
    stack = case.stack(extra=SOURCES + 'overrides:\n  vllm: {version: "0.27.0", reason: "older"}\n')
    err = refused(case, stack)
    assert err == (
        "error[resolution]: overrides.vllm: vllm is built in the image from sources.vllm.sdist "
        "(0.28.0); its version is the sdist's\n"
        "hint: remove overrides.vllm, or change sources.vllm.sdist.version\n"
    )
