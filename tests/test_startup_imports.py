"""What a start of the tool loads before a command runs: the command line's parser is built
from each stage's ``commands`` module, and those import what a command needs only when it runs
(the manifest's YAML reader, the image stages, importlib.metadata for --version).

Each check runs in a fresh interpreter and looks only at the modules that ``import build_image``
and ``build_parser()`` add, so whatever the interpreter loads at its own start (site, .pth
files) does not count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
        "images.publish.verify_commands",
        "images.serve",
        "images.serve.commands",
        "manifest",
        "manifest.commands",
        "manifest.fields",
        "manifest.model",
        "manifest.names",
        "manifest.serving",
        "resolver",
        "resolver.commands",
        "resolver.endpoints",
    ]
    assert [m for m in loaded if m.split(".", 1)[0] in LATER or m in LATER] == []


def test_the_manifest_reader_is_loaded_when_a_manifest_is_first_read() -> None:
    probe = (
        "import sys; from pathlib import Path; import manifest\n"
        "assert 'manifest.reader' not in sys.modules and 'yaml' not in sys.modules\n"
        "print(manifest.load_manifest(Path('stack/demo-v028.yaml')).name)\n"
        "assert 'manifest.reader' in sys.modules and 'yaml' in sys.modules\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", probe],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (res.returncode, res.stdout, res.stderr) == (0, "vllm-musa-demo-v028\n", "")
