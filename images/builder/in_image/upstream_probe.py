"""The second probe of a built image: what upstream's own image build runs or checks, as facts.

Standalone: standard library only, any CPython >= 3.8; ``images/engine/`` runs it as
``python3.X -c <this file> --musa-arch=mp_XY [--provider-function=MODULE:NAME...]``, after
``gate_probe.py``. It prints one JSON line and judges nothing: ``images/builder/
upstream_gates.py`` does, purely.

- ``musa_jit``: the vllm-musa JIT's build of a ``.mu`` kernel, as its jit.py does it
  (MooreThreads/vllm-musa@69f6fa0792ecb56dc567f8d8b8764c50b6175fd0 :
  vllm_musa/jit_kernel/csrc/jit.py): a build.ninja with its rules, run by ninja; ``mcc`` is
  ``$VLLM_MUSA_MCC``, else ``$MUSA_HOME/bin/mcc``; the output is read as ELF (never loaded: no
  GPU). libmusa is the driver's library, which the host provides at run time: without one in
  ``$MUSA_HOME/lib`` (or ``lib/stubs``) the link takes a stub made here.
- ``provider_functions``: each MODULE:NAME located without importing anything (GPU-bound) and
  its source parsed with ``ast``: what binds NAME at the top level of MODULE.
- ``pytest``: ``python3.X -m pytest --version``, in an empty directory.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

MUSA_ARCH = "--musa-arch="
PROVIDER_FUNCTION = "--provider-function="  # MODULE:NAME
DEFAULT_MUSA_HOME = "/usr/local/musa"
OUTPUT_LINES = 40  # of a failed step's output, the last ones, kept in the facts
JIT_NAME = "vllm_musa_jit_probe"
JIT_SOURCE = JIT_NAME + ".mu"
JIT_OBJECT = JIT_NAME + ".musa.o"  # jit.py's _object_path for a .mu source
JIT_LIBRARY = JIT_NAME + ".so"
STUBS = "stubs"  # the generated libmusa.so, under the build directory
STUB_SONAME = "libmusa.so.1"
# a __global__ kernel and a host function that calls the MUSA runtime: mcc compiles the
# kernel for the target arch and the host code, and the library then needs libmusart
JIT_KERNEL = """\
#include <musa_runtime.h>

__global__ void vllm_musa_jit_probe_fill(float *out, float value, int n) {
    for (int i = 0; i < n; ++i) {
        out[i] = value;
    }
}

extern "C" int vllm_musa_jit_probe_devices(void) {
    int count = 0;
    return musaGetDeviceCount(&count) == musaSuccess ? count : -1;
}
"""
ELF_TYPES = {1: "relocatable", 2: "executable", 3: "shared object", 4: "core"}


def _run(argv: list[str], cwd: str | None = None) -> dict[str, object]:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=300, cwd=cwd
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"returncode": None, "output": str(exc)}
    return {"returncode": proc.returncode, "output": (proc.stdout + proc.stderr).strip()}


def _musa_home() -> str:
    """tvm-ffi's _find_musa_home: $MUSA_HOME, $MUSA_PATH, the directory above ``mcc`` on
    PATH, else /usr/local/musa."""
    home = os.environ.get("MUSA_HOME") or os.environ.get("MUSA_PATH")
    if home:
        return home
    mcc = shutil.which("mcc")
    return str(Path(mcc).parent.parent) if mcc else DEFAULT_MUSA_HOME


def _normalize_arch(token: str) -> str:
    """jit.py's _normalize_musa_arch: ``3.1``, ``31``, ``mp_31`` -> ``mp_31``."""
    arch = token.strip().lower().replace("mp", "").replace("_", "").replace(".", "")
    if not arch.isdigit():
        raise ValueError(f"Invalid MUSA arch value: {arch!r}")
    return f"mp_{arch}"


def _arch_env() -> dict[str, object]:
    """What the JIT's arch list variable gives in this environment (jit.py's
    _musa_arch_flags): the variable, its value and the archs, or the error it raises."""
    for variable in ("VLLM_MUSA_ARCH_LIST", "MATE_MUSA_ARCH_LIST"):
        value = os.environ.get(variable)
        if value:
            try:
                arches = [_normalize_arch(token) for token in value.split()]
                return {"variable": variable, "value": value, "arches": arches}
            except ValueError as exc:
                return {"variable": variable, "value": value, "error": str(exc)}
    return {}


def _tvm_ffi() -> dict[str, str]:
    """apache-tvm-ffi's headers and library, found from its package directory (tvm_ffi's
    libinfo layout: include/, include/dlpack/, lib/libtvm_ffi.so) without importing it."""
    out = {"distribution": "", "package": "", "include": "", "dlpack": "", "lib": ""}
    try:
        dist = metadata.distribution("apache-tvm-ffi")
    except metadata.PackageNotFoundError:
        return out
    out["distribution"] = f"{dist.metadata['Name']} {dist.version}"
    try:
        spec = importlib.util.find_spec("tvm_ffi")
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        return out
    package = Path(locations[0])
    out["package"] = str(package)
    include = package / "include"
    if include.is_dir():
        out["include"] = str(include)
    if (include / "dlpack").is_dir():
        out["dlpack"] = str(include)
    libraries = [package / "lib" / "libtvm_ffi.so"]
    libraries += [
        Path(str(dist.locate_file(f))) for f in dist.files or [] if f.name == "libtvm_ffi.so"
    ]
    out["lib"] = next((str(p) for p in libraries if p.is_file()), "")
    return out


def _find_mcc(home: str) -> dict[str, str]:
    """jit.py's _mcc: $VLLM_MUSA_MCC, else $MUSA_HOME/bin/mcc; ``path`` is "" when it is not
    an executable file."""
    chosen = os.environ.get("VLLM_MUSA_MCC")
    if chosen:
        return {"mcc": chosen, "from": "VLLM_MUSA_MCC", "path": shutil.which(chosen) or ""}
    default = str(Path(home, "bin", "mcc"))
    return {"mcc": default, "from": "$MUSA_HOME/bin/mcc", "path": shutil.which(default) or ""}


def _libmusa(home: str) -> tuple[str, list[str]]:
    """Where ``-lmusa`` is found (the path), and the -L directory to add for it; "" when
    neither $MUSA_HOME/lib nor lib/stubs has libmusa.so."""
    lib = Path(home, "lib")
    if (lib / "libmusa.so").is_file():
        return str(lib / "libmusa.so"), []
    if (lib / "stubs" / "libmusa.so").is_file():
        return str(lib / "stubs" / "libmusa.so"), [f"-L{lib / 'stubs'}"]
    return "", [f"-L{STUBS}"]


def _ninja_file(mcc: str, cxx: str, musa_cflags: list[str], ldflags: list[str]) -> str:
    """jit.py's build.ninja for one .mu source: its variables and its compile_musa and link
    rules (paths relative to the build directory, each word quoted for the shell)."""

    def words(argv: list[str]) -> str:
        return " ".join(shlex.quote(a) for a in argv).replace("$", "$$")

    return f"""\
ninja_required_version = 1.3
cxx = {words([cxx])}
mcc = {words([mcc])}
musa_cflags = {words(musa_cflags)}
ldflags = {words(ldflags)}

rule compile_musa
  depfile = $out.d
  deps = gcc
  command = $mcc -MD -MF $out.d $musa_cflags -c $in -o $out

rule link
  command = $cxx $in $ldflags -o $out

build {JIT_OBJECT}: compile_musa {JIT_SOURCE}
build {JIT_LIBRARY}: link {JIT_OBJECT}
default {JIT_LIBRARY}
"""


def _musa_jit(arch: str) -> dict[str, object]:
    """Compile and link the kernel as the JIT does, for ``arch``; ``stage`` names the first
    step that failed ("" when none did: then ``elf`` describes the library), with its
    command and the last lines of its output."""
    home = _musa_home()
    found = _find_mcc(home)
    out: dict[str, object] = {
        "mcc": found["mcc"],
        "mcc_from": found["from"],
        "mcc_path": found["path"],
        "musa_home": home,
        "source": JIT_SOURCE,
        "library": JIT_LIBRARY,
        "arch": arch,
        "arch_env": _arch_env(),
        "tvm_ffi": {},
        "libmusa": "",
        "ninja": "",
        "stage": "",
        "command": [],
        "output": [],
        "elf": {},
    }
    if not found["path"]:
        return out
    out["tvm_ffi"] = tvm = _tvm_ffi()
    ninja = shutil.which("ninja")
    if ninja is None:
        out["stage"] = "ninja"
        return out
    out["ninja"] = ninja
    cxx = os.environ.get("CXX") or "c++"
    includes = [f"-I{tvm[k]}" for k in ("include", "dlpack") if tvm[k]]
    musa_cflags = ["-std=c++17", "-fPIC", "-O3", "-ffast-math", f"--offload-arch={arch}"]
    musa_cflags += [*includes, f"-I{Path(home, 'include')}"]
    libmusa, stub_dirs = _libmusa(home)
    tvm_flags = [f"-L{Path(tvm['lib']).parent}", "-ltvm_ffi"] if tvm["lib"] else []
    ldflags = ["-shared", *tvm_flags, f"-L{Path(home, 'lib')}", *stub_dirs, "-lmusa", "-lmusart"]
    out["libmusa"] = libmusa or "stub"
    compile_cmd = [found["mcc"], "-MD", "-MF", f"{JIT_OBJECT}.d", *musa_cflags]
    compile_cmd += ["-c", JIT_SOURCE, "-o", JIT_OBJECT]
    with tempfile.TemporaryDirectory(prefix="vllm-musa-jit-") as tmp:
        Path(tmp, JIT_SOURCE).write_text(JIT_KERNEL, encoding="utf-8")
        text = _ninja_file(found["mcc"], cxx, musa_cflags, ldflags)
        Path(tmp, "build.ninja").write_text(text, encoding="utf-8")
        steps = [
            ("compile", compile_cmd, [ninja, "-f", "build.ninja", JIT_OBJECT]),
            ("link", [cxx, JIT_OBJECT, *ldflags, "-o", JIT_LIBRARY], [ninja, "-f", "build.ninja"]),
        ]
        if not libmusa:
            Path(tmp, STUBS).mkdir()
            Path(tmp, STUBS, "musa_stub.c").write_text("", encoding="utf-8")
            cc = os.environ.get("CC") or "cc"
            stub = [cc, "-shared", "-fPIC", f"-Wl,-soname,{STUB_SONAME}", f"{STUBS}/musa_stub.c"]
            steps.insert(0, ("stub", [*stub, "-o", f"{STUBS}/libmusa.so"], []))
        for stage, command, runner in steps:
            res = _run(runner or command, cwd=tmp)
            if res["returncode"] != 0:
                lines = str(res["output"]).splitlines()[-OUTPUT_LINES:]
                out.update(stage=stage, command=command, output=lines)
                return out
        out["elf"] = _elf(Path(tmp, JIT_LIBRARY))
    return out


def _elf(path: Path) -> dict[str, object]:
    """The ELF file type, DT_SONAME and DT_NEEDED of ``path``, from its section headers."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return {"error": str(exc)}
    if data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return {"error": "not an ELF file"}
    wide, end = data[4] == 2, "<" if data[5] == 1 else ">"
    try:
        (kind,) = struct.unpack_from(end + "H", data, 16)
        if wide:
            (shoff,) = struct.unpack_from(end + "Q", data, 0x28)
            size, count = struct.unpack_from(end + "HH", data, 0x3A)
            header, entry = end + "IIQQQQIIQQ", end + "qQ"
        else:
            (shoff,) = struct.unpack_from(end + "I", data, 0x20)
            size, count = struct.unpack_from(end + "HH", data, 0x2E)
            header, entry = end + "IIIIIIIIII", end + "iI"
        sections = [struct.unpack_from(header, data, shoff + i * size) for i in range(count)]
        needed, soname = [], ""
        for section in (s for s in sections if s[1] == 6):  # SHT_DYNAMIC
            strings = sections[section[6]][4]  # sh_link: its string table's offset
            for at in range(section[4], section[4] + section[5], struct.calcsize(entry)):
                tag, value = struct.unpack_from(entry, data, at)
                if tag == 0:  # DT_NULL
                    break
                if tag in (1, 14):  # DT_NEEDED, DT_SONAME
                    start = strings + value
                    name = data[start : data.index(b"\0", start)].decode("utf-8", "replace")
                    if tag == 1:
                        needed.append(name)
                    else:
                        soname = name
    except (struct.error, IndexError, ValueError) as exc:
        return {"error": f"unreadable ELF: {exc}"}
    return {"type": ELF_TYPES.get(kind, f"type {kind}"), "soname": soname, "needed": needed}


def _locate(module: str) -> object:
    """The spec of ``module`` found without importing it or any parent package (each level
    searched in the parent's ``submodule_search_locations``, as gate_probe.py does)."""
    parts = module.split(".")
    spec = importlib.util.find_spec(parts[0])
    for i in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None
        name = ".".join(parts[: i + 1])
        spec = importlib.machinery.PathFinder.find_spec(name, spec.submodule_search_locations)
    return spec


def _binding(statements: list[ast.stmt], name: str) -> str:
    """What binds ``name`` at the top level of a module (inside top-level if/try/with blocks
    too): "def", "async def", "class", "assignment", "import from X"; "" when nothing does."""
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                kind = {ast.FunctionDef: "def", ast.AsyncFunctionDef: "async def"}
                return kind.get(type(node), "class")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            if name in names and (isinstance(node, ast.Assign) or node.value is not None):
                return "assignment"
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                if bound == name and alias.name != "*":
                    if isinstance(node, ast.ImportFrom):
                        return f"import from {'.' * node.level}{node.module or ''}"
                    return f"import {alias.name}"
        nested: list[ast.stmt] = []
        if isinstance(node, ast.If):
            nested = [*node.body, *node.orelse]
        elif isinstance(node, ast.With):
            nested = list(node.body)
        elif isinstance(node, ast.Try):
            nested = [*node.body, *(s for h in node.handlers for s in h.body), *node.orelse]
            nested += node.finalbody
        found = _binding(nested, name) if nested else ""
        if found:
            return found
    return ""


def _provider_function(module: str, name: str) -> dict[str, str]:
    """Where ``module`` is (or would be) and what binds ``name`` in it."""
    out = {"module": module, "function": name, "path": "", "binding": "", "error": ""}
    try:
        spec = _locate(module)
    except BaseException as exc:  # noqa: BLE001 - a probe reports every failure as data
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    if spec is None:
        parent, _, leaf = module.rpartition(".")
        try:
            parent_spec = _locate(parent) if parent else None
        except BaseException:  # noqa: BLE001 - the parent's own failure: reported as absent
            parent_spec = None
        locations = getattr(parent_spec, "submodule_search_locations", None) or []
        if locations:
            out["path"] = str(Path(next(iter(locations)), leaf + ".py"))
            out["error"] = "no such module"
        else:
            out["error"] = f"no package {parent or module}"
        return out
    origin = str(getattr(spec, "origin", None) or "")
    out["path"] = origin
    if not origin.endswith(".py"):
        out["error"] = f"not a Python source file ({origin or 'a namespace package'})"
        return out
    try:
        tree = ast.parse(Path(origin).read_bytes(), filename=origin)
    except (OSError, SyntaxError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    out["binding"] = _binding(tree.body, name)
    return out


def _pytest() -> dict[str, object]:
    """``python3.X -m pytest --version`` in an empty directory (no conftest, no ini file)."""
    with tempfile.TemporaryDirectory(prefix="vllm-musa-pytest-") as tmp:
        return _run([sys.executable, "-m", "pytest", "--version"], cwd=tmp)


def main(args: list[str]) -> int:
    arch = next((a[len(MUSA_ARCH) :] for a in args if a.startswith(MUSA_ARCH)), "mp_31")
    pairs = [a[len(PROVIDER_FUNCTION) :] for a in args if a.startswith(PROVIDER_FUNCTION)]
    facts = {
        "musa_jit": _musa_jit(arch),
        "provider_functions": [_provider_function(*p.split(":", 1)) for p in pairs],
        "pytest": _pytest(),
    }
    sys.stdout.write(json.dumps(facts, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
