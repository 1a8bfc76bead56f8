"""Parse index pages without I/O: PEP 503 HTML, PEP 691 JSON, and flat find-links pages.

Pure functions from (bytes, content type, page URL) to rows and ``IndexFile`` records, by the
content type: ``resolver.page_json`` (read for a target, or whole) or ``resolver.page_html``;
their shared checks are ``resolver.page_checks``, the records ``resolver.page_records``. The
rest of the tool imports all of them from here.

A filename is data, never a path: one that is not a plain file name stays listed with its
``problem`` set, so ``explain`` shows it refused and nothing ever selects it. A PEP 691 value
of the wrong JSON type, or a link that is not a URL, is a broken page.
"""

from __future__ import annotations

from resolver.page_cache_rows import kept_from_cache, rows_from_cache
from resolver.page_checks import PageParseError
from resolver.page_html import parse_html
from resolver.page_json import json_for_target, parse_json_full
from resolver.page_records import IndexFile, Keep, ListedFile, ProjectPage, listed, whole_page

__all__ = [
    "ACCEPT",
    "HTML_CONTENT_TYPES",
    "JSON_CONTENT_TYPE",
    "IndexFile",
    "Keep",
    "ListedFile",
    "PageParseError",
    "ProjectPage",
    "kept_from_cache",
    "listed",
    "media_type",
    "parse_find_links_page",
    "parse_kept",
    "parse_project_page",
    "rows_from_cache",
    "whole_page",
]

JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_CONTENT_TYPES = ("application/vnd.pypi.simple.v1+html", "text/html")
ACCEPT = f"{JSON_CONTENT_TYPE}, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"


def media_type(content_type: str) -> str:
    return content_type.split(";", 1)[0].strip().lower()


def parse_project_page(content: bytes, content_type: str, page_url: str) -> ProjectPage:
    """Parse one project's page, as JSON (PEP 691) or HTML (PEP 503) by its content type."""
    return ProjectPage(parse_kept(content, content_type, page_url, keep=None)[0])


def parse_kept(
    content: bytes, content_type: str, page_url: str, *, keep: Keep
) -> tuple[list[ListedFile], int]:
    """The rows of the files ``keep`` keeps, and how many it left out. A file with a
    filename problem is always kept. A kept file is checked as in a whole parse; a file
    left out of a PEP 691 page is not read beyond its name (``json_for_target``), one of an HTML
    page is checked all the same (a broken link breaks the page whether it is kept or not)."""
    kind = media_type(content_type)
    if kind == JSON_CONTENT_TYPE:
        return _parse_json(content, page_url, keep)
    if kind in HTML_CONTENT_TYPES or kind == "":
        return parse_html(content, page_url, keep)
    raise PageParseError(f"unexpected content type {content_type!r} (want HTML or PEP 691 JSON)")


def parse_find_links_page(content: bytes, content_type: str, page_url: str) -> ProjectPage:
    """A flat page of links to files of many projects (pip's ``--find-links``)."""
    return parse_project_page(content, content_type or "text/html", page_url)


def _parse_json(content: bytes, page_url: str, keep: Keep = None) -> tuple[list[ListedFile], int]:
    """A PEP 691 page: for a target, the files it cannot run read only by name
    (``json_for_target``) unless that read gives up; else, and for the whole page, every value
    of it read and checked (``parse_json_full``)."""
    if keep is not None:
        read = json_for_target(content, page_url, keep)
        if read is not None:
            return read
    return parse_json_full(content, page_url, keep)
