"""The stack manifest: one model below both stages (the resolver and the image side).

    model.py          the frozen dataclasses and constants (no I/O, no YAML)
    reader.py         the YAML file in, a validated ``Manifest`` out (``load_manifest``)
    key_table.py      every key of every mapping: type, required, default, meaning, schema
    key_rows.py       what the table is written with: a key's row, a mapping, schema fragments
    lock_keys.py      target, indexes, packages, requirements, rules, overrides
    source_keys.py    sources and their third_party trees
    platform_keys.py  python_install, sdk_apt, sdk, musa, runtime
    component_keys.py components: vllm-rs, mooncake
    image_keys.py     mirrors, build, gates, image
    key_shapes.py     the patterns several key parsers share, and plain URLs
    serving.py        serving: the launch profile, the semantic check and the A/B contract
    fields.py         the validation helpers every key parser uses
    names.py          the names command lines offer as choices (mirrors, targets)
    schema.py         the JSON Schema and the reference's key tables, from the key table
    commands.py       ``build_image.py schema``

Import from here: ``from manifest import Manifest, load_manifest``. The YAML reader (PyYAML,
packaging and the key parsers) is loaded when a reading function is first called, so a
command line is built without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from manifest.model import (
    COMPONENTS,
    GLIBC_HIGHEST,
    MIRROR_INDEXES,
    PINS_FILE,
    PLAIN_URL_RE,
    PYTHON_VERSIONS,
    RUST_BUILD_REQUIREMENT,
    RUST_WORKSPACE,
    TAG_FIELD_RE,
    TAG_FIELDS,
    ImageSettings,
    Manifest,
    Mirrors,
    Musa,
    PinnedFile,
    PythonInstall,
    Runtime,
    Sdk,
    SdkApt,
    Source,
    Target,
    WheelKind,
    lock_inputs_sha256,
    target_problem,
)
from manifest.names import MIRROR_NAMES, TARGETS
from manifest.serving import ServingProfile

if TYPE_CHECKING:
    from pathlib import Path


def load_manifest(path: Path) -> Manifest:
    """Read and validate a stack manifest file (``manifest.reader.load_manifest``)."""
    from manifest import reader

    return reader.load_manifest(path)


def parse_manifest(text: str, *, path: Path) -> Manifest:
    """Validate manifest text; ``path`` names it in messages (``manifest.reader``)."""
    from manifest import reader

    return reader.parse_manifest(text, path=path)


def load_serving_profile(path: Path) -> ServingProfile:
    """Read a serving profile file, ``--profile FILE`` (``manifest.reader``)."""
    from manifest import reader

    return reader.load_serving_profile(path)


__all__ = [
    "COMPONENTS",
    "GLIBC_HIGHEST",
    "MIRROR_INDEXES",
    "MIRROR_NAMES",
    "PINS_FILE",
    "PLAIN_URL_RE",
    "PYTHON_VERSIONS",
    "RUST_BUILD_REQUIREMENT",
    "RUST_WORKSPACE",
    "TAG_FIELDS",
    "TAG_FIELD_RE",
    "TARGETS",
    "ImageSettings",
    "Manifest",
    "Mirrors",
    "Musa",
    "PinnedFile",
    "PythonInstall",
    "Runtime",
    "Sdk",
    "SdkApt",
    "Source",
    "Target",
    "WheelKind",
    "load_manifest",
    "load_serving_profile",
    "lock_inputs_sha256",
    "parse_manifest",
    "target_problem",
]
