"""The PEP 503 HTML reader: the ``<a>`` links of a simple (or find-links) page, as rows.

A file's name is the percent-decoded last path segment of its link, and its sha256 (or other
hash) is the link's fragment; ``data-yanked``, ``data-requires-python`` and the PEP 658/714
``data-core-metadata`` / ``data-dist-info-metadata`` attributes are read. A link that is not
a URL, or a hash that is not a hex digest, is a broken page, whether its file is kept or not.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from html.parser import HTMLParser
from urllib.parse import unquote

from resolver.page_checks import (
    Joiner,
    checked_hashes,
    join_url,
    name_and_problem,
    split_hash_fragment,
)
from resolver.page_records import Keep, ListedFile


def _filename(url: str) -> str:
    path = url.partition("?")[0]  # the fragment is already gone
    return unquote(path.rsplit("/", 1)[-1])


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


def parse_html(content: bytes, page_url: str, keep: Keep) -> tuple[list[ListedFile], int]:
    base_href, anchors = _scan_tags(content.decode("utf-8", errors="replace"))
    base = join_url(page_url, base_href) if base_href else page_url
    join = Joiner(base)
    files: list[ListedFile] = []
    dropped = 0
    for attrs in anchors:
        href = attrs.get("href")
        if not href:
            continue
        url, hashes = split_hash_fragment(join(href))
        raw = _filename(url)
        if not raw:
            continue
        filename, problem = name_and_problem(raw)
        yanked = "data-yanked" in attrs
        metadata = _metadata_attr(attrs.get("data-core-metadata"))
        if metadata is None:
            metadata = _metadata_attr(attrs.get("data-dist-info-metadata"))
        if keep is not None and problem is None and not keep(filename):
            checked_hashes(hashes, filename)  # checked all the same: a broken page is broken
            if metadata is not None:
                checked_hashes(metadata, filename)
            dropped += 1
            continue
        files.append(
            (
                filename,
                url,
                checked_hashes(hashes, filename),
                attrs.get("data-requires-python") or None,
                yanked,
                (attrs.get("data-yanked") or "") if yanked else "",
                None if metadata is None else checked_hashes(metadata, filename),
                None,
                None,
                problem,
            )
        )
    return files, dropped
