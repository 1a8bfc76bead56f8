"""The vocabulary of the key table (``manifest.key_table``): a key's row (``Key``), a mapping's
keys and the schema's rules across them (``Section``), and the JSON Schema fragments the rows
are written with: a validator's regular expression as a schema pattern, a range of decimal
numbers, one-of and if-then rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Key:
    """One key of a mapping: a row of docs/manifest.md, a property of the JSON Schema."""

    name: str
    type: str  # as the reference writes it: string, mapping, list of strings, ...
    required: str  # "yes" (the reader requires it), "no", or when it is needed ("with `git`")
    meaning: str
    default: object = None  # a literal: the schema's default and the reference's
    note: str = ""  # the reference's Default when it is not a literal ("the daemon's")
    schema: Mapping[str, Any] = field(default_factory=dict)  # the value's keywords
    names: Mapping[str, Any] = field(default_factory=dict)  # each key the user names
    items: Mapping[str, Any] = field(default_factory=dict)  # each item, or each mapped value


@dataclass(frozen=True)
class Section:
    """A mapping whose keys the reader checks, and the schema's rules across its keys."""

    keys: tuple[Key, ...]
    rules: Mapping[str, Any]

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(k.name for k in self.keys if k.required == "yes")

    @property
    def names(self) -> list[str]:
        """Its keys, the required ones first (as an unknown key's hint lists them)."""
        return [*self.required, *(k.name for k in self.keys if k.required != "yes")]


def section(*keys: Key, rules: Mapping[str, Any] | None = None) -> Section:
    return Section(keys=keys, rules=rules or {})


def pattern(regex: re.Pattern[str]) -> str:
    """A validator's regular expression as a JSON Schema pattern: anchored (the validators
    use ``fullmatch``), named groups made plain (ECMA-262 spells them differently)."""
    text = re.sub(r"\(\?P<[A-Za-z_]+>", "(?:", regex.pattern)
    if not (text.startswith("^") and text.endswith("$")):
        text = f"^(?:{text})$"
    return text


def numbers(low: int, high: int) -> str:
    """A pattern for the decimal numbers ``low`` to ``high`` (at most 99), no leading zeros:
    ``numbers(17, 99)`` is ``(?:1[7-9]|[2-9][0-9])``."""
    assert 0 <= low <= high <= 99
    parts = [f"[{low}-{min(high, 9)}]"] if low <= 9 else []
    start = max(low, 10)
    while start <= high:
        tens, end = start // 10, min(high, start // 10 * 10 + 9)
        if start % 10 == 0 and end % 10 == 9:  # whole decades at once
            last = min(high // 10 if high % 10 == 9 else high // 10 - 1, 9)
            parts.append(f"[{tens}-{last}][0-9]" if last > tens else f"{tens}[0-9]")
            start = last * 10 + 10
        else:
            parts.append(f"{tens}[{start % 10}-{end % 10}]")
            start = end + 1
    return "(?:" + "|".join(parts) + ")"


def one_of(*keys: str) -> dict[str, Any]:
    return {"oneOf": [{"required": [k]} for k in keys]}


def when(key: str, value: object, then: dict[str, Any], otherwise: Any = None) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "if": {"properties": {key: {"const": value}}, "required": [key]},
        "then": then,
    }
    if otherwise is not None:
        rule["else"] = otherwise
    return rule
