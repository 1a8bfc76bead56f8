"""The stack manifest: one model below both stages (the resolver and the image side).

    model.py          the frozen dataclasses and constants (no I/O, no YAML)
    reader.py         the YAML file in, a validated ``Manifest`` out (``load_manifest``)
    lock_keys.py      target, indexes, packages, requirements, rules, overrides
    source_keys.py    sources and their third_party trees
    platform_keys.py  python_install, sdk_apt, sdk, musa, runtime
    component_keys.py components: vllm-rs, mooncake
    image_keys.py     mirrors, build, gates, image
    key_shapes.py     the patterns several key parsers share, and plain URLs
    serving.py        serving: the launch profile, the semantic check and the A/B contract
    fields.py         the validation helpers every key parser uses
    names.py          the names command lines offer as choices (mirrors, targets)
    schema.py         the manifest's JSON Schema, generated from the reader and docs/manifest.md
    commands.py       ``build_image.py schema``

Import from here: ``from manifest import Manifest, load_manifest``. Each name is loaded at its
first use, so a command that needs only ``TARGETS`` (a parser's choices) does not pay for the
model's dataclasses or the YAML reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from manifest.model import (
        ARCHES,
        COMPONENTS,
        GLIBC_HIGHEST,
        GLIBC_LOWEST,
        INDEX_FORMATS,
        MIRROR_INDEXES,
        MOONCAKE_PACKAGE,
        PINS_FILE,
        PLAIN_URL_RE,
        PYTHON_PROVIDERS,
        PYTHON_VERSIONS,
        RUST_BUILD_REQUIREMENT,
        RUST_PROVIDERS,
        RUST_WORKSPACE,
        SCHEMA_VERSION,
        TAG_FIELD_RE,
        TAG_FIELDS,
        VLLM_RS_TREE,
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
        Override,
        PackagePin,
        PinnedFile,
        PythonInstall,
        Rules,
        Runtime,
        SdistRef,
        Sdk,
        SdkApt,
        Source,
        Target,
        ThirdParty,
        VllmRs,
        WheelKind,
        lock_inputs,
        lock_inputs_sha256,
        target_problem,
    )
    from manifest.names import (
        MIRROR_NAMES,
        TARGETS,
    )
    from manifest.reader import (
        load_manifest,
        load_serving_profile,
        parse_manifest,
    )
    from manifest.serving import (
        ServingProfile,
    )

# where each name of __all__ lives
_HOMES = {
    "ARCHES": "manifest.model",
    "COMPONENTS": "manifest.model",
    "GLIBC_HIGHEST": "manifest.model",
    "GLIBC_LOWEST": "manifest.model",
    "INDEX_FORMATS": "manifest.model",
    "MIRROR_INDEXES": "manifest.model",
    "MOONCAKE_PACKAGE": "manifest.model",
    "PINS_FILE": "manifest.model",
    "PLAIN_URL_RE": "manifest.model",
    "PYTHON_PROVIDERS": "manifest.model",
    "PYTHON_VERSIONS": "manifest.model",
    "RUST_BUILD_REQUIREMENT": "manifest.model",
    "RUST_PROVIDERS": "manifest.model",
    "RUST_WORKSPACE": "manifest.model",
    "VLLM_RS_TREE": "manifest.model",
    "SCHEMA_VERSION": "manifest.model",
    "TAG_FIELD_RE": "manifest.model",
    "TAG_FIELDS": "manifest.model",
    "BuildSettings": "manifest.model",
    "Components": "manifest.model",
    "Gates": "manifest.model",
    "ImageSettings": "manifest.model",
    "IndexSpec": "manifest.model",
    "LineMap": "manifest.model",
    "Manifest": "manifest.model",
    "Mirrors": "manifest.model",
    "Mooncake": "manifest.model",
    "Musa": "manifest.model",
    "Override": "manifest.model",
    "PackagePin": "manifest.model",
    "PinnedFile": "manifest.model",
    "PythonInstall": "manifest.model",
    "Rules": "manifest.model",
    "Runtime": "manifest.model",
    "SdistRef": "manifest.model",
    "Sdk": "manifest.model",
    "SdkApt": "manifest.model",
    "Source": "manifest.model",
    "Target": "manifest.model",
    "ThirdParty": "manifest.model",
    "VllmRs": "manifest.model",
    "WheelKind": "manifest.model",
    "lock_inputs": "manifest.model",
    "lock_inputs_sha256": "manifest.model",
    "target_problem": "manifest.model",
    "MIRROR_NAMES": "manifest.names",
    "TARGETS": "manifest.names",
    "load_manifest": "manifest.reader",
    "load_serving_profile": "manifest.reader",
    "parse_manifest": "manifest.reader",
    "ServingProfile": "manifest.serving",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # __import__, not importlib.import_module: the same import, and -X importtime shows it
    value = getattr(__import__(home, fromlist=[name]), name)
    globals()[name] = value  # the next use is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "ARCHES",
    "COMPONENTS",
    "GLIBC_HIGHEST",
    "GLIBC_LOWEST",
    "INDEX_FORMATS",
    "MIRROR_INDEXES",
    "MIRROR_NAMES",
    "MOONCAKE_PACKAGE",
    "PINS_FILE",
    "PLAIN_URL_RE",
    "PYTHON_PROVIDERS",
    "PYTHON_VERSIONS",
    "RUST_BUILD_REQUIREMENT",
    "RUST_PROVIDERS",
    "RUST_WORKSPACE",
    "SCHEMA_VERSION",
    "TAG_FIELDS",
    "TAG_FIELD_RE",
    "TARGETS",
    "VLLM_RS_TREE",
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
    "Override",
    "PackagePin",
    "PinnedFile",
    "PythonInstall",
    "Rules",
    "Runtime",
    "SdistRef",
    "Sdk",
    "SdkApt",
    "ServingProfile",
    "Source",
    "Target",
    "ThirdParty",
    "VllmRs",
    "WheelKind",
    "load_manifest",
    "load_serving_profile",
    "lock_inputs",
    "lock_inputs_sha256",
    "parse_manifest",
    "target_problem",
]
