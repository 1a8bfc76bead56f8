"""What both page readers check the same way: a listed file's name, its link and its hashes.

A filename is data, never a path: one that is not a plain file name (a ``/`` or ``\\``, a
``..``, a NUL or control character, see ``core.filenames``) is kept escaped for messages with
its problem beside it (``name_and_problem``), so nothing ever selects it. A hash is a hex
digest of its algorithm's length (``checked_hashes``), and a link is joined to the page's URL
as ``urljoin`` joins it (``Joiner``); anything else is a broken page (``PageParseError``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import urljoin

from core.filenames import MAX_FILENAME_BYTES, filename_problem, shown
from core.urls import redact


class PageParseError(ValueError):
    """The page is not a simple index page (wrong content type, broken JSON)."""


HEX_DIGITS = re.compile(r"[0-9a-f]+")
_HEX_LENGTHS = {"md5": 32, "sha1": 40, "sha224": 56, "sha256": 64, "sha384": 96, "sha512": 128}


def checked_hashes(hashes: Mapping[str, str], filename: str) -> dict[str, str]:
    """Hash values are hex digests of the right length; anything else is a broken page
    (and must never reach the cache, whose paths are built from them)."""
    out: dict[str, str] = {}
    for algo, value in hashes.items():
        want = _HEX_LENGTHS.get(algo)
        if want is None:
            continue  # an algorithm we cannot check is as good as none
        if len(value) != want or not HEX_DIGITS.fullmatch(value):
            raise PageParseError(f"{filename}: {algo} hash {value[:80]!r} is not a hex digest")
        out[algo] = value
    return out


def split_hash_fragment(url: str) -> tuple[str, dict[str, str]]:
    bare, _, fragment = url.partition("#")
    hashes: dict[str, str] = {}
    if fragment and "=" in fragment:
        algo, _, value = fragment.partition("=")
        if algo and value:
            hashes[algo.lower()] = value.lower()
    return bare, hashes


# a name of these characters only is a plain file name unless it is "." or holds ".." (the
# check ``filename_problem`` makes, done here in one regex step for the thousands of names of
# a page; any other name goes through ``filename_problem``)
PLAIN_NAME = re.compile(rf"[A-Za-z0-9._+!-]{{1,{MAX_FILENAME_BYTES}}}")


def name_and_problem(raw: str) -> tuple[str, str | None]:
    """The filename as kept (escaped when it is not a plain file name) and its problem."""
    if PLAIN_NAME.fullmatch(raw) is not None and ".." not in raw and raw != ".":
        return raw, None
    problem = filename_problem(raw)
    return (raw, None) if problem is None else (shown(raw), problem)


def join_url(base: str, href: str) -> str:
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


class Joiner:
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
                        return join_url(self.base, href)  # the refusal, naming the whole link
                    self._dirs[head] = joined
                if joined.endswith("/") and "?" not in joined and "#" not in joined:
                    return joined + name + tail
        return join_url(self.base, href)
