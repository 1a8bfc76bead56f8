"""docs/manifest.md's key tables are the key table's rendering, and its complete example is a
valid manifest that reaches every mapping of the key table."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from manifest import COMPONENTS, MIRROR_INDEXES, MIRROR_NAMES, parse_manifest
from manifest.fields import KeyReader
from manifest.key_table import TABLE
from manifest.schema import reference_tables, tables_in, with_tables

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "docs" / "manifest.md"
REGENERATE = ".venv/bin/python -m manifest.schema docs/manifest.md"


def complete_example() -> str:
    """The YAML of the reference's "A manifest with every key"."""
    section = REFERENCE.read_text(encoding="utf-8").split("## A manifest with every key", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block is not None
    return block.group(1)


def test_the_reference_tables_are_the_key_tables_rendering() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    assert len(tables_in(text)) == len(reference_tables())
    assert with_tables(text) == text, f"{REFERENCE} is stale: regenerate it with `{REGENERATE}`"


def test_every_key_of_the_table_is_in_one_reference_row() -> None:
    rows = [line.split("`")[1] for t in reference_tables() for line in t.splitlines()[2:]]
    paths = [f"{s}.{k.name}" if s else k.name for s, keys in TABLE.items() for k in keys.keys]
    assert sorted(rows) == sorted(paths)


def test_the_complete_example_reaches_every_mapping_of_the_table() -> None:
    read: set[str] = set()
    original = KeyReader.keys

    def recording(
        self: KeyReader, value: Mapping[str, Any], keypath: Sequence[str], section: str
    ) -> None:
        read.add(section)
        original(self, value, keypath, section)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KeyReader, "keys", recording)
        parse_manifest(complete_example(), path=Path("stack/every-key.yaml"))
    assert read == set(TABLE)


def test_the_tables_names_are_the_models() -> None:
    assert TABLE["mirrors"].names == [*MIRROR_NAMES, MIRROR_INDEXES]
    assert tuple(TABLE["components"].names) == COMPONENTS
