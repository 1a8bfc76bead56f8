"""Validation helpers of the manifest reader: every error names the file, line and key path."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core.errors import ManifestError

if TYPE_CHECKING:
    from manifest.key_rows import Section

_Choice = TypeVar("_Choice", bound=str)


class KeyReader:
    """Validation helpers that know the file and the line of every key path, and the key table
    (``manifest.key_table.TABLE``) that says which keys each mapping takes."""

    def __init__(
        self, path: Path, marks: Mapping[tuple[str, ...], int], table: Mapping[str, Section]
    ) -> None:
        self.path = path
        self.marks = marks
        self.table = table

    def error(self, keypath: Sequence[str], message: str, hint: str | None = None) -> ManifestError:
        dotted = ".".join(keypath) if keypath else "(top level)"
        return ManifestError(
            f"{file_line(self.path, self.marks, keypath)}: {dotted}: {message}", hint=hint
        )

    def mapping(self, value: object, keypath: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(keypath, f"must be a mapping, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(keypath, f"keys must be strings, got {describe(key)}")
        return value

    def keys(self, value: Mapping[str, Any], keypath: Sequence[str], section: str) -> None:
        """Refuse a key of ``value`` that the table's ``section`` does not list, and a missing
        required one."""
        required, known = self.table[section].required, self.table[section].names
        for key in value:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
                raise self.error([*keypath, key], "unknown key", hint=hint)
        for key in required:
            if key not in value:
                raise self.error(keypath, f"missing required key {key!r}")

    def string(self, value: object, keypath: Sequence[str], *, example: str = "") -> str:
        if isinstance(value, bool) or not isinstance(value, str):
            hint = None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                shown = example or str(value)
                hint = f'quote it: "{shown}" (YAML reads unquoted numbers as numbers; 3.10 is 3.1)'
            raise self.error(keypath, f"must be a string, got {describe(value)}", hint=hint)
        if not value.strip():
            raise self.error(keypath, "must not be empty")
        return value

    def matching(
        self, regex: re.Pattern[str], text: str, keypath: Sequence[str], what: str, hint: str = ""
    ) -> str:
        """``text`` when ``regex`` matches all of it, else the error "'text' is not ``what``"."""
        if not regex.fullmatch(text):
            raise self.error(keypath, f"{text!r} is not {what}", hint=hint or None)
        return text

    def choice(self, value: object, keypath: Sequence[str], choices: Sequence[_Choice]) -> _Choice:
        text = self.string(value, keypath)
        for choice in choices:
            if choice == text:
                return choice
        raise self.error(keypath, f"{text!r} is not one of {', '.join(choices)}")

    def index(self, value: object, keypath: Sequence[str], indexes: Mapping[str, object]) -> str:
        """The name of one of the manifest's ``indexes``."""
        name = self.string(value, keypath)
        if name not in indexes:
            raise self.error(
                keypath, f"{name!r} is not one of the indexes ({', '.join(sorted(indexes))})"
            )
        return name

    def string_list(self, value: object, keypath: Sequence[str]) -> list[str]:
        if not isinstance(value, list):
            raise self.error(keypath, f"must be a list, got {describe(value)}")
        return [self.string(item, [*keypath, str(i)]) for i, item in enumerate(value)]

    def boolean(self, value: object, keypath: Sequence[str]) -> bool:
        if not isinstance(value, bool):
            raise self.error(keypath, f"must be true or false, got {describe(value)}")
        return value

    def string_map(self, value: object, keypath: Sequence[str]) -> dict[str, str]:
        mapping = self.mapping(value, keypath)
        return {k: self.string(v, [*keypath, k]) for k, v in mapping.items()}


def file_line(path: Path, marks: Mapping[tuple[str, ...], int], keypath: Sequence[str]) -> str:
    """``path:line`` of ``keypath``, or of its nearest parent with a line in ``marks``."""
    parts = tuple(keypath)
    while parts and parts not in marks:
        parts = parts[:-1]
    return f"{path}:{marks[parts]}" if parts in marks else str(path)


def describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__
