"""The probe that runs inside a built image and prints the facts the gates judge, as JSON.

Standalone: standard library only, any CPython >= 3.8; ``images/engine/`` runs it as
``python3.X -c <this file> [IMPORT...] [--find-spec=MODULE...] [--library=SONAME...]
[--marker=DIST=PATH...] [--third-party=RECORD]``.
It judges nothing: ``images/builder/gates.py`` does, purely.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import traceback
from importlib import metadata
from pathlib import Path

SBOM = "/opt/vllm-musa/sbom.json"
COMPONENTS = "/opt/vllm-musa/components.json"
PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")
FIND_SPEC = "--find-spec="
LIBRARY = "--library="
MARKER = "--marker="  # DIST=PATH: a file a patch of the series adds
THIRD_PARTY = "--third-party="  # the record of the driven trees (images/builder/third_party.py)
BASE_RECORD = "--base-record="  # what the base image had (installed.py base)
# The C++ extension the cxx-extension gate builds: one .cpp with Python.h and a libstdc++
# header, compiled and linked with the image's own compiler, then imported and called.
CXX_MODULE = "_vllm_musa_cxx_probe"
CXX_FLAGS = ("-std=c++17", "-fPIC", "-O2")  # the vllm-musa JIT's: -std=c++17 -fPIC -O3
CXX_OUTPUT_LINES = 40  # of a failed step's output, kept in the facts
CXX_SOURCE = """\
#include <Python.h>
#include <string>

static PyObject *join(PyObject *self, PyObject *args) {
    const char *left, *right;
    if (!PyArg_ParseTuple(args, "ss", &left, &right)) return NULL;
    std::string joined = std::string(left) + "-" + right;
    return PyUnicode_FromStringAndSize(joined.data(), (Py_ssize_t)joined.size());
}

static PyMethodDef methods[] = {
    {"join", join, METH_VARARGS, "left-right, joined by std::string"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "@MODULE@", NULL, -1, methods};

PyMODINIT_FUNC PyInit_@MODULE@(void) { return PyModule_Create(&module); }
""".replace("@MODULE@", CXX_MODULE)
CXX_CALL = "join('vllm', 'musa')"
# run in the directory of the built library (PYTHONSAFEPATH would drop it from sys.path)
CXX_IMPORT = f"import sys; sys.path.insert(0, '.'); import {CXX_MODULE} as m; print(m.{CXX_CALL})"


def _run(argv: list[str], cwd: str | None = None) -> dict[str, object]:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, check=False, timeout=300, cwd=cwd
        )
    except OSError as exc:
        return {"returncode": None, "output": str(exc)}
    return {"returncode": proc.returncode, "output": (proc.stdout + proc.stderr).strip()}


def _venv_packages() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return []
    res = _run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n", "python3*-venv"])
    rows = [line.split() for line in str(res["output"]).splitlines()]
    return [row[0] for row in rows if len(row) >= 2 and row[1].startswith("ii")]  # installed


def _ensurepip_wheels() -> list[str]:
    stdlib = Path(sysconfig.get_path("stdlib"))
    found = [str(p) for p in (stdlib / "ensurepip" / "_bundled").glob("*.whl")]
    found += [str(p) for p in Path("/usr/share/python-wheels").glob("*.whl")]
    return sorted(found)


def _imports(modules: list[str]) -> dict[str, str]:
    out = {}
    for module in modules:
        out[module] = ""
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - a probe reports every failure as data
            out[module] = traceback.format_exc(limit=3).strip()
    return out


def _locate(module: str) -> object:
    """The spec of ``module`` found without importing it or any parent package.

    ``importlib.util.find_spec("a.b")`` imports ``a``; here each level is searched in the
    parent's ``submodule_search_locations`` instead, so no package code runs.
    """
    parts = module.split(".")
    spec = importlib.util.find_spec(parts[0])
    for i in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return None
        name = ".".join(parts[: i + 1])
        spec = importlib.machinery.PathFinder.find_spec(name, spec.submodule_search_locations)
    return spec


def _find_specs(modules: list[str]) -> dict[str, dict[str, object]]:
    """Each module located, never imported: where its spec points, or why there is none."""
    out: dict[str, dict[str, object]] = {}
    for module in modules:
        try:
            spec = _locate(module)
        except BaseException as exc:  # noqa: BLE001 - a probe reports every failure as data
            out[module] = {"found": False, "detail": f"{type(exc).__name__}: {exc}"}
            continue
        if spec is None:
            out[module] = {"found": False, "detail": "no spec"}
        else:
            where = getattr(spec, "origin", None) or ", ".join(
                getattr(spec, "submodule_search_locations", None) or []
            )
            out[module] = {"found": True, "detail": str(where or "namespace package")}
    return out


def _ld_cache() -> dict[str, str]:
    """soname -> path from ``ldconfig -p`` (the dynamic linker's cache), this machine's ABI."""
    ldconfig = shutil.which("ldconfig") or next(
        (p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if Path(p).exists()), None
    )
    if ldconfig is None:
        return {}
    res = _run([ldconfig, "-p"])
    found: dict[str, str] = {}
    for line in str(res["output"]).splitlines()[1:]:
        name, sep, path = line.strip().partition(" => ")
        if not sep:
            continue
        soname, _, abi = name.partition(" (")
        if ("64" in abi) == (sys.maxsize > 2**32):  # x86-64, AArch64, 64bit: this ABI
            found.setdefault(soname.strip(), path.strip())
    return found


def _libraries(sonames: list[str]) -> dict[str, str]:
    """Each soname -> where the dynamic linker finds it (``ldconfig -p``, then LD_LIBRARY_PATH);
    "" when it does not. Nothing is loaded, so no GPU library runs."""
    if not sonames:
        return {}
    cache = _ld_cache()
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    out = {}
    for soname in sonames:
        path = next((str(Path(d, soname)) for d in dirs if Path(d, soname).exists()), "")
        if not path and soname in cache and Path(cache[soname]).exists():
            path = cache[soname]
        out[soname] = path
    return out


def _entry_points() -> list[dict[str, str]]:
    out = [
        {"group": ep.group, "name": ep.name, "value": ep.value, "dist": dist.metadata["Name"]}
        for dist in metadata.distributions()
        for ep in dist.entry_points
        if ep.group in PLUGIN_GROUPS
    ]
    return sorted(out, key=lambda e: (e["group"], e["dist"], e["name"]))


def _sbom() -> object:
    try:
        return json.loads(Path(SBOM).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


def _base_record(path: str) -> object:
    """installed.py base's list of {name, version, location}; None when the image has none."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


def _distribution_locations() -> list[list[str]]:
    """[name, version, site directory] of every distribution, the site directory being where
    its metadata lies (as installed.py base records it)."""
    out = []
    for dist in metadata.distributions():
        path = getattr(dist, "_path", None)
        location = str(Path(str(path)).parent) if path is not None else ""
        out.append([str(dist.metadata["Name"]), dist.version, location])
    return sorted(out)


def _components() -> object:
    """The marker of the optional components and, for vllm-rs, what the package it names
    holds: the binary (an executable file, as vLLM's lookup wants) and each Rust module,
    loaded as an extension module of this interpreter (the package itself is not imported)."""
    try:
        marker = json.loads(Path(COMPONENTS).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    rs = marker.get("vllm-rs") if isinstance(marker, dict) else None
    package = rs.get("package") if isinstance(rs, dict) else None
    return {"marker": marker, "vllm_rs": _rust_artifacts(str(package or "vllm"))}


def _rust_artifacts(package: str) -> dict[str, object]:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if spec is None or not spec.origin:
        return {"error": f"no package {package}"}
    directory = Path(spec.origin).parent
    binary = directory / "vllm-rs"
    modules = {}
    for path in sorted(directory.glob("_rust_*.so")):
        name = f"{package}.{path.name.split('.', 1)[0]}"
        try:
            loader = importlib.machinery.ExtensionFileLoader(name, str(path))
            module_spec = importlib.util.spec_from_file_location(name, path, loader=loader)
            assert module_spec is not None
            loader.exec_module(importlib.util.module_from_spec(module_spec))
            modules[path.name] = ""
        except Exception as exc:  # noqa: BLE001  reported by the gate
            modules[path.name] = f"{type(exc).__name__}: {exc}"
    return {
        "package": str(directory),
        "binary": str(binary) if binary.is_file() and os.access(binary, os.X_OK) else "",
        "modules": modules,
    }


_WHOAMI = (
    "import json, os, sys; "
    "print(json.dumps({'version': list(sys.version_info[:3]), "
    "'realpath': os.path.realpath(sys.executable)}))"
)


def _python_commands() -> dict[str, object]:
    """What ``python3`` and ``python`` on PATH run: their version and real executable."""
    out: dict[str, object] = {}
    for command in ("python3", "python"):
        found = shutil.which(command)
        if found is None:
            out[command] = {"error": "not on PATH"}
            continue
        res = _run([found, "-c", _WHOAMI])
        lines = [x for x in str(res["output"]).splitlines() if x.startswith("{")]
        try:
            out[command] = json.loads(lines[-1])
        except (ValueError, IndexError):
            out[command] = {"error": f"{found} exited {res['returncode']}: {res['output']}"}
    return out


def _cxx_extension(include: str, python: str) -> dict[str, object]:
    """Build a C++ Python extension as the vllm-musa JIT builds its kernels while serving: the
    compiler is ``$CXX`` or ``c++`` and c++ links (MooreThreads/vllm-musa@69f6fa07
    vllm_musa/jit_kernel/csrc/jit.py); then ``python`` imports it and calls it. ``stage``
    names the first step that failed ("" when none did), with its command and first lines."""
    compiler = os.environ.get("CXX") or "c++"
    out: dict[str, object] = {
        "compiler": compiler,
        "path": shutil.which(compiler) or "",
        "version": "",
        "ninja": shutil.which("ninja") or "",
        "include": include,
        "module": CXX_MODULE,
        "call": CXX_CALL,
        "stage": "",
        "command": [],
        "output": [],
        "result": "",
    }
    if not out["path"]:
        out["stage"] = "compiler"
        return out
    version = _run([str(out["path"]), "--version"])
    out["version"] = (str(version["output"]).splitlines() or [""])[0]
    if not (Path(include) / "Python.h").is_file():
        out["stage"] = "python-h"
        return out
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    library = CXX_MODULE + suffix
    steps = (
        ("compile", [compiler, *CXX_FLAGS, f"-I{include}", "-c", "probe.cpp", "-o", "probe.o"]),
        ("link", [compiler, "-shared", "probe.o", "-o", library]),
        ("import", [python, "-c", CXX_IMPORT]),
    )
    with tempfile.TemporaryDirectory(prefix="vllm-musa-cxx-") as tmp:
        (Path(tmp) / "probe.cpp").write_text(CXX_SOURCE, encoding="utf-8")
        for stage, argv in steps:
            res = _run(argv, cwd=tmp)
            lines = str(res["output"]).splitlines()
            if res["returncode"] != 0:
                out.update(stage=stage, command=argv, output=lines[:CXX_OUTPUT_LINES])
                return out
        out["result"] = lines[-1] if lines else ""
    return out


def _package_dir(package: str) -> Path | None:
    """Where the top-level ``package`` is found (no code runs), or None."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _owners(package: str) -> list[str]:
    """Every installed distribution that ships files of ``package`` or names it top-level."""
    out = set()
    for dist in metadata.distributions():
        top = (dist.read_text("top_level.txt") or "").split()
        files = dist.files or []
        if package in top or any(f.parts and f.parts[0] == package for f in files):
            out.add(dist.metadata["Name"])
    return sorted(out)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _third_party(record_path: str) -> object:
    """Each driven tree of the record against the image: who owns its packages, where they
    are found, other copies on sys.path, and its files against the staged (pre-series) ones."""
    try:
        record = json.loads(Path(record_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"trees": []}
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    out = []
    for tree in record.get("trees", []):
        root = Path(tree["dir"])
        files = tree.get("files", {})
        exempt = set(tree.get("exempt", [])) & set(files)  # staged files the series changes
        changed, missing = [], []
        for rel, digest in sorted(files.items()):
            if rel in exempt:
                continue
            path = root / rel
            if not path.is_file():
                missing.append(rel)
            elif _sha256(path) != digest:
                changed.append(rel)
        packages = {}
        for pkg in tree.get("packages", []):
            found = _package_dir(pkg)
            copies = sorted(
                str(Path(entry) / pkg)
                for entry in sys.path
                if entry
                and Path(entry, pkg).is_dir()
                and Path(entry, pkg).resolve() != (root / pkg).resolve()
            )
            packages[pkg] = {
                "found": str(found) if found else "",
                "owners": _owners(pkg),
                "copies": copies,
            }
        out.append(
            {
                "source": tree.get("source"),
                "dir": str(root),
                "packages": packages,
                "checked": len(files) - len(exempt),
                "exempt": len(exempt),
                "series": tree.get("series", []),
                "changed": changed,
                "missing": missing,
            }
        )
    if "overlays" not in record:
        return {"trees": out}
    return {"trees": out, "overlays": [_overlay(o) for o in record["overlays"]]}


def _overlay(entry: dict[str, object]) -> dict[str, object]:
    """An overlaid provider of the record: its marker file under the installed package (found
    without importing it), and what the file holds (None when it is not there)."""
    package_dir = _package_dir(str(entry.get("package", "")))
    marker = str(entry.get("marker", ""))
    if package_dir is None or not marker:
        where = f"{entry.get('package')}/{marker} (the package is not installed)"
        return {**entry, "path": where, "found": False, "content": None}
    path = package_dir / marker
    out = {**entry, "path": str(path), "found": path.is_file(), "content": None}
    if path.is_file():
        try:
            out["content"] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            out["error"] = str(exc)
    return out


def _markers(pairs: list[str]) -> dict[str, dict[str, object]]:
    """Each DIST=PATH: the file PATH, under where its top-level package is found."""
    out: dict[str, dict[str, object]] = {}
    for pair in pairs:
        dist, _, rel = pair.partition("=")
        package_dir = _package_dir(rel.split("/", 1)[0])
        path = package_dir.parent / rel if package_dir else None
        out[dist] = {
            "path": str(path) if path else rel,
            "found": bool(path and path.is_file()),
        }
    return out


def main(args: list[str]) -> int:
    modules = [a for a in args if not a.startswith("--")]
    find_spec = [a[len(FIND_SPEC) :] for a in args if a.startswith(FIND_SPEC)]
    libraries = [a[len(LIBRARY) :] for a in args if a.startswith(LIBRARY)]
    markers = [a[len(MARKER) :] for a in args if a.startswith(MARKER)]
    record = next((a[len(THIRD_PARTY) :] for a in args if a.startswith(THIRD_PARTY)), "")
    base_record = next((a[len(BASE_RECORD) :] for a in args if a.startswith(BASE_RECORD)), "")
    include = sysconfig.get_path("include")
    facts = {
        "python": list(sys.version_info[:3]),
        "executable": sys.executable,
        "prefix": sys.prefix,
        "base_prefix": sys.base_prefix,
        "uv": [p for p in (shutil.which("uv"), shutil.which("uvx")) if p],
        "venv_packages": _venv_packages(),
        "ensurepip_wheels": _ensurepip_wheels(),
        "pip_check": _run([sys.executable, "-m", "pip", "check"]),
        "distributions": sorted(
            [dist.metadata["Name"], dist.version] for dist in metadata.distributions()
        ),
        "distribution_locations": _distribution_locations(),
        "imports": _imports(modules),
        "find_spec": _find_specs(find_spec),
        "libraries": _libraries(libraries),
        "entry_points": _entry_points(),
        "sbom": _sbom(),
        "components": _components(),
        "executable_realpath": os.path.realpath(sys.executable),
        "python_commands": _python_commands(),
        "python_h": {"include": include, "present": Path(include, "Python.h").is_file()},
        "cxx_extension": _cxx_extension(include, sys.executable),
        "markers": _markers(markers),
        "third_party": _third_party(record) if record else {"trees": []},
        "base_distributions": _base_record(base_record) if base_record else [],
    }
    sys.stdout.write(json.dumps(facts, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
