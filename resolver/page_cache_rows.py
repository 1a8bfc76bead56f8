"""The rows of a parsed page read back from the cache, as untrusted input.

A row is taken back only when it is one the parser could have made: the right types, a
plain file name unless a problem is set, hashes of hex digests of the algorithms the parser
checks. Anything else makes the whole kept parse unusable (``None``), and the page is parsed
again from its bytes.
"""

from __future__ import annotations

import re

from resolver.page_checks import PLAIN_NAME
from resolver.page_records import ListedFile

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


def rows_from_cache(data: object) -> list[ListedFile] | None:
    """The rows of a parsed page read back from the cache (JSON: lists for tuples), when
    every row is one the parser could have made: the right types (``_cached_values``), a
    plain file name unless a problem is set, hashes of hex digests. None otherwise (the page
    is parsed again)."""
    if type(data) is not list:
        return None
    plain = PLAIN_NAME.fullmatch
    for row in data:
        if type(row) is not list or len(row) != 10 or not _cached_values(row):
            return None
        name, problem = row[0], row[9]
        if problem is None:
            if plain(name) is None or ".." in name or name == ".":
                return None
        elif type(problem) is not str:
            return None
    return data


def _cached_values(row: list[object]) -> bool:
    """Whether the ten values of a cached row have the types the parser gives them (the
    name a string; the problem is checked with the name)."""
    name, url, hashes, rp, yanked, reason, meta, size, upload, _problem = row
    return (
        type(name) is str
        and type(url) is str
        and _cached_hashes(hashes)
        and (rp is None or type(rp) is str)
        and type(yanked) is bool
        and type(reason) is str
        and (meta is None or _cached_hashes(meta))
        and (size is None or (type(size) is int and size >= 0))
        and (upload is None or type(upload) is str)
    )


def kept_from_cache(data: object, target: str) -> tuple[list[ListedFile], int] | None:
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
