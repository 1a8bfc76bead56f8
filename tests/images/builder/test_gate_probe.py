"""The in-image probe's facts about driven trees and markers, from a real tree on disk (the
probe is a standalone script; here it runs in this interpreter, with a tree on sys.path)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

PROBE = Path(__file__).resolve().parents[3] / "images" / "builder" / "in_image" / "gate_probe.py"


@pytest.fixture
def probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gate_probe_under_test", PROBE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Path]:
    """A driven tree with a package no installed distribution provides, first on sys.path."""
    root = tmp_path / "third_party" / "probepkg"
    (root / "probepkg_x1" / "platforms").mkdir(parents=True)
    (root / "probepkg_x1" / "__init__.py").write_text("")
    (root / "probepkg_x1" / "envs.py").write_text("patched\n")
    (root / "probepkg_x1" / "platforms" / "series.py").write_text("SERIES = 1\n")
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        sys.modules.pop("probepkg_x1", None)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_tree_as_staged_apart_from_the_exempt_files(
    probe: ModuleType, tree: Path, tmp_path: Path
) -> None:
    record = tmp_path / "third-party.json"
    record.write_text(
        json.dumps(
            {
                "trees": [
                    {
                        "source": "probepkg",
                        "dir": str(tree),
                        "packages": ["probepkg_x1"],
                        "files": {
                            "probepkg_x1/__init__.py": _sha(""),
                            "probepkg_x1/envs.py": _sha("staged\n"),  # patched: exempt
                            "probepkg_x1/gone.py": _sha("x"),
                            "probepkg_x1/other.py": _sha("y"),
                        },
                        "exempt": ["probepkg_x1/envs.py", "csrc/added.mu"],
                        "series": ["0001.patch"],
                    }
                ]
            }
        )
    )
    (tree / "probepkg_x1" / "other.py").write_text("changed")
    facts = probe._third_party(str(record))
    assert facts == {
        "trees": [
            {
                "source": "probepkg",
                "dir": str(tree),
                "packages": {
                    "probepkg_x1": {
                        "found": str(tree / "probepkg_x1"),
                        "owners": [],
                        "copies": [],
                    }
                },
                "checked": 3,
                "exempt": 1,
                "series": ["0001.patch"],
                "changed": ["probepkg_x1/other.py"],
                "missing": ["probepkg_x1/gone.py"],
            }
        ]
    }


def test_markers_are_found_under_the_package_root(probe: ModuleType, tree: Path) -> None:
    assert probe._markers(
        ["probepkg=probepkg_x1/platforms/series.py", "other=probepkg_x1/platforms/none.py"]
    ) == {
        "probepkg": {"path": str(tree / "probepkg_x1/platforms/series.py"), "found": True},
        "other": {"path": str(tree / "probepkg_x1/platforms/none.py"), "found": False},
    }
    assert "probepkg_x1" not in sys.modules  # located, never imported


def test_no_record_is_no_tree(probe: ModuleType, tmp_path: Path) -> None:
    assert probe._third_party(str(tmp_path / "absent.json")) == {"trees": []}
    (tmp_path / "bad.json").write_text("{")
    assert "error" in probe._third_party(str(tmp_path / "bad.json"))
