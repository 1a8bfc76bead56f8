"""A PEP 691 page read for a target, the files the target cannot run read only by name.

``scan_json`` gives the rows and the count of the files left out that the full read
(``resolver.page_json``) gives, or None at any doubt, and then the page is read whole.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from core.filenames import MAX_FILENAME_BYTES
from resolver.page_checks import Joiner, PageParseError, name_and_problem
from resolver.page_json import json_files, json_rows
from resolver.page_records import ListedFile

# A page parsed for a target reads, of each file it leaves out, only the name: the files a
# target cannot run are most of a real page, and ``json.loads`` of all of them, and the
# checks of every entry, are most of the CPU a cold lock spends on its pages. ``scan_json``
# finds each entry and its name with regular expressions over the text, and decodes
# (``raw_decode``) only the entries it keeps; at any doubt it answers None and the page is
# read whole, which also says what is wrong with a broken page.
#
# Why no page that ``parse_json_full`` reads is read otherwise (no entry missed, none made
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
# Each entry the scan keeps is decoded and made a row by ``json_rows``, as the full parse
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
# then that key and its value (the first group when it is of ``PLAIN_NAME``, else the second)
_TO_NAME = (
    rf'{_W}(?:(?!"filename"){_S}{_W}:{_W}{_VALUE}{_W},{_W})*?'
    rf'"filename"{_W}:{_W}"(?:([A-Za-z0-9._+!-]{{1,{MAX_FILENAME_BYTES}}})|([^"\\\x00-\x1f]*))"'
)
_HEAD = re.compile(r"\{" + _TO_NAME)
_NEXT = re.compile(rf"\}}{_W},{_W}(\{{){_TO_NAME}")


def scan_json(
    content: bytes, page_url: str, keep: Callable[[str], bool]
) -> tuple[list[ListedFile], int] | None:
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
        json_files(data, page_url)  # the checks of the page itself (its files are [])
        rows = json_rows(kept, Joiner(page_url))[0]
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
    """An entry's name as scanned (``plain`` when it is of ``PLAIN_NAME``, else ``other``)
    and whether the parse keeps it: a name with a problem is always kept."""
    if plain is not None and ".." not in plain and plain != ".":
        return plain, keep(plain)
    name = other if plain is None else plain
    assert name is not None  # one of the two groups matched
    return name, name_and_problem(name)[1] is not None or keep(name)


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
