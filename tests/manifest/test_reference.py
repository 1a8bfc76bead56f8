"""docs/manifest.md names every key the manifest reader accepts, and its complete example is a
valid manifest that uses every one of them.

The keys are collected twice: from the source, every name in the ``required=`` / ``optional=``
arguments of ``KeyReader.keys`` calls in manifest/*.py (constants resolved through
``manifest.model``); and at run time, every key path ``KeyReader.keys`` is asked about while the
reference's complete example and the shipped stacks are read. Names the user chooses (an index,
a project, a source) are written ``<name>``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import manifest.model
import manifest.names
from manifest import load_manifest, parse_manifest
from manifest.fields import KeyReader

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "manifest.md"
_NAMED = {
    ("indexes",): (1, "<name>"),
    ("packages",): (1, "<name>"),
    ("overrides",): (1, "<name>"),
    ("sources",): (1, "<name>"),
    ("sources", "<name>", "third_party"): (3, "<dir>"),
    ("rules", "line_map"): (2, "<name>"),
    ("serving", "check", "requests"): (3, "<n>"),
}


def _generic(keypath: Sequence[str]) -> list[str]:
    """``["indexes", "pypi"]`` -> ``["indexes", "<name>"]``: names the user chooses."""
    out = list(keypath)
    for prefix, (at, placeholder) in _NAMED.items():
        if tuple(out[: len(prefix)]) == prefix and len(out) > at:
            out[at] = placeholder
    return out


def _complete_example() -> str:
    text = REFERENCE.read_text(encoding="utf-8")
    section = text.split("## A manifest with every key", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return block.group(1)


def _resolve(node: ast.expr) -> Iterator[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, (ast.Tuple, ast.List)):
        for item in node.elts:
            yield from _resolve(item)
    elif isinstance(node, ast.Starred):
        yield from _resolve(node.value)
    elif isinstance(node, ast.Name):
        value = getattr(manifest.model, node.id, None) or getattr(manifest.names, node.id)
        yield from ([value] if isinstance(value, str) else value)
    else:
        raise TypeError(f"cannot read the keys of {ast.dump(node)}")


def _source_keys() -> set[str]:
    names: set[str] = set()
    for path in sorted((REPO / "manifest").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "keys":
                continue
            for kw in node.keywords:
                if kw.arg in ("required", "optional"):
                    names.update(_resolve(kw.value))
    return names


@pytest.fixture(scope="module")
def accepted() -> set[str]:
    """Every dotted key path the reader accepts while reading the example and the stacks."""
    seen: set[str] = set()
    original = KeyReader.keys

    def recording(
        self: KeyReader,
        value: Mapping[str, Any],
        keypath: Sequence[str],
        *,
        required: Sequence[str] = (),
        optional: Sequence[str] = (),
    ) -> None:
        for key in (*required, *optional):
            seen.add(".".join([*_generic(keypath), key]))
        original(self, value, keypath, required=required, optional=optional)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KeyReader, "keys", recording)
        parse_manifest(_complete_example(), path=Path("stack/every-key.yaml"))
        for stack in sorted((REPO / "stack").glob("*.yaml")):
            load_manifest(stack)
    return seen


def test_the_complete_example_reaches_every_key_parser(accepted: set[str]) -> None:
    leaves = {path.rsplit(".", 1)[-1] for path in accepted}
    assert _source_keys() - leaves == set()


def test_every_accepted_key_is_in_the_reference(accepted: set[str]) -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    assert sorted(p for p in accepted if f"`{p}`" not in text) == []
