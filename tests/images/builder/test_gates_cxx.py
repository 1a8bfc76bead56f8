"""The cxx-extension gate: the probe builds a C++ Python extension with the compiler it finds
(``$CXX`` or ``c++``, as the vllm-musa JIT does), imports it and calls it; the gate names the
step that failed with its first lines of output.

The probe is a standalone script: here it runs in this interpreter, with the host's compiler
(the real build) or with stand-in tools (each failure), and its facts are judged as the image's
are. ``tests/images/builder/test_build_docker_image.py`` runs it inside the demo image.
"""

from __future__ import annotations

import copy
import importlib.util
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from images.builder.gates import CXX_EXPECTED, evaluate_gates
from manifest import Manifest
from resolver.lockfile import Lock
from tests.images.builder.test_gates import GOOD
from tests.support.environment import in_ci
from tests.support.images import lock_for, manifest

PROBE = Path(__file__).resolve().parents[3] / "images" / "builder" / "in_image" / "gate_probe.py"
INCLUDE = sysconfig.get_path("include")
LIBRARY = "_vllm_musa_cxx_probe" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The probe module, its temporary directories under ``tmp_path/tmp``, ``CXX`` unset."""
    spec = importlib.util.spec_from_file_location("gate_probe_cxx_under_test", PROBE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.delenv("CXX", raising=False)
    return module


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Manifest, Lock]:
    m = manifest(tmp_path / "stack")
    return m, lock_for(m)


def _gate(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> tuple[bool, str]:
    full = copy.deepcopy(GOOD)
    full["cxx_extension"] = facts
    result = next(r for r in evaluate_gates(full, *stack) if r.name == "cxx-extension")
    return result.ok, result.output


def _tool(directory: Path, name: str, script: str) -> Path:
    """A stand-in executable: ``script`` run by sh."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + script, encoding="utf-8")
    path.chmod(0o755)
    return path


# a compiler that writes what -o names, and says which step it ran; FAIL_AT makes one fail
FAKE_CXX = """\
case " $* " in *" --version "*) echo "fake c++ 1.0"; exit 0;; esac
out=""; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
case " $* " in
  *" -c "*) step=compile;;
  *" -shared "*) step=link;;
esac
if [ "$step" = "$FAIL_AT" ]; then
  echo "$step: first line of the failure" >&2
  i=2; while [ $i -le 14 ]; do echo "$step: line $i" >&2; i=$((i + 1)); done
  exit 1
fi
: > "$out"
"""


def test_the_host_compiler_builds_imports_and_calls_the_extension(
    probe: ModuleType, tmp_path: Path, stack: tuple[Manifest, Lock]
) -> None:
    cxx = shutil.which("c++")
    if cxx is None or not Path(INCLUDE, "Python.h").is_file():
        if in_ci():
            pytest.fail("CI=true: the test machine must have c++ and this Python's Python.h")
        pytest.skip("no host c++ or no Python.h for this interpreter")
    version = probe._run([cxx, "--version"])["output"].splitlines()[0]
    ninja = shutil.which("ninja") or ""

    facts = probe._cxx_extension(INCLUDE, sys.executable)

    assert facts == {
        "compiler": "c++",
        "path": cxx,
        "version": version,
        "ninja": ninja,
        "include": INCLUDE,
        "module": "_vllm_musa_cxx_probe",
        "call": "join('vllm', 'musa')",
        "stage": "",
        "command": [],
        "output": [],
        "result": CXX_EXPECTED,
    }
    assert list((tmp_path / "tmp").iterdir()) == []  # the build directory is removed
    if ninja:
        assert _gate(facts, stack) == (
            True,
            f"c++ ({version}) compiled and linked _vllm_musa_cxx_probe against "
            f"{INCLUDE}/Python.h; python3.11 imported it and join('vllm', 'musa') returned "
            f"'vllm-musa'; ninja is {ninja}",
        )


def test_a_missing_compiler_is_named(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, stack: tuple[Manifest, Lock]
) -> None:
    monkeypatch.setenv("CXX", "no-such-c++")
    facts = probe._cxx_extension(INCLUDE, sys.executable)
    assert (facts["stage"], facts["path"], facts["command"]) == ("compiler", "", [])
    ok, output = _gate(facts, stack)
    assert not ok
    assert output.splitlines()[0] == (
        "compiler missing: no-such-c++ is not on PATH; install build-essential (the vllm-musa "
        "JIT compiles and links with $CXX or c++ while serving)"
    )


def test_a_missing_python_h_is_named(
    probe: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: tuple[Manifest, Lock]
) -> None:
    monkeypatch.setenv("CXX", str(_tool(tmp_path / "bin", "c++", FAKE_CXX)))
    include = tmp_path / "include" / "python3.11"
    include.mkdir(parents=True)
    facts = probe._cxx_extension(str(include), sys.executable)
    assert (facts["stage"], facts["version"]) == ("python-h", "fake c++ 1.0")
    assert _gate({**facts, "ninja": "/usr/bin/ninja"}, stack) == (
        False,
        f"Python.h missing: {include}/Python.h is not there; install python3.11-dev",
    )


NINJA_MISSING = (
    "ninja missing: ninja is not on PATH; install ninja-build (the vllm-musa JIT builds its "
    "kernels with ninja while serving)"
)


@pytest.mark.parametrize("step", ["compile", "link"])
def test_a_failed_compile_or_link_names_the_command_and_its_first_lines(
    probe: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stack: tuple[Manifest, Lock],
    step: str,
) -> None:
    cxx = str(_tool(tmp_path / "bin", "c++", FAKE_CXX))
    monkeypatch.setenv("CXX", cxx)
    monkeypatch.setenv("FAIL_AT", step)
    flags = [cxx, "-std=c++17", "-fPIC", "-O2"]  # the JIT's, but -O2
    facts = probe._cxx_extension(INCLUDE, sys.executable)
    command = {
        "compile": [*flags, f"-I{INCLUDE}", "-c", "probe.cpp", "-o", "probe.o"],
        "link": [cxx, "-shared", "probe.o", "-o", LIBRARY],
    }[step]
    assert (facts["stage"], facts["command"]) == (step, command)
    assert len(facts["output"]) == 14  # all of them (up to 40) are kept in the facts
    ok, output = _gate({**facts, "ninja": "/usr/bin/ninja"}, stack)
    assert not ok
    assert output == (
        f"{step} failed: {' '.join(command)}\n"
        f"  {step}: first line of the failure\n"
        + "".join(f"  {step}: line {i}\n" for i in range(2, 11)).rstrip("\n")
    )  # the first 10 lines


def test_an_extension_that_does_not_import_is_named(
    probe: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: tuple[Manifest, Lock]
) -> None:
    monkeypatch.setenv("CXX", str(_tool(tmp_path / "bin", "c++", FAKE_CXX)))
    python = _tool(
        tmp_path / "bin",
        "python3.11",
        'echo "Traceback (most recent call last):" >&2\n'
        'echo "ImportError: ./_vllm_musa_cxx_probe.so: undefined symbol: _ZSt4cout" >&2\n'
        "exit 1\n",
    )
    facts = probe._cxx_extension(INCLUDE, str(python))
    assert facts["stage"] == "import"
    assert facts["command"][0] == str(python)
    assert _gate({**facts, "ninja": "/usr/bin/ninja"}, stack) == (
        False,
        "import failed: python3.11 cannot import _vllm_musa_cxx_probe, which "
        f"{facts['compiler']} built:\n"
        "  Traceback (most recent call last):\n"
        "  ImportError: ./_vllm_musa_cxx_probe.so: undefined symbol: _ZSt4cout",
    )


def test_a_wrong_answer_and_a_missing_ninja_are_named(
    probe: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: tuple[Manifest, Lock]
) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("CXX", str(_tool(bin_dir, "c++", FAKE_CXX)))
    monkeypatch.setenv("PATH", str(bin_dir))  # no ninja
    python = _tool(bin_dir, "python3.11", "echo vllm+musa\n")
    facts = probe._cxx_extension(INCLUDE, str(python))
    assert (facts["stage"], facts["result"], facts["ninja"]) == ("", "vllm+musa", "")
    assert _gate(facts, stack) == (
        False,
        "call failed: _vllm_musa_cxx_probe.join('vllm', 'musa') returned 'vllm+musa', not "
        f"'vllm-musa'\n{NINJA_MISSING}",
    )


def test_not_probed(stack: tuple[Manifest, Lock]) -> None:
    facts = copy.deepcopy(GOOD)
    del facts["cxx_extension"]
    result = next(r for r in evaluate_gates(facts, *stack) if r.name == "cxx-extension")
    assert (result.ok, result.output) == (False, "the C++ extension build was not probed")
