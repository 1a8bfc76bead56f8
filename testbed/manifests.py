"""Stack manifests written from keyword arguments over a minimal valid stack.

``stack_text(indexes={"vendor": {"url": url}}, default_index="vendor", requirements=["torch"])``
gives the YAML text; ``write_stack(path, ...)`` writes it and returns ``path``. Keyword arguments
replace top-level keys of ``base`` (``BASE`` unless given); ``None`` drops a key. Mappings are
written as block YAML in the given order, lists and scalars as JSON (which is YAML), so every
string is quoted and never re-typed by the reader ("3.10" stays a string).

Tests that assert line numbers in messages keep their manifest text verbatim instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

BASE: Mapping[str, object] = {
    "schema": 1,
    "name": "t",
    "release": "0.28.0",
    "target": {"python": "3.12", "arch": "x86_64", "glibc": "2.35"},
    "indexes": {"pypi": {"url": "https://pypi.org/simple/"}},
    "default_index": "pypi",
}
"""The smallest stack the reader accepts: one index, nothing to lock."""


def to_yaml(value: Mapping[str, object], indent: int = 0) -> str:
    """Block YAML for a mapping; nested mappings as blocks, everything else as JSON."""
    pad = "  " * indent
    lines: list[str] = []
    for key, item in value.items():
        if isinstance(item, Mapping) and item:
            lines.append(f"{pad}{key}:\n{to_yaml(item, indent + 1)}")
        else:
            lines.append(f"{pad}{key}: {json.dumps(item)}\n")
    return "".join(lines)


def stack_text(base: Mapping[str, object] | None = None, /, **keys: object) -> str:
    merged = dict(BASE if base is None else base)
    for key, item in keys.items():
        if item is None:
            merged.pop(key, None)
        else:
            merged[key] = item
    return to_yaml(merged)


def write_stack(path: Path, base: Mapping[str, object] | None = None, /, **keys: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(stack_text(base, **keys), encoding="utf-8")
    return path
