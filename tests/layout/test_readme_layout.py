"""The README's layout section names every part of the tree, and nothing the tree lacks."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# a layout line: four spaces, a path, two or more spaces, its description
ENTRY = re.compile(r"^    (\S+)\s{2,}\S")


def layout_entries() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for line in section.splitlines() if (m := ENTRY.match(line))]


# what .gitignore keeps out of the tree: a clean clone has none of these
IGNORED = ("build", "__pycache__")


def _kept(path: Path) -> bool:
    name = path.name
    return not (name.startswith(".") or name in IGNORED or name.endswith(".egg-info"))


def tree_parts() -> set[str]:
    """The top-level files that are code or templates, the top-level folders, and the parts
    of images/ (its subpackages and modules)."""
    parts: set[str] = set()
    for path in filter(_kept, REPO.iterdir()):
        if path.name == "images":
            continue  # listed by its parts
        if path.is_dir():
            parts.add(f"{path.name}/")
        elif path.suffix in (".py", ".j2"):
            parts.add(path.name)
    for path in filter(_kept, (REPO / "images").iterdir()):
        if path.is_dir():
            parts.add(f"images/{path.name}/")
        elif path.suffix == ".py" and path.name != "__init__.py":
            parts.add(f"images/{path.name}")
    return parts


def test_the_layout_lists_each_part_of_the_tree_once() -> None:
    entries = layout_entries()
    assert len(entries) == len(set(entries)), entries
    assert set(entries) == tree_parts()
