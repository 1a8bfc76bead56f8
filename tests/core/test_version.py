"""``build_image.py --version``: the installed distribution's version, else (a checkout that
was never installed) the version in the checkout's pyproject.toml."""

from __future__ import annotations

import io
import sys
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

import build_image
import core.version
from core.version import pyproject_version, tool_version

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _version_output(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_version_prints_the_program_and_its_version() -> None:
    assert _version_output("--version") == (0, f"build_image.py {CHECKOUT_VERSION}\n", "")
    assert _version_output("--version", "lock") == (0, f"build_image.py {CHECKOUT_VERSION}\n", "")


def test_a_checkout_without_metadata_reads_its_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(core.version, "version", missing)
    assert tool_version() == CHECKOUT_VERSION
    assert _version_output("--version")[1] == f"build_image.py {CHECKOUT_VERSION}\n"


def test_the_installed_metadata_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core.version, "version", lambda _name: "9.8.7")
    assert _version_output("--version")[1] == "build_image.py 9.8.7\n"


def test_another_projects_pyproject_is_not_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "other"\nversion = "5.0"\n')
    assert pyproject_version(other) is None
    assert pyproject_version(tmp_path / "missing.toml") is None
    (tmp_path / "bad.toml").write_text("[project\n")
    assert pyproject_version(tmp_path / "bad.toml") is None

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(core.version, "version", missing)
    monkeypatch.setattr(core.version, "PYPROJECT", other)
    assert tool_version() == "0+unknown"
