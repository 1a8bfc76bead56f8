"""The tool's own version: the installed distribution's metadata, else (run from a checkout
that was never installed) the version in the checkout's pyproject.toml."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Ubuntu 22.04's python3.10 runs the tool too
    import tomli as tomllib

DISTRIBUTION = "vllm-musa-image"
UNKNOWN = "0+unknown"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def pyproject_version(path: Path | None = None) -> str | None:
    """``[project] version`` of ``path`` (default: the checkout's) when it is this project's
    pyproject.toml, else None."""
    try:
        doc = tomllib.loads((path or PYPROJECT).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    project = doc.get("project")
    if not isinstance(project, dict) or project.get("name") != DISTRIBUTION:
        return None
    value = project.get("version")
    return value if isinstance(value, str) and value else None


def tool_version() -> str:
    """The installed version; from a checkout, its pyproject.toml's; else ``0+unknown``."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return pyproject_version() or UNKNOWN
