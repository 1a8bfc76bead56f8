"""Validation helpers of the manifest reader: every error names the file, line and key path."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.errors import ManifestError

# told of every mapping whose keys are checked: its key path, its required and optional keys
KeysListener = Callable[[tuple[str, ...], tuple[str, ...], tuple[str, ...]], None]


class KeyReader:
    """Validation helpers that know the file and the line of every key path.

    ``on_keys`` hears of every ``keys`` check before it is made: what the JSON Schema of the
    manifest (``manifest.schema``) learns the manifest's keys from.
    """

    def __init__(
        self,
        path: Path,
        marks: Mapping[tuple[str, ...], int],
        *,
        on_keys: KeysListener | None = None,
    ) -> None:
        self.path = path
        self.marks = marks
        self.on_keys = on_keys

    def error(self, keypath: Sequence[str], message: str, hint: str | None = None) -> ManifestError:
        where = str(self.path)
        parts = tuple(keypath)
        while parts and parts not in self.marks:
            parts = parts[:-1]
        if parts in self.marks:
            where += f":{self.marks[parts]}"
        dotted = ".".join(keypath) if keypath else "(top level)"
        return ManifestError(f"{where}: {dotted}: {message}", hint=hint)

    def mapping(self, value: object, keypath: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(keypath, f"must be a mapping, got {describe(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(keypath, f"keys must be strings, got {describe(key)}")
        return value

    def keys(
        self,
        value: Mapping[str, Any],
        keypath: Sequence[str],
        *,
        required: Sequence[str] = (),
        optional: Sequence[str] = (),
    ) -> None:
        if self.on_keys is not None:
            self.on_keys(tuple(keypath), tuple(required), tuple(optional))
        known = [*required, *optional]
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
