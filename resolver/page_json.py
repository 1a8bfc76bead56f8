"""The PEP 691 JSON reader: every value of a page read and checked, the files made rows.

For a target (``json_for_target``), the files it cannot run, most of a real page, are read no
further than their names. A file's name is its ``filename`` key; its hashes,
``requires-python``, ``yanked``, ``size``, ``upload-time`` and PEP 658/714 ``core-metadata``
(or ``dist-info-metadata``) are read. A value of the wrong JSON type, a link that is not a
URL, a hash that is not a hex digest or an api-version other than 1.x is a broken page, named
in the error, whether the file is kept or not.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

import orjson

from core.filenames import shown
from resolver.page_checks import (
    HEX_DIGITS,
    PLAIN_NAME,
    Joiner,
    PageParseError,
    checked_hashes,
    name_and_problem,
    split_hash_fragment,
)
from resolver.page_records import Keep, ListedFile


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


def parse_json_full(
    content: bytes, page_url: str, keep: Keep = None
) -> tuple[list[ListedFile], int]:
    try:
        data = json.loads(content)
    except RecursionError:
        raise PageParseError("broken PEP 691 JSON: nested too deeply") from None
    except json.JSONDecodeError:  # no position: Python's differs between versions
        raise PageParseError("broken PEP 691 JSON: not valid JSON") from None
    except ValueError as exc:  # not UTF-8
        raise PageParseError(f"broken PEP 691 JSON: {exc}") from None
    return json_files(data, page_url, keep)


def json_for_target(
    content: bytes, page_url: str, keep: Callable[[str], bool]
) -> tuple[list[ListedFile], int] | None:
    """The rows of the files ``keep`` keeps (a name with a problem is always kept) and how
    many it left out, those read no further than their names; what ``parse_json_full`` gives
    for the kept files. None when orjson does not read the page as ``json.loads`` would (a
    BOM or another encoding, a number past 64 bits, a lone surrogate), when an entry is not
    an object with a string ``filename``, or when the page or a kept entry is broken: the
    page is then read whole, which says what is wrong."""
    if content.startswith(b"\xef\xbb\xbf") or b"\x00" in content[:4]:
        return None  # json.loads would read another encoding
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or type(data.get("files")) is not list:
        return None
    kept: list[object] = []
    dropped = 0
    for entry in data["files"]:
        name = entry.get("filename") if type(entry) is dict else None
        if type(name) is not str:
            return None
        if name_and_problem(name)[1] is not None or keep(name):
            kept.append(entry)
        else:
            dropped += 1
    try:
        json_files({**data, "files": []}, page_url)  # the checks of the page itself
        rows = json_rows(kept, Joiner(page_url))[0]
    except PageParseError:
        return None
    return rows, dropped


def json_files(data: object, page_url: str, keep: Keep = None) -> tuple[list[ListedFile], int]:
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
    return json_rows(data["files"], Joiner(page_url), keep)


def _plain_sha256(value: object) -> Mapping[str, str] | None:
    """``value`` itself when it is ``{"sha256": <64 lower-case hex digits>}``, else None."""
    if type(value) is dict and len(value) == 1:
        digest = value.get("sha256")
        if type(digest) is str and len(digest) == 64 and HEX_DIGITS.fullmatch(digest) is not None:
            return value
    return None


def json_rows(
    entries: list[object], join: Joiner, keep: Keep = None
) -> tuple[list[ListedFile], int]:
    """The rows of a page's ``files`` that ``keep`` keeps, and how many it left out. The
    common entry is read in a few steps (``_common_row``), to the row ``_json_file`` makes of
    it; any other goes through ``_json_file``, which checks every value and says what is wrong.
    A file left out is checked all the same (its link joined, its values typed): a broken
    entry breaks the page whether it is kept or not (the page read whole, ``parse_json_full``;
    the read for a target, ``json_for_target``, does not read the files it leaves out)."""
    rows: list[ListedFile] = []
    append = rows.append
    dropped = 0
    for entry in entries:
        row = _common_row(entry, join)
        if row is None:
            row = _json_file(entry, join)
        if keep is not None and row[9] is None and not keep(row[0]):
            dropped += 1
            continue
        append(row)
    return rows, dropped


def _common_row(entry: object, join: Joiner) -> ListedFile | None:
    """The row of a common entry: a plain file name, a link without a fragment, a sha256 or
    no hash, values of the right types (``_common_values``); None for any other entry."""
    if type(entry) is not dict:
        return None
    raw, href = entry.get("filename"), entry.get("url")
    if type(raw) is not str or type(href) is not str or "#" in href:
        return None
    if PLAIN_NAME.fullmatch(raw) is None or ".." in raw or raw == ".":
        return None
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
    if not _common_values(
        hashes=hashes,
        requires_python=requires_python,
        yanked=yanked,
        size=size,
        upload_time=upload_time,
        metadata=metadata,
    ):
        return None
    return (
        raw,
        join(href),
        hashes or {},
        requires_python or None,
        bool(yanked),
        yanked if type(yanked) is str else "",
        None if metadata is None else ({} if metadata is True else metadata),
        size,
        upload_time,
        None,
    )


def _common_values(
    *,
    hashes: object,
    requires_python: object,
    yanked: object,
    size: object,
    upload_time: object,
    metadata: object,
) -> bool:
    """Whether an entry's values are of the common kinds, which ``_json_file`` takes as they
    are: no hash or a plain sha256, strings, a yanked flag or reason, a size of zero or more,
    and metadata offered without a hash or with a plain sha256."""
    return (
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
    )


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


def _json_file(entry: object, join: Joiner) -> ListedFile:
    if not isinstance(entry, dict) or "url" not in entry or "filename" not in entry:
        raise PageParseError(
            f"PEP 691 file entry without url or filename: {shown(repr(entry), limit=120)}"
        )
    raw = entry["filename"]
    if not isinstance(raw, str):
        raise PageParseError(
            f"PEP 691 file entry: 'filename' is a JSON {_type_name(raw)}, not a string"
        )
    filename, problem = name_and_problem(raw)
    where = f"PEP 691 file {filename}"
    href = entry["url"]
    if type(href) is not str:
        raise PageParseError(f"{where}: 'url' is a JSON {_type_name(href)}, not a string")
    url, frag_hashes = split_hash_fragment(join(href))
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
        checked_hashes(hashes or frag_hashes, filename),
        str(requires_python) if requires_python else None,
        bool(yanked),
        yanked if isinstance(yanked, str) else "",
        None if metadata is None else checked_hashes(metadata, filename),
        size if isinstance(size, int) else None,
        str(upload_time) if upload_time is not None else None,
        problem,
    )
