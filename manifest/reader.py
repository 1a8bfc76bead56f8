"""The stack manifest (``stack/*.yaml``): parse and validate into a frozen model.

``parse_manifest`` is pure (text in, ``Manifest`` out); ``load_manifest`` reads the file.
Every error names the file, the line and the key path (``packages.torch.version``), and an
unknown key gets a "did you mean". YAML is read with a loader that refuses duplicate keys,
and version-like values must be strings (unquoted ``3.10`` reads as the float 3.1).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from core.errors import ManifestError
from manifest.fields import KeyReader
from manifest.image_keys import (
    parse_build,
    parse_components,
    parse_gates,
    parse_image,
    parse_mirrors,
    parse_musa,
    parse_python_install,
    parse_runtime,
    parse_sdk,
    parse_sdk_apt,
    parse_sources,
)
from manifest.lock_keys import (
    parse_indexes,
    parse_overrides,
    parse_packages,
    parse_requirements,
    parse_rules,
    parse_target,
)
from manifest.model import (
    SCHEMA_VERSION,
    IndexSpec,
    Manifest,
    Override,
    PackagePin,
    lock_inputs_sha256,
)
from manifest.serving import ServingProfile, parse_serving


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate mapping keys (yaml/pyyaml#165)."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise ManifestError(
                f"duplicate key {key!r} at line {key_node.start_mark.line + 1} "
                f"(first at line {seen[key] + 1})",
                hint="a YAML mapping keeps only the last duplicate; remove one of them",
            )
        seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _line_marks(node: yaml.Node | None, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], int]:
    """Map each key path to its 1-based line, for messages."""
    marks: dict[tuple[str, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = (*path, str(key_node.value))
            marks[sub] = key_node.start_mark.line + 1
            marks.update(_line_marks(value_node, sub))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            sub = (*path, str(i))
            marks[sub] = item.start_mark.line + 1
            marks.update(_line_marks(item, sub))
    return marks


def load_manifest(path: Path) -> Manifest:
    """Read and validate a stack manifest file."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(
            f"{path}: no such manifest", hint="stacks live in stack/*.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the manifest: {exc}") from None
    return parse_manifest(text, path=path)


def _requirements(
    r: KeyReader, top: Mapping[str, Any], packages: Mapping[NormalizedName, PackagePin]
) -> list[Requirement]:
    requirements = parse_requirements(r, top.get("requirements", []), ["requirements"])
    for i, req in enumerate(requirements):
        name_ = canonicalize_name(req.name)
        if name_ in packages:
            raise r.error(
                ["requirements", str(i)],
                f"{req.name} is already pinned under packages.{packages[name_].key}",
                hint="keep one of the two",
            )
    return requirements


def _overrides(
    r: KeyReader,
    top: Mapping[str, Any],
    indexes: Mapping[str, IndexSpec],
    packages: Mapping[NormalizedName, PackagePin],
    requirements: list[Requirement],
) -> dict[NormalizedName, Override]:
    overrides = parse_overrides(r, top.get("overrides", {}), indexes, packages)
    for i, req in enumerate(requirements):
        if canonicalize_name(req.name) in overrides:
            raise r.error(
                ["requirements", str(i)],
                f"{req.name} is also under overrides; the override decides its version",
                hint="keep one of the two",
            )
    return overrides


def parse_manifest(text: str, *, path: Path) -> Manifest:
    """Parse manifest text; ``path`` is used for messages and to place the default lock."""
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc.message}", hint=exc.hint) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from None
    r = KeyReader(path, _line_marks(node))
    top = r.mapping(data, [])
    r.keys(
        top,
        [],
        required=(
            "schema",
            "name",
            "release",
            "target",
            "indexes",
            "default_index",
        ),
        optional=(
            "packages",
            "requirements",
            "rules",
            "base_image",
            "python_install",
            "sdk_apt",
            "sdk",
            "sources",
            "build",
            "gates",
            "image",
            "components",
            "mirrors",
            "musa",
            "runtime",
            "overrides",
            "serving",
        ),
    )
    schema = top["schema"]
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise r.error(["schema"], f"unsupported schema {schema!r}; this tool reads schema 1")
    name = r.string(top["name"], ["name"])
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise r.error(["name"], f"{name!r} is not a valid name (letters, digits, '.', '_', '-')")
    release = r.string(top["release"], ["release"], example="0.28.0")
    target = parse_target(r, top["target"])
    indexes = parse_indexes(r, top["indexes"])
    default_index = r.string(top["default_index"], ["default_index"])
    if default_index not in indexes:
        raise r.error(
            ["default_index"],
            f"{default_index!r} is not one of the indexes ({', '.join(sorted(indexes))})",
        )
    packages = parse_packages(r, top.get("packages", {}), indexes)
    requirements = _requirements(r, top, packages)
    rules = parse_rules(r, top.get("rules", {}), packages)
    base_image = None
    if "base_image" in top:
        base_image = r.string(top["base_image"], ["base_image"])
    python_install = parse_python_install(r, top.get("python_install", {}))
    sdk_apt = parse_sdk_apt(r, top["sdk_apt"]) if "sdk_apt" in top else None
    sdk = parse_sdk(r, top["sdk"], sdk_apt) if "sdk" in top else None
    sources = parse_sources(r, top.get("sources", {}), indexes)
    overrides = _overrides(r, top, indexes, packages, requirements)
    build = parse_build(r, top.get("build", {}))
    gates = parse_gates(r, top.get("gates", {}))
    image = parse_image(r, top["image"], release) if "image" in top else None
    components = parse_components(r, top.get("components", {}), indexes)
    if components.mooncake is not None:
        pin = components.mooncake.pin
        if pin.name in packages:
            raise r.error(
                ["components", "mooncake", "package"],
                f"{pin.key} is also pinned under packages.{packages[pin.name].key}",
                hint="pin it once: under components.mooncake",
            )
        if any(canonicalize_name(q.name) == pin.name for q in requirements):
            raise r.error(
                ["components", "mooncake", "package"],
                f"{pin.key} is also listed under requirements",
                hint="pin it once: under components.mooncake",
            )
        # the lock locks everything in packages: mooncake on is one more exact pin
        packages = {**packages, pin.name: pin}
    mirrors = parse_mirrors(r, top.get("mirrors", {}), indexes)
    manifest = Manifest(
        path=path,
        schema=SCHEMA_VERSION,
        name=name,
        release=release,
        target=target,
        indexes=indexes,
        default_index=default_index,
        packages=packages,
        requirements=tuple(requirements),
        rules=rules,
        base_image=base_image,
        python_install=python_install,
        sdk_apt=sdk_apt,
        sdk=sdk,
        sources=tuple(sources),
        build=build,
        gates=gates,
        image=image,
        components=components,
        mirrors=mirrors,
        musa=parse_musa(r, top["musa"], build) if "musa" in top else None,
        runtime=parse_runtime(r, top.get("runtime", {})),
        overrides=overrides,
        serving=parse_serving(r, top["serving"], ["serving"]) if "serving" in top else None,
    )
    return dataclasses.replace(manifest, lock_inputs_sha256=lock_inputs_sha256(manifest))


def _load_yaml(path: Path, what: str) -> tuple[Any, dict[tuple[str, ...], int]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: cannot read the {what}: {exc}") from None
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc.message}", hint=exc.hint) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from None
    return data, _line_marks(node)


def load_serving_profile(path: Path) -> ServingProfile:
    """A serving profile file (``--profile FILE``): the keys of a manifest's ``serving:``."""
    data, marks = _load_yaml(path, "serving profile")
    return parse_serving(KeyReader(path, marks), data, [])
