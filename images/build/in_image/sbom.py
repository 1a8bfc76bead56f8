"""The SBOM writer that runs inside the image (final stage), with the image's own Python.

Standalone: standard library only, any CPython >= 3.8. It lists every installed Python
distribution as a CycloneDX 1.5 component (name, full version, purl), with the sha256 of the
locked wheel (from ``requirements.txt`` of the lock) or of the source-built wheel, and for a
source-built one the source it came from. Output is sorted and stable.

    python3.X sbom.py --lock requirements.txt --built DIR --out sbom.json --source NAME=REV ...
        [--workspace INSTALLED.json]

``--workspace`` lists the distributions the driving source's ``pip install -e .`` installed
(``installed.py pack --list``): each is source-built, installed from the workspace tree.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from importlib import metadata
from pathlib import Path

_REQ_RE = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")
_HASH_RE = re.compile(r"--hash=sha256:([0-9a-f]{64})")


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _locked(path: Path) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
    current = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _REQ_RE.match(line)
        if m:
            current = _canon(m.group(1))
            out[current] = (m.group(2), "")
        h = _HASH_RE.search(line)
        if h and current:
            out[current] = (out[current][0], h.group(1))
    return out


def _built(directory: Path) -> dict[str, tuple[str, str, str]]:
    """name -> (version, wheel filename, sha256) of each source-built wheel."""
    out: dict[str, tuple[str, str, str]] = {}
    for wheel in sorted(directory.glob("*/*.whl")):
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        out[_canon(name)] = (version, wheel.name, digest)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lock", type=Path, required=True)
    parser.add_argument("--built", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", action="append", default=[])
    parser.add_argument("--workspace", type=Path, default=None)
    args = parser.parse_args(argv)
    locked = _locked(args.lock)
    built = _built(args.built)
    workspace = set()
    if args.workspace is not None:
        workspace = {_canon(d["name"]) for d in json.loads(args.workspace.read_text("utf-8"))}
    sources = dict(s.split("=", 1) for s in args.source)
    components = []
    for dist in metadata.distributions():
        name = _canon(dist.metadata["Name"])
        version = dist.version
        component: dict[str, object] = {
            "type": "library",
            "name": name,
            "version": version,
            "purl": f"pkg:pypi/{name}@{version}",
        }
        if name in workspace:
            component["properties"] = [
                {"name": "vllm-musa:built-from", "value": sources.get(name, "unknown")},
                {"name": "vllm-musa:workspace", "value": "editable install of the workspace"},
            ]
        elif name in built:
            component["hashes"] = [{"alg": "SHA-256", "content": built[name][2]}]
            component["properties"] = [
                {"name": "vllm-musa:built-from", "value": sources.get(name, "unknown")},
                {"name": "vllm-musa:wheel", "value": built[name][1]},
            ]
        elif name in locked and locked[name][1]:
            component["hashes"] = [{"alg": "SHA-256", "content": locked[name][1]}]
        components.append(component)
    components.sort(key=lambda c: (str(c["name"]), str(c["version"])))
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": {"component": {"type": "container", "name": "vllm-musa"}},
        "components": components,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
