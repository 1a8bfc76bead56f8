"""The manifest builder writes stacks the reader accepts, with strings kept strings."""

from __future__ import annotations

from pathlib import Path

from manifest import load_manifest, parse_manifest
from testbed.manifests import BASE, stack_text, write_stack


def test_the_base_stack_is_valid() -> None:
    m = parse_manifest(stack_text(), path=Path("stack/t.yaml"))
    assert (m.name, m.default_index, m.target.python) == ("t", "pypi", (3, 12))


def test_keywords_replace_and_none_drops_top_level_keys(tmp_path: Path) -> None:
    path = write_stack(
        tmp_path / "stack" / "t.yaml",
        target={"python": "3.10", "arch": "x86_64", "glibc": "2.35"},
        requirements=["numpy==1.26.4"],
        packages={"torch": {"version": "2.11.0", "index": "pypi", "wheel": "native"}},
    )
    m = load_manifest(path)
    assert m.target.python == (3, 10)
    assert [str(r) for r in m.requirements] == ["numpy==1.26.4"]
    assert "default_index" not in stack_text(default_index=None)
    assert stack_text(dict(BASE, name="other")).startswith('schema: 1\nname: "other"\n')
