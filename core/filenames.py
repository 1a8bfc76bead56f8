"""Filenames that come from an index page or a lock are data, never paths.

A wheel or sdist filename names one file: no ``/`` or ``\\``, no ``..``, no NUL, control or
invisible formatting character, at most 255 bytes, and only the characters such filenames
have (letters, digits and ``. _ + ! -``; PEP 427 escapes everything else to ``_``). Anything
else is refused before it can become a path (``wheelhouse/runtime/<file>``), a line of the
Dockerfile (the pip wheel's name) or a line of a message.

``filename_problem`` says what is wrong with a name (or None); ``shown`` is the name as a
message may print it; ``child_path`` is the one way a path is built from such a name.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

__all__ = ["MAX_FILENAME_BYTES", "child_path", "filename_problem", "shown"]

MAX_FILENAME_BYTES = 255  # NAME_MAX of every Linux filesystem the tool writes to
_ALPHABET = re.compile(r"[A-Za-z0-9._+!-]*")
_INVISIBLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})


def _invisible(ch: str) -> bool:
    return unicodedata.category(ch) in _INVISIBLE


def shown(name: str, *, limit: int = 200) -> str:
    """``name`` with every control or invisible character written as an escape (``\\x1b``),
    and cut after ``limit`` characters, so a message can never be rewritten by the name."""
    out: list[str] = []
    for ch in name[:limit]:
        if ch == "\\":
            out.append("\\\\")
        elif _invisible(ch):
            out.append(ascii(ch)[1:-1])
        else:
            out.append(ch)
    return "".join(out) + ("..." if len(name) > limit else "")


def filename_problem(name: str) -> str | None:
    """Why ``name`` is not a plain wheel or sdist filename, or None when it is one."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}, a directory, not a file"
    for ch in name:
        if ch in "/\\":
            return f"holds {ch!r}, a path separator"
        if ch == "\0":
            return "holds a NUL character"
        if _invisible(ch):
            return f"holds the control or invisible character U+{ord(ch):04X}"
    if ".." in name:
        return "holds '..', a parent-directory step"
    size = len(name.encode("utf-8", errors="surrogatepass"))
    if size > MAX_FILENAME_BYTES:
        return f"is {size} bytes long, more than a file name may be ({MAX_FILENAME_BYTES})"
    if _ALPHABET.fullmatch(name) is None:
        ch = next(c for c in name if _ALPHABET.fullmatch(c) is None)
        return (
            f"holds {ch!r}, which no wheel or sdist filename has "
            "(only letters, digits and . _ + ! -)"
        )
    return None


def child_path(root: Path, name: str) -> Path:
    """``root / name``, for a ``name`` that is a plain filename and stays directly under
    ``root`` (also through an existing symlink); ValueError naming the problem otherwise."""
    problem = filename_problem(name)
    if problem is not None:
        raise ValueError(f"{shown(name)} {problem}")
    path = root / name
    if path.is_symlink() or path.resolve().parent != root.resolve():
        raise ValueError(f"{name} would be written outside {root} (through a link)")
    return path
