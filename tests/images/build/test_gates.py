"""Gate evaluation tests (pure): a passing image, then each gate failing with its name and output."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from core.errors import GateError
from images.build.gates import GATE_NAMES, evaluate_gates, parse_probe_output, require_gates
from manifest import Manifest
from resolver.lockfile import Lock
from tests.support.images import lock_for, manifest


def _built(name: str, version: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "properties": [{"name": "vllm-musa:built-from", "value": f"path:demo/{name}"}],
    }


GOOD: dict[str, Any] = {
    "python": [3, 11, 2],
    "prefix": "/usr",
    "base_prefix": "/usr",
    "uv": [],
    "venv_packages": [],
    "ensurepip_wheels": [],
    "pip_check": {"returncode": 0, "output": "No broken requirements found."},
    "distributions": [
        ["mate", "0.2.7"],
        ["pip", "23.0.1"],
        ["torch", "2.11.0.post2+musa5.2.0"],
        ["vllm", "0.28.0+demo"],
        ["vllm_musa", "0.1.28+demo"],
    ],
    "imports": {"torch": "", "mate": "", "vllm_musa": ""},
    "entry_points": [{"name": "musa", "value": "vllm_musa:register", "dist": "vllm_musa"}],
    "sbom": {"components": [_built("vllm", "0.28.0+demo"), _built("vllm-musa", "0.1.28+demo")]},
    "components": {
        "marker": {"mooncake": {"built": False}, "vllm-rs": {"built": False}},
        "binaries": {"vllm-rs": ""},
    },
    # python3-is-target and python-h (tests/images/build/test_gates_interpreter.py)
    "executable_realpath": "/usr/bin/python3.11",
    "python_commands": {
        "python3": {"version": [3, 11, 2], "realpath": "/usr/bin/python3.11"},
        "python": {"version": [3, 11, 2], "realpath": "/usr/bin/python3.11"},
    },
    "python_h": {"include": "/usr/include/python3.11", "present": True},
}


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Manifest, Lock]:
    m = manifest(tmp_path)
    return m, lock_for(m)


def _failed(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> dict[str, str]:
    results = evaluate_gates(facts, *stack)
    assert [r.name for r in results] == list(GATE_NAMES)
    return {r.name: r.output for r in results if not r.ok}


def test_a_good_image_passes_every_gate(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(GOOD, stack) == {}
    require_gates(evaluate_gates(GOOD, *stack), image="img")


def _bad(**changes: Any) -> dict[str, Any]:
    facts = copy.deepcopy(GOOD)
    facts.update(changes)
    return facts


def test_python_version(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(_bad(python=[3, 12, 1]), stack) == {
        "python-version": "python is 3.12.1, the target is 3.11"
    }


def test_system_prefix(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(_bad(prefix="/opt/venv"), stack) == {
        "system-prefix": "sys.prefix is '/opt/venv' and sys.base_prefix is '/usr'; both must be "
        "'/usr' (a venv or a non-system interpreter is in use)"
    }


def test_no_uv(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(_bad(uv=["/usr/local/bin/uv"]), stack) == {
        "no-uv": "uv is on PATH: /usr/local/bin/uv"
    }


def test_no_venv(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(
        venv_packages=["python3.11-venv"],
        ensurepip_wheels=["/usr/share/python-wheels/pip-23.0.1-py3-none-any.whl"],
    )
    assert _failed(facts, stack) == {
        "no-venv": "the package python3.11-venv is installed\n"
        "venv's ensurepip wheel is present: /usr/share/python-wheels/pip-23.0.1-py3-none-any.whl"
    }


def test_pip_check(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(pip_check={"returncode": 1, "output": "mate 0.2.7 requires torch, not installed"})
    assert _failed(facts, stack) == {
        "pip-check": "pip check exited 1: mate 0.2.7 requires torch, not installed"
    }


def test_installed_equals_lock(stack: tuple[Manifest, Lock]) -> None:
    dists = [d for d in GOOD["distributions"] if d[0] != "mate"]
    dists[1] = ["torch", "2.11.0.post2+musa5.2.1mp22"]
    dists += [["setuptools", "66.1.1"], ["requests", "2.32.0"]]
    assert _failed(_bad(distributions=dists), stack) == {
        "installed-equals-lock": "requests 2.32.0 is installed but is not in the lock\n"
        "setuptools 66.1.1 is a build-stage package (requirements-build.txt) and must not be in "
        "the image\n"
        "torch 2.11.0.post2+musa5.2.1mp22 is installed, but the lock has 2.11.0.post2+musa5.2.0\n"
        "mate 0.2.7 is in the lock but not installed"
    }


def test_installed_source_must_be_built(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(sbom={"components": [_built("vllm", "0.28.0+demo")]})
    failed = _failed(facts, stack)
    assert failed["installed-equals-lock"] == (
        "source vllm-musa was not built into the image (no SBOM entry)\n"
        "vllm-musa 0.1.28+demo is installed but is not in the lock"
    )


def test_imports(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(imports={"torch": "", "mate": "ModuleNotFoundError: No module named 'mate'"})
    assert _failed(facts, stack) == {
        "imports": "import mate failed:\nModuleNotFoundError: No module named 'mate'\n"
        "import vllm_musa: not probed"
    }


def test_no_cuda(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(distributions=[*GOOD["distributions"], ["nvidia-cublas-cu12", "12.4.5.8"]])
    failed = _failed(facts, stack)
    assert failed["no-cuda"] == "a CUDA distribution is installed: nvidia-cublas-cu12 12.4.5.8"


def test_platform_plugin(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(entry_points=[{"name": "cuda", "value": "x:y", "dist": "other"}])
    assert _failed(facts, stack) == {
        "platform-plugin": "no vllm.platform_plugins entry point is registered by a "
        "source-built distribution (vllm, vllm-musa); registered: cuda = x:y (other)"
    }


def test_a_failed_gate_is_an_error_naming_it(stack: tuple[Manifest, Lock]) -> None:
    with pytest.raises(GateError) as info:
        require_gates(evaluate_gates(_bad(uv=["/usr/bin/uv"]), *stack), image="sha256:abc")
    assert info.value.message == (
        "image sha256:abc failed 1 gate(s); no tag was applied\n"
        "  gate no-uv failed:\n    uv is on PATH: /usr/bin/uv"
    )


def test_probe_output_without_json() -> None:
    with pytest.raises(GateError) as info:
        parse_probe_output("Traceback ...\n", image="img")
    assert info.value.message == "the gate probe in img printed no JSON:\nTraceback ...\n"
