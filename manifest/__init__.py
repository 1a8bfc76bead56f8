"""The stack manifest: one model below both stages (the resolver and the image side).

    model.py       the frozen dataclasses and constants (no I/O, no YAML)
    reader.py      the YAML file in, a validated ``Manifest`` out (``load_manifest``)
    lock_keys.py   target, indexes, packages, requirements, rules
    image_keys.py  base_image, python_install, sdk_apt, sources, components, mirrors, build,
                   gates, image, musa, runtime
    fields.py      the validation helpers every key parser uses

Import from here: ``from manifest import Manifest, load_manifest``.
"""

from manifest.model import (
    ARCHES,
    COMPONENTS,
    INDEX_FORMATS,
    MIRROR_INDEXES,
    MIRROR_NAMES,
    MOONCAKE_PACKAGE,
    PLAIN_URL_RE,
    PYTHON_PROVIDERS,
    RUST_PROVIDERS,
    SCHEMA_VERSION,
    TAG_FIELDS,
    TARGETS,
    BuildSettings,
    Components,
    Gates,
    ImageSettings,
    IndexSpec,
    LineMap,
    Manifest,
    Mirrors,
    Mooncake,
    Musa,
    PackagePin,
    PinnedFile,
    PythonInstall,
    Rules,
    Runtime,
    SdkApt,
    Source,
    Target,
    VllmRs,
    WheelKind,
    lock_inputs,
    lock_inputs_sha256,
)
from manifest.reader import load_manifest, parse_manifest

__all__ = [
    "ARCHES",
    "COMPONENTS",
    "INDEX_FORMATS",
    "MIRROR_INDEXES",
    "MIRROR_NAMES",
    "MOONCAKE_PACKAGE",
    "PLAIN_URL_RE",
    "PYTHON_PROVIDERS",
    "RUST_PROVIDERS",
    "SCHEMA_VERSION",
    "TAG_FIELDS",
    "TARGETS",
    "BuildSettings",
    "Components",
    "Gates",
    "ImageSettings",
    "IndexSpec",
    "LineMap",
    "Manifest",
    "Mirrors",
    "Mooncake",
    "Musa",
    "PackagePin",
    "PinnedFile",
    "PythonInstall",
    "Rules",
    "Runtime",
    "SdkApt",
    "Source",
    "Target",
    "VllmRs",
    "WheelKind",
    "load_manifest",
    "lock_inputs",
    "lock_inputs_sha256",
    "parse_manifest",
]
