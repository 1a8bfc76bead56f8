"""The tool's own version: the installed distribution's metadata, else (run from a checkout
that was never installed) the version in the checkout's pyproject.toml.

Read only when asked (``--version``, an error report, a release record): importlib.metadata
and the TOML reader are imported then, not at every start of the tool."""

from __future__ import annotations

import sys
from pathlib import Path

DISTRIBUTION = "vllm-musa-image"
UNKNOWN = "0+unknown"
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def version(distribution: str) -> str:
    """``importlib.metadata.version``; raises its ``PackageNotFoundError``."""
    from importlib.metadata import version as installed_version

    return installed_version(distribution)


def pyproject_version(path: Path | None = None) -> str | None:
    """``[project] version`` of ``path`` (default: the checkout's) when it is this project's
    pyproject.toml, else None."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Ubuntu 22.04's python3.10 runs the tool too
        import tomli as tomllib

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
    from importlib.metadata import PackageNotFoundError

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return pyproject_version() or UNKNOWN
