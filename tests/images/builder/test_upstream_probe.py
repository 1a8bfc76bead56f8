"""The second in-image probe (in_image/upstream_probe.py), run in this interpreter: the vllm-musa
JIT's build of a .mu kernel through ninja with the demo's stand-in mcc and MUSA_HOME, the
provider functions located in generated trees without importing them, and pytest's version.
Its facts are judged as the image's are (test_gates_upstream.py has the judges' every message).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from images.builder.gates import evaluate_gates
from manifest import Manifest
from resolver.lockfile import Lock
from tests.images.builder.test_gates import GOOD
from tests.images.builder.test_gates_upstream import MUSA, _stack
from tests.support.environment import in_ci

ROOT = Path(__file__).resolve().parents[3]
PROBE = ROOT / "images" / "builder" / "in_image" / "upstream_probe.py"
STAND_IN = ROOT / "demo" / "vllm-musa-v028" / "tools"
NINJA_STOPPED = "ninja: build stopped: subcommand failed."


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The probe module; its temporary directories under ``tmp_path/tmp``; none of the JIT's
    variables set."""
    spec = importlib.util.spec_from_file_location("upstream_probe_under_test", PROBE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    for name in ("VLLM_MUSA_MCC", "VLLM_MUSA_ARCH_LIST", "MUSA_PATH", "CXX", "CC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MATE_MUSA_ARCH_LIST", "3.1")
    return module


@pytest.fixture
def musa_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the demo tree's stand-in MUSA_HOME (tools/musa-standin, with the stand-in mcc
    beside it), its libmusart.so.5 built as the tree's setup.py builds it; MUSA_HOME set."""
    missing = [t for t in ("cc", "c++", "ninja") if shutil.which(t) is None]
    if missing:
        if in_ci():
            pytest.fail(f"CI=true: the test machine must have {', '.join(missing)}")
        pytest.skip(f"no {', '.join(missing)} on this machine")
    tools = tmp_path / "tools"
    shutil.copytree(STAND_IN, tools)
    home = tools / "musa-standin"
    (home / "lib").mkdir()
    musart = [str(home / "musart.c"), "-o", str(home / "lib" / "libmusart.so.5")]
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-O2",
            "-Wl,-soname,libmusart.so.5",
            f"-I{home}/include",
            *musart,
        ],
        check=True,
    )
    (home / "lib" / "libmusart.so").symlink_to("libmusart.so.5")
    monkeypatch.setenv("MUSA_HOME", str(home))
    return home


def _compile(home: Path) -> list[str]:
    return [
        f"{home}/bin/mcc",
        "-MD",
        "-MF",
        "vllm_musa_jit_probe.musa.o.d",
        "-std=c++17",
        "-fPIC",
        "-O3",
        "-ffast-math",
        "--offload-arch=mp_31",
        f"-I{home}/include",
        "-c",
        "vllm_musa_jit_probe.mu",
        "-o",
        "vllm_musa_jit_probe.musa.o",
    ]


def _judged(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> tuple[bool, str]:
    full = copy.deepcopy(GOOD)
    full["musa_jit"] = facts
    result = next(r for r in evaluate_gates(full, *stack) if r.name == "musa-jit")
    return result.ok, result.output


# ------------------------------------------------------------------------------ musa-jit


def test_the_stand_in_mcc_builds_the_kernel_through_ninja(
    probe: ModuleType, musa_home: Path, tmp_path: Path
) -> None:
    facts = probe._musa_jit("mp_31")

    elf = facts.pop("elf")
    assert facts == {
        "mcc": f"{musa_home}/bin/mcc",
        "mcc_from": "$MUSA_HOME/bin/mcc",
        "mcc_path": f"{musa_home}/bin/mcc",
        "musa_home": str(musa_home),
        "source": "vllm_musa_jit_probe.mu",
        "library": "vllm_musa_jit_probe.so",
        "arch": "mp_31",
        "arch_env": {"variable": "MATE_MUSA_ARCH_LIST", "value": "3.1", "arches": ["mp_31"]},
        "tvm_ffi": {"distribution": "", "package": "", "include": "", "dlpack": "", "lib": ""},
        "libmusa": "stub",
        "ninja": shutil.which("ninja"),
        "stage": "",
        "command": [],
        "output": [],
    }
    # the host's linker decides what else it needs (--as-needed or not); libmusart it must
    assert (elf["type"], elf["soname"]) == ("shared object", "")
    assert "libmusart.so.5" in elf["needed"]
    assert list((tmp_path / "tmp").iterdir()) == []  # the build directory is removed
    ok, said = _judged({**facts, "elf": elf}, _stack(tmp_path / "s", MUSA))
    assert ok
    assert said.splitlines()[0] == (
        f"{musa_home}/bin/mcc ($MUSA_HOME/bin/mcc) compiled vllm_musa_jit_probe.mu for mp_31 "
        f"and ninja ({shutil.which('ninja')}) linked it as the vllm-musa JIT does: "
        f"vllm_musa_jit_probe.so is a shared object that needs {', '.join(elf['needed'])}"
    )


def test_tvm_ffi_is_found_from_its_distribution_and_linked(
    probe: ModuleType, musa_home: Path, tmp_path: Path
) -> None:
    """apache-tvm-ffi's layout (tvm_ffi/include/, include/dlpack/, lib/libtvm_ffi.so), its
    package never imported: the JIT's build compiles against the headers and links it."""
    site = tmp_path / "tvm-site"
    package = site / "tvm_ffi"
    (package / "include" / "dlpack").mkdir(parents=True)
    (package / "lib").mkdir()
    (package / "__init__.py").write_text('raise RuntimeError("never imported")\n', "utf-8")
    (package / "include" / "dlpack" / "dlpack.h").write_text("", "utf-8")
    (site / "empty.c").write_text("", "utf-8")
    library = package / "lib" / "libtvm_ffi.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", str(site / "empty.c"), "-o", str(library)], check=True
    )
    info = site / "apache_tvm_ffi-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apache-tvm-ffi\nVersion: 0.1.0\n")
    (info / "RECORD").write_text("tvm_ffi/__init__.py,,\ntvm_ffi/lib/libtvm_ffi.so,,\n", "utf-8")
    sys.path.insert(0, str(site))
    try:
        facts = probe._musa_jit("mp_31")
    finally:
        sys.path.remove(str(site))
        importlib.invalidate_caches()
    assert facts["tvm_ffi"] == {
        "distribution": "apache-tvm-ffi 0.1.0",
        "package": str(package),
        "include": str(package / "include"),
        "dlpack": str(package / "include"),
        "lib": str(library),
    }
    assert (facts["stage"], facts["output"]) == ("", [])
    assert "tvm_ffi" not in sys.modules


def test_a_libmusa_in_musa_home_is_linked_and_no_stub_is_built(
    probe: ModuleType, musa_home: Path
) -> None:
    lib = musa_home / "lib"
    shutil.copyfile(lib / "libmusart.so.5", lib / "libmusa.so")
    facts = probe._musa_jit("mp_31")
    assert (facts["stage"], facts["libmusa"]) == ("", str(lib / "libmusa.so"))


def test_a_failing_mcc_names_its_command_and_the_last_lines_of_ninja(
    probe: ModuleType, musa_home: Path, tmp_path: Path
) -> None:
    mcc = musa_home / "bin" / "mcc"
    lines = "".join(f'echo "mcc: line {i}" >&2\n' for i in range(1, 15))
    mcc.write_text(f"#!/bin/sh\n{lines}exit 1\n", encoding="utf-8")
    facts = probe._musa_jit("mp_31")
    assert (facts["stage"], facts["command"]) == ("compile", _compile(musa_home))
    assert facts["output"][-2:] == ["mcc: line 14", NINJA_STOPPED]
    assert _judged(facts, _stack(tmp_path / "s", MUSA)) == (
        False,
        f"compile failed: {' '.join(_compile(musa_home))}\n"
        + "".join(f"  mcc: line {i}\n" for i in range(6, 15))
        + f"  {NINJA_STOPPED}",
    )


def test_a_link_without_libmusart_fails_naming_the_link(probe: ModuleType, musa_home: Path) -> None:
    for name in ("libmusart.so", "libmusart.so.5"):
        (musa_home / "lib" / name).unlink()
    facts = probe._musa_jit("mp_31")
    link = ["c++", "vllm_musa_jit_probe.musa.o", "-shared", f"-L{musa_home}/lib", "-Lstubs"]
    assert (facts["stage"], facts["command"]) == (
        "link",
        [*link, "-lmusa", "-lmusart", "-o", "vllm_musa_jit_probe.so"],
    )
    assert facts["output"][-1] == NINJA_STOPPED
    assert any("-lmusart" in line for line in facts["output"])


def test_no_ninja_stops_before_the_build(
    probe: ModuleType, musa_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    facts = probe._musa_jit("mp_31")
    assert (facts["stage"], facts["ninja"], facts["command"]) == ("ninja", "", [])


def test_no_mcc_is_reported_as_absent(
    probe: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MUSA_HOME", str(tmp_path / "musa"))
    facts = probe._musa_jit("mp_31")
    assert {k: facts[k] for k in ("mcc", "mcc_from", "mcc_path", "stage")} == {
        "mcc": f"{tmp_path}/musa/bin/mcc",
        "mcc_from": "$MUSA_HOME/bin/mcc",
        "mcc_path": "",
        "stage": "",
    }
    monkeypatch.setenv("VLLM_MUSA_MCC", str(tmp_path / "no-mcc"))
    facts = probe._musa_jit("mp_31")
    assert (facts["mcc"], facts["mcc_from"], facts["mcc_path"]) == (
        str(tmp_path / "no-mcc"),
        "VLLM_MUSA_MCC",
        "",
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("3.1", {"arches": ["mp_31"]}),
        ("mp_22 31", {"arches": ["mp_22", "mp_31"]}),
        ("s5000", {"error": "Invalid MUSA arch value: 's5000'"}),
    ],
)
def test_the_arch_list_is_read_as_the_jit_reads_it(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str, expected: dict[str, Any]
) -> None:
    monkeypatch.setenv("VLLM_MUSA_ARCH_LIST", value)  # before MATE_MUSA_ARCH_LIST
    assert probe._arch_env() == {"variable": "VLLM_MUSA_ARCH_LIST", "value": value, **expected}


def test_elf_of_an_object_and_of_a_text_file(probe: ModuleType, tmp_path: Path) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no cc on this machine")
    (tmp_path / "a.c").write_text("int a(void) { return 1; }\n", encoding="utf-8")
    subprocess.run(["cc", "-c", str(tmp_path / "a.c"), "-o", str(tmp_path / "a.o")], check=True)
    assert probe._elf(tmp_path / "a.o") == {"type": "relocatable", "soname": "", "needed": []}
    assert probe._elf(tmp_path / "a.c") == {"error": "not an ELF file"}


# -------------------------------------------------------------------- provider functions

PROVIDER = {
    "__init__.py": 'raise RuntimeError("a probe must not import the package")\n',
    "mamba/__init__.py": 'raise RuntimeError("a probe must not import the package")\n',
    "mamba/ssd_combined.py": (
        "import math\n\n\ndef ssd_combined_fwd_varlen(*args, **kwargs):\n    return math.pi\n"
    ),
    "mamba/selective_state_update.py": (
        "try:\n    from ._triton import selective_state_update\n"
        "except ImportError:\n    selective_state_update = None\n"
    ),
    "mamba/by_async.py": "async def run():\n    pass\n",
    "mamba/by_class.py": "class Runner:\n    pass\n",
    "mamba/by_assignment.py": "run: object = print\n",
    "mamba/by_import.py": "import os.path as run\n",
    "mamba/nothing.py": "def other():\n    pass\n\n\nclass Holder:\n    def run(self):\n        pass\n",
    "mamba/broken.py": "def run(:\n",
}


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Path]:
    """A package ``fiprobe_x1`` with a mamba subpackage, first on sys.path; importing either
    raises."""
    root = tmp_path / "site" / "fiprobe_x1"
    for rel, text in PROVIDER.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    sys.path.insert(0, str(root.parent))
    try:
        yield root
    finally:
        sys.path.remove(str(root.parent))
        importlib.invalidate_caches()


@pytest.mark.parametrize(
    ("module", "name", "binding"),
    [
        ("ssd_combined", "ssd_combined_fwd_varlen", "def"),
        ("selective_state_update", "selective_state_update", "import from ._triton"),
        ("by_async", "run", "async def"),
        ("by_class", "Runner", "class"),
        ("by_assignment", "run", "assignment"),
        ("by_import", "run", "import os.path"),
        ("nothing", "run", ""),  # a method is no top-level binding
    ],
)
def test_a_function_is_located_and_its_binding_named_without_importing(
    probe: ModuleType, provider: Path, module: str, name: str, binding: str
) -> None:
    assert probe._provider_function(f"fiprobe_x1.mamba.{module}", name) == {
        "module": f"fiprobe_x1.mamba.{module}",
        "function": name,
        "path": str(provider / "mamba" / f"{module}.py"),
        "binding": binding,
        "error": "",
    }
    assert "fiprobe_x1" not in sys.modules


def test_a_missing_module_a_missing_package_and_a_broken_file(
    probe: ModuleType, provider: Path
) -> None:
    assert probe._provider_function("fiprobe_x1.mamba.gone", "run") == {
        "module": "fiprobe_x1.mamba.gone",
        "function": "run",
        "path": str(provider / "mamba" / "gone.py"),
        "binding": "",
        "error": "no such module",
    }
    assert probe._provider_function("fiprobe_x1.nothere.ssd", "run")["error"] == (
        "no package fiprobe_x1.nothere"
    )
    broken = probe._provider_function("fiprobe_x1.mamba.broken", "run")
    assert broken["path"] == str(provider / "mamba" / "broken.py")
    assert broken["error"].startswith("SyntaxError: ")
    assert "fiprobe_x1" not in sys.modules


# --------------------------------------------------------------------------------- pytest


def test_pytest_runs_and_says_its_version(probe: ModuleType) -> None:
    assert probe._pytest() == {"returncode": 0, "output": f"pytest {metadata.version('pytest')}"}


def test_the_script_prints_one_json_line(tmp_path: Path, provider: Path) -> None:
    argv = [sys.executable, "-c", PROBE.read_text(encoding="utf-8"), "--musa-arch=mp_22"]
    argv += ["--provider-function=fiprobe_x1.mamba.ssd_combined:ssd_combined_fwd_varlen"]
    env = {
        "PATH": "/usr/bin:/bin",
        "MUSA_HOME": str(tmp_path / "musa"),
        "PYTHONPATH": str(provider.parent),
    }
    done = subprocess.run(argv, capture_output=True, text=True, check=True, env=env, cwd=tmp_path)
    facts = json.loads(done.stdout)
    assert sorted(facts) == ["musa_jit", "provider_functions", "pytest"]
    assert (facts["musa_jit"]["arch"], facts["musa_jit"]["mcc_path"]) == ("mp_22", "")
    assert [(e["function"], e["binding"]) for e in facts["provider_functions"]] == [
        ("ssd_combined_fwd_varlen", "def")
    ]
