"""The JSON Schema (draft 2020-12) of a stack manifest, generated, never written by hand.

Where each part comes from:

- the keys, how they nest and which are required: the reader itself. ``render_schema`` reads
  the reference's complete example (docs/manifest.md, "A manifest with every key", which
  reaches every key parser) and listens to every ``KeyReader.keys`` check the reader makes;
  a mapping whose keys are checked has exactly those properties (``additionalProperties:
  false``), and a level the reader does not check is a name the user chooses;
- each key's type, default and description: its row in the reference's tables (docs/manifest.md
  lists every key; ``tests/manifest/test_schema.py`` holds the rows and the reader's keys equal);
- enums, patterns and bounds: ``CONSTRAINTS`` below, built from the validators' own constants
  (``ARCHES``, ``WHEEL_KINDS``, the regular expressions of the key parsers).

What a schema cannot say (a pin's index must be one of ``indexes``, a PEP 508 requirement, a
requirement that repeats a pin...) stays with the reader; docs/manifest.md lists those rules.
``render_schema`` is pure: reference text in, schema out (``build_image.py schema`` prints it).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import ManifestError
from manifest.component_keys import _SHA256_RE, _TOOLCHAIN_RE
from manifest.fields import KeyReader
from manifest.image_keys import (
    _COMPONENT_SWITCHES,
    _DIST_RE,
    _LICENSES_RE,
    _MODULE,
    _SONAME,
    MAX_DESCRIPTION,
)
from manifest.key_shapes import _DEB_NAME_RE, _ENV_NAME_RE, _LINE_RE, _NAME_RE, _REL_FILE_RE
from manifest.lock_keys import _INDEX_NAME_RE, _INDEX_URL_RE
from manifest.model import (
    ARCHES,
    GLIBC_HIGHEST,
    GLIBC_LOWEST,
    INDEX_FORMATS,
    PLAIN_URL_RE,
    PYTHON_PROVIDERS,
    PYTHON_VERSIONS,
    RUST_PROVIDERS,
    SCHEMA_VERSION,
    SDK_FROM,
    TAG_FIELDS,
    WHEEL_KINDS,
)
from manifest.names import MIRROR_NAMES
from manifest.platform_keys import (
    _APT_WORD_RE,
    _DEB_PIN_RE,
    _DIR_RE,
    _GPU_ARCH_RE,
    _SDK_COMMAND_RE,
    _SDK_LIBRARY_RE,
    _VISIBLE_RE,
    MUSA_ENV,
)
from manifest.reader import STACK_NAME_RE, parse_manifest
from manifest.serving import _ENV_NAME_RE as _SERVING_ENV_RE
from manifest.serving import (
    _MODEL_NAME_RE,
    _RUNTIME_RE,
    _SIZE_RE,
    IPC_MODES,
    LIFETIMES,
    NETWORKS,
    _check_order,
)
from manifest.source_keys import _GIT_URL_RE, _PIN_KEY_RE, _REV_RE

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# The keywords the schema uses: those that mean the same in draft-07, which is what the YAML
# language server (VS Code's YAML extension) implements, so an editor checks all of them.
KEYWORDS = frozenset(
    {
        "$schema", "additionalProperties", "allOf", "anyOf", "const", "default", "description",
        "else", "enum", "exclusiveMaximum", "if", "items", "maxItems", "maxLength", "maximum",
        "minItems", "minProperties", "minimum", "not", "oneOf", "pattern", "properties",
        "propertyNames", "required", "then", "title", "type", "uniqueItems",
    }
)  # fmt: skip
REFERENCE = Path("docs") / "manifest.md"  # under the repository root
SCHEMA_FILE = Path("docs") / "stack.schema.json"  # the committed schema, under the root
_EXAMPLE_HEADING = "## A manifest with every key"
_TABLE_HEADER = "| Key | Type | Required | Default | Meaning |"
_ANY = "*"  # a name the user chooses, or a list item, in a key path


def _pattern(regex: re.Pattern[str]) -> str:
    """A validator's regular expression as a JSON Schema pattern: anchored (the validators
    use ``fullmatch``), named groups made plain (ECMA-262 spells them differently)."""
    text = re.sub(r"\(\?P<[A-Za-z_]+>", "(?:", regex.pattern)
    if not (text.startswith("^") and text.endswith("$")):
        text = f"^(?:{text})$"
    return text


def _numbers(low: int, high: int) -> str:
    """A pattern for the decimal numbers ``low`` to ``high`` (at most 99), no leading zeros:
    ``_numbers(17, 99)`` is ``(?:1[7-9]|[2-9][0-9])``."""
    assert 0 <= low <= high <= 99
    parts = [f"[{low}-{min(high, 9)}]"] if low <= 9 else []
    start = max(low, 10)
    while start <= high:
        tens, end = start // 10, min(high, start // 10 * 10 + 9)
        if start % 10 == 0 and end % 10 == 9:  # whole decades at once
            last = min(high // 10 if high % 10 == 9 else high // 10 - 1, 9)
            parts.append(f"[{tens}-{last}][0-9]" if last > tens else f"{tens}[0-9]")
            start = last * 10 + 10
        else:
            parts.append(f"{tens}[{start % 10}-{end % 10}]")
            start = end + 1
    return "(?:" + "|".join(parts) + ")"


def _glibc(arch: str) -> dict[str, Any]:
    low, high = GLIBC_LOWEST[arch], GLIBC_HIGHEST
    return {"pattern": f"^2\\.{_numbers(low[1], high[1])}$"}


# a version as packaging writes it (str(Version(text)) == text): what an exact pin must be
NORMAL_VERSION = (
    r"^(?:[1-9][0-9]*!)?(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*"
    r"(?:(?:a|b|rc)(?:0|[1-9][0-9]*))?(?:\.post(?:0|[1-9][0-9]*))?(?:\.dev(?:0|[1-9][0-9]*))?"
    r"(?:\+(?:0|[1-9][0-9]*|[a-z0-9]*[a-z][a-z0-9]*)(?:\.(?:0|[1-9][0-9]*|[a-z0-9]*[a-z][a-z0-9]*))*)?$"
)
_URL = {"pattern": _pattern(PLAIN_URL_RE)}
_PROJECT = {"pattern": _pattern(_NAME_RE).replace("a-z", "A-Za-z")}  # matched lowercased
_PINNED_VERSION = {"pattern": NORMAL_VERSION}
_FINGERPRINT = {"pattern": "^ *(?:[0-9A-Fa-f] *){40}$"}  # 40 hex, spaces allowed
_NO_DOTDOT = {"not": {"pattern": "(?:^|/)\\.\\.(?:/|$)"}}
_RELATIVE_FILE = {"pattern": _pattern(_REL_FILE_RE), **_NO_DOTDOT}
_IMAGE_DIR = {
    "pattern": _pattern(_DIR_RE),
    "allOf": [_NO_DOTDOT, {"not": {"enum": ["/", "."]}}],
}
_ABSOLUTE_DIR = {**_IMAGE_DIR, "pattern": "^/" + _pattern(_DIR_RE)[1:].removeprefix("/?")}
_CONTAINER_PATH = {"pattern": "^/[^:,]*$"}  # absolute, no ':' or ',' (a mount, a device)
_WHEEL = {"enum": list(WHEEL_KINDS)}
_ENV = {"pattern": _pattern(_ENV_NAME_RE)}


def _one_of(*keys: str) -> dict[str, Any]:
    return {"oneOf": [{"required": [k]} for k in keys]}


def _when(key: str, value: object, then: dict[str, Any], otherwise: Any = None) -> dict[str, Any]:
    rule: dict[str, Any] = {
        "if": {"properties": {key: {"const": value}}, "required": [key]},
        "then": then,
    }
    if otherwise is not None:
        rule["else"] = otherwise
    return rule


def _source(*kinds: str) -> dict[str, Any]:
    """A source is one of git + rev, path, or sdist (with an optional rev)."""
    return {
        **_one_of(*kinds),
        "allOf": [
            {"if": {"required": ["git"]}, "then": {"required": ["rev"]}},
            {"if": {"required": ["path"]}, "then": {"not": {"required": ["rev"]}}},
        ],
    }


def _orders() -> list[list[str]]:
    """The orders of server lifetimes ``serving.ab.order`` takes: every arrangement of
    ``LIFETIMES`` that the reader's own check passes."""
    reader = KeyReader(REFERENCE, {})
    out: list[list[str]] = []
    for n in range(1, len(LIFETIMES) + 1):
        for order in itertools.permutations(LIFETIMES, n):
            try:
                _check_order(reader, list(order), ["order"])
            except ManifestError:
                continue
            out.append(list(order))
    return out


def _sdk_from(origin: str) -> dict[str, Any]:
    return {
        "properties": {"sdk": {"properties": {"from": {"const": origin}}, "required": ["from"]}},
        "required": ["sdk"],
    }


# Enums, patterns and bounds, by the key path of docs/manifest.md; ``<item>`` is an item of a
# list or a value of a mapping, ``<key>`` a key the user chooses. Every entry must be used.
CONSTRAINTS: Mapping[str, Mapping[str, Any]] = {
    "": {  # the top level: rules across sections
        "allOf": [
            {"if": _sdk_from("apt"), "then": {"required": ["sdk_apt"]}},
            {"if": _sdk_from("base"), "then": {"not": {"required": ["sdk_apt"]}}},
            {  # musa: sets these in the image, so no build argument may name them
                "if": {"required": ["musa"]},
                "then": {
                    "properties": {
                        "build": {
                            "properties": {
                                "args": {"propertyNames": {"not": {"enum": list(MUSA_ENV)}}}
                            }
                        }
                    }
                },
            },
        ],
    },
    "schema": {"const": SCHEMA_VERSION},
    "name": {"pattern": _pattern(STACK_NAME_RE)},
    "target": {
        "allOf": [_when("arch", arch, {"properties": {"glibc": _glibc(arch)}}) for arch in ARCHES],
    },
    "target.python": {"enum": [f"{major}.{minor}" for major, minor in PYTHON_VERSIONS]},
    "target.arch": {"enum": list(ARCHES)},
    "target.glibc": {
        "pattern": f"^2\\.{_numbers(min(GLIBC_LOWEST.values())[1], GLIBC_HIGHEST[1])}$"
    },
    "indexes": {"minProperties": 1},
    "indexes.<key>": {"pattern": _pattern(_INDEX_NAME_RE)},
    "indexes.<name>.url": {
        "pattern": _INDEX_URL_RE.pattern,
        "not": {"pattern": "^https?://[^/]*@"},  # credentials go in the environment
    },
    "indexes.<name>.format": {"enum": list(INDEX_FORMATS)},
    "packages.<key>": _PROJECT,
    "packages.<name>.version": _PINNED_VERSION,
    "packages.<name>.wheel": _WHEEL,
    "rules.same_line.<item>": {"minItems": 2},
    "rules.line_map.<name>.versions": {"minProperties": 1},
    "rules.line_map.<name>.versions.<key>": {"pattern": _pattern(_LINE_RE)},
    "rules.line_map.<name>.versions.<item>": _PINNED_VERSION,
    "python_install": _when(
        "provider",
        "deadsnakes",
        {"required": ["mirror", "key_fingerprint"]},
        {"not": {"anyOf": [{"required": [k]} for k in ("mirror", "key_fingerprint", "key_url")]}},
    ),
    "python_install.provider": {"enum": list(PYTHON_PROVIDERS)},
    "python_install.mirror": _URL,
    "python_install.key_fingerprint": _FINGERPRINT,
    "python_install.key_url": _URL,
    "sdk_apt.url": _URL,
    "sdk_apt.suite": {"pattern": _pattern(_APT_WORD_RE)},
    "sdk_apt.component": {"pattern": _pattern(_APT_WORD_RE)},
    "sdk_apt.key_fingerprint": _FINGERPRINT,
    "sdk_apt.key_url": _URL,
    "sdk_apt.packages": {"minItems": 1},
    "sdk_apt.packages.<item>": {"pattern": _pattern(_DEB_PIN_RE)},
    "sdk": {
        "allOf": [
            _when("from", "apt", {"required": ["runtime"]}, {"not": {"required": ["runtime"]}}),
            _when(  # from: base must check something of the base image's SDK
                "from",
                "base",
                {
                    "not": {
                        "properties": {"commands": {"maxItems": 0}, "libraries": {"maxItems": 0}},
                        "required": ["commands", "libraries"],
                    }
                },
            ),
        ]
    },
    "sdk.from": {"enum": list(SDK_FROM)},
    "sdk.runtime": {"pattern": _pattern(_LINE_RE)},
    "sdk.commands.<item>": {"pattern": _pattern(_SDK_COMMAND_RE)},
    "sdk.libraries.<item>": {"pattern": _pattern(_SDK_LIBRARY_RE)},
    "sources.<key>": {"pattern": _pattern(_NAME_RE)},
    "sources.<name>": _source("git", "path", "sdist"),
    "sources.<name>.git": {
        "pattern": _pattern(_GIT_URL_RE),
        "not": {"pattern": "^[a-z]+://[^/]*@"},
    },
    "sources.<name>.rev": {"pattern": _pattern(_REV_RE)},
    "sources.<name>.path": {"not": {"anyOf": [{"pattern": "^/"}, _NO_DOTDOT["not"]]}},
    "sources.<name>.env.<key>": _ENV,
    "sources.<name>.sdist.project": _PROJECT,
    "sources.<name>.requirements_files": {"uniqueItems": True},
    "sources.<name>.requirements_files.<item>": _RELATIVE_FILE,
    "sources.<name>.build_requirements_files": {"uniqueItems": True},
    "sources.<name>.build_requirements_files.<item>": _RELATIVE_FILE,
    "sources.<name>.third_party.<key>": {"pattern": _pattern(_NAME_RE)},
    "sources.<name>.third_party.<dir>.pin": {"pattern": _pattern(_PIN_KEY_RE)},
    "sources.<name>.third_party.<dir>.patches": _RELATIVE_FILE,
    "build.args.<key>": {**_ENV, "not": {"enum": sorted(_COMPONENT_SWITCHES)}},
    "build.apt_packages.<item>": {"pattern": _pattern(_DEB_NAME_RE)},
    "musa.gpu_arch": {"pattern": _pattern(_GPU_ARCH_RE)},
    "musa.home": _ABSOLUTE_DIR,
    "musa.visible_devices": {"pattern": _pattern(_VISIBLE_RE)},
    "musa.path.<item>": _IMAGE_DIR,
    "musa.library_path.<item>": _IMAGE_DIR,
    "runtime.apt_packages.<item>": {"pattern": _pattern(_DEB_NAME_RE)},
    "runtime.library_links.<key>": _ABSOLUTE_DIR,
    "runtime.library_links.<item>": _ABSOLUTE_DIR,
    "runtime.host_libraries.<key>": {"pattern": _pattern(_SONAME)},
    "gates.imports": {"uniqueItems": True},
    "gates.imports.<item>": {"pattern": _pattern(_MODULE)},
    "gates.find_spec": {"uniqueItems": True},
    "gates.find_spec.<item>": {"pattern": _pattern(_MODULE)},
    "gates.versions.<key>": {"pattern": _pattern(_DIST_RE)},
    "gates.libraries": {"uniqueItems": True},
    "gates.libraries.<item>": {"pattern": _pattern(_SONAME)},
    "gates.markers.<key>": {"pattern": _pattern(_DIST_RE)},
    "gates.markers.<item>": _RELATIVE_FILE,
    "image.variables.<key>": {"not": {"enum": list(TAG_FIELDS)}},
    "image.licenses": {"pattern": _pattern(_LICENSES_RE)},
    "image.description": {"maxLength": MAX_DESCRIPTION},
    "components.vllm-rs": _when(
        "enabled",
        True,
        # rustup-init is pinned for the rustup provider (the default), refused for distro,
        # which alone takes toolchain (rustup's is the tree's rust-toolchain.toml)
        _when(
            "provider",
            "distro",
            {"not": {"required": ["rustup_init"]}},
            {"required": ["rustup_init"], "not": {"required": ["toolchain"]}},
        ),
    ),
    "components.vllm-rs.tree": {"pattern": _pattern(_NAME_RE)},
    "components.vllm-rs.toolchain": {"pattern": _pattern(_TOOLCHAIN_RE)},
    "components.vllm-rs.provider": {"enum": list(RUST_PROVIDERS)},
    "components.vllm-rs.rustup_init.url": _URL,
    "components.vllm-rs.rustup_init.sha256": {"pattern": _pattern(_SHA256_RE)},
    "components.mooncake": _when("enabled", True, {"required": ["version", "index"]}),
    "components.mooncake.package": _PROJECT,
    "components.mooncake.version": _PINNED_VERSION,
    "components.mooncake.wheel": _WHEEL,
    **{f"mirrors.{name}": _URL for name in MIRROR_NAMES},
    "mirrors.indexes.<item>": _URL,
    "serving.model": {  # a relative path (the demo's) stays under the repository
        "if": {"properties": {"path": {"pattern": "^[^/]"}}, "required": ["path"]},
        "then": {"required": ["mount"], "properties": {"path": _NO_DOTDOT}},
    },
    "serving.model.path": {"pattern": "^[^:,]+$", "allOf": [{"pattern": "\\S"}]},
    "serving.model.mount": _CONTAINER_PATH,
    "serving.model.name": {"pattern": _pattern(_MODEL_NAME_RE)},
    "serving.launch.port": {"minimum": 1, "maximum": 65535},
    "serving.launch.env.<key>": {"pattern": _pattern(_SERVING_ENV_RE)},
    "serving.launch.runtime": {"pattern": _pattern(_RUNTIME_RE)},
    "serving.launch.devices.<item>": _CONTAINER_PATH,
    "serving.launch.ipc": {"enum": list(IPC_MODES)},
    "serving.launch.network": {"enum": list(NETWORKS)},
    # the reader lowercases the size before it checks it
    "serving.launch.shm_size": {"pattern": _pattern(_SIZE_RE).replace("[bkmg]", "[bkmgBKMG]")},
    "serving.health.deadline": {"minimum": 1},
    "serving.check.requests.<n>": _one_of("chat", "prompt"),
    "serving.check.requests.<n>.max_tokens": {"minimum": 1},
    "serving.preflight.probe.command": {"minItems": 1},
    "serving.ab.input_len": {"minimum": 1},
    "serving.ab.output_len": {"minimum": 2},
    "serving.ab.concurrency": {"minItems": 1, "uniqueItems": True},
    "serving.ab.concurrency.<item>": {"minimum": 1, "maximum": 4096},
    "serving.ab.warmups": {"minimum": 0},
    "serving.ab.runs": {"minimum": 1},
    "serving.ab.requests_per_run": {"minimum": 1},
    "serving.ab.order": {"enum": _orders()},
    "serving.ab.order.<item>": {"enum": list(LIFETIMES)},
    "serving.ab.bootstrap.resamples": {"minimum": 100},
    "serving.ab.bootstrap.confidence": {"minimum": 0.5, "exclusiveMaximum": 1},
    "serving.ab.bootstrap.seed": {"minimum": 0},
    "serving.ab.request_timeout": {"minimum": 1},
}

_SCALARS = {"string": "string", "boolean": "boolean", "integer": "integer", "number": "number"}
_ITEMS = {
    "list of strings": "string",
    "list of integers": "integer",
    "mapping of strings": "string",
}


@dataclass(frozen=True, kw_only=True)
class Row:
    """One row of a key table of docs/manifest.md."""

    key: str  # as written: packages.<name>.version
    type: str
    required: str
    default: str
    meaning: str

    @property
    def generic(self) -> tuple[str, ...]:
        return tuple(_ANY if p.startswith("<") else p for p in self.key.split("."))


def parse_reference(text: str) -> dict[tuple[str, ...], Row]:
    """The rows of every key table, by generic key path (``("packages", "*", "version")``)."""
    rows: dict[tuple[str, ...], Row] = {}
    in_table = False
    for line in text.splitlines():
        if line.startswith(_TABLE_HEADER):
            in_table = True
            continue
        if not line.startswith("|"):
            in_table = False
        if not in_table or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|", 4)]
        if len(cells) != 5 or not (cells[0].startswith("`") and cells[0].endswith("`")):
            raise _reference_error(f"a key table row that is not `key` | type | ...: {line!r}")
        row = Row(
            key=cells[0][1:-1],
            type=cells[1],
            required=cells[2],
            default=cells[3],
            meaning=cells[4],
        )
        if row.generic in rows:
            raise _reference_error(f"`{row.key}` has two rows")
        rows[row.generic] = row
    return rows


def complete_example(text: str) -> str:
    """The YAML of the reference's "A manifest with every key"."""
    section = text.partition(_EXAMPLE_HEADING)[2]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    if block is None:
        raise _reference_error(f'no ```yaml block under "{_EXAMPLE_HEADING}"')
    return block.group(1)


@dataclass(frozen=True, kw_only=True)
class KeySet:
    required: tuple[str, ...]
    optional: tuple[str, ...]


def reader_keys(example: str) -> dict[tuple[str, ...], KeySet]:
    """The keys the reader checks while it reads ``example``, by generic key path: a level
    of a key path that no check names is a name the user chooses (or a list item)."""
    seen: dict[tuple[str, ...], KeySet] = {}

    def listen(keypath: tuple[str, ...], required: tuple[str, ...], opt: tuple[str, ...]) -> None:
        seen[keypath] = KeySet(required=required, optional=opt)

    parse_manifest(example, path=REFERENCE, on_keys=listen)
    out: dict[tuple[str, ...], KeySet] = {}
    for keypath, keys in seen.items():
        generic = tuple(
            part
            if keypath[:i] in seen
            and part in (*seen[keypath[:i]].required, *seen[keypath[:i]].optional)
            else _ANY
            for i, part in enumerate(keypath)
        )
        if out.setdefault(generic, keys) != keys:
            raise _reference_error(f"{'.'.join(generic)} is read with two sets of keys")
    return out


class _Builder:
    def __init__(
        self, rows: Mapping[tuple[str, ...], Row], keys: Mapping[tuple[str, ...], KeySet]
    ) -> None:
        self.rows = rows
        self.keys = keys
        self.used: set[str] = set()
        self.keypaths = {r.key for r in rows.values()}

    def spelled(self, generic: tuple[str, ...]) -> str:
        """A generic key path as the reference writes it (``sources.<name>.third_party.<dir>``)."""
        for row in self.rows.values():
            if row.generic[: len(generic)] == generic:
                return ".".join(row.key.split(".")[: len(generic)])
        return ".".join("<name>" if p == _ANY else p for p in generic)

    def constraint(self, name: str) -> dict[str, Any]:
        if name in CONSTRAINTS:
            self.used.add(name)
            return dict(CONSTRAINTS[name])
        return {}

    def scalar(self, kind: str, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"type": kind, **self.constraint(name)}
        if kind == "string" and not ({"pattern", "enum", "const"} & out.keys()):
            out["pattern"] = "\\S"  # the reader refuses an empty or blank string
        return out

    def mapping(self, keypath: tuple[str, ...], name: str) -> dict[str, Any]:
        """The object the reader checks the keys of at ``keypath``."""
        keys = self.keys[keypath]
        props = {k: self.key((*keypath, k)) for k in (*keys.required, *keys.optional)}
        out: dict[str, Any] = {
            "type": "object",
            "properties": props,
            "additionalProperties": False,
            **self.constraint(name),
        }
        if keys.required:
            out["required"] = sorted(keys.required)
        return out

    def key(self, keypath: tuple[str, ...]) -> dict[str, Any]:
        row = self.rows.get(keypath)
        if row is None:
            raise _reference_error(
                f"`{self.spelled(keypath)}` is read by the manifest reader but has no row"
            )
        out = self.value(keypath, row)
        out["description"] = row.meaning
        default = self.default(row)
        if default is not None:
            out["default"] = default
        return out

    def value(self, keypath: tuple[str, ...], row: Row) -> dict[str, Any]:
        name, kind = row.key, row.type
        if kind in _SCALARS:
            return self.scalar(_SCALARS[kind], name)
        if kind == "mapping":
            if keypath in self.keys:
                return self.mapping(keypath, name)
            named = (*keypath, _ANY)
            if named not in self.keys:
                raise _reference_error(f"`{name}` is a mapping the reader never reads the keys of")
            return {
                "type": "object",
                "propertyNames": self.scalar("string", f"{name}.<key>"),
                "additionalProperties": self.mapping(named, self.spelled(named)),
                **self.constraint(name),
            }
        if kind == "mapping of strings":
            return {
                "type": "object",
                "propertyNames": self.scalar("string", f"{name}.<key>"),
                "additionalProperties": self.scalar("string", f"{name}.<item>"),
                **self.constraint(name),
            }
        if kind in _ITEMS:
            return {
                "type": "array",
                "items": self.scalar(_ITEMS[kind], f"{name}.<item>"),
                **self.constraint(name),
            }
        if kind == "list of lists of strings":
            inner = {"type": "array", "items": self.scalar("string", f"{name}.<item>.<item>")}
            return {
                "type": "array",
                "items": {**inner, **self.constraint(f"{name}.<item>")},
                **self.constraint(name),
            }
        if kind == "list of mappings":
            return {
                "type": "array",
                "items": self.mapping((*keypath, _ANY), self.spelled((*keypath, _ANY))),
                **self.constraint(name),
            }
        raise _reference_error(f"`{name}` has the type {kind!r}, which the schema does not know")

    def default(self, row: Row) -> object:
        """The Default cell as a value, when it is one literal in backticks (not a key
        that the default is taken from, like `default_index`)."""
        cell = row.default
        if not (cell.startswith("`") and cell.endswith("`") and cell.count("`") == 2):
            return None
        text = cell[1:-1]
        if "<" in text or any(k == text or k.endswith(f".{text}") for k in self.keypaths):
            return None
        return _literal(text, row.type)


def _literal(text: str, kind: str) -> object:
    """A Default cell's literal: ``true``, ``8000``, ``-2.0``, ``[A1, B1]``, ``{a: b}``."""
    if kind == "boolean":
        return {"true": True, "false": False}[text]
    if kind == "integer":
        return int(text)
    if kind == "number":
        return float(text) if "." in text else int(text)
    if text.startswith("[") and text.endswith("]"):
        items = [i.strip() for i in text[1:-1].split(",") if i.strip()]
        return [int(i) if kind == "list of integers" else i for i in items]
    if text.startswith("{") and text.endswith("}"):
        pairs = [p.split(":", 1) for p in text[1:-1].split(",") if p.strip()]
        return {k.strip(): v.strip() for k, v in pairs}
    return text


def _reference_error(message: str) -> ManifestError:
    return ManifestError(
        f"{REFERENCE}: {message}",
        hint="the schema is generated from docs/manifest.md and the manifest reader: "
        "make them agree, then run `build_image.py schema --out docs/stack.schema.json`",
    )


def render_schema(reference: str) -> dict[str, Any]:
    """The JSON Schema of a stack manifest, from the text of docs/manifest.md."""
    rows = parse_reference(reference)
    keys = reader_keys(complete_example(reference))
    builder = _Builder(rows, keys)
    root = builder.mapping((), "")
    unused = sorted(set(CONSTRAINTS) - builder.used)
    if unused:
        raise _reference_error(f"constraints for keys the reader does not read: {unused}")
    unread = sorted(r.key for g, r in rows.items() if not _reached(g, keys))
    if unread:
        raise _reference_error(f"rows for keys the reader does not read: {unread}")
    return {
        "$schema": DIALECT,
        "title": "vllm-musa-image stack manifest",
        "description": "A stack manifest (stack/*.yaml), schema 1. Generated by "
        "`build_image.py schema` from the manifest reader and docs/manifest.md; do not edit.",
        **root,
    }


def _reached(generic: tuple[str, ...], keys: Mapping[tuple[str, ...], KeySet]) -> bool:
    parent, name = generic[:-1], generic[-1]
    known = keys.get(parent)
    return known is not None and name in (*known.required, *known.optional)


def schema_json(reference: str) -> str:
    """``render_schema`` as the committed file holds it: sorted keys, two-space indent."""
    return json.dumps(render_schema(reference), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
