"""The SBOM writer that runs inside the image (final stage), with the image's own Python.

Standalone: standard library only, any CPython >= 3.8. It writes one CycloneDX 1.5 JSON
document of the image:

- every installed Python distribution (name, full version, purl), with the sha256 of the
  locked wheel (the lock's ``requirements.txt``) or of the source-built wheel, and for a
  source-built one the source it came from. A distribution the lock binds to another index
  than the manifest's default one (the vendor's torch) has a purl that says so:
  ``pkg:pypi/torch@2.11.0%2Bmusa5.2.0?repository_url=https://vendor/simple/``, so a scanner
  does not take it for PyPI's build of the same name and version;
- every installed Debian package (``/var/lib/dpkg/status``), as
  ``pkg:deb/<os id>/<name>@<version>?arch=<arch>&distro=<os id>-<version id>``;
- the dependency graph: the lock's own edges for the locked distributions (``--facts``, from
  ``images/builder/sbom_facts.py``), the installed ``Requires-Dist`` of the others, and the
  Debian packages' ``Depends`` and ``Pre-Depends``;
- ``metadata.timestamp`` from ``--created`` (never the clock) and a ``serialNumber`` derived
  from the document's own content: the same inputs give the same bytes.

``--workspace`` lists the distributions the driving source's ``pip install -e .`` installed
(``installed.py pack --list``). Refusals are printed as ``error[sbom]: ...`` and exit 1.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import quote

MAX_DPKG_STATUS_BYTES = 64 * 1024 * 1024  # read of /var/lib/dpkg/status (a few MB in an SDK)
MAX_TEXT_BYTES = 16 * 1024 * 1024  # read of any other text input (the lock, the facts, ...)
# uuid5 namespace of the serial numbers (uuid5 of the URL namespace and this tool's name).
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/MooreThreads/vllm-musa-image")
TOOL = "vllm-musa-image"

_REQ_RE = re.compile(r"^([A-Za-z0-9._-]+)==(\S+)")
_HASH_RE = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_DIST_NAME_RE = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)")
_DEB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_DEB_VERSION_RE = re.compile(r"^[A-Za-z0-9.+~:-]+$")
_DEB_ARCH_RE = re.compile(r"^[a-z0-9-]+$")
_OS_WORD_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class SbomError(Exception):
    """A refusal: printed as ``error[sbom]: <message>``."""


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def purl_quote(text: str) -> str:
    """A purl version or qualifier value, percent-encoded as the purl spec (and packageurl-python)
    does: ``+`` is ``%2B``; ``/`` and ``:`` stay as they are."""
    return quote(text, safe="/:")


def pypi_purl(name: str, version: str, repository_url: str = "") -> str:
    """``pkg:pypi/<name>@<version>``, with ``repository_url`` for another index than PyPI's.

    The purl spec's pypi name is lower case with ``_`` as ``-``."""
    purl = f"pkg:pypi/{name.lower().replace('_', '-')}@{purl_quote(version)}"
    if repository_url:
        purl += f"?repository_url={purl_quote(repository_url)}"
    return purl


def _read_text(path: Path, limit: int, what: str) -> str:
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise SbomError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise SbomError(
            f"{what} {path} is larger than {limit // (1024 * 1024)} MB; refusing to read it"
        )
    return data.decode("utf-8", "replace")


def parse_locked(text: str) -> dict[str, tuple[str, str]]:
    """name -> (version, sha256) of each wheel of the lock's ``requirements.txt``."""
    out: dict[str, tuple[str, str]] = {}
    current = ""
    for line in text.splitlines():
        m = _REQ_RE.match(line)
        if m:
            current = _canon(m.group(1))
            out[current] = (m.group(2), "")
        h = _HASH_RE.search(line)
        if h and current:
            out[current] = (out[current][0], h.group(1))
    return out


def read_built(directory: Path) -> dict[str, tuple[str, str, str]]:
    """name -> (version, wheel filename, sha256) of each source-built wheel."""
    out: dict[str, tuple[str, str, str]] = {}
    for wheel in sorted(directory.glob("*/*.whl")):
        name, version = wheel.name.split("-")[:2]
        digest = hashlib.sha256()
        with wheel.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        out[_canon(name)] = (version, wheel.name, digest.hexdigest())
    return out


def parse_facts(text: str, where: str) -> dict[str, dict[str, Any]]:
    """name -> {version, repository_url, required_by, root} of each runtime package of the lock
    (the JSON ``images/builder/sbom_facts.py`` writes)."""
    try:
        return {
            _canon(str(p["name"])): {
                "version": str(p["version"]),
                "repository_url": str(p["repository_url"]),
                "required_by": [_canon(str(r)) for r in p["required_by"]],
                "root": bool(p["root"]),
            }
            for p in json.loads(text)["packages"]
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise SbomError(f"{where} is not a facts file of {TOOL}: {exc!r}") from None


def parse_base(text: str, where: str) -> dict[str, tuple[str, str]]:
    """installed.py base's record: canonical name -> (version, location)."""
    try:
        return {
            _canon(str(d["name"])): (str(d["version"]), str(d["location"]))
            for d in json.loads(text)
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise SbomError(f"{where} is not a record of installed.py base: {exc!r}") from None


def parse_os_release(text: str) -> tuple[str, str]:
    """(ID, VERSION_ID) of an os-release file, each "" when absent or not a plain word."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("\"'")
    os_id, version_id = values.get("ID", ""), values.get("VERSION_ID", "")
    return (
        os_id if _OS_WORD_RE.match(os_id) else "",
        version_id if _OS_WORD_RE.match(version_id) else "",
    )


def parse_dpkg_status(text: str, where: str) -> list[dict[str, str]]:
    """The installed packages of a dpkg status file: Package, Version, Architecture, Source,
    Depends, Pre-Depends of each (a field that is absent is "")."""
    wanted = ("Package", "Status", "Version", "Architecture", "Source", "Depends", "Pre-Depends")
    packages = []
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        last = ""
        for line in paragraph.splitlines():
            if line[:1] in (" ", "\t"):
                if last in wanted:
                    fields[last] += " " + line.strip()
                continue
            key, sep, value = line.partition(":")
            last = key if sep else ""
            if sep and key in wanted:
                fields[key] = value.strip()
        if not fields.get("Package"):
            continue
        if fields.get("Status", "").split()[-1:] != ["installed"]:
            continue  # removed with its config files kept, half-installed, ...
        name, version = fields["Package"], fields.get("Version", "")
        arch = fields.get("Architecture", "")
        if not _DEB_NAME_RE.match(name):
            raise SbomError(f"{where}: package {name[:80]!r} is not a Debian package name")
        if not _DEB_VERSION_RE.match(version):
            raise SbomError(f"{where}: package {name}: version {version[:80]!r} is not valid")
        if not _DEB_ARCH_RE.match(arch):
            raise SbomError(f"{where}: package {name}: architecture {arch[:80]!r} is not valid")
        source = fields.get("Source", "").split(" ", 1)[0]
        packages.append(
            {
                "name": name,
                "version": version,
                "arch": arch,
                "source": source if _DEB_NAME_RE.match(source) and source != name else "",
                "depends": ", ".join(
                    d for d in (fields.get("Pre-Depends", ""), fields.get("Depends", "")) if d
                ),
            }
        )
    return packages


def _requires_dist_names(requires: Iterable[str] | None) -> list[str]:
    """The names of the Requires-Dist of a distribution that hold without an extra."""
    names = []
    for req in requires or ():
        spec, _, marker = req.partition(";")
        if "extra" in marker:
            continue
        m = _DIST_NAME_RE.match(spec)
        if m:
            names.append(_canon(m.group(1)))
    return names


def _library(purl: str, name: str, version: str) -> dict[str, Any]:
    return {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}


def _deb_components(
    packages: Sequence[Mapping[str, str]], os_id: str, version_id: str
) -> tuple[list[dict[str, Any]], dict[str, list[str]], list[str]]:
    """(components, ref -> refs it depends on, refs nothing else depends on)."""
    namespace = os_id or "debian"
    distro = f"{os_id}-{version_id}" if os_id and version_id else ""
    by_name: dict[str, dict[str, str]] = {}  # name -> arch -> purl
    components = []
    for p in packages:
        purl = f"pkg:deb/{namespace}/{p['name']}@{purl_quote(p['version'])}"
        purl += f"?arch={purl_quote(p['arch'])}"
        if distro:
            purl += f"&distro={purl_quote(distro)}"
        if p["source"]:
            purl += f"&upstream={purl_quote(p['source'])}"
        by_name.setdefault(p["name"], {})[p["arch"]] = purl
        components.append(_library(purl, p["name"], p["version"]))
    edges: dict[str, list[str]] = {}
    for p in packages:
        ref = by_name[p["name"]][p["arch"]]
        wants = set()
        for clause in p["depends"].split(","):
            for alternative in clause.split("|"):
                dep = alternative.strip().split(" ", 1)[0].split("(", 1)[0]
                dep_name, _, dep_arch = dep.partition(":")
                arches = by_name.get(dep_name)
                if not arches:
                    continue  # virtual, or not installed: the next alternative
                pick = arches.get(dep_arch) or arches.get(p["arch"]) or arches.get("all")
                wants.add(pick or arches[sorted(arches)[0]])
                break
        wants.discard(ref)
        edges[ref] = sorted(wants)
    depended = {d for deps in edges.values() for d in deps}
    top = sorted(ref for ref in edges if ref not in depended)
    return components, edges, top


@dataclass(frozen=True)
class Known:
    """What the writer knows of the Python distributions besides their metadata, by canonical
    name: ``parse_locked``, ``parse_facts``, ``read_built``, the workspace's editable installs,
    the source each was built from, and ``parse_base`` (None: no record of the base image)."""

    locked: Mapping[str, tuple[str, str]]
    facts: Mapping[str, Mapping[str, Any]]
    built: Mapping[str, tuple[str, str, str]]
    workspace: frozenset[str]
    sources: Mapping[str, str]
    base: Mapping[str, tuple[str, str]] | None


def _python_component(raw: str, version: str, repository_url: str, known: Known) -> dict[str, Any]:
    key = _canon(raw)
    component = _library(pypi_purl(raw, version, repository_url), key, version)
    locked, built, base = known.locked, known.built, known.base
    if key in known.workspace:
        component["properties"] = [
            {"name": "vllm-musa:built-from", "value": known.sources.get(key, "unknown")},
            {"name": "vllm-musa:workspace", "value": "editable install of the workspace"},
        ]
    elif key in built:
        component["hashes"] = [{"alg": "SHA-256", "content": built[key][2]}]
        component["properties"] = [
            {"name": "vllm-musa:built-from", "value": known.sources.get(key, "unknown")},
            {"name": "vllm-musa:wheel", "value": built[key][1]},
        ]
    elif key in locked and locked[key][1] and locked[key][0] == version:
        component["hashes"] = [{"alg": "SHA-256", "content": locked[key][1]}]
    elif base is not None and key in base and base[key][0] == version:
        component["properties"] = [
            {"name": "vllm-musa:origin", "value": "base image"},
            {"name": "vllm-musa:location", "value": base[key][1]},
        ]
    return component


def _python_graph(
    python: Mapping[str, Mapping[str, Any]],
    requires: Mapping[str, list[str]],
    facts: Mapping[str, Mapping[str, Any]],
    roots: set[str],
) -> dict[str, set[str]]:
    """name -> the names it depends on: the lock's edges for a locked distribution (and the
    lock's roots added to ``roots``), the Requires-Dist of the others."""
    edges: dict[str, set[str]] = {key: set() for key in python}
    for key in python:
        fact = facts.get(key)
        if fact is None or key in requires:
            continue
        if fact["root"]:
            roots.add(key)
        for parent in fact["required_by"]:
            if parent in edges:
                edges[parent].add(key)
    for key, names in requires.items():
        edges[key].update(n for n in names if n in python and n != key)
    return edges


@dataclass(frozen=True)
class ImageInfo:
    """What the document says of the image itself: its name and version, its licenses (an SPDX
    expression) and description, the sha256 of its lock, when it was created and the revision
    of the tool that built it; "" for each of the last five that is not known."""

    name: str
    version: str
    licenses: str
    description: str
    lock_sha256: str
    created: str
    tooling_revision: str


def _image_metadata(image_ref: str, info: ImageInfo) -> dict[str, Any]:
    image: dict[str, Any] = {"type": "container", "bom-ref": image_ref, "name": info.name}
    image["version"] = info.version
    if info.description:
        image["description"] = info.description
    if info.licenses:
        image["licenses"] = [{"expression": info.licenses}]
    if info.lock_sha256:
        image["properties"] = [{"name": "vllm-musa:lock-sha256", "value": info.lock_sha256}]
    tool: dict[str, Any] = {"type": "application", "name": TOOL}
    if info.tooling_revision:
        tool["version"] = info.tooling_revision
    meta: dict[str, Any] = {"component": image, "tools": {"components": [tool]}}
    if info.created:
        meta["timestamp"] = info.created
    return meta


def _python_components(
    distributions: Iterable[metadata.Distribution], known: Known
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """The component of each installed distribution (canonical name -> component; the first
    of a name in import order wins, the others are shadowed), and the Requires-Dist names of
    those the lock does not know at their version."""
    python: dict[str, dict[str, Any]] = {}
    requires: dict[str, list[str]] = {}
    for dist in distributions:
        raw = str((dist.metadata.get_all("Name") or [""])[0])
        if not raw:
            where = getattr(dist, "_path", "a distribution")
            raise SbomError(f"{where}: its METADATA has no Name")
        key = _canon(raw)
        if key in python:
            continue  # shadowed: not the one that is imported
        fact = known.facts.get(key)
        locked_here = fact is not None and fact["version"] == dist.version
        index = fact["repository_url"] if fact is not None and locked_here else ""
        python[key] = _python_component(raw, dist.version, index, known)
        if not locked_here:
            requires[key] = _requires_dist_names(dist.requires)
    return python, requires


def _dependencies(
    image_ref: str,
    top: list[str],
    python: Mapping[str, Mapping[str, Any]],
    edges: Mapping[str, set[str]],
    deb_edges: Mapping[str, list[str]],
) -> list[dict[str, Any]]:
    """The document's dependency graph: the image on ``top``, each Python distribution on its
    ``edges``, each Debian package on its ``deb_edges``."""
    dependencies: list[dict[str, Any]] = [{"ref": image_ref, "dependsOn": top}]
    for key in sorted(python):
        deps = sorted(python[d]["bom-ref"] for d in edges[key])
        dependencies.append({"ref": python[key]["bom-ref"], "dependsOn": deps})
    dependencies += [{"ref": ref, "dependsOn": deps} for ref, deps in sorted(deb_edges.items())]
    return dependencies


def build_sbom(
    *,
    image: ImageInfo,
    known: Known,
    distributions: Iterable[metadata.Distribution],
    debs: Sequence[Mapping[str, str]],
    os_release: tuple[str, str],
) -> dict[str, Any]:
    """The CycloneDX 1.5 document of the image; pure: the same arguments give the same document.

    ``image`` is what it says of the image itself; ``distributions`` are the installed ones,
    in import order (the first of a name wins); ``debs`` the installed Debian packages
    (``parse_dpkg_status``); ``os_release`` (ID, VERSION_ID) of the image."""
    image_ref = f"image:{image.name}@{image.version}"
    python, requires = _python_components(distributions, known)
    roots = {key for key in python if key in known.workspace or key in known.built}
    edges = _python_graph(python, requires, known.facts, roots)
    needed = {d for deps in edges.values() for d in deps}
    roots.update(key for key in python if key not in needed)  # else nothing would reach it
    deb_components, deb_edges, deb_top = _deb_components(debs, *os_release)
    top = sorted([python[k]["bom-ref"] for k in roots] + deb_top)
    components = sorted(
        [*python.values(), *deb_components], key=lambda c: (str(c["purl"]), str(c["name"]))
    )
    doc: dict[str, Any] = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": _image_metadata(image_ref, image),
        "components": components,
        "dependencies": _dependencies(image_ref, top, python, edges, deb_edges),
    }
    content = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    serial = uuid.uuid5(SERIAL_NAMESPACE, hashlib.sha256(content).hexdigest())
    doc["serialNumber"] = f"urn:uuid:{serial}"
    return doc


def generate(args: argparse.Namespace, distributions: Iterable[metadata.Distribution]) -> str:
    """Read the inputs ``args`` names and return the SBOM text."""
    locked = parse_locked(_read_text(args.lock, MAX_TEXT_BYTES, "the lock's requirements"))
    facts = parse_facts(_read_text(args.facts, MAX_TEXT_BYTES, "the SBOM facts"), str(args.facts))
    workspace: list[str] = []
    if args.workspace is not None:
        text = _read_text(args.workspace, MAX_TEXT_BYTES, "the workspace list")
        try:
            workspace = [str(d["name"]) for d in json.loads(text)]
        except (ValueError, KeyError, TypeError) as exc:
            raise SbomError(f"{args.workspace} is not a list of installed.py: {exc!r}") from None
    debs: list[dict[str, str]] = []
    if args.dpkg_status.exists():
        status = _read_text(args.dpkg_status, MAX_DPKG_STATUS_BYTES, "the dpkg status")
        debs = parse_dpkg_status(status, str(args.dpkg_status))
    base = None
    if args.base is not None:
        base = parse_base(_read_text(args.base, MAX_TEXT_BYTES, "the base record"), str(args.base))
    os_release = ("", "")
    if args.os_release.exists():
        os_release = parse_os_release(_read_text(args.os_release, MAX_TEXT_BYTES, "os-release"))
    # --name, --version, ... --tooling-revision: one option for each field of ImageInfo
    info = {f.name: getattr(args, f.name) for f in fields(ImageInfo)}
    if info["tooling_revision"] == "unknown":
        info["tooling_revision"] = ""
    known = Known(
        locked=locked,
        facts=facts,
        built=read_built(args.built),
        workspace=frozenset(_canon(n) for n in workspace),
        sources=dict(s.split("=", 1) for s in args.source),
        base=base,
    )
    doc = build_sbom(
        image=ImageInfo(**info),
        known=known,
        distributions=distributions,
        debs=debs,
        os_release=os_release,
    )
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sbom.py")
    p.add_argument("--lock", type=Path, required=True)
    p.add_argument("--facts", type=Path, required=True)
    p.add_argument("--built", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--version", required=True)
    p.add_argument("--licenses", default="")
    p.add_argument("--description", default="")
    p.add_argument("--lock-sha256", default="")
    p.add_argument("--created", default="")
    p.add_argument("--tooling-revision", default="")
    p.add_argument("--source", action="append", default=[])
    p.add_argument("--workspace", type=Path, default=None)
    p.add_argument("--base", type=Path, default=None)  # installed.py base's record
    p.add_argument("--dpkg-status", type=Path, default=Path("/var/lib/dpkg/status"))
    p.add_argument("--os-release", type=Path, default=Path("/etc/os-release"))
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        text = generate(args, metadata.distributions())
    except SbomError as exc:
        sys.stderr.write(f"error[sbom]: {exc}\n")
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
