"""What a start of the tool loads before a command runs: the command line's parser is built
from each stage's ``commands`` module, and those import what a command needs only when it runs
(the manifest's model and YAML reader, the image stages, importlib.metadata for --version).

Each check runs in a fresh interpreter and looks only at the modules that ``import build_image``
and ``build_parser()`` add, so whatever the interpreter loads at its own start (site, .pth
files) does not count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TOOL_PACKAGES = ("build_image", "core", "manifest", "sources", "resolver", "images")
# loaded by a command that needs them, never to build the parser
LATER = (
    "importlib.metadata",
    "tomllib",
    "yaml",
    "packaging",
    "email",
    "zipfile",
    "secrets",
    "urllib3",
    "docker",
    "jinja2",
    "resolvelib",
)

_PROBE = """
import json, sys
before = set(sys.modules)
sys.path.insert(0, sys.argv[1])
import build_image
build_image.build_parser()
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def _loaded_at_start() -> list[str]:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, str(REPO)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    loaded: list[str] = json.loads(res.stdout)
    return loaded


def test_the_parser_is_built_from_the_command_modules_only() -> None:
    loaded = _loaded_at_start()
    assert [m for m in loaded if m.split(".", 1)[0] in TOOL_PACKAGES] == [
        "build_image",
        "core",
        "core.chosen_paths",
        "core.console",
        "core.errors",
        "core.json_output",
        "core.urls",
        "core.version",
        "images",
        "images.builder",
        "images.builder.commands",
        "images.publish",
        "images.publish.commands",
        "images.publish.rebuild_commands",
        "images.serve",
        "images.serve.commands",
        "manifest",
        "manifest.commands",
        "manifest.names",
        "resolver",
        "resolver.commands",
        "resolver.endpoints",
    ]
    assert [m for m in loaded if m.split(".", 1)[0] in LATER or m in LATER] == []


def test_a_name_of_the_manifest_package_is_loaded_at_its_first_use() -> None:
    import manifest
    from manifest.model import Manifest
    from manifest.reader import load_manifest

    assert manifest.Manifest is Manifest
    assert manifest.load_manifest is load_manifest
    assert set(manifest.__all__) <= set(dir(manifest))
    with pytest.raises(AttributeError, match=r"^module 'manifest' has no attribute 'NotAName'$"):
        manifest.NotAName  # noqa: B018
