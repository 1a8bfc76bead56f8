"""The stack manifest (``stack/*.yaml``): parse and validate into a frozen model.

``parse_manifest`` is pure (text in, ``Manifest`` out); ``load_manifest`` reads the file.
Every error names the file, the line and the key path (``packages.torch.version``), and an
unknown key gets a "did you mean". YAML is read with a loader that refuses duplicate keys,
and version-like values must be strings (unquoted ``3.10`` reads as the float 3.1).

A hostile file costs bounded time and memory: its size is checked before it is read, and the
loader refuses anchors, aliases, merge keys, tags, non-scalar keys, a second document, and
nesting, node counts and scalars past the ``MAX_*`` bounds as it composes (docs/manifest.md,
"What the reader accepts").
"""

from __future__ import annotations

import codecs
import dataclasses
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

import yaml
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

from core.errors import ManifestError
from manifest.component_keys import parse_components
from manifest.fields import KeyReader
from manifest.image_keys import parse_build, parse_gates, parse_image, parse_mirrors
from manifest.key_shapes import STACK_NAME_RE
from manifest.key_table import TABLE
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
from manifest.platform_keys import (
    parse_musa,
    parse_python_install,
    parse_runtime,
    parse_sdk,
    parse_sdk_apt,
)
from manifest.serving import ServingProfile, parse_serving
from manifest.source_keys import parse_sources

# Bounds on what the reader takes in. A real manifest is a few KB, a few hundred values, five
# levels deep, with no value longer than a URL; these are far above that, and keep a hostile
# file's cost (time, memory, message length) bounded whatever its shape. docs/manifest.md
# documents them. The size bound is the time bound: the pure-Python scanner reads its slowest
# shapes (blank lines, repeated `...`) at about 1 MB a second, so 256 KiB is a quarter second.
MAX_MANIFEST_BYTES = 256 * 1024  # the file, checked before it is read whole
MAX_DEPTH = 32  # nested mappings and lists
MAX_NODES = 10_000  # keys, values and list items, all counted
MAX_KEY_CHARS = 256
MAX_SCALAR_CHARS = 4096  # one value
MAX_NUMBER_CHARS = 32  # an unquoted number: a 10**5-digit int is refused, not converted

_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
# what a plain scalar the resolver reads as one of these is, for messages
_CONVERTED = {_INT_TAG: "integer", _FLOAT_TAG: "number", _TIMESTAMP_TAG: "date"}
# Characters no manifest value has a use for: C0/C1 controls (a newline or tab included, which a
# quoted "\n" or "\t" can still write), lone surrogates, line and paragraph separators, and the
# invisible ones (zero-width, bidirectional overrides, a BOM) that make text read other than it is.
_UNPRINTABLE_RE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]"
)
_STRUCTURE_HINT = (
    "a stack manifest is plain mappings, lists and scalars: write the value out where it is used"
)


class _ManifestLoader(yaml.SafeLoader):
    """PyYAML's pure-Python safe loader, bounded while it composes: no anchors, aliases, merge
    keys or tags; keys are scalars; depth, node count and scalar length are capped. It refuses
    duplicate mapping keys (yaml/pyyaml#165).

    The pure-Python loader, not libyaml's ``CSafeLoader``: its composer is where the bounds are
    checked, one event at a time, so a hostile file stops at the first node over a bound (the
    C composer recurses in C and would only be checked after it built the whole tree).
    """

    def __init__(self, text: str, path: Path) -> None:
        super().__init__(text)
        self.manifest_path = path
        self.depth = 0
        self.nodes = 0
        self.keypath: list[str] = []  # of the node being composed, for messages

    def refuse(self, mark: Any, message: str, hint: str | None = None) -> NoReturn:
        where = f"{self.manifest_path}:{mark.line + 1}" if mark else str(self.manifest_path)
        dotted = ".".join(self.keypath) if self.keypath else "(top level)"
        raise ManifestError(f"{where}: {dotted}: {message}", hint=hint)

    def next_event(self) -> Any:
        return self.peek_event()  # type: ignore[no-untyped-call]

    def get_single_node(self) -> yaml.Node | None:
        self.get_event()  # type: ignore[no-untyped-call]  # the stream start
        node = None
        if not self.check_event(yaml.StreamEndEvent):
            node = self.compose_document()
        if not self.check_event(yaml.StreamEndEvent):
            mark = self.next_event().start_mark
            raise ManifestError(
                f"{self.manifest_path}:{mark.line + 1}: a second YAML document; "
                "a manifest is one document",
                hint="one stack per file: remove the `---` and what follows it",
            )
        self.get_event()  # type: ignore[no-untyped-call]
        return node

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # the key path of this node: a mapping value is under its key (index is the key's
        # node, already checked), a list item under its position; a key is named by its mapping
        if isinstance(index, yaml.ScalarNode):
            self.keypath.append(str(index.value))
        elif isinstance(parent, yaml.SequenceNode):
            self.keypath.append(str(index))
        else:
            return self._compose(parent, index)
        try:
            return self._compose(parent, index)
        finally:
            self.keypath.pop()

    def _compose(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.next_event()
        mark = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            self.refuse(mark, f"a YAML alias (*{event.anchor}) is not allowed", _STRUCTURE_HINT)
        if event.anchor is not None:
            self.refuse(mark, f"a YAML anchor (&{event.anchor}) is not allowed", _STRUCTURE_HINT)
        tag = getattr(event, "tag", None)
        if tag is not None:
            self.refuse(
                mark,
                f"a YAML tag ({tag}) is not allowed",
                hint='write the value plainly; quote a string that looks like a number: "3.12"',
            )
        is_key = isinstance(parent, yaml.MappingNode) and index is None
        if is_key and not isinstance(event, yaml.ScalarEvent):
            kind = "a list" if isinstance(event, yaml.SequenceStartEvent) else "a mapping"
            self.refuse(mark, f"a mapping key is {kind}; keys are plain strings")
        self.nodes += 1
        if self.nodes > MAX_NODES:
            self.refuse(
                mark,
                f"more than {MAX_NODES} values; the manifest is too large",
                hint="a stack manifest has a few hundred values",
            )
        if isinstance(event, yaml.ScalarEvent):
            self._check_scalar(mark, event.value, is_key=is_key)
            node = super().compose_node(parent, index)
            if node is not None:
                self._check_resolved(mark, node, is_key=is_key)
            return node
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                self.refuse(
                    mark,
                    f"nested more than {MAX_DEPTH} levels deep",
                    hint="a stack manifest is a few levels of mappings and lists",
                )
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def _check_scalar(self, mark: Any, value: str, *, is_key: bool) -> None:
        limit, what = (MAX_KEY_CHARS, "key") if is_key else (MAX_SCALAR_CHARS, "value")
        if len(value) > limit:
            self.refuse(mark, f"a {what} of {len(value)} characters (at most {limit})")
        bad = _UNPRINTABLE_RE.search(value)
        if bad:
            self.refuse(
                mark,
                f"a {what} holds the character U+{ord(bad.group()):04X}",
                hint='a value is one line of printable text (a quoted "\\n" or "\\t" is one too)',
            )

    def _check_resolved(self, mark: Any, node: yaml.Node, *, is_key: bool) -> None:
        if node.tag in (_INT_TAG, _FLOAT_TAG) and len(node.value) > MAX_NUMBER_CHARS:
            self.refuse(
                mark,
                f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS})",
                hint="no manifest key takes a number that long; quote it if it is a string",
            )
        if is_key and node.tag == _MERGE_TAG:
            self.refuse(mark, "a YAML merge key (<<) is not allowed", _STRUCTURE_HINT)
        kind = _CONVERTED.get(node.tag)
        if kind:
            # the resolver's patterns pass what the constructor cannot convert (`0b_`, `._`,
            # `2024-13-45`): convert it here, where the line is known
            try:
                self.yaml_constructors[node.tag](self, node)
            except (ValueError, OverflowError):
                self.refuse(
                    mark,
                    f"{node.value!r} reads as a YAML {kind} but is not a valid one",
                    hint=f'quote it if it is a string: "{node.value}"',
                )


def _construct_mapping(loader: _ManifestLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise ManifestError(
                f"{loader.manifest_path}:{line}: duplicate key {key!r} (first at line {seen[key]})",
                hint="a YAML mapping keeps only the last duplicate; remove one of them",
            )
        seen[key] = line
    return loader.construct_mapping(node, deep=True)


_ManifestLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _line_marks(root: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """Map each key path to its 1-based line, for messages (the tree has no aliases, so this
    visits each node once)."""
    marks: dict[tuple[str, ...], int] = {}
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())] if root is not None else []
    while stack:
        node, path = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                sub = (*path, str(key_node.value))
                marks.setdefault(sub, key_node.start_mark.line + 1)
                stack.append((value_node, sub))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                sub = (*path, str(i))
                marks[sub] = item.start_mark.line + 1
                stack.append((item, sub))
    return marks


def _too_large(path: Path, size: int) -> ManifestError:
    return ManifestError(
        f"{path}: the manifest is {size} bytes; at most {MAX_MANIFEST_BYTES} "
        f"({MAX_MANIFEST_BYTES // 1024} KiB) are read",
        hint="a stack manifest is a few KB: is this the right file?",
    )


def load_manifest(path: Path) -> Manifest:
    """Read and validate a stack manifest file: a regular file of at most
    ``MAX_MANIFEST_BYTES`` of UTF-8 text (a leading BOM is allowed), checked before it is read."""
    return parse_manifest(_read_text(path, "manifest", "stacks live in stack/*.yaml"), path=path)


def _read_text(path: Path, what: str, where: str) -> str:
    """The text of a manifest-like file, within ``MAX_MANIFEST_BYTES``, checked before it is
    read whole; ``what`` names it in messages, ``where`` says where such files live."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise ManifestError(f"{path}: not a regular file", hint=where)
        if info.st_size > MAX_MANIFEST_BYTES:
            raise _too_large(path, info.st_size)
        with path.open("rb") as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)  # the file may have grown since
    except FileNotFoundError:
        raise ManifestError(f"{path}: no such {what}", hint=where) from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read the {what}: {exc.strerror}") from None
    if len(data) > MAX_MANIFEST_BYTES:
        raise _too_large(path, len(data))
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        hint = f"save the {what} as UTF-8"
        if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
            hint += " (this file is UTF-16)"
        raise ManifestError(
            f"{path}:{line}: not UTF-8 text (the byte 0x{data[exc.start]:02x})", hint=hint
        ) from None


def _yaml_error(path: Path, text: str, exc: yaml.YAMLError) -> ManifestError:
    """A PyYAML error as a manifest error with the file and line (never a snippet of the file)."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        return ManifestError(
            f"{path}:{line}: the character U+{exc.character:04X} is not allowed in YAML",
            hint="a manifest is printable UTF-8 text: remove it",
        )
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        what = ", ".join(p for p in (exc.context, exc.problem) if p)
        return ManifestError(f"{where}: not valid YAML: {what}")
    return ManifestError(f"{path}: not valid YAML: {exc}")


def _compose(text: str, path: Path) -> tuple[yaml.Node | None, object]:
    """The document's node tree and its value, composed once, within the bounds."""
    if len(text) > MAX_MANIFEST_BYTES:
        raise _too_large(path, len(text.encode("utf-8", "surrogatepass")))
    try:
        loader = _ManifestLoader(text, path)  # it refuses unprintable characters up front
    except yaml.YAMLError as exc:
        raise _yaml_error(path, text, exc) from None
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        raise _yaml_error(path, text, exc) from None
    finally:
        loader.dispose()
    return node, data


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
    node, data = _compose(text, path)
    marks = _line_marks(node)
    r = KeyReader(path, marks, TABLE)
    top = r.mapping(data, [])
    r.keys(top, [], "")
    schema = top["schema"]
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise r.error(["schema"], f"unsupported schema {schema!r}; this tool reads schema 1")
    name = r.string(top["name"], ["name"])
    r.matching(STACK_NAME_RE, name, ["name"], "a valid name (letters, digits, '.', '_', '-')")
    release = r.string(top["release"], ["release"], example="0.28.0")
    target = parse_target(r, top["target"])
    indexes = parse_indexes(r, top["indexes"])
    default_index = r.index(top["default_index"], ["default_index"], indexes)
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
    components = parse_components(r, top.get("components", {}), indexes, sources)
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
        key_lines=marks,
    )
    return dataclasses.replace(manifest, lock_inputs_sha256=lock_inputs_sha256(manifest))


def load_serving_profile(path: Path) -> ServingProfile:
    """A serving profile file (``--profile FILE``): the keys of a manifest's ``serving:``."""
    text = _read_text(path, "serving profile", "a profile holds the keys of a serving: section")
    node, data = _compose(text, path)
    return parse_serving(KeyReader(path, _line_marks(node), TABLE), data, [])
