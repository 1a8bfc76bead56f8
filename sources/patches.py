"""The files a patch series touches, read from the unified-diff headers of each patch.
Pure: text in, paths out. Used to exempt those files from the pristine-tree gate."""

from __future__ import annotations

import re
from collections.abc import Iterable

_HEADER_RE = re.compile(r"^(?:---|\+\+\+) (?P<path>\S+)")
_GIT_RE = re.compile(r"^diff --git a/(?P<a>\S+) b/(?P<b>\S+)$")


def _strip(path: str) -> str | None:
    if path == "/dev/null":
        return None
    for prefix in ("a/", "b/"):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def touched_files(patch: str) -> set[str]:
    """Every path a patch names as old or new file (``a/`` and ``b/`` prefixes removed)."""
    out: set[str] = set()
    for line in patch.splitlines():
        git = _GIT_RE.match(line)
        if git:
            out.update({git.group("a"), git.group("b")})
            continue
        m = _HEADER_RE.match(line)
        if m:
            path = _strip(m.group("path"))
            if path:
                out.add(path)
    return out


def series_touched(patches: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for text in patches:
        out |= touched_files(text)
    return out
