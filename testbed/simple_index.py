"""Simple-index trees over real files: the PEP 503 HTML pages (and, asked for, the PEP 691 JSON
ones) of every file put in the tree, and a flat find-links page::

    root/files/<filename>             the distributions (+ ``<filename>.metadata``, PEP 658)
    root/simple/index.html            the project list
    root/simple/<project>/index.html  one page per project (+ ``index.json`` with json=True)
    root/find-links/index.html        a flat page (``write_find_links_page``)
    root/listings.json                the per-file listing options, so later calls merge

Each call rewrites every page from all the files of the tree, so pages never disagree with
it; how a file is listed (yanked, Requires-Python, its hash right, wrong or absent, a PEP 658
metadata file) is a ``Listing``. The same files and listings give byte-identical pages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import html
import json as jsonlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from testbed.distributions import read_wheel_metadata
from testbed.files import atomic_output, place, sha256_file, write_text

__all__ = [
    "JSON_CONTENT_TYPE",
    "UPLOAD_TIME",
    "HashMode",
    "Listing",
    "project_of",
    "write_find_links_page",
    "write_simple_index",
]

UPLOAD_TIME = "2024-01-01T00:00:00.000000Z"  # PEP 700 upload-time of every listed file
JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"

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
        """Every field but ``filename``, the entry's key in ``listings.json``."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "filename"}

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
        place(listing.path, root / "files" / filename)
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
            with atomic_output(meta) as tmp:
                tmp.write_bytes(read_wheel_metadata(root / "files" / name))
        else:
            with contextlib.suppress(FileNotFoundError):
                meta.unlink()
    blob = {"files": {n: entries[n].to_json() for n in sorted(entries)}}
    write_text(root / "listings.json", jsonlib.dumps(blob, indent=2, sort_keys=True) + "\n")
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
    real = sha256_file(path)
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
        write_text(page_dir / "index.html", _html_page(f"Links for {project}", map(_anchor, items)))
        json_path = page_dir / "index.json"
        if json:
            versions = {v for e in project_entries if (v := _version_of(e.filename)) is not None}
            page = {
                "meta": {"api-version": "1.1"},
                "name": project,
                "versions": [str(v) for v in sorted(versions)],
                "files": [_json_file(item) for item in items],
            }
            write_text(json_path, _json_text(page))
        else:
            with contextlib.suppress(FileNotFoundError):
                json_path.unlink()
    projects = sorted(by_project)
    root_lines = [f'    <a href="{quote(p)}/">{html.escape(p)}</a><br>' for p in projects]
    write_text(simple / "index.html", _html_page("Simple index", root_lines))
    if json:
        blob = {"meta": {"api-version": "1.1"}, "projects": [{"name": p} for p in projects]}
        write_text(simple / "index.json", _json_text(blob))
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
    write_text(page, _html_page("Find links", map(_anchor, items)))
    return page
