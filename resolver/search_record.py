"""The search record: what one lock's dependency search read and chose, to replay it.

The search (``resolver.closure``) is a deterministic function of its inputs: the roots, the
pins, the names built in the image, the overrides, the target, the tool's own code, and the
bytes of the index pages and METADATA files it read. After a successful lock
``resolver.lock`` keeps, per ``_search()`` call (two when ``rules.line_map`` adds pins), a
``RecordedSearch``: a fingerprint of those inputs (``fingerprint``, over ``code_digest``),
every page the search read (its index, its name, and the sha256 the index client computes over the
page's URL, content type and body; a 404 as 404), the sha256 of every METADATA it read, and
its outcome (each chosen version with the page row of its file, who required it, the runtime
group, the ignored requirements on overridden names, the root names).

A later lock of the same stack (one record per ``slot``: the stack's name, its target and its
index URLs) replays an entry instead of searching when its fingerprint is the one computed
now and every page it lists was fetched in this run with the same digest (a 404 still 404),
and every METADATA it lists still has the same sha256. The pages are revalidated as ever
(a conditional GET each), so a yanked file, a new release or a re-upload changes a page's
bytes, hence its digest, and the search runs again; a METADATA the page gives no sha256 for
is read again (from the cache when the file's sha256 keys it) and compared.

This module is pure: it encodes and decodes records and computes the digests. The record is
read as untrusted input (bounded in size by the cache, strict types, rows checked as
``simple_page.rows_from_cache`` checks a kept parse): anything unexpected makes it
unusable, and the search runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import resolvelib
from packaging import markers, requirements, specifiers, tags, utils, version
from packaging.utils import NormalizedName
from packaging.version import InvalidVersion, Version

from resolver.simple_page import ListedFile, rows_from_cache

RECORD_VERSION = 1
MAX_RECORD_BYTES = 32 << 20  # a record of thousands of pages is a few MB
MAX_ENTRIES = 8

# the modules whose code decides what the search does with its inputs
_CODE = (
    "closure.py",
    "lock.py",
    "fixed_points.py",
    "fetcher.py",
    "search.py",
    "search_replay.py",
    "wheel_select.py",
    "simple_page.py",
    "page_cache_rows.py",
    "page_checks.py",
    "page_html.py",
    "page_json.py",
    "page_records.py",
    "target.py",
    "wheel_metadata.py",
    "search_record.py",
)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,198}[a-z0-9])?")  # a canonical project name


@functools.cache
def code_digest() -> str:
    """sha256 over the source of the modules that decide the search (this tool's, and the
    ``packaging`` modules it reads versions, tags and requirements with), and resolvelib's
    version (computed once per process)."""
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in _CODE:
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    for module in (markers, requirements, specifiers, tags, utils, version):
        h.update(module.__name__.encode() + b"\0" + Path(module.__file__ or "").read_bytes())
    h.update(f"\0resolvelib {resolvelib.__version__}".encode())
    return h.hexdigest()


def slot_key(stack: str, target: str, index_urls: Mapping[str, str]) -> str:
    """The record's slot: one per stack name, target and index endpoints."""
    blob = json.dumps([stack, target, sorted(index_urls.items())], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def fingerprint(inputs: object) -> str:
    """sha256 of the search's inputs (JSON types) with ``code_digest``."""
    blob = json.dumps([code_digest(), inputs], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class PageRead:
    index: str
    name: NormalizedName
    digest: str | None  # None: the index said 404


@dataclass(frozen=True)
class MetadataRead:
    """A METADATA the search read whose sha256 the page does not give (so the page's digest
    does not cover it, and a replay reads it again)."""

    name: NormalizedName
    pos: int  # the file's row on the name's page; -1: the file of a pin
    row: ListedFile | None  # that row, None for a pin
    sha256: str  # of the METADATA bytes the search used


@dataclass(frozen=True)
class ChosenRecord:
    name: NormalizedName
    version: str
    pos: int  # the file's row on the name's page; -1: a pin (its file is the pin's)
    row: ListedFile | None  # that row, None for a pin


@dataclass(frozen=True)
class RecordedSearch:
    """One search: its inputs' fingerprint, what it read, what it chose."""

    fingerprint: str
    pages: tuple[PageRead, ...]
    metadata: tuple[MetadataRead, ...]
    chosen: tuple[ChosenRecord, ...]
    required_by: Mapping[NormalizedName, tuple[str, ...]]
    runtime: frozenset[NormalizedName]
    ignores: Mapping[NormalizedName, tuple[str, ...]]
    roots: frozenset[NormalizedName]


def row_json(row: ListedFile) -> list[object]:
    """A page row as JSON types (what ``rows_from_cache`` reads back)."""
    name, url, hashes, rp, yanked, reason, meta, size, upload, problem = row
    return [
        name,
        url,
        dict(hashes),
        rp,
        yanked,
        reason,
        None if meta is None else dict(meta),
        size,
        upload,
        problem,
    ]


def encode(entries: Sequence[RecordedSearch]) -> dict[str, object]:
    return {
        "version": RECORD_VERSION,
        "entries": [
            {
                "fingerprint": e.fingerprint,
                "pages": [[p.index, p.name, p.digest] for p in e.pages],
                "metadata": [
                    [m.name, m.pos, None if m.row is None else row_json(m.row), m.sha256]
                    for m in e.metadata
                ],
                "chosen": [
                    [c.name, c.version, c.pos, None if c.row is None else row_json(c.row)]
                    for c in e.chosen
                ],
                "required_by": {n: list(v) for n, v in sorted(e.required_by.items())},
                "runtime": sorted(e.runtime),
                "ignores": {n: list(v) for n, v in sorted(e.ignores.items())},
                "roots": sorted(e.roots),
            }
            for e in entries
        ],
    }


class _Bad(Exception):
    """The record is not one this module writes."""


def decode(data: object) -> tuple[RecordedSearch, ...] | None:
    """The entries of a record read back; None when it is not one ``encode`` could make."""
    try:
        obj = _dict(data, {"version", "entries"})
        if obj["version"] != RECORD_VERSION or type(obj["version"]) is not int:
            return None
        raw = _list(obj["entries"])
        if len(raw) > MAX_ENTRIES:
            return None
        return tuple(_entry(e) for e in raw)
    except _Bad:
        return None


def _entry(data: object) -> RecordedSearch:
    keys = {"fingerprint", "pages", "metadata", "chosen", "required_by", "runtime"}
    obj = _dict(data, keys | {"ignores", "roots"})
    fp = obj["fingerprint"]
    if type(fp) is not str or not _HEX64.fullmatch(fp):
        raise _Bad
    pages = []
    for p in _list(obj["pages"]):
        index, name, digest = _tuple(p, 3)
        if digest is not None and (type(digest) is not str or not _HEX64.fullmatch(digest)):
            raise _Bad
        pages.append(PageRead(_str(index), _name(name), digest))
    metadata = []
    for m in _list(obj["metadata"]):
        name, pos, row, sha = _tuple(m, 4)
        if type(sha) is not str or not _HEX64.fullmatch(sha):
            raise _Bad
        pos = _pos(pos)
        metadata.append(MetadataRead(_name(name), pos, _row(pos, row), sha))
    chosen = []
    for c in _list(obj["chosen"]):
        name, version, pos, row = _tuple(c, 4)
        version = _str(version)
        try:
            if str(Version(version)) != version:
                raise _Bad
        except InvalidVersion:
            raise _Bad from None
        pos = _pos(pos)
        chosen.append(ChosenRecord(_name(name), version, pos, _row(pos, row)))
    return RecordedSearch(
        fingerprint=fp,
        pages=tuple(pages),
        metadata=tuple(metadata),
        chosen=tuple(chosen),
        required_by=_names_to_texts(obj["required_by"]),
        runtime=frozenset(_name(n) for n in _list(obj["runtime"])),
        ignores=_names_to_texts(obj["ignores"]),
        roots=frozenset(_name(n) for n in _list(obj["roots"])),
    )


def _row(pos: int, row: object) -> ListedFile | None:
    """A recorded page row (checked as a kept parse's rows are), None for a pin's file."""
    if (pos == -1) != (row is None):
        raise _Bad
    if row is None:
        return None
    rows = rows_from_cache([row])
    if rows is None:
        raise _Bad
    return rows[0]


def _dict(data: object, keys: set[str]) -> dict[str, object]:
    if type(data) is not dict or set(data) != keys:
        raise _Bad
    return data


def _list(data: object) -> list[object]:
    if type(data) is not list:
        raise _Bad
    return data


def _tuple(data: object, n: int) -> list[object]:
    items = _list(data)
    if len(items) != n:
        raise _Bad
    return items


def _str(data: object) -> str:
    if type(data) is not str:
        raise _Bad
    return data


def _name(data: object) -> NormalizedName:
    if type(data) is not str or not _NAME.fullmatch(data):
        raise _Bad
    return NormalizedName(data)


def _pos(data: object) -> int:
    if type(data) is not int or data < -1:
        raise _Bad
    return data


def _names_to_texts(data: object) -> dict[NormalizedName, tuple[str, ...]]:
    if type(data) is not dict:
        raise _Bad
    return {_name(k): tuple(_str(v) for v in _list(texts)) for k, texts in data.items()}
