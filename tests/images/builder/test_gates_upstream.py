"""The gates of upstream_gates.py, judged purely from facts: musa-jit (the vllm-musa JIT's mcc
build of a .mu kernel), the FlashInfer provider's functions (part of flashinfer-provider) and
pytest at the locked version. ``test_upstream_probe.py`` runs the probe that gathers the facts.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from images.builder.gates import evaluate_gates
from images.builder.upstream_gates import (
    NO_MCC,
    provider_function_checks,
    upstream_probe_args,
)
from manifest import Manifest
from resolver.lockfile import Lock, LockedPackage
from tests.images.builder.test_gates import GOOD
from tests.support.images import MANIFEST, lock_for, manifest

HOME = "/vllm-workspace/tools/musa-standin"
MCC = f"{HOME}/bin/mcc"
COMPILE = [
    MCC,
    "-MD",
    "-MF",
    "vllm_musa_jit_probe.musa.o.d",
    "-std=c++17",
    "-fPIC",
    "-O3",
    "-ffast-math",
    "--offload-arch=mp_31",
    f"-I{HOME}/include",
    "-c",
    "vllm_musa_jit_probe.mu",
    "-o",
    "vllm_musa_jit_probe.musa.o",
]
# what the probe reports of the demo image: the stand-in mcc, no tvm-ffi, a stub libmusa
BUILT: dict[str, Any] = {
    "mcc": MCC,
    "mcc_from": "$MUSA_HOME/bin/mcc",
    "mcc_path": MCC,
    "musa_home": HOME,
    "source": "vllm_musa_jit_probe.mu",
    "library": "vllm_musa_jit_probe.so",
    "arch": "mp_31",
    "arch_env": {"variable": "MATE_MUSA_ARCH_LIST", "value": "3.1", "arches": ["mp_31"]},
    "tvm_ffi": {"distribution": "", "package": "", "include": "", "dlpack": "", "lib": ""},
    "libmusa": "stub",
    "ninja": "/usr/bin/ninja",
    "stage": "",
    "command": [],
    "output": [],
    "elf": {
        "type": "shared object",
        "soname": "",
        "needed": ["libmusa.so.1", "libmusart.so.5", "libstdc++.so.6", "libc.so.6"],
    },
}
BUILT_OK = (
    f"{MCC} ($MUSA_HOME/bin/mcc) compiled vllm_musa_jit_probe.mu for mp_31 and ninja "
    "(/usr/bin/ninja) linked it as the vllm-musa JIT does: vllm_musa_jit_probe.so is a shared "
    "object that needs libmusa.so.1, libmusart.so.5, libstdc++.so.6, libc.so.6\n"
    "tvm-ffi: apache-tvm-ffi is not installed: built without it\n"
    f"-lmusa: no libmusa.so in {HOME}/lib or {HOME}/lib/stubs (the driver's library, which "
    "the host provides at run time): linked against a stub the gate built (soname libmusa.so.1)"
)
MUSA = "musa:\n  gpu_arch: mp_31\n"
SDK = "sdk: {from: base}\n"


def _stack(tmp_path: Path, extra: str = "") -> tuple[Manifest, Lock]:
    """The test stack, with ``extra`` keys (its MTGPU_TARGET build arg goes: musa sets it)."""
    text = MANIFEST.replace("  args: {MTGPU_TARGET: mp_31}\n", "") + extra
    m = manifest(tmp_path, text)
    return m, lock_for(m)


def _gate(name: str, stack: tuple[Manifest, Lock], **facts: Any) -> tuple[bool, str]:
    full = copy.deepcopy(GOOD)
    full.update(facts)
    result = next(r for r in evaluate_gates(full, *stack) if r.name == name)
    return result.ok, result.output


def _jit(stack: tuple[Manifest, Lock], **changes: Any) -> tuple[bool, str]:
    return _gate("musa-jit", stack, musa_jit={**copy.deepcopy(BUILT), **changes})


# ------------------------------------------------------------------------------ musa-jit


def test_the_jit_build_passes_naming_the_compiler_the_arch_and_the_stub(tmp_path: Path) -> None:
    assert _jit(_stack(tmp_path, MUSA)) == (True, BUILT_OK)


def test_without_an_mcc_the_gate_passes_saying_so(tmp_path: Path) -> None:
    assert _gate("musa-jit", _stack(tmp_path)) == (True, NO_MCC)
    assert NO_MCC == "no mcc in the image (VLLM_MUSA_MCC, $MUSA_HOME/bin/mcc): not exercised"


def test_without_an_mcc_the_gate_fails_when_sdk_commands_lists_it(tmp_path: Path) -> None:
    assert _gate("musa-jit", _stack(tmp_path, MUSA + SDK)) == (
        False,
        "mcc missing: VLLM_MUSA_MCC is unset and /usr/local/musa/bin/mcc is not there "
        "($MUSA_HOME is /usr/local/musa), but sdk.commands lists mcc: the vllm-musa JIT "
        "compiles its .mu kernels with $MUSA_HOME/bin/mcc while serving; install the SDK's "
        "compiler there, or set musa.home to the SDK's directory",
    )


def test_an_sdk_without_mcc_in_its_commands_does_not_require_it(tmp_path: Path) -> None:
    stack = _stack(tmp_path, MUSA + "sdk: {from: base, commands: [], libraries: [libmusart.so]}\n")
    assert _gate("musa-jit", stack) == (True, NO_MCC)


def test_a_vllm_musa_mcc_that_is_not_there_fails(tmp_path: Path) -> None:
    facts = {"mcc": "/opt/mcc", "mcc_from": "VLLM_MUSA_MCC", "mcc_path": "", "musa_home": HOME}
    assert _gate("musa-jit", _stack(tmp_path, MUSA), musa_jit=facts) == (
        False,
        "mcc missing: VLLM_MUSA_MCC is '/opt/mcc', which is not an executable file; the "
        "vllm-musa JIT runs it for every .mu kernel (unset it to use $MUSA_HOME/bin/mcc, or "
        "point it at the SDK's mcc)",
    )


def test_a_failed_compile_names_the_command_and_its_last_lines(tmp_path: Path) -> None:
    output = [f"line {i}" for i in range(1, 15)]
    ok, said = _jit(_stack(tmp_path, MUSA), stage="compile", command=COMPILE, output=output)
    assert not ok
    assert said == f"compile failed: {' '.join(COMPILE)}\n" + "\n".join(
        f"  line {i}" for i in range(5, 15)
    )


def test_a_failed_stub_names_its_command(tmp_path: Path) -> None:
    command = ["cc", "-shared", "-fPIC", "-Wl,-soname,libmusa.so.1", "stubs/musa_stub.c"]
    command += ["-o", "stubs/libmusa.so"]
    ok, said = _jit(_stack(tmp_path, MUSA), stage="stub", command=command, output=["cc: not found"])
    assert (ok, said) == (
        False,
        f"stub failed: no libmusa.so in {HOME}/lib or {HOME}/lib/stubs, and the stub the gate "
        "links against instead could not be built: cc -shared -fPIC -Wl,-soname,libmusa.so.1 "
        "stubs/musa_stub.c -o stubs/libmusa.so\n  cc: not found",
    )


def test_no_ninja(tmp_path: Path) -> None:
    assert _jit(_stack(tmp_path, MUSA), stage="ninja", ninja="", elf={}) == (
        False,
        "ninja missing: ninja is not on PATH; install ninja-build (the vllm-musa JIT builds its "
        "kernels with ninja while serving)",
    )


@pytest.mark.parametrize(
    ("elf", "expected"),
    [
        (
            {"error": "not an ELF file"},
            "the JIT's output vllm_musa_jit_probe.so cannot be read as ELF: not an ELF file",
        ),
        (
            {"type": "relocatable", "soname": "", "needed": []},
            "the JIT's output vllm_musa_jit_probe.so is an ELF relocatable, not a shared object",
        ),
        (
            {"type": "shared object", "soname": "", "needed": ["libc.so.6"]},
            "the JIT's output vllm_musa_jit_probe.so needs libc.so.6, not libmusart: its "
            f"kernel's host code calls the MUSA runtime, -lmusart from {HOME}/lib",
        ),
    ],
)
def test_an_output_that_is_not_a_library_needing_libmusart_fails(
    tmp_path: Path, elf: dict[str, Any], expected: str
) -> None:
    assert _jit(_stack(tmp_path, MUSA), elf=elf) == (False, expected)


def test_the_images_arch_list_must_be_the_stacks(tmp_path: Path) -> None:
    other = {"variable": "MATE_MUSA_ARCH_LIST", "value": "2.2 3.1", "arches": ["mp_22", "mp_31"]}
    bad = {
        "variable": "VLLM_MUSA_ARCH_LIST",
        "value": "s5000",
        "error": "Invalid MUSA arch value: 's5000'",
    }
    stack = _stack(tmp_path, MUSA)
    assert _jit(stack, arch_env=other) == (
        False,
        "MATE_MUSA_ARCH_LIST=2.2 3.1 in the image makes the JIT compile for mp_22, mp_31, but "
        "musa.gpu_arch is mp_31",
    )
    assert _jit(stack, arch_env=bad) == (
        False,
        "VLLM_MUSA_ARCH_LIST=s5000 in the image is not a MUSA arch list: the JIT raises "
        "ValueError: Invalid MUSA arch value: 's5000'",
    )
    assert _jit(stack, arch_env={})[0]  # unset: the JIT would ask the device, none here


def test_tvm_ffi_installed_is_compiled_against_and_must_be_whole(tmp_path: Path) -> None:
    package = "/usr/local/lib/python3.11/dist-packages/tvm_ffi"
    whole = {
        "distribution": "apache-tvm-ffi 0.1.0",
        "package": package,
        "include": f"{package}/include",
        "dlpack": f"{package}/include",
        "lib": f"{package}/lib/libtvm_ffi.so",
    }
    stack = _stack(tmp_path, MUSA)
    ok, said = _jit(stack, tvm_ffi=whole)
    assert ok
    assert said.splitlines()[1] == (
        f"tvm-ffi: apache-tvm-ffi 0.1.0, -I{package}/include -L{package}/lib -ltvm_ffi"
    )
    assert _jit(stack, tvm_ffi={**whole, "dlpack": "", "lib": ""}) == (
        False,
        f"apache-tvm-ffi 0.1.0 is installed, but its tvm_ffi package ({package}) has no "
        "include/dlpack/, lib/libtvm_ffi.so: the vllm-musa JIT compiles against tvm_ffi's "
        "include/ and include/dlpack/ and links libtvm_ffi.so",
    )


def test_a_libmusa_of_the_sdk_is_named(tmp_path: Path) -> None:
    ok, said = _jit(_stack(tmp_path, MUSA), libmusa=f"{HOME}/lib/stubs/libmusa.so")
    assert ok
    assert said.splitlines()[2] == f"-lmusa: {HOME}/lib/stubs/libmusa.so"


def test_musa_jit_not_probed(tmp_path: Path) -> None:
    facts = copy.deepcopy(GOOD)
    del facts["musa_jit"]
    result = next(r for r in evaluate_gates(facts, *_stack(tmp_path)) if r.name == "musa-jit")
    assert (result.ok, result.output) == (False, "the MUSA JIT build was not probed")


def test_probe_args(tmp_path: Path) -> None:
    m, _ = _stack(tmp_path, "musa:\n  gpu_arch: mp_22\n")
    assert upstream_probe_args(m, overlay=True) == [
        "--musa-arch=mp_22",
        "--provider-function=flashinfer.mamba.ssd_combined:ssd_combined_fwd_varlen",
        "--provider-function=flashinfer.mamba.selective_state_update:selective_state_update",
    ]
    plain, _ = _stack(tmp_path / "plain")
    assert upstream_probe_args(plain, overlay=False) == ["--musa-arch=mp_31"]


# -------------------------------------------------------------------- provider functions

SITE = "/usr/local/lib/python3.11/dist-packages"
OVERLAY = "/vllm-workspace/third_party/flashinfer"


def _entry(module: str, function: str, **changes: str) -> dict[str, str]:
    path = f"{SITE}/{module.replace('.', '/')}.py"
    return {
        "module": module,
        "function": function,
        "path": path,
        "binding": "def",
        "error": "",
        **changes,
    }


SSD = ("flashinfer.mamba.ssd_combined", "ssd_combined_fwd_varlen")
SSU = ("flashinfer.mamba.selective_state_update", "selective_state_update")


def test_provider_functions_bound_by_def_or_import_are_reported() -> None:
    facts = {
        "provider_functions": [
            _entry(*SSD),
            _entry(*SSU, binding="import from .selective_state_update_triton"),
        ]
    }
    assert provider_function_checks(facts, OVERLAY) == (
        [],
        f"flashinfer.mamba.ssd_combined.ssd_combined_fwd_varlen: def in {SITE}/flashinfer/"
        "mamba/ssd_combined.py\n"
        "flashinfer.mamba.selective_state_update.selective_state_update: import from "
        f".selective_state_update_triton in {SITE}/flashinfer/mamba/selective_state_update.py",
    )


def test_a_missing_module_and_a_missing_function_name_the_file_and_the_function() -> None:
    facts = {
        "provider_functions": [
            _entry(*SSD, binding=""),
            _entry(*SSU, binding="", error="no such module"),
        ]
    }
    assert provider_function_checks(facts, OVERLAY) == (
        [
            f"{SITE}/flashinfer/mamba/ssd_combined.py (flashinfer.mamba.ssd_combined) has no "
            "top-level ssd_combined_fwd_varlen (no def, class, assignment or import binds "
            "it); upstream's image imports it and checks that it is callable",
            f"{SITE}/flashinfer/mamba/selective_state_update.py: missing; upstream's image "
            "imports selective_state_update from flashinfer.mamba.selective_state_update (the "
            f"FlashInfer provider overlaid from {OVERLAY} lacks it)",
        ],
        "",
    )


def test_an_unreadable_module_or_package_and_a_function_not_probed() -> None:
    facts = {
        "provider_functions": [
            _entry(*SSD, binding="", error="SyntaxError: invalid syntax (ssd_combined.py, line 3)"),
        ]
    }
    problems, _ = provider_function_checks(facts, OVERLAY)
    assert problems == [
        f"{SITE}/flashinfer/mamba/ssd_combined.py (flashinfer.mamba.ssd_combined) cannot be "
        "read: SyntaxError: invalid syntax (ssd_combined.py, line 3); upstream's image imports "
        "ssd_combined_fwd_varlen from flashinfer.mamba.ssd_combined",
        "flashinfer.mamba.selective_state_update.selective_state_update: not probed",
    ]
    gone = {
        "provider_functions": [
            _entry(*SSD, path="", binding="", error="no package flashinfer.mamba")
        ]
    }
    assert provider_function_checks(gone, OVERLAY)[0][0] == (
        "flashinfer.mamba.ssd_combined (flashinfer.mamba.ssd_combined) cannot be read: no "
        "package flashinfer.mamba; upstream's image imports ssd_combined_fwd_varlen from "
        "flashinfer.mamba.ssd_combined"
    )


# --------------------------------------------------------------------------------- pytest


def _with_pytest(lock: Lock, version: str = "8.3.4") -> Lock:
    pkg = dataclasses.replace(
        lock.packages[0], name=canonicalize_name("pytest"), version=version, filename="p.whl"
    )
    packages: tuple[LockedPackage, ...] = tuple(sorted((*lock.packages, pkg), key=lambda p: p.name))
    return dataclasses.replace(lock, packages=packages)


def test_pytest_not_in_the_lock_is_not_checked(tmp_path: Path) -> None:
    assert _gate("pytest", _stack(tmp_path)) == (True, "pytest is not in the lock: not checked")


def test_pytest_at_the_locked_version_passes(tmp_path: Path) -> None:
    m, lock = _stack(tmp_path)
    facts = {"returncode": 0, "output": "pytest 8.3.4"}
    assert _gate("pytest", (m, _with_pytest(lock)), pytest=facts) == (
        True,
        "python3.11 -m pytest --version: pytest 8.3.4, as locked",
    )
    old = {"returncode": 0, "output": "This is pytest version 6.2.5, imported from /x/pytest"}
    assert _gate("pytest", (m, _with_pytest(lock, "6.2.5")), pytest=old)[0]


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (
            {"returncode": 0, "output": "pytest 8.3.3"},
            "python3.11 -m pytest --version says pytest 8.3.3, but the lock has pytest 8.3.4",
        ),
        (
            {"returncode": 1, "output": "/usr/bin/python3.11: No module named pytest"},
            "python3.11 -m pytest --version exited 1; the lock has pytest 8.3.4:\n"
            "  /usr/bin/python3.11: No module named pytest",
        ),
        (
            {"returncode": 0, "output": "hello"},
            "python3.11 -m pytest --version printed no version; the lock has pytest 8.3.4:\n"
            "  hello",
        ),
        (None, "pytest was not probed"),
    ],
)
def test_pytest_failures_name_the_command_and_the_lock(
    tmp_path: Path, facts: dict[str, Any] | None, expected: str
) -> None:
    m, lock = _stack(tmp_path)
    assert _gate("pytest", (m, _with_pytest(lock)), pytest=facts) == (False, expected)


def test_a_test_requirements_file_without_pytest_in_the_lock_fails(tmp_path: Path) -> None:
    text = MANIFEST.replace(
        "  vllm-musa: {path: demo/vllm-musa}\n",
        "  vllm-musa: {path: demo/vllm-musa, requirements_files: [requirements/test.txt]}\n",
    )
    assert text != MANIFEST
    m = manifest(tmp_path, text)
    assert _gate("pytest", (m, lock_for(m))) == (
        False,
        "pytest is not in the lock, but sources.vllm-musa.requirements_files lists "
        "requirements/test.txt (upstream's image installs requirements/test.txt, and its "
        "import check requires pytest); lock the stack again",
    )
