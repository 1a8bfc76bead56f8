"""A closure world with real-sized index pages, for ``bench.closure --world real``.

``testbed.closuregen`` lists a few files per project; a real index lists thousands
(numpy's page is about 2 MB of PEP 691 JSON). This generator writes the same kind of world
(a public index of many projects that depend on each other, a vendor index with pinned native
wheels carrying local labels) with the page shapes of the real one, deterministically for a
seed:

- every project has tens of releases (10 to 40);
- a native project's release lists 30 wheels (CPython 3.9 to 3.13 times six platforms: two
  manylinux, musllinux, two macOS, Windows) plus an sdist; a pure project's lists its
  ``py3-none-any`` wheel and an sdist;
- pages in PEP 691 JSON (``index.json``, api-version 1.1, what both uv and we ask for first)
  and PEP 503 HTML, with sha256 hashes, sizes, upload times, ``requires-python`` and PEP 658
  ``core-metadata`` for every wheel the target can use.

Only what a lock reads is written as a file: the pages, and the ``.metadata`` file of each
wheel the target can use. The wheels themselves are never fetched by ``lock --no-verify`` nor
by ``uv pip compile`` (which take the index's hashes), so the listed wheels do not exist; the
listed sha256 of each is that of its filename. The vendor index holds real wheels (the lock
reads their METADATA by range requests, as the vendor's index has no metadata files).
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path
from urllib.parse import quote

from testbed.closuregen import World, project_name
from testbed.distributions import WheelSpec, build_wheel, dist_name, render_metadata
from testbed.simple_index import Listing, write_simple_index

PYTHONS = ("cp39", "cp310", "cp311", "cp312", "cp313")
PLATFORMS = (
    "manylinux_2_17_x86_64.manylinux2014_x86_64",
    "manylinux_2_17_aarch64.manylinux2014_aarch64",
    "musllinux_1_2_x86_64",
    "macosx_11_0_arm64",
    "macosx_10_9_x86_64",
    "win_amd64",
)
UPLOAD = "2025-{:02d}-{:02d}T{:02d}:00:00.000000Z"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def generate(
    out: Path, *, projects: int = 500, roots: int = 64, seed: int = 11, python: str = "3.12"
) -> World:
    """Write ``out/public`` and ``out/vendor``; lower bounds only, so one solution exists."""
    shutil.rmtree(out, ignore_errors=True)
    rng = random.Random(seed)  # noqa: S311 (a deterministic world, not a secret)
    cp = "cp" + python.replace(".", "")
    names = [project_name(i) for i in range(projects)]
    versions = _release_versions(rng, names)
    public = out / "public"
    files_dir = public / "files"
    files_dir.mkdir(parents=True)
    total = 0
    for i, n in enumerate(names):
        native = rng.random() < 0.25
        entries: list[dict[str, object]] = []
        for vi, v in enumerate(versions[n]):
            deps = _requirements(rng, i, names, versions)
            requires_python = ">=3.8"
            if vi == len(versions[n]) - 1 and rng.random() < 0.1:
                requires_python = ">=3.13"  # the newest release dropped the target
            upload = UPLOAD.format(1 + vi % 12, 1 + vi % 28, vi % 24)
            entries += _release_files(
                files_dir,
                n,
                v,
                deps=deps,
                requires_python=requires_python,
                upload=upload,
                native=native,
                cp=cp,
            )
        total += len(entries)
        _write_pages(public / "simple" / n, n, versions[n], entries)
    _write_root(public / "simple", names)
    pins = {
        "vtorch": "2.11.0.post2+musa5.2.0",
        "vtorch-musa": "2.11.0.post2+musa5.2.0",
        "vtriton": "3.2.0",
    }
    vendor_wheels = _write_vendor(out, pins, names, versions, cp)
    total += len(vendor_wheels)
    root_reqs = [names[0], f"{names[1]}[fast]>={versions[names[1]][0]}"]
    root_reqs += [names[i] for i in range(2, max(3, roots))]
    return World(
        public_root=public,
        vendor_root=out / "vendor",
        roots=root_reqs,
        pins=pins,
        projects=projects + len(pins),
        files=total,
        vendor_wheels=vendor_wheels,
    )


def _release_versions(rng: random.Random, names: list[str]) -> dict[str, list[str]]:
    """Name -> its 10 to 40 releases, oldest first."""
    versions: dict[str, list[str]] = {}
    for n in names:
        major = rng.randint(0, 4)
        count = rng.randint(10, 40)
        versions[n] = [f"{major + k // 12}.{k % 12}.{rng.randint(0, 3)}" for k in range(count)]
    return versions


def _requirements(
    rng: random.Random, i: int, names: list[str], versions: dict[str, list[str]]
) -> list[str]:
    """The requirements of a release of project ``i``: up to three later projects, each at
    least one of its older releases, sometimes one for Windows only and one for an extra."""
    projects = len(names)
    deps: list[str] = []
    for j in sorted(rng.sample(range(i + 1, projects), k=min(projects - i - 1, rng.randint(0, 3)))):
        dn = names[j]
        deps.append(f"{dn}>={rng.choice(versions[dn][: len(versions[dn]) // 2])}")
    if rng.random() < 0.3 and i + 1 < projects:
        deps.append(f"{names[rng.randrange(i + 1, projects)]}; sys_platform == 'win32'")
    if rng.random() < 0.15 and i + 1 < projects:
        deps.append(f"{names[rng.randrange(i + 1, projects)]}; extra == 'fast'")
    return deps


def _release_files(
    files_dir: Path,
    name: str,
    version: str,
    *,
    deps: list[str],
    requires_python: str,
    upload: str,
    native: bool,
    cp: str,
) -> list[dict[str, object]]:
    """The page's files of one release: every wheel (30 for a native project, one
    ``py3-none-any`` otherwise) and the sdist. The wheel the target ``cp`` can use gets a
    ``.metadata`` file in ``files_dir`` and ``core-metadata`` on the page."""
    stem = f"{dist_name(name)}-{version}"
    tags = (
        [f"{py}-{py}-{plat}" for py in PYTHONS for plat in PLATFORMS]
        if native
        else ["py3-none-any"]
    )
    usable = f"{cp}-{cp}-{PLATFORMS[0]}" if native else "py3-none-any"
    entries: list[dict[str, object]] = []
    for tag in tags:
        filename = f"{stem}-{tag}.whl"
        size = 100_000 + len(filename) * 997
        entry = _file_entry(filename, size, requires_python, upload)
        if tag == usable:
            spec = WheelSpec(
                name=name,
                version=version,
                tags=tag,
                requires_dist=tuple(deps),
                requires_python=requires_python,
            )
            meta = render_metadata(spec)
            (files_dir / f"{filename}.metadata").write_bytes(meta)
            entry["core-metadata"] = {"sha256": _sha(meta)}
            entry["data-dist-info-metadata"] = {"sha256": _sha(meta)}
        entries.append(entry)
    sdist = f"{stem}.tar.gz"
    entries.append(_file_entry(sdist, 50_000 + len(sdist) * 991, requires_python, upload))
    return entries


def _write_vendor(
    out: Path, pins: dict[str, str], names: list[str], versions: dict[str, list[str]], cp: str
) -> list[Path]:
    """The vendor index in ``out/vendor``: real wheels of the pins (and of each local
    version's ``s5000`` variant), each requiring a public project; the wheels, in order."""
    listings: list[Listing] = []
    vendor_wheels: list[Path] = []
    for k, (n, v) in enumerate(pins.items()):
        dep = names[k * 7 + 1]
        deps = [f"{dep}>={versions[dep][0]}"]
        if n == "vtorch-musa":
            deps.append("vtorch==2.11.0.post2")
        for ver in (v, v + "s5000") if "+" in v else (v,):
            spec = WheelSpec(name=n, version=ver, tags=f"{cp}-{cp}-linux_x86_64",
                             requires_dist=tuple(deps))  # fmt: skip
            w = build_wheel(spec, out / "wheels")
            vendor_wheels.append(w)
            listings.append(Listing(path=w, hash="none"))
    write_simple_index(out / "vendor", listings)
    return vendor_wheels


def _file_entry(filename: str, size: int, requires_python: str, upload: str) -> dict[str, object]:
    """One file of a PEP 691 page (its bytes are never served: the hash is of its name)."""
    return {
        "filename": filename,
        "url": "../../files/" + quote(filename, safe=""),
        "hashes": {"sha256": _sha(filename.encode())},
        "requires-python": requires_python,
        "size": size,
        "upload-time": upload,
        "yanked": False,
    }


def _write_pages(
    page_dir: Path, name: str, versions: list[str], entries: list[dict[str, object]]
) -> None:
    page_dir.mkdir(parents=True)
    doc = {
        "meta": {"api-version": "1.1", "_last-serial": 1},
        "name": name,
        "versions": versions,
        "files": entries,
    }
    (page_dir / "index.json").write_text(json.dumps(doc, separators=(",", ":")))
    lines = []
    for e in entries:
        href = f"{e['url']}#sha256={e['hashes']['sha256']}"  # type: ignore[index]
        attrs = f'href="{href}" data-requires-python="{e["requires-python"]}"'.replace(">", "&gt;")
        if "core-metadata" in e:
            value = f"sha256={e['core-metadata']['sha256']}"  # type: ignore[index]
            attrs += f' data-core-metadata="{value}" data-dist-info-metadata="{value}"'
        lines.append(f"    <a {attrs}>{e['filename']}</a><br />")
    body = "\n".join(lines)
    (page_dir / "index.html").write_text(
        f'<!DOCTYPE html>\n<html>\n  <head>\n    <meta name="pypi:repository-version" '
        f'content="1.1">\n    <title>Links for {name}</title>\n  </head>\n  <body>\n'
        f"    <h1>Links for {name}</h1>\n{body}\n  </body>\n</html>\n"
    )


def _write_root(simple: Path, names: list[str]) -> None:
    doc = {"meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in names]}
    (simple / "index.json").write_text(json.dumps(doc))
    links = "".join(f'    <a href="{n}/">{n}</a><br />\n' for n in names)
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
