"""The probe that runs inside a built image and prints the facts the gates judge, as JSON.

Standalone: standard library only, any CPython >= 3.8; ``images/build/engine.py`` runs it as
``python3.X -c <this file> IMPORT...``. It judges nothing: ``images/build/gates.py`` does, purely.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import traceback
from importlib import metadata
from pathlib import Path

SBOM = "/opt/vllm-musa/sbom.json"
COMPONENTS = "/opt/vllm-musa/components.json"
PLUGIN_GROUP = "vllm.platform_plugins"


def _run(argv: list[str]) -> dict[str, object]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    except OSError as exc:
        return {"returncode": None, "output": str(exc)}
    return {"returncode": proc.returncode, "output": (proc.stdout + proc.stderr).strip()}


def _venv_packages() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return []
    res = _run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n", "python3*-venv"])
    out = []
    for line in str(res["output"]).splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("ii"):
            out.append(parts[0])
    return out


def _ensurepip_wheels() -> list[str]:
    stdlib = Path(sysconfig.get_path("stdlib"))
    found = [str(p) for p in (stdlib / "ensurepip" / "_bundled").glob("*.whl")]
    found += [str(p) for p in Path("/usr/share/python-wheels").glob("*.whl")]
    return sorted(found)


def _imports(modules: list[str]) -> dict[str, str]:
    out = {}
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - a probe reports every failure as data
            out[module] = traceback.format_exc(limit=3).strip()
        else:
            out[module] = ""
    return out


def _entry_points() -> list[dict[str, str]]:
    out = []
    for dist in metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == PLUGIN_GROUP:
                out.append({"name": ep.name, "value": ep.value, "dist": dist.metadata["Name"]})
    return sorted(out, key=lambda e: (e["dist"], e["name"]))


def _sbom() -> object:
    try:
        with Path(SBOM).open(encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}


def _components() -> object:
    """The marker of the optional components, and where each built binary is on PATH."""
    try:
        with Path(COMPONENTS).open(encoding="utf-8") as fh:
            marker = json.load(fh)
    except (OSError, ValueError) as exc:
        return {"error": str(exc)}
    found = {}
    if isinstance(marker, dict):
        for info in marker.values():
            if isinstance(info, dict):
                for binary in info.get("binaries", []):
                    found[binary] = shutil.which(binary) or ""
    found["vllm-rs"] = shutil.which("vllm-rs") or ""
    return {"marker": marker, "binaries": found}


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


def _python_h() -> dict[str, object]:
    include = sysconfig.get_path("include")
    return {"include": include, "present": (Path(include) / "Python.h").is_file()}


def main(modules: list[str]) -> int:
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
        "imports": _imports(modules),
        "entry_points": _entry_points(),
        "sbom": _sbom(),
        "components": _components(),
        "executable_realpath": os.path.realpath(sys.executable),
        "python_commands": _python_commands(),
        "python_h": _python_h(),
    }
    sys.stdout.write(json.dumps(facts, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
