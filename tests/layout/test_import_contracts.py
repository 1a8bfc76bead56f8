"""The import contracts of pyproject.toml ([tool.importlinter]) hold, and a violation fails.

`make lint` runs `lint-imports` on the checkout. These tests run it on a copy of the packages
with one import added, to show that each kind of violation breaks the build: a stage importing
upward, Docker outside the engine, HTTP outside the transport, YAML outside the reader.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "manifest", "sources", "resolver", "images")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy_tree(dest: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(
            REPO / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.j2")
        )
    shutil.copy2(REPO / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")


@pytest.fixture(scope="module")
def lint_available() -> None:
    if not LINT_IMPORTS.is_file():
        pytest.fail(f"{LINT_IMPORTS} is missing: `make dev` installs import-linter")


def test_the_checkout_keeps_every_contract(lint_available: None, tmp_path: Path) -> None:
    result = _lint(_copy_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken"),
    [
        (
            "resolver/lock.py",
            "import images.publish.commands",
            "Stages import downward, publish to core",
        ),
        (
            "manifest/model.py",
            "import resolver.lockfile",
            "Stages import downward, publish to core",
        ),
        (
            "images/records.py",
            "import docker",
            "Docker is driven from images.engine only",
        ),
        (
            "images/builder/inputs.py",
            "import urllib3",
            "HTTP goes through core.transport only",
        ),
        ("resolver/lock.py", "import yaml", "YAML is read in manifest.reader only"),
        (
            "images/publish/bake.py",
            "import jinja2",
            "Templates are rendered in images.builder.render only",
        ),
    ],
)
def test_a_violation_breaks_the_contract_that_owns_it(
    lint_available: None, tmp_path: Path, module: str, line: str, broken: str
) -> None:
    root = _copy_tree(tmp_path)
    _append(root / module, line)
    result = _lint(root)
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"{broken} BROKEN" in result.stdout
    assert "1 broken" in result.stdout
