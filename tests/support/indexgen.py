"""Real wheels, sdists and simple-index trees for tests, benchmarks and demos.

Everything here is deterministic: the same arguments give byte-identical files, so a test can
compare hashes and a benchmark can rebuild its fixtures without invalidating caches.

- ``build_wheel`` / ``build_sdist`` write valid distributions (pip installs the wheels).
- ``write_simple_index`` lays out a PEP 503 (and optionally PEP 691 JSON) tree::

      root/files/<filename>             the distributions (+ ``<filename>.metadata``, PEP 658)
      root/simple/index.html            the project list
      root/simple/<project>/index.html  one page per project (+ ``index.json`` with json=True)
      root/find-links/index.html        a flat page (``write_find_links_page``)
      root/listings.json                the per-file listing options, so later calls merge

- ``nginx_config`` / ``start_nginx`` / ``stop_nginx`` serve such a tree with the Debian nginx
  (used by the benchmarks; tests use ``tests.support.index_server``).

Stdlib only, plus ``packaging``.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import gzip
import hashlib
import html
import io
import json as jsonlib
import os
import random
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import quote

from packaging.tags import parse_tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

__all__ = [
    "UPLOAD_TIME",
    "Listing",
    "WheelFactory",
    "WheelSpec",
    "build_sdist",
    "build_wheel",
    "dist_name",
    "nginx_config",
    "read_wheel_metadata",
    "start_nginx",
    "stop_nginx",
    "write_find_links_page",
    "write_simple_index",
]

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
TAR_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the same instant as the zip timestamps
UPLOAD_TIME = "2024-01-01T00:00:00.000000Z"  # PEP 700 upload-time of every listed file
JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
NGINX = Path("/usr/sbin/nginx")

_CHUNK = 1 << 20
_HARDLINK_THRESHOLD = 16 << 20  # copy small files (a test may corrupt one), link big ones
_EXTRA_RE = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")
_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_EP: Mapping[str, Mapping[str, str]] = MappingProxyType({})


def dist_name(name: str) -> str:
    """The name as a wheel or sdist filename spells it (``Deep-GEMM`` -> ``deep_gemm``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


# ----------------------------------------------------------------------------- wheels


@dataclass(frozen=True, kw_only=True)
class WheelSpec:
    """What ``build_wheel`` writes.

    ``tags`` is a compressed tag set as in a filename (``cp38-abi3-manylinux_2_17_x86_64.
    manylinux2014_x86_64``). ``metadata_name`` / ``metadata_version`` make METADATA (and the
    ``.dist-info`` directory) disagree with the filename, like a renamed wheel. ``modules``
    maps paths inside the wheel to text; by default a package named after the project whose
    ``__init__.py`` holds ``__version__``. ``payload_bytes`` adds ``<package>/payload.bin`` of
    incompressible deterministic bytes (written in chunks) for benchmarks.
    """

    name: str
    version: str
    tags: str = "py3-none-any"
    build: str | None = None
    requires_dist: tuple[str, ...] = ()
    requires_python: str | None = None
    metadata_name: str | None = None
    metadata_version: str | None = None
    modules: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    entry_points: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY_EP)
    payload_bytes: int = 0

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{dist_name(self.name)}-{self.version}{build}-{self.tags}.whl"

    @property
    def package(self) -> str:
        """The import package of the default module and of the payload."""
        return dist_name(self.name)

    @property
    def dist_info(self) -> str:
        name = dist_name(self.metadata_name or self.name)
        return f"{name}-{self.metadata_version or self.version}.dist-info"

    @property
    def purelib(self) -> bool:
        return all(t.abi == "none" and t.platform == "any" for t in parse_tag(self.tags))


def render_metadata(spec: WheelSpec) -> bytes:
    """The core metadata (``METADATA``) of the wheel ``spec`` describes."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {spec.metadata_name or spec.name}",
        f"Version: {spec.metadata_version or spec.version}",
        f"Summary: {spec.name} {spec.version}, a test wheel written by tests.support.indexgen",
    ]
    if spec.requires_python is not None:
        lines.append(f"Requires-Python: {spec.requires_python}")
    extras = sorted({m for req in spec.requires_dist for m in _EXTRA_RE.findall(req)})
    lines.extend(f"Provides-Extra: {extra}" for extra in extras)
    lines.extend(f"Requires-Dist: {req}" for req in spec.requires_dist)
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def _render_wheel_file(spec: WheelSpec) -> bytes:
    lines = [
        "Wheel-Version: 1.0",
        "Generator: tests.support.indexgen",
        f"Root-Is-Purelib: {'true' if spec.purelib else 'false'}",
    ]
    lines.extend(f"Tag: {tag}" for tag in sorted(str(t) for t in parse_tag(spec.tags)))
    if spec.build:
        lines.append(f"Build: {spec.build}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _render_entry_points(entry_points: Mapping[str, Mapping[str, str]]) -> bytes:
    out: list[str] = []
    for group in sorted(entry_points):
        out.append(f"[{group}]")
        out.extend(f"{name} = {entry_points[group][name]}" for name in sorted(entry_points[group]))
        out.append("")
    return "\n".join(out).encode("utf-8")


def _zip_info(arcname: str, *, compress: int = zipfile.ZIP_DEFLATED) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
    info.create_system = 3  # unix, so the permission bits below mean the same everywhere
    info.external_attr = 0o100644 << 16
    info.compress_type = compress
    return info


def _record_hash(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _payload_chunks(seed: str, size: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    left = size
    while left > 0:
        n = min(_CHUNK, left)
        yield rng.randbytes(n)
        left -= n


def _check_member_path(path: str) -> None:
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or "" in parts:
        raise ValueError(f"module path {path!r} must be relative, without '..' or empty parts")
    if parts[0].endswith(".dist-info"):
        raise ValueError(f"module path {path!r} is inside a .dist-info directory")


def build_wheel(spec: WheelSpec, out_dir: Path) -> Path:
    """Write the wheel ``spec`` describes into ``out_dir``; return its path.

    Byte-identical for equal specs: entries sorted (``.dist-info`` last, ``RECORD`` at the
    end), timestamps 1980-01-01, mode 0644.
    """
    if spec.payload_bytes < 0:
        raise ValueError(f"payload_bytes must be >= 0, not {spec.payload_bytes}")
    modules = dict(spec.modules) or {
        f"{spec.package}/__init__.py": f'__version__ = "{spec.version}"\n'
    }
    payload_path = f"{spec.package}/payload.bin" if spec.payload_bytes else None
    for path in modules:
        _check_member_path(path)
    if payload_path is not None and payload_path in modules:
        raise ValueError(f"module path {payload_path!r} is taken by the payload")

    dist_info = spec.dist_info
    meta_files: dict[str, bytes] = {
        f"{dist_info}/METADATA": render_metadata(spec),
        f"{dist_info}/WHEEL": _render_wheel_file(spec),
    }
    if spec.entry_points:
        meta_files[f"{dist_info}/entry_points.txt"] = _render_entry_points(spec.entry_points)
    body = {path: text.encode("utf-8") for path, text in modules.items()}

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / spec.filename
    records: list[tuple[str, str, str]] = []
    with _atomic_output(target) as tmp, zipfile.ZipFile(tmp, "w") as zf:
        for arcname in sorted([*body, *([payload_path] if payload_path else [])]):
            if arcname == payload_path:
                digest = hashlib.sha256()
                info = _zip_info(arcname, compress=zipfile.ZIP_STORED)
                big = spec.payload_bytes >= zipfile.ZIP64_LIMIT
                with zf.open(info, "w", force_zip64=big) as member:
                    for chunk in _payload_chunks(spec.filename, spec.payload_bytes):
                        member.write(chunk)
                        digest.update(chunk)
                records.append((arcname, _record_hash(digest.digest()), str(spec.payload_bytes)))
            else:
                data = body[arcname]
                zf.writestr(_zip_info(arcname), data)
                records.append(
                    (arcname, _record_hash(hashlib.sha256(data).digest()), str(len(data)))
                )
        for arcname in sorted(meta_files):
            data = meta_files[arcname]
            zf.writestr(_zip_info(arcname), data)
            records.append((arcname, _record_hash(hashlib.sha256(data).digest()), str(len(data))))
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows(records)
        writer.writerow((f"{dist_info}/RECORD", "", ""))
        zf.writestr(_zip_info(f"{dist_info}/RECORD"), buf.getvalue().encode("utf-8"))
    return target


def read_wheel_metadata(path: Path) -> bytes:
    """The ``*.dist-info/METADATA`` of a wheel (what a PEP 658 metadata file holds)."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise ValueError(f"{path.name}: expected one .dist-info/METADATA, found {names}")
        return zf.read(names[0])


# ----------------------------------------------------------------------------- sdists


def build_sdist(
    name: str, version: str, out_dir: Path, *, extra: Mapping[str, str] | None = None
) -> Path:
    """A tiny valid sdist ``<name>-<version>.tar.gz`` (PKG-INFO + pyproject.toml, and the
    ``extra`` files, path under the top directory -> text); deterministic."""
    stem = f"{dist_name(name)}-{version}"
    package = dist_name(name)
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n",
        "pyproject.toml": (
            "[build-system]\n"
            'requires = ["setuptools>=61"]\n'
            'build-backend = "setuptools.build_meta"\n\n'
            "[project]\n"
            f'name = "{name}"\n'
            f'version = "{version}"\n'
        ),
        f"{package}/__init__.py": f'__version__ = "{version}"\n',
        **(extra or {}),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{stem}.tar.gz"
    with (
        _atomic_output(target) as tmp,
        tmp.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for relpath in sorted(files):
            data = files[relpath].encode("utf-8")
            info = tarfile.TarInfo(f"{stem}/{relpath}")
            info.size = len(data)
            info.mtime = TAR_EPOCH
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return target


# ----------------------------------------------------------------------------- index trees

HashMode = Literal["sha256", "none", "wrong"]


@dataclass(frozen=True, kw_only=True)
class Listing:
    """How one file is listed on the index pages.

    ``yanked``: False, True, or the reason (a string, even empty, means yanked).
    ``requires_python``: the ``data-requires-python`` attribute (never taken from the wheel).
    ``hash``: publish the real sha256, none, or a wrong one. ``metadata``: publish the PEP
    658/714 ``<file>.metadata`` file and advertise its hash. ``project``: the project the file
    is listed under; by default parsed from the filename (needed for unparseable names).
    """

    path: Path
    yanked: str | bool = False
    requires_python: str | None = None
    hash: HashMode = "sha256"
    metadata: bool = False
    project: str | None = None


@dataclass(frozen=True)
class _Entry:
    filename: str
    project: str  # normalized
    yanked: str | bool
    requires_python: str | None
    hash: HashMode
    metadata: bool

    def to_json(self) -> dict[str, object]:
        return {
            "project": self.project,
            "yanked": self.yanked,
            "requires_python": self.requires_python,
            "hash": self.hash,
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, filename: str, raw: Mapping[str, object]) -> _Entry:
        yanked = raw.get("yanked", False)
        requires_python = raw.get("requires_python")
        hash_mode = raw.get("hash", "sha256")
        if hash_mode not in ("sha256", "none", "wrong"):
            raise ValueError(f"listings.json: {filename}: bad hash mode {hash_mode!r}")
        return cls(
            filename=filename,
            project=str(raw["project"]),
            yanked=yanked if isinstance(yanked, str | bool) else bool(yanked),
            requires_python=str(requires_python) if requires_python is not None else None,
            hash=hash_mode,
            metadata=bool(raw.get("metadata", False)),
        )


def project_of(filename: str) -> str:
    """The normalized project name of a wheel or sdist filename."""
    if filename.endswith(".whl"):
        with contextlib.suppress(InvalidWheelFilename):
            return str(parse_wheel_filename(filename)[0])
    else:
        with contextlib.suppress(InvalidSdistFilename):
            return str(parse_sdist_filename(filename)[0])
    raise ValueError(
        f"cannot tell the project of {filename!r} from its name; give Listing(project=...)"
    )


def _version_of(filename: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            return parse_wheel_filename(filename)[1]
        return parse_sdist_filename(filename)[1]
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None


def _as_listing(item: Listing | Path) -> Listing:
    return item if isinstance(item, Listing) else Listing(path=item)


def _same_file(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        if a.samefile(b):
            return True
        if a.stat().st_size == b.stat().st_size:
            return _sha256_file(a) == _sha256_file(b)
    return False


def _place(src: Path, dest: Path) -> None:
    """Put ``src`` at ``dest`` (hardlink for big files, else copy) unless it is already there."""
    if dest.exists() and _same_file(src, dest):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    linked = False
    if src.stat().st_size >= _HARDLINK_THRESHOLD:
        with contextlib.suppress(OSError):
            os.link(src, tmp)
            linked = True
    if not linked:
        shutil.copyfile(src, tmp)
    tmp.replace(dest)


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def _atomic_output(path: Path) -> Iterator[Path]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(0o644)
        tmp.replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _write_text(path: Path, text: str) -> None:
    with _atomic_output(path) as tmp:
        tmp.write_bytes(text.encode("utf-8"))


def _load_entries(root: Path) -> dict[str, _Entry]:
    sidecar = root / "listings.json"
    entries: dict[str, _Entry] = {}
    if sidecar.exists():
        raw = jsonlib.loads(sidecar.read_text("utf-8"))
        for filename, options in raw.get("files", {}).items():
            entries[filename] = _Entry.from_json(filename, options)
    files_dir = root / "files"
    if files_dir.is_dir():  # files put there by hand are listed with the defaults
        for path in sorted(files_dir.iterdir()):
            name = path.name
            if name in entries or name.startswith(".") or name.endswith(".metadata"):
                continue
            if path.is_file():
                try:
                    project = project_of(name)
                except ValueError as exc:
                    raise ValueError(f"{path} was put there by hand: {exc}") from None
                entries[name] = _Entry(name, project, False, None, "sha256", False)
    return entries


def _register(root: Path, listings: Iterable[Listing | Path]) -> dict[str, _Entry]:
    """Copy the files into ``root/files``, merge their options into the sidecar, return all."""
    entries = _load_entries(root)
    for listing in map(_as_listing, listings):
        filename = listing.path.name
        project = canonicalize_name(listing.project) if listing.project else project_of(filename)
        _place(listing.path, root / "files" / filename)
        entries[filename] = _Entry(
            filename=filename,
            project=project,
            yanked=listing.yanked,
            requires_python=listing.requires_python,
            hash=listing.hash,
            metadata=listing.metadata,
        )
    # drop entries whose file is gone (removed by hand)
    entries = {n: e for n, e in entries.items() if (root / "files" / n).is_file()}
    for name, entry in entries.items():
        meta = root / "files" / f"{name}.metadata"
        if entry.metadata:
            if not name.endswith(".whl"):
                raise ValueError(f"{name}: only wheels have a PEP 658 metadata file")
            with _atomic_output(meta) as tmp:
                tmp.write_bytes(read_wheel_metadata(root / "files" / name))
        else:
            with contextlib.suppress(FileNotFoundError):
                meta.unlink()
    blob = {"files": {n: entries[n].to_json() for n in sorted(entries)}}
    _write_text(root / "listings.json", jsonlib.dumps(blob, indent=2, sort_keys=True) + "\n")
    return entries


@dataclass(frozen=True)
class _Rendered:
    """One file's values as both page formats show them."""

    entry: _Entry
    href: str  # relative, percent-encoded, without fragment
    sha256: str | None  # what the index advertises (possibly wrong), None for hash="none"
    metadata_sha256: str | None
    size: int


def _rendered(root: Path, entry: _Entry, files_url: str) -> _Rendered:
    path = root / "files" / entry.filename
    real = _sha256_file(path)
    advertised = {
        "sha256": real,
        "none": None,
        "wrong": hashlib.sha256(b"wrong:" + real.encode("ascii")).hexdigest(),
    }[entry.hash]
    meta_sha = None
    if entry.metadata:
        meta_sha = hashlib.sha256((root / "files" / f"{entry.filename}.metadata").read_bytes())
    return _Rendered(
        entry=entry,
        href=files_url + quote(entry.filename, safe=""),
        sha256=advertised,
        metadata_sha256=meta_sha.hexdigest() if meta_sha else None,
        size=path.stat().st_size,
    )


def _anchor(item: _Rendered) -> str:
    href = item.href + (f"#sha256={item.sha256}" if item.sha256 else "")
    attrs = [f'href="{html.escape(href, quote=True)}"']
    entry = item.entry
    if entry.requires_python is not None:
        attrs.append(f'data-requires-python="{html.escape(entry.requires_python, quote=True)}"')
    if entry.yanked is not False:
        reason = entry.yanked if isinstance(entry.yanked, str) else ""
        attrs.append(f'data-yanked="{html.escape(reason, quote=True)}"')
    if item.metadata_sha256:
        value = f"sha256={item.metadata_sha256}"
        attrs.append(f'data-core-metadata="{value}"')
        attrs.append(f'data-dist-info-metadata="{value}"')
    return f"    <a {' '.join(attrs)}>{html.escape(entry.filename)}</a><br>"


def _html_page(title: str, lines: Iterable[str]) -> str:
    head = [
        "<!DOCTYPE html>",
        "<html>",
        "  <head>",
        '    <meta name="pypi:repository-version" content="1.1">',
        f"    <title>{html.escape(title)}</title>",
        "  </head>",
        "  <body>",
        f"    <h1>{html.escape(title)}</h1>",
    ]
    return "\n".join([*head, *lines, "  </body>", "</html>", ""])


def _json_file(item: _Rendered) -> dict[str, object]:
    entry = item.entry
    out: dict[str, object] = {
        "filename": entry.filename,
        "url": item.href,
        "hashes": {"sha256": item.sha256} if item.sha256 else {},
        "size": item.size,
        "upload-time": UPLOAD_TIME,
        # PEP 691: a yank reason must be a non-empty string; otherwise true
        "yanked": (entry.yanked or True) if isinstance(entry.yanked, str) else entry.yanked,
    }
    if entry.requires_python is not None:
        out["requires-python"] = entry.requires_python
    if item.metadata_sha256:
        out["core-metadata"] = {"sha256": item.metadata_sha256}
        out["dist-info-metadata"] = {"sha256": item.metadata_sha256}
    return out


def _json_text(data: object) -> str:
    return jsonlib.dumps(data, indent=2, sort_keys=True) + "\n"


def write_simple_index(
    root: Path,
    listings: Iterable[Listing | Path],
    *,
    json: bool = False,
    files_url: str = "../../files/",
) -> None:
    """Add ``listings`` to the tree at ``root`` and rewrite every page from all its files.

    A bare ``Path`` is listed with the defaults. Options given for a file replace the ones
    an earlier call gave (kept in ``root/listings.json``). With ``json=True`` each project
    also gets a PEP 691 ``index.json`` (api-version 1.1); with ``json=False`` any earlier
    ``index.json`` is removed. ``files_url`` is the file location relative to a project page.
    """
    entries = _register(root, listings)
    simple = root / "simple"
    by_project: dict[str, list[_Entry]] = {}
    for entry in entries.values():
        by_project.setdefault(entry.project, []).append(entry)
    for stale in sorted(simple.glob("*/index.*")) if simple.is_dir() else []:
        if stale.parent.name not in by_project:
            stale.unlink()
    for project, project_entries in sorted(by_project.items()):
        items = [
            _rendered(root, e, files_url) for e in sorted(project_entries, key=lambda e: e.filename)
        ]
        page_dir = simple / project
        _write_text(
            page_dir / "index.html", _html_page(f"Links for {project}", map(_anchor, items))
        )
        json_path = page_dir / "index.json"
        if json:
            versions = {v for e in project_entries if (v := _version_of(e.filename)) is not None}
            page = {
                "meta": {"api-version": "1.1"},
                "name": project,
                "versions": [str(v) for v in sorted(versions)],
                "files": [_json_file(item) for item in items],
            }
            _write_text(json_path, _json_text(page))
        else:
            with contextlib.suppress(FileNotFoundError):
                json_path.unlink()
    projects = sorted(by_project)
    root_lines = [f'    <a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in projects]
    _write_text(simple / "index.html", _html_page("Simple index", root_lines))
    if json:
        blob = {"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}
        _write_text(simple / "index.json", _json_text(blob))
    else:
        with contextlib.suppress(FileNotFoundError):
            (simple / "index.json").unlink()


def write_find_links_page(root: Path, listings: Iterable[Listing | Path]) -> Path:
    """Add ``listings`` to ``root`` and write a flat page of every file (``--find-links``).

    The page is ``root/find-links/index.html``; its links point at ``root/files/``.
    """
    entries = _register(root, listings)
    items = [_rendered(root, entries[n], "../files/") for n in sorted(entries)]
    page = root / "find-links" / "index.html"
    _write_text(page, _html_page("Find links", map(_anchor, items)))
    return page


# ----------------------------------------------------------------------------- nginx


def nginx_config(root: Path, port: int, workdir: Path) -> str:
    """An nginx.conf serving ``root`` on 127.0.0.1:``port`` in the foreground.

    pid, logs and temp paths live under ``workdir``. Directories serve ``index.json`` when
    the Accept header asks for PEP 691 JSON and the file exists, else ``index.html``. ETags
    and byte ranges are on. Running as root, the workers stay root so they can read a
    ``root`` under a private temp directory.
    """
    root = root.resolve()
    workdir = workdir.resolve()
    user = "user root root;\n" if os.geteuid() == 0 else ""
    temp = "\n".join(
        f'    {kind}_temp_path "{workdir / "tmp" / kind}";'
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""\
# written by tests.support.indexgen.nginx_config
{user}daemon off;
worker_processes auto;
pid "{workdir / "nginx.pid"}";
error_log "{workdir / "error.log"}" warn;

events {{
    worker_connections 1024;
}}

http {{
    access_log off;
{temp}
    types {{
        text/html html;
        {JSON_CONTENT_TYPE} json;
        application/octet-stream whl metadata gz;
    }}
    default_type application/octet-stream;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 10000;
    etag on;

    map $http_accept $pypi_index {{
        "~application/vnd\\.pypi\\.simple\\.v1\\+json" index.json;
        default index.html;
    }}

    server {{
        listen 127.0.0.1:{port};
        root "{root}";
        index $pypi_index index.html;
        location / {{
            add_header Vary Accept;
        }}
    }}
}}
"""


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited with status {proc.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port} within {timeout} s")


def start_nginx(
    root: Path, port: int, workdir: Path, *, timeout: float = 10.0
) -> subprocess.Popen[bytes]:
    """Write ``workdir/nginx.conf`` and run nginx in the foreground until it listens."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (workdir / "tmp" / kind).mkdir(parents=True, exist_ok=True)
    conf = workdir / "nginx.conf"
    conf.write_text(nginx_config(root, port, workdir), "utf-8")
    log = workdir / "error.log"
    cmd = [str(NGINX), "-p", str(workdir), "-c", str(conf), "-e", str(log)]
    with (workdir / "nginx.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_for_port(port, proc, timeout)
    except RuntimeError as exc:
        stop_nginx(proc)
        detail = "".join(
            p.read_text("utf-8", errors="replace")[-2000:]
            for p in (workdir / "nginx.out", log)
            if p.exists()
        )
        raise RuntimeError(f"{exc}\n{detail}") from None
    return proc


def stop_nginx(proc: subprocess.Popen[bytes], *, timeout: float = 10.0) -> None:
    """Stop an nginx started by ``start_nginx`` (fast shutdown, then kill)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


# ----------------------------------------------------------------------------- test helper


class WheelFactory:
    """Builds wheels and sdists into one directory (the ``wheel_factory`` test fixture)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir

    def __call__(
        self,
        spec_or_name: WheelSpec | str,
        version: str | None = None,
        /,
        *,
        out_dir: Path | None = None,
        **fields: Any,
    ) -> Path:
        """``factory(WheelSpec(...))`` or ``factory(name, version, **WheelSpec fields)``."""
        if isinstance(spec_or_name, WheelSpec):
            if version is not None or fields:
                raise TypeError("give either a WheelSpec, or a name, a version and fields")
            spec = spec_or_name
        else:
            if version is None:
                raise TypeError("wheel_factory(name, version, ...) needs a version")
            spec = WheelSpec(name=spec_or_name, version=version, **fields)
        return build_wheel(spec, out_dir or self.out_dir)

    def sdist(self, name: str, version: str, *, out_dir: Path | None = None) -> Path:
        return build_sdist(name, version, out_dir or self.out_dir)
