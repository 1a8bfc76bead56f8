"""Gates that repeat in the built image what upstream's own image build runs or checks, judged
purely from the facts of ``in_image/upstream_probe.py``:

- ``musa-jit``: the vllm-musa JIT's build of a ``.mu`` kernel (vllm_musa/jit_kernel/csrc/jit.py),
  compiled by the image's mcc for ``musa.gpu_arch`` and linked through ninja, without a GPU;
- the FlashInfer provider's functions, which upstream's image imports and checks are callable,
  located without importing (the ``flashinfer-provider`` gate);
- ``pytest``: upstream's image installs requirements/test.txt and its import check requires
  pytest; the image's ``python3.X -m pytest`` runs at the locked version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.utils import canonicalize_name

from images.builder.installed_gate import same_version
from manifest import Manifest
from resolver.lockfile import Lock

UPSTREAM_PROBE = Path(__file__).with_name("in_image") / "upstream_probe.py"
# upstream's JIT compiles for mp_31 when neither the arch variables nor a device say otherwise
DEFAULT_JIT_ARCH = "mp_31"
SHOWN_LINES = 10  # of a failed step's output (the last ones here, the first in cxx-extension)
NO_MCC = "no mcc in the image (VLLM_MUSA_MCC, $MUSA_HOME/bin/mcc): not exercised"
NINJA_MISSING = (
    "ninja missing: ninja is not on PATH; install ninja-build (the vllm-musa JIT builds its "
    "kernels with ninja while serving)"
)
# what upstream's image imports from the overlaid FlashInfer provider and checks is callable
PROVIDER_FUNCTIONS = (
    ("flashinfer.mamba.ssd_combined", "ssd_combined_fwd_varlen"),
    ("flashinfer.mamba.selective_state_update", "selective_state_update"),
)
TEST_REQUIREMENTS = "test.txt"  # upstream's requirements/test.txt, which brings pytest
_PYTEST_VERSION = re.compile(r"^(?:pytest |This is pytest version )([^\s,]+)", re.MULTILINE)


def jit_arch(manifest: Manifest) -> str:
    """The arch the musa-jit gate compiles for: the stack's ``musa.gpu_arch``."""
    return manifest.musa.gpu_arch if manifest.musa else DEFAULT_JIT_ARCH


def upstream_probe_args(manifest: Manifest, *, overlay: bool) -> list[str]:
    """The arguments of ``upstream_probe.py``: the JIT's arch, and with a FlashInfer overlay
    the provider's functions to locate."""
    functions = [f"--provider-function={m}:{f}" for m, f in PROVIDER_FUNCTIONS] if overlay else []
    return [f"--musa-arch={jit_arch(manifest)}", *functions]


def _last_lines(output: Sequence[Any]) -> str:
    return "".join(f"\n  {line}" for line in [str(x) for x in output][-SHOWN_LINES:])


def musa_jit_gate(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    """musa-jit: where the image has an mcc, the JIT's build of a kernel through ninja gives a
    shared object that needs libmusart; without one it passes, unless ``sdk.commands`` lists
    mcc."""
    info = facts.get("musa_jit")
    if not isinstance(info, Mapping):
        return ["the MUSA JIT build was not probed"], ""
    home = str(info.get("musa_home"))
    mcc, chosen = str(info.get("mcc")), info.get("mcc_from")
    if not info.get("mcc_path"):
        if chosen == "VLLM_MUSA_MCC":
            return [
                f"mcc missing: VLLM_MUSA_MCC is {mcc!r}, which is not an executable file; the "
                "vllm-musa JIT runs it for every .mu kernel (unset it to use $MUSA_HOME/bin/mcc, "
                "or point it at the SDK's mcc)"
            ], ""
        if manifest.sdk is not None and "mcc" in manifest.sdk.commands:
            return [
                f"mcc missing: VLLM_MUSA_MCC is unset and {mcc} is not there ($MUSA_HOME is "
                f"{home}), but sdk.commands lists mcc: the vllm-musa JIT compiles its .mu "
                "kernels with $MUSA_HOME/bin/mcc while serving; install the SDK's compiler "
                "there, or set musa.home to the SDK's directory"
            ], ""
        return [], NO_MCC
    problems = _arch_problems(info, manifest)
    tvm = info.get("tvm_ffi") or {}
    problems += _tvm_problems(tvm)
    stage, library = str(info.get("stage") or ""), str(info.get("library"))
    command = " ".join(str(word) for word in info.get("command") or [])
    said = _last_lines(info.get("output") or [])
    if stage == "ninja":
        problems.append(NINJA_MISSING)
    elif stage == "stub":
        problems.append(
            f"stub failed: no libmusa.so in {home}/lib or {home}/lib/stubs, and the stub the "
            f"gate links against instead could not be built: {command}{said}"
        )
    elif stage:
        problems.append(f"{stage} failed: {command}{said}")
    else:
        problems += _output_problems(info.get("elf") or {}, library, home)
    return problems, "\n".join(_jit_ok(info, tvm))


def _arch_problems(info: Mapping[str, Any], manifest: Manifest) -> list[str]:
    """The image's arch list variable must give the arch the gate compiles for."""
    env = info.get("arch_env") or {}
    if not env:
        return []
    shown = f"{env.get('variable')}={env.get('value')} in the image"
    if env.get("error"):
        return [f"{shown} is not a MUSA arch list: the JIT raises ValueError: {env['error']}"]
    arches = [str(a) for a in env.get("arches") or []]
    want = jit_arch(manifest)
    if arches == [want]:
        return []
    where = "musa.gpu_arch" if manifest.musa else "the JIT's default"
    return [f"{shown} makes the JIT compile for {', '.join(arches)}, but {where} is {want}"]


def _tvm_problems(tvm: Mapping[str, Any]) -> list[str]:
    """apache-tvm-ffi installed: the JIT compiles against its headers and links its library."""
    if not tvm.get("distribution"):
        return []
    parts = {"include": "include/", "dlpack": "include/dlpack/", "lib": "lib/libtvm_ffi.so"}
    missing = [what for key, what in parts.items() if not tvm.get(key)]
    if not missing:
        return []
    return [
        f"{tvm['distribution']} is installed, but its tvm_ffi package "
        f"({tvm.get('package') or 'not found'}) has no {', '.join(missing)}: the vllm-musa JIT "
        "compiles against tvm_ffi's include/ and include/dlpack/ and links libtvm_ffi.so"
    ]


def _output_problems(elf: Mapping[str, Any], library: str, home: str) -> list[str]:
    if elf.get("error"):
        return [f"the JIT's output {library} cannot be read as ELF: {elf['error']}"]
    if elf.get("type") != "shared object":
        return [f"the JIT's output {library} is an ELF {elf.get('type')}, not a shared object"]
    needed = [str(n) for n in elf.get("needed") or []]
    if any(n.startswith("libmusart.so") for n in needed):
        return []
    return [
        f"the JIT's output {library} needs {', '.join(needed) or 'no library'}, not libmusart: "
        f"its kernel's host code calls the MUSA runtime, -lmusart from {home}/lib"
    ]


def _jit_ok(info: Mapping[str, Any], tvm: Mapping[str, Any]) -> list[str]:
    home, library = info.get("musa_home"), info.get("library")
    needed = ", ".join(str(n) for n in (info.get("elf") or {}).get("needed") or [])
    lines = [
        f"{info.get('mcc')} ({info.get('mcc_from')}) compiled {info.get('source')} for "
        f"{info.get('arch')} and ninja ({info.get('ninja')}) linked it as the vllm-musa JIT "
        f"does: {library} is a shared object that needs {needed}",
    ]
    if tvm.get("distribution"):
        lines.append(
            f"tvm-ffi: {tvm['distribution']}, -I{tvm.get('include')} -L"
            f"{PurePosixPath(str(tvm.get('lib'))).parent} -ltvm_ffi"
        )
    else:
        lines.append("tvm-ffi: apache-tvm-ffi is not installed: built without it")
    if info.get("libmusa") == "stub":
        lines.append(
            f"-lmusa: no libmusa.so in {home}/lib or {home}/lib/stubs (the driver's library, "
            "which the host provides at run time): linked against a stub the gate built "
            "(soname libmusa.so.1)"
        )
    else:
        lines.append(f"-lmusa: {info.get('libmusa')}")
    return lines


def provider_function_checks(facts: Mapping[str, Any], overlay_dir: str) -> tuple[list[str], str]:
    """Each of upstream's provider functions bound at the top level of its module in the
    image, found without importing."""
    probed = {
        (str(e.get("module")), str(e.get("function"))): e
        for e in facts.get("provider_functions") or []
        if isinstance(e, Mapping)
    }
    problems: list[str] = []
    found: list[str] = []
    for module, function in PROVIDER_FUNCTIONS:
        entry = probed.get((module, function))
        if entry is None:
            problems.append(f"{module}.{function}: not probed")
            continue
        path, error = entry.get("path") or module, entry.get("error")
        imports = f"upstream's image imports {function} from {module}"
        if error == "no such module":
            problems.append(
                f"{path}: missing; {imports} (the FlashInfer provider overlaid from "
                f"{overlay_dir} lacks it)"
            )
        elif error:
            problems.append(f"{path} ({module}) cannot be read: {error}; {imports}")
        elif not entry.get("binding"):
            problems.append(
                f"{path} ({module}) has no top-level {function} (no def, class, assignment or "
                "import binds it); upstream's image imports it and checks that it is callable"
            )
        else:
            found.append(f"{module}.{function}: {entry['binding']} in {path}")
    return problems, "\n".join(found)


def _test_requirements(manifest: Manifest) -> list[str]:
    return [
        f"sources.{s.name}.requirements_files lists {f}"
        for s in manifest.sources
        for f in s.requirements_files
        if PurePosixPath(f).name == TEST_REQUIREMENTS
    ]


def pytest_gate(facts: Mapping[str, Any], manifest: Manifest, lock: Lock) -> tuple[list[str], str]:
    """pytest: with pytest in the lock, ``python3.X -m pytest --version`` says the locked
    version; without it, the gate fails only when a source's requirements list a test.txt."""
    locked = next((p for p in lock.runtime() if p.name == canonicalize_name("pytest")), None)
    if locked is None:
        listed = _test_requirements(manifest)
        if listed:
            return [
                f"pytest is not in the lock, but {'; '.join(listed)} (upstream's image installs "
                "requirements/test.txt, and its import check requires pytest); lock the stack "
                "again"
            ], ""
        return [], "pytest is not in the lock: not checked"
    command = f"python{manifest.target.python_str} -m pytest --version"
    info = facts.get("pytest")
    if not isinstance(info, Mapping):
        return ["pytest was not probed"], ""
    output = str(info.get("output") or "")
    said = _last_lines(output.splitlines())
    if info.get("returncode") != 0:
        return [
            f"{command} exited {info.get('returncode')}; the lock has pytest "
            f"{locked.version}:{said}"
        ], ""
    match = _PYTEST_VERSION.search(output)
    if match is None:
        return [f"{command} printed no version; the lock has pytest {locked.version}:{said}"], ""
    got = match.group(1)
    if not same_version(got, locked.version):
        return [f"{command} says pytest {got}, but the lock has pytest {locked.version}"], ""
    return [], f"{command}: pytest {got}, as locked"
