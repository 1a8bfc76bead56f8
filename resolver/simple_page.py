"""Parse index pages without I/O: PEP 503 HTML, PEP 691 JSON, and flat find-links pages.

Pure functions from (bytes, content type, page URL) to ``IndexFile`` records. Filenames are
the percent-decoded last path segment of the file URL (HTML) or the ``filename`` key (PEP 691);
hash fragments, ``data-yanked``, ``data-requires-python`` and PEP 658/714 metadata attributes
are honoured.

A filename is data, never a path: one that is not a plain file name (a ``/`` or ``\\``, a
``..``, a NUL or control character, see ``core.filenames``) stays on the list with its
``problem`` set and its name escaped for messages, so ``explain`` shows it refused and
nothing ever selects it. A PEP 691 value of the wrong JSON type, or a link that is not a URL,
is a broken page.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import overload
from urllib.parse import unquote, urljoin

from core.filenames import MAX_FILENAME_BYTES, filename_problem, shown
from core.urls import redact

JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_CONTENT_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
ACCEPT = f"{JSON_CONTENT_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


class PageParseError(ValueError):
    """The page is not a simple index page (wrong content type, broken JSON)."""


_HEX = re.compile(r"[0-9a-f]+")
_HEX_LENGTHS = {"md5": 32, "sha1": 40, "sha224": 56, "sha256": 64, "sha384": 96, "sha512": 128}


def _checked_hashes(hashes: Mapping[str, str], filename: str) -> dict[str, str]:
    """Hash values are hex digests of the right length; anything else is a broken page
    (and must never reach the cache, whose paths are built from them)."""
    out: dict[str, str] = {}
    for algo, value in hashes.items():
        want = _HEX_LENGTHS.get(algo)
        if want is None:
            continue  # an algorithm we cannot check is as good as none
        if len(value) != want or not _HEX.fullmatch(value):
            raise PageParseError(f"{filename}: {algo} hash {value[:80]!r} is not a hex digest")
        out[algo] = value
    return out


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    """One file listed on an index page."""

    filename: str
    url: str  # absolute, without the hash fragment
    hashes: Mapping[str, str] = field(default_factory=dict)
    requires_python: str | None = None
    yanked: bool = False
    yanked_reason: str = ""
    # PEP 658/714: None when no metadata file is offered; else its hashes (may be empty)
    metadata_hashes: Mapping[str, str] | None = None
    size: int | None = None
    upload_time: str | None = None
    # why this listing can never be used: its filename is not a plain file name (then
    # ``filename`` is the name as ``core.filenames.shown`` prints it); None for a usable one
    problem: str | None = None

    @property
    def metadata_url(self) -> str:
        return self.url + ".metadata"

    @staticmethod
    def from_row(row: Row) -> IndexFile:
        return _record(row)


# One file of a page as the parser leaves it, in the order of ``IndexFile``'s fields:
# (filename, url, hashes, requires_python, yanked, yanked_reason, metadata_hashes, size,
# upload_time, problem). A page of thousands of files is kept as these tuples, and an
# ``IndexFile`` is made only for a file that is looked at (``ProjectPage``).
Row = tuple[
    str,
    str,
    Mapping[str, str],
    str | None,
    bool,
    str,
    Mapping[str, str] | None,
    int | None,
    str | None,
    str | None,
]


def _record(row: Row) -> IndexFile:
    name, url, hashes, requires_python, yanked, reason, metadata, size, upload, problem = row
    return IndexFile(
        filename=name,
        url=url,
        hashes=hashes,
        requires_python=requires_python,
        yanked=yanked,
        yanked_reason=reason,
        metadata_hashes=metadata,
        size=size,
        upload_time=upload,
        problem=problem,
    )


class ProjectPage(Sequence[IndexFile]):
    """The files of one page, in page order: rows, each made an ``IndexFile`` the first time
    it is read (a real page lists thousands of files; a search reads a few of them).

    ``filename(i)`` and ``problem(i)`` read a file's name without making its record.

    A page parsed for a target (``target`` is its key, ``resolver.target.TargetTags.key``)
    holds only the files that target may run: ``dropped`` wheels none of whose tags it
    accepts were left out. ``whole()`` is the page with every file it lists, parsed again
    from the same bytes, for what shows every file (``explain``, a refusal).

    ``digest``: the sha256 the index client computed over the page's URL, content type and
    body (what a search record compares), None when it was not computed."""

    __slots__ = ("_full", "_made", "_whole", "digest", "dropped", "rows", "target")

    def __init__(
        self,
        rows: Sequence[Row],
        *,
        target: str | None = None,
        dropped: int = 0,
        whole: Callable[[], ProjectPage] | None = None,
        digest: str | None = None,
    ) -> None:
        self.rows = rows
        self.digest = digest
        self._made: dict[int, IndexFile] = {}
        self.target = target
        self.dropped = dropped
        self._whole = whole
        self._full: ProjectPage | None = None

    def whole(self) -> ProjectPage:
        """Every file the page lists: this page itself unless it was parsed for a target."""
        if self._whole is None:
            return self
        if self._full is None:
            self._full = self._whole()
        return self._full

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> IndexFile: ...

    @overload
    def __getitem__(self, i: slice) -> list[IndexFile]: ...

    def __getitem__(self, i: int | slice) -> IndexFile | list[IndexFile]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.rows)))]
        if i < 0:
            i += len(self.rows)
        made = self._made.get(i)
        if made is None:
            made = self._made.setdefault(i, _record(self.rows[i]))
        return made

    def __iter__(self) -> Iterator[IndexFile]:
        for i in range(len(self.rows)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ProjectPage, list)):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.target is None:
            return f"ProjectPage({len(self.rows)} files)"
        return f"ProjectPage({len(self.rows)} files for {self.target}, {self.dropped} dropped)"

    def filename(self, i: int) -> str:
        return self.rows[i][0]

    def problem(self, i: int) -> str | None:
        return self.rows[i][9]


_ROW_HASHES = re.compile(
    r"(?:md5:[0-9a-f]{32}|sha1:[0-9a-f]{40}|sha224:[0-9a-f]{56}|sha256:[0-9a-f]{64}"
    r"|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})"
)


def _cached_hashes(value: object) -> bool:
    """A hashes value as the parser leaves it: algorithms it checks, hex digests."""
    if type(value) is not dict:
        return False
    for algo, digest in value.items():
        if type(digest) is not str or _ROW_HASHES.fullmatch(f"{algo}:{digest}") is None:
            return False
    return True


def rows_from_cache(data: object) -> list[Row] | None:
    """The rows of a parsed page read back from the cache (JSON: lists for tuples), when
    every row is one the parser could have made: the right types, a plain file name unless
    a problem is set, hashes of hex digests. None otherwise (the page is parsed again)."""
    if type(data) is not list:
        return None
    plain = _PLAIN_NAME.fullmatch
    for row in data:
        if type(row) is not list or len(row) != 10:
            return None
        name, url, hashes, rp, yanked, reason, meta, size, upload, problem = row
        if not (
            type(name) is str
            and type(url) is str
            and _cached_hashes(hashes)
            and (rp is None or type(rp) is str)
            and type(yanked) is bool
            and type(reason) is str
            and (meta is None or _cached_hashes(meta))
            and (size is None or (type(size) is int and size >= 0))
            and (upload is None or type(upload) is str)
        ):
            return None
        if problem is None:
            if plain(name) is None or ".." in name or name == ".":
                return None
        elif type(problem) is not str:
            return None
    return data


def kept_from_cache(data: object, target: str) -> tuple[list[Row], int] | None:
    """The rows and the count of files left out of a page parsed for ``target``, read back
    from the cache (``{"target", "dropped", "rows"}``), when the target is that one and
    every row passes ``rows_from_cache``; None otherwise (the page is parsed again)."""
    if type(data) is not dict or data.keys() != {"target", "dropped", "rows"}:
        return None
    dropped = data["dropped"]
    if data["target"] != target or type(dropped) is not int or dropped < 0:
        return None
    rows = rows_from_cache(data["rows"])
    return None if rows is None else (rows, dropped)


def whole_page(files: Sequence[IndexFile]) -> Sequence[IndexFile]:
    """Every file of ``files``: the whole page when it is a page parsed for a target."""
    return files.whole() if isinstance(files, ProjectPage) else files


def listed(files: Sequence[IndexFile]) -> int:
    """How many files the page lists, counting those a parse for a target left out."""
    return len(files) + (files.dropped if isinstance(files, ProjectPage) else 0)


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def parse_project_page(content: bytes, content_type: str, page_url: str) -> ProjectPage:
    """Parse one project's page, as JSON (PEP 691) or HTML (PEP 503) by its content type."""
    return ProjectPage(parse_rows(content, content_type, page_url))


def parse_rows(content: bytes, content_type: str, page_url: str) -> list[Row]:
    """``parse_project_page`` as rows: every file checked as the records are."""
    return parse_kept(content, content_type, page_url, keep=None)[0]


# which plain file names a parse makes rows of (``TargetTags.may_run``); None: every one
Keep = Callable[[str], bool] | None


def parse_kept(
    content: bytes, content_type: str, page_url: str, *, keep: Keep
) -> tuple[list[Row], int]:
    """The rows of the files ``keep`` keeps, and how many it left out. A file with a
    filename problem is always kept. A kept file is checked as for ``parse_rows``; a file
    left out of a PEP 691 page is not read beyond its name (``_scan_json``), one of an HTML
    page is checked all the same (a broken link breaks the page whether it is kept or not)."""
    kind = media_type(content_type)
    if kind == JSON_CONTENT_TYPE:
        return _parse_json(content, page_url, keep)
    if kind in HTML_CONTENT_TYPES or kind == "":
        return _parse_html(content, page_url, keep)
    raise PageParseError(f"unexpected content type {content_type!r} (want HTML or PEP 691 JSON)")


def parse_find_links_page(content: bytes, content_type: str, page_url: str) -> ProjectPage:
    """A flat page of links to files of many projects (pip's ``--find-links``)."""
    return parse_project_page(content, content_type or "text/html", page_url)


def _split_hash_fragment(url: str) -> tuple[str, dict[str, str]]:
    bare, _, fragment = url.partition("#")
    hashes: dict[str, str] = {}
    if fragment and "=" in fragment:
        algo, _, value = fragment.partition("=")
        if algo and value:
            hashes[algo.lower()] = value.lower()
    return bare, hashes


def _filename(url: str) -> str:
    path = url.partition("?")[0]  # the fragment is already gone
    return unquote(path.rsplit("/", 1)[-1])


# a name of these characters only is a plain file name unless it is "." or holds ".." (the
# check ``filename_problem`` makes, done here in one regex step for the thousands of names of
# a page; any other name goes through ``filename_problem``)
_PLAIN_NAME = re.compile(rf"[A-Za-z0-9._+!-]{{1,{MAX_FILENAME_BYTES}}}")


def _name_and_problem(raw: str) -> tuple[str, str | None]:
    """The filename as kept (escaped when it is not a plain file name) and its problem."""
    if _PLAIN_NAME.fullmatch(raw) is not None and ".." not in raw and raw != ".":
        return raw, None
    problem = filename_problem(raw)
    return (raw, None) if problem is None else (shown(raw), problem)


def _join(base: str, href: str) -> str:
    try:
        return urljoin(base, href)
    except ValueError:  # e.g. an unclosed [IPv6 host
        raise PageParseError(f"link {redact(shown(href))!r} is not a URL") from None


# what ``urljoin`` returns unchanged: an absolute http(s) URL with a plain host and path (no
# query, parameters, fragment, whitespace or control characters); and the last segment of a
# relative link that ``urljoin`` appends as is to the join of the link's directory
_PLAIN_ABSOLUTE = re.compile(r"https?://[A-Za-z0-9.-]+(?::[0-9]+)?/[A-Za-z0-9._~%+!/-]*")
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9._~%+!-]+")
_PLAIN_FRAGMENT = re.compile(r"[A-Za-z0-9=]*")
_PLAIN_HEAD = re.compile(r"[A-Za-z0-9._~%+!/-]*")


class _Joiner:
    """``urljoin(base, href)`` for every link of one page, the same string, computed once per
    directory of the links (a page's files share one or a few)."""

    def __init__(self, base: str) -> None:
        self.base = base
        self._dirs: dict[str, str] = {}

    def __call__(self, href: str) -> str:
        bare, hashmark, fragment = href.partition("#")
        plain_fragment = _PLAIN_FRAGMENT.fullmatch(fragment) is not None and (
            fragment or not hashmark
        )
        if plain_fragment and bare:
            tail = hashmark + fragment
            if _PLAIN_ABSOLUTE.fullmatch(bare) is not None:
                return bare + tail
            head, slash, name = bare.rpartition("/")
            relative = (
                slash and not bare.startswith("//") and _PLAIN_HEAD.fullmatch(head) is not None
            )
            if relative and name not in (".", "..") and _PLAIN_SEGMENT.fullmatch(name) is not None:
                joined = self._dirs.get(head)
                if joined is None:
                    try:
                        joined = urljoin(self.base, head + "/")
                    except ValueError:
                        return _join(self.base, href)  # the refusal, naming the whole link
                    self._dirs[head] = joined
                if joined.endswith("/") and "?" not in joined and "#" not in joined:
                    return joined + name + tail
        return _join(self.base, href)


def _metadata_attr(value: str | None) -> Mapping[str, str] | None:
    if value is None or value.lower() == "false":
        return None
    if value.lower() == "true" or "=" not in value:
        return {}
    algo, _, digest = value.partition("=")
    return {algo.lower(): digest.lower()}


class _AnchorParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.anchors: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "base" and self.base is None:
            href = dict(attrs).get("href")
            if href:
                self.base = href
        elif tag == "a":
            self.anchors.append(dict(attrs))


_TAG = re.compile(r"<(a|base)(\s[^<>]*)?>", re.IGNORECASE)
_ATTR = re.compile(r"""([^\s=/>"']+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_TRICKY = re.compile(r"<!--|<script|<!\[CDATA\[|<textarea|<title[^>]*>[^<]*<a", re.IGNORECASE)


def _scan_tags(text: str) -> tuple[str | None, list[dict[str, str | None]]]:
    """The ``<base href>`` and the attributes of every ``<a>`` of a plain index page.

    Simple pages are flat lists of anchors, so a regular expression reads them several times
    faster than ``html.parser``; pages with comments or scripts go through the real parser.
    """
    if _TRICKY.search(text):
        parser = _AnchorParser()
        parser.feed(text)
        parser.close()
        return parser.base, parser.anchors
    base: str | None = None
    anchors: list[dict[str, str | None]] = []
    for m in _TAG.finditer(text):
        attrs: dict[str, str | None] = {}
        for a in _ATTR.finditer(m.group(2) or ""):
            raw = a.group(2) if a.group(2) is not None else a.group(3)
            if raw is None:
                raw = a.group(4)
            name = a.group(1).lower()
            if name not in attrs:
                attrs[name] = html.unescape(raw) if raw is not None else None
        if m.group(1).lower() == "a":
            anchors.append(attrs)
        elif base is None and attrs.get("href"):
            base = attrs["href"]
    return base, anchors


def _parse_html(content: bytes, page_url: str, keep: Keep) -> tuple[list[Row], int]:
    base_href, anchors = _scan_tags(content.decode("utf-8", errors="replace"))
    base = _join(page_url, base_href) if base_href else page_url
    join = _Joiner(base)
    files: list[Row] = []
    dropped = 0
    for attrs in anchors:
        href = attrs.get("href")
        if not href:
            continue
        url, hashes = _split_hash_fragment(join(href))
        raw = _filename(url)
        if not raw:
            continue
        filename, problem = _name_and_problem(raw)
        yanked = "data-yanked" in attrs
        metadata = _metadata_attr(attrs.get("data-core-metadata"))
        if metadata is None:
            metadata = _metadata_attr(attrs.get("data-dist-info-metadata"))
        if keep is not None and problem is None and not keep(filename):
            _checked_hashes(hashes, filename)  # checked all the same: a broken page is broken
            if metadata is not None:
                _checked_hashes(metadata, filename)
            dropped += 1
            continue
        files.append(
            (
                filename,
                url,
                _checked_hashes(hashes, filename),
                attrs.get("data-requires-python") or None,
                yanked,
                (attrs.get("data-yanked") or "") if yanked else "",
                None if metadata is None else _checked_hashes(metadata, filename),
                None,
                None,
                problem,
            )
        )
    return files, dropped


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _json_str_map(value: object, what: str) -> dict[str, str]:
    """A JSON object of strings (``hashes``, ``core-metadata``), keys lower-cased."""
    if not isinstance(value, dict):
        raise PageParseError(f"{what} is a JSON {_type_name(value)}, not an object")
    out: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(item, str):
            raise PageParseError(
                f"{what}[{shown(key)!r}] is a JSON {_type_name(item)}, not a string"
            )
        out[key.lower()] = item.lower()
    return out


def _json_metadata(value: object, what: str) -> Mapping[str, str] | None:
    if value is None or value is False:
        return None
    if value is True:
        return {}
    return _json_str_map(value, what)


def _parse_json(content: bytes, page_url: str, keep: Keep = None) -> tuple[list[Row], int]:
    """A PEP 691 page: for a target, scanned (``_scan_json``) unless the scan has any doubt;
    else, and for the whole page, every value of it read and checked (``_parse_json_full``)."""
    if keep is not None:
        scanned = _scan_json(content, page_url, keep)
        if scanned is not None:
            return scanned
    return _parse_json_full(content, page_url, keep)


def _parse_json_full(content: bytes, page_url: str, keep: Keep = None) -> tuple[list[Row], int]:
    try:
        data = json.loads(content)
    except RecursionError:
        raise PageParseError("broken PEP 691 JSON: nested too deeply") from None
    except ValueError as exc:
        raise PageParseError(f"broken PEP 691 JSON: {exc}") from None
    return _json_files(data, page_url, keep)


def _json_files(data: object, page_url: str, keep: Keep = None) -> tuple[list[Row], int]:
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise PageParseError("PEP 691 JSON without a 'files' list")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise PageParseError(f"PEP 691 JSON: 'meta' is a JSON {_type_name(meta)}, not an object")
    version = meta.get("api-version", "1.0")
    if not isinstance(version, str):
        raise PageParseError(
            f"PEP 691 JSON: 'meta.api-version' is a JSON {_type_name(version)}, not a string"
        )
    if not version.startswith("1."):
        raise PageParseError(f"unsupported PEP 691 api-version {shown(version)}")
    return _json_rows(data["files"], _Joiner(page_url), keep)


def _plain_sha256(value: object) -> Mapping[str, str] | None:
    """``value`` itself when it is ``{"sha256": <64 lower-case hex digits>}``, else None."""
    if type(value) is dict and len(value) == 1:
        digest = value.get("sha256")
        if type(digest) is str and len(digest) == 64 and _HEX.fullmatch(digest) is not None:
            return value
    return None


def _json_rows(entries: list[object], join: _Joiner, keep: Keep = None) -> tuple[list[Row], int]:
    """The rows of a page's ``files`` that ``keep`` keeps, and how many it left out. The
    common entry (a plain file name, a link without a fragment, a sha256 or no hash, values
    of the right types) is read in a few steps here, to the row ``_json_file`` makes of it;
    any other goes through ``_json_file``, which checks every value and says what is wrong.
    A file left out is checked all the same (its link joined, its values typed): a broken
    entry breaks the page whether it is kept or not (the page read whole, ``_parse_json_full``;
    the scan for a target, ``_scan_json``, does not read the files it leaves out)."""
    rows: list[Row] = []
    append = rows.append
    plain = _PLAIN_NAME.fullmatch
    dropped = 0
    for entry in entries:
        if type(entry) is dict:
            raw, href = entry.get("filename"), entry.get("url")
            if (
                type(raw) is str
                and type(href) is str
                and plain(raw) is not None
                and ".." not in raw
                and raw != "."
                and "#" not in href
            ):
                hashes = entry.get("hashes")
                requires_python = entry.get("requires-python")
                yanked = entry.get("yanked")
                size = entry.get("size")
                upload_time = entry.get("upload-time")
                metadata = entry.get("core-metadata")
                if metadata is None or metadata is False:
                    metadata = entry.get("dist-info-metadata")
                if metadata is False:
                    metadata = None
                if (
                    (hashes is None or hashes == {} or _plain_sha256(hashes) is not None)
                    and (requires_python is None or type(requires_python) is str)
                    and (yanked is None or type(yanked) is bool or type(yanked) is str)
                    and (size is None or (type(size) is int and size >= 0))
                    and (upload_time is None or type(upload_time) is str)
                    and (
                        metadata is None
                        or metadata is True
                        or metadata == {}
                        or _plain_sha256(metadata) is not None
                    )
                ):
                    url = join(href)
                    if keep is not None and not keep(raw):
                        dropped += 1
                        continue
                    append(
                        (
                            raw,
                            url,
                            hashes or {},
                            requires_python or None,
                            bool(yanked),
                            yanked if type(yanked) is str else "",
                            None if metadata is None else ({} if metadata is True else metadata),
                            size,
                            upload_time,
                            None,
                        )
                    )
                    continue
        row = _json_file(entry, join)
        if keep is not None and row[9] is None and not keep(row[0]):
            dropped += 1
            continue
        append(row)
    return rows, dropped


def _typed(
    entry: Mapping[str, object],
    key: str,
    kinds: type | tuple[type, ...],
    what: str,
    where: str,
) -> object:
    """``entry[key]`` when absent, null or of one of ``kinds`` (a bool is no number)."""
    value = entry.get(key)
    if value is None:
        return None
    wanted = kinds if isinstance(kinds, tuple) else (kinds,)
    if (isinstance(value, bool) and bool not in wanted) or not isinstance(value, wanted):
        raise PageParseError(f"{where}: {key!r} is a JSON {_type_name(value)}, not {what}")
    return value


def _get(
    entry: Mapping[str, object], key: str, kinds: tuple[type, ...], what: str, filename: str
) -> object:
    """``_typed`` with the common case first: a value that is absent, null or exactly of one
    of ``kinds`` (JSON gives no subclasses) is returned without building a message."""
    value = entry.get(key)
    if value is None or type(value) in kinds:
        return value
    return _typed(entry, key, kinds, what, f"PEP 691 file {filename}")


def _json_file(entry: object, join: _Joiner) -> Row:
    if not isinstance(entry, dict) or "url" not in entry or "filename" not in entry:
        raise PageParseError(
            f"PEP 691 file entry without url or filename: {shown(repr(entry), limit=120)}"
        )
    raw = entry["filename"]
    if not isinstance(raw, str):
        raise PageParseError(
            f"PEP 691 file entry: 'filename' is a JSON {_type_name(raw)}, not a string"
        )
    filename, problem = _name_and_problem(raw)
    where = f"PEP 691 file {filename}"
    href = entry["url"]
    if type(href) is not str:
        raise PageParseError(f"{where}: 'url' is a JSON {_type_name(href)}, not a string")
    url, frag_hashes = _split_hash_fragment(join(href))
    raw_hashes = entry.get("hashes")
    hashes = _json_str_map(raw_hashes, f"{where}: 'hashes'") if raw_hashes is not None else {}
    requires_python = _get(entry, "requires-python", (str,), "a string", filename)
    yanked = _get(entry, "yanked", (bool, str), "true, false or a reason", filename)
    size = _get(entry, "size", (int,), "a number of bytes", filename)
    if isinstance(size, int) and size < 0:
        raise PageParseError(f"{where}: 'size' is {size}, less than zero")
    upload_time = _get(entry, "upload-time", (str,), "a string", filename)
    metadata = _json_metadata(entry.get("core-metadata"), f"{where}: 'core-metadata'")
    if metadata is None:
        metadata = _json_metadata(entry.get("dist-info-metadata"), f"{where}: 'dist-info-metadata'")
    return (
        filename,
        url,
        _checked_hashes(hashes or frag_hashes, filename),
        str(requires_python) if requires_python else None,
        bool(yanked),
        yanked if isinstance(yanked, str) else "",
        None if metadata is None else _checked_hashes(metadata, filename),
        size if isinstance(size, int) else None,
        str(upload_time) if upload_time is not None else None,
        problem,
    )


# ----------------------------------------------------------------------------- the scan
#
# A page parsed for a target reads, of each file it leaves out, only the name: the files a
# target cannot run are most of a real page, and ``json.loads`` of all of them, and the
# checks of every entry, are most of the CPU a cold lock spends on its pages. ``_scan_json``
# finds each entry and its name with regular expressions over the text, and decodes
# (``raw_decode``) only the entries it keeps; at any doubt it answers None and the page is
# read whole, which also says what is wrong with a broken page.
#
# Why no page that ``_parse_json_full`` reads is read otherwise (no entry missed, none made
# up, no name other than the one ``json.loads`` gives). Let the page be one the full parse
# reads: valid JSON whose ``files`` is a list of objects, each with a string ``filename``.
#
# 0. The text is the page decoded as strict UTF-8 without a BOM: what ``json.loads`` reads.
# 1. The top-level object is read key by key, each key and every value but ``files``
#    decoded exactly (``raw_decode``); a key given twice is a doubt. So the ``[`` of
#    ``files`` is where the scan starts, and the first ``{`` after it starts the first entry.
# 2. No ``\u006`` is in the text, so a string whose value is ``filename`` is written
#    ``"filename"`` (only a ``\u`` escape gives a letter, and ``\u0060``-``\u006f`` are the
#    ones that give the letters of ``filename``).
# 3. ``_HEAD`` read from the ``{`` of an entry reads that entry's own keys, in order: each
#    of its tokens (strings without a backslash, literals, numbers, flat objects of such
#    strings) is the JSON token at that place, so it stops at the entry's first key
#    ``filename``, and the string after it (no backslash either) is that key's value.
# 4. Between an entry's start and the next ``[`` or ``]`` of the text (``bracket``), no
#    list opens or closes, so the innermost list there is ``files``. A ``{`` that follows
#    ``}``, blanks and ``,`` there is either inside a string or, outside strings, a value
#    after a comma of that list (after a comma of an object comes a key): an entry's start.
#    Inside a string, ``_NEXT`` cannot match: the ``"`` after that ``{`` (and blanks) has no
#    backslash before it, so it ends the string; no ``"`` the pattern reads has a backslash
#    before it (its strings hold none), so each is a real quote, and they alternate: the
#    pattern's strings are the text between the page's strings, and its ``"filename"``
#    would be the bare word ``filename`` outside any string, which no valid JSON holds.
#    So every match of ``_NEXT`` before ``bracket`` is an entry's start and its name, in
#    page order, and an entry the scan decodes (every kept one, and the last one found
#    before ``bracket``, whose end is where the scan goes on) is decoded from its start.
# 5. Each entry the scan finds took one ``"filename"`` of the text, its own. The scan
#    insists that the text holds exactly as many ``"filename"`` as entries it found. Every
#    ``filename`` key of every entry is written so (2.), so each is the one key that some
#    entry found took (3.): no entry was missed (its key would be one more), and none has
#    a second ``filename`` (the one ``json.loads`` would keep, being the last). (A key
#    ``"filename"`` shares no quote with another ``"filename"`` of valid JSON, so the count,
#    which counts occurrences that do not overlap, counts every such key.)
#
# Each entry the scan keeps is decoded and made a row by ``_json_rows``, as the full parse
# makes it, so the rows and the count of the rest are the full parse's. On any page the
# patterns take time linear in the text (each repeat stops where its token ends, and what
# follows it cannot be read by it: nothing to backtrack into; no possessive repeats, which
# Python 3.10 lacks),
# ``raw_decode`` stops at a depth the interpreter allows (a RecursionError is a doubt), and
# what is kept is the rows: a hostile page costs its size and is read whole at a doubt.

_DECODE = json.JSONDecoder().raw_decode
_BLANKS = re.compile(r"[ \t\n\r]*")
_COMMA = re.compile(r"[ \t\n\r]*,[ \t\n\r]*")
_UTF8_BOM = b"\xef\xbb\xbf"

_W = r"[ \t\n\r]*"
_S = r'"[^"\\\x00-\x1f]*"'  # a string without an escape: the text is its value
_VALUE = (
    rf"(?:{_S}|true|false|null|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
    rf"|\{{{_W}(?:{_S}{_W}:{_W}{_S}{_W}(?:,{_W}{_S}{_W}:{_W}{_S}{_W})*)?\}})"
)
# from the ``{`` of an entry: its keys before the first ``filename`` and their plain values,
# then that key and its value (the first group when it is of ``_PLAIN_NAME``, else the second)
_TO_NAME = (
    rf'{_W}(?:(?!"filename"){_S}{_W}:{_W}{_VALUE}{_W},{_W})*?'
    rf'"filename"{_W}:{_W}"(?:([A-Za-z0-9._+!-]{{1,{MAX_FILENAME_BYTES}}})|([^"\\\x00-\x1f]*))"'
)
_HEAD = re.compile(r"\{" + _TO_NAME)
_NEXT = re.compile(rf"\}}{_W},{_W}(\{{){_TO_NAME}")


def _scan_json(
    content: bytes, page_url: str, keep: Callable[[str], bool]
) -> tuple[list[Row], int] | None:
    """The rows of the files ``keep`` keeps and how many it left out, the files left out read
    no further than their names; None when the page is not plainly one the scan can read
    (then it is read whole). See the comment above for why the two never differ."""
    if content.startswith(_UTF8_BOM) or b"\x00" in content[:4]:
        return None  # json.loads would read another encoding
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if "\\" in text and "\\u006" in text:  # the first test is a fast one
        return None
    try:
        scanned = _scan_page(text, keep)
    except (ValueError, RecursionError):  # raw_decode of a broken or too deep value
        return None
    if scanned is None:
        return None
    data, kept, dropped, found = scanned
    if text.count('"filename"') != found:
        return None
    try:
        _json_files(data, page_url)  # the checks of the page itself (its files are [])
        rows = _json_rows(kept, _Joiner(page_url))[0]
    except PageParseError:
        return None  # a kept entry is broken: the full parse says which one first
    return rows, dropped


def _scan_page(
    text: str, keep: Callable[[str], bool]
) -> tuple[dict[str, object], list[object], int, int] | None:
    """The top-level object, ``files`` read by ``_scan_files`` (and left an empty list), the
    kept entries, how many were left out and how many were found; None at a doubt."""
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return None
    pos = _skip(text, pos + 1)
    data: dict[str, object] = {}
    scanned: tuple[list[object], int, int, int] | None = None
    while text.startswith('"', pos):
        key, pos = _DECODE(text, pos)
        if type(key) is not str or key in data:
            return None
        pos = _skip(text, pos)
        if not text.startswith(":", pos):
            return None
        pos = _skip(text, pos + 1)
        if key == "files":
            if not text.startswith("[", pos):
                return None
            scanned = _scan_files(text, pos, keep)
            if scanned is None:
                return None
            data[key] = []
            pos = scanned[3]
        else:
            data[key], pos = _DECODE(text, pos)
        pos = _skip(text, pos)
        if text.startswith(",", pos):
            pos = _skip(text, pos + 1)
        elif text.startswith("}", pos):
            if scanned is None or _skip(text, pos + 1) != len(text):
                return None
            return data, scanned[0], scanned[1], scanned[2]
        else:
            return None
    return None


def _skip(text: str, pos: int) -> int:
    """The position after the blanks at ``pos``."""
    blanks = _BLANKS.match(text, pos)
    return pos if blanks is None else blanks.end()


def _next_bracket(text: str, pos: int) -> int:
    """Where the first ``[`` or ``]`` at or after ``pos`` is (the text's length if none)."""
    found = [at for at in (text.find("[", pos), text.find("]", pos)) if at >= 0]
    return min(found) if found else len(text)


def _judged(plain: str | None, other: str | None, keep: Callable[[str], bool]) -> tuple[str, bool]:
    """An entry's name as scanned (``plain`` when it is of ``_PLAIN_NAME``, else ``other``)
    and whether the parse keeps it: a name with a problem is always kept."""
    if plain is not None and ".." not in plain and plain != ".":
        return plain, keep(plain)
    name = other if plain is None else plain
    assert name is not None  # one of the two groups matched
    return name, _name_and_problem(name)[1] is not None or keep(name)


def _scan_files(
    text: str, pos: int, keep: Callable[[str], bool]
) -> tuple[list[object], int, int, int] | None:
    """The ``files`` list whose ``[`` is at ``pos``: the kept entries (decoded), how many were
    left out, how many were found, and the position after its ``]``; None at a doubt."""
    pos = _skip(text, pos + 1)
    if text.startswith("]", pos):
        return [], 0, 0, pos + 1
    kept: list[object] = []
    dropped = found = 0
    bracket = -1
    while True:
        # ``pos`` is the start of an entry (the first, or the one after a decoded entry)
        head = _HEAD.match(text, pos)
        if head is None:
            return None
        if bracket < pos:
            bracket = _next_bracket(text, pos)
        start = pos
        name, wanted = _judged(head.group(1), head.group(2), keep)
        found += 1
        for following in _NEXT.finditer(text, head.end(), bracket):
            after = following.start(1)
            if wanted:
                entry, end = _DECODE(text, start)
                if type(entry) is not dict or entry.get("filename") != name:
                    return None
                comma = _COMMA.match(text, end)
                if comma is None or comma.end() != after:
                    return None
                kept.append(entry)
            else:
                dropped += 1
            start = after
            name, wanted = _judged(following.group(2), following.group(3), keep)
            found += 1
        # the last entry found before ``bracket``: decoded, for where it ends
        entry, end = _DECODE(text, start)
        if type(entry) is not dict or entry.get("filename") != name:
            return None
        if wanted:
            kept.append(entry)
        else:
            dropped += 1
        pos = _skip(text, end)
        if text.startswith("]", pos):
            return kept, dropped, found, pos + 1
        if not text.startswith(",", pos):
            return None
        pos = _skip(text, pos + 1)
        if not text.startswith("{", pos):
            return None
