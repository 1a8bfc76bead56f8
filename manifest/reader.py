"""The stack manifest (``stack/*.yaml``): parse and validate into a frozen model.

``parse_manifest`` is pure (text in, ``Manifest`` out); ``load_manifest`` reads the file.
Every error names the file, the line and the key path (``packages.torch.version``), and an
unknown key gets a "did you mean". YAML is read with a loader that refuses duplicate keys,
and version-like values must be strings (unquoted ``3.10`` reads as the float 3.1).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from core.errors import ManifestError
from core.urls import redact

SCHEMA_VERSION = 1
WheelKind = Literal["native", "abi3", "pure"]
WHEEL_KINDS: tuple[WheelKind, ...] = ("native", "abi3", "pure")
ARCHES = ("x86_64", "aarch64")
INDEX_FORMATS = ("simple", "find-links")
PYTHON_PROVIDERS = ("deadsnakes", "distro")
RUST_PROVIDERS = ("rustup", "distro")
COMPONENTS = ("vllm-rs", "mooncake")
# mirrors: each optional; a command line --mirror NAME=URL replaces one (images/build/commands.py).
# mirrors.indexes (NAME: URL per Python index) is the manifest's form of --index NAME=URL.
MIRROR_NAMES = ("deadsnakes", "apt", "sdk-apt", "rustup", "rustup-update-root", "cargo", "proxy")
MIRROR_INDEXES = "indexes"
MOONCAKE_PACKAGE = "mooncake-transfer-engine"
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# URLs that end up in a Dockerfile (apt sources, key fetches, mirrors): a plain URL with no
# credentials, whitespace or shell metacharacters, so no value can run a command or add an
# instruction, whatever the template does with it
PLAIN_URL_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%+=,:-]*)?$")
_TOOLCHAIN_RE = re.compile(r"^(\d+\.\d+(\.\d+)?|stable|beta|nightly(-\d{4}-\d{2}-\d{2})?)$")
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_INDEX_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GIT_URL_RE = re.compile(
    r"(https|ssh|file)://[A-Za-z0-9._~/%+=,:@-]+|git@[A-Za-z0-9.-]+:[A-Za-z0-9._~/%+=,-]+"
)
_REV_RE = re.compile(r"^[0-9a-f]{40}$")
_FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}$")
_DEB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")
_APT_WORD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_LINE_RE = re.compile(r"^\d+\.\d+$")
_TAG_FIELD_RE = re.compile(r"\{([^{}]*)\}")


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True, kw_only=True)
class Target:
    """The interpreter inside the image. Never read from the host."""

    python: tuple[int, int]
    arch: str
    glibc: tuple[int, int]

    @property
    def python_str(self) -> str:
        return f"{self.python[0]}.{self.python[1]}"

    @property
    def cp_tag(self) -> str:
        return f"cp{self.python[0]}{self.python[1]}"

    def describe(self) -> str:
        glibc = f"{self.glibc[0]}.{self.glibc[1]}"
        return f"CPython {self.python_str} ({self.cp_tag}), linux {self.arch}, glibc {glibc}"


@dataclass(frozen=True, kw_only=True)
class IndexSpec:
    name: str
    url: str
    format: Literal["simple", "find-links"] = "simple"


@dataclass(frozen=True, kw_only=True)
class PackagePin:
    """An exact pin bound to one index, with the wheel kind it must have."""

    name: NormalizedName
    key: str  # the key as written in the manifest, for messages
    version: Version
    version_text: str
    index: str
    wheel: WheelKind | None  # None: inferred from the chosen wheel (exact roots, line_map)
    deps: bool = True


@dataclass(frozen=True, kw_only=True)
class LineMap:
    name: NormalizedName
    follows: NormalizedName
    versions: Mapping[str, str]  # "2.11" -> "0.17.0"


@dataclass(frozen=True, kw_only=True)
class Rules:
    same_line: tuple[tuple[NormalizedName, ...], ...] = ()
    line_map: tuple[LineMap, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PythonInstall:
    provider: Literal["deadsnakes", "distro"] = "distro"
    mirror: str | None = None
    key_fingerprint: str | None = None
    # where the build fetches the archive key (deadsnakes only); None: the Ubuntu keyserver
    # by fingerprint. The fetched key must have key_fingerprint, whatever the URL.
    key_url: str | None = None


@dataclass(frozen=True, kw_only=True)
class SdkApt:
    """``sdk_apt:``: the vendor apt repository the MUSA SDK packages are installed from.

    The source is ``deb [signed-by=<that key only>] url suite component``; the key is fetched
    from ``key_url`` (None: the Ubuntu keyserver by fingerprint) and refused unless its
    primary fingerprint is ``key_fingerprint``. Never ``trusted=yes``.
    """

    url: str
    suite: str
    component: str
    key_fingerprint: str
    key_url: str | None
    packages: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Source:
    """A source tree built inside the image: a git repository at a revision, or a path."""

    name: str
    git: str | None = None
    rev: str | None = None
    path: str | None = None  # relative to the manifest's repository root
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class PinnedFile:
    """A file the build downloads: fetched by URL, refused unless it has this sha256."""

    url: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class VllmRs:
    """``components.vllm-rs``: the Rust frontend, built in its own stage when enabled.

    ``toolchain`` is a Rust version ("1.83.0"), or None: the source's rust-toolchain.toml.
    ``provider`` rustup fetches ``rustup_init`` (pinned by sha256); distro installs the base
    distribution's rustc and cargo (the demo's stand-in) and checks their version.
    """

    source: Source
    toolchain: str | None
    provider: Literal["rustup", "distro"]
    rustup_init: PinnedFile | None
    binaries: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Mooncake:
    """``components.mooncake``: a pinned binary wheel, locked like every ``packages`` pin."""

    pin: PackagePin


@dataclass(frozen=True, kw_only=True)
class Components:
    vllm_rs: VllmRs | None = None  # None: off
    mooncake: Mooncake | None = None  # None: off

    def enabled(self) -> tuple[str, ...]:
        return tuple(n for n, c in (("vllm-rs", self.vllm_rs), ("mooncake", self.mooncake)) if c)


@dataclass(frozen=True, kw_only=True)
class Mirrors:
    """``mirrors:``; every value is an http(s) URL or None (the upstream default is used)."""

    deadsnakes: str | None = None
    apt: str | None = None
    sdk_apt: str | None = None  # replaces sdk_apt.url
    rustup: str | None = None  # RUSTUP_DIST_SERVER
    rustup_update_root: str | None = None  # RUSTUP_UPDATE_ROOT
    cargo: str | None = None  # a sparse registry replacing crates.io
    proxy: str | None = None  # the one proxy the build uses on purpose; None: no proxy
    # Python index name -> URL, like --index NAME=URL (which wins); never in the lock inputs
    indexes: Mapping[str, str] = field(default_factory=dict)

    def replace(self, overrides: Mapping[str, str]) -> Mirrors:
        """A copy with ``--mirror NAME=URL`` overrides applied (names as in MIRROR_NAMES)."""
        values = {**self.__dict__}
        for name, url in overrides.items():
            values[name.replace("-", "_")] = url
        return Mirrors(**values)


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    requirements: tuple[Requirement, ...] = ()
    args: Mapping[str, str] = field(default_factory=dict)
    # image side: the C/C++ compiler the build stage runs through ccache (mcc for MUSA), and
    # the apt packages present in the build stage only (a toolchain the base lacks)
    compiler: str = "gcc"
    apt_packages: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Gates:
    imports: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ImageSettings:
    repository: str
    release_tags: tuple[str, ...] = ()
    nightly_tags: tuple[str, ...] = ()
    variables: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Manifest:
    path: Path
    schema: int
    name: str
    release: str
    target: Target
    indexes: Mapping[str, IndexSpec]
    default_index: str
    packages: Mapping[NormalizedName, PackagePin]
    requirements: tuple[Requirement, ...]
    rules: Rules
    base_image: str | None = None
    python_install: PythonInstall = field(default_factory=PythonInstall)
    sdk_apt: SdkApt | None = None
    sources: tuple[Source, ...] = ()
    build: BuildSettings = field(default_factory=BuildSettings)
    gates: Gates = field(default_factory=Gates)
    image: ImageSettings | None = None
    components: Components = field(default_factory=Components)
    mirrors: Mirrors = field(default_factory=Mirrors)
    lock_inputs_sha256: str = ""

    @property
    def stem(self) -> str:
        return self.path.name.removesuffix(".yaml").removesuffix(".yml")

    def default_lock_dir(self) -> Path:
        return self.path.parent / f"{self.stem}.lock"

    def index_of(self, name: NormalizedName) -> str:
        pin = self.packages.get(name)
        return pin.index if pin else self.default_index


# --------------------------------------------------------------------------- YAML reading


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


class _Reader:
    """Validation helpers that know the file and the line of every key path."""

    def __init__(self, path: Path, marks: Mapping[tuple[str, ...], int]) -> None:
        self.path = path
        self.marks = marks

    def error(self, keypath: Sequence[str], message: str, hint: str | None = None) -> ManifestError:
        where = str(self.path)
        parts = tuple(keypath)
        while parts and parts not in self.marks:
            parts = parts[:-1]
        if parts in self.marks:
            where += f":{self.marks[parts]}"
        dotted = ".".join(keypath) if keypath else "(top level)"
        return ManifestError(f"{where}: {dotted}: {message}", hint=hint)

    def mapping(self, value: object, keypath: Sequence[str]) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(keypath, f"must be a mapping, got {_describe(value)}")
        for key in value:
            if not isinstance(key, str):
                raise self.error(keypath, f"keys must be strings, got {_describe(key)}")
        return value

    def keys(
        self,
        value: Mapping[str, Any],
        keypath: Sequence[str],
        *,
        required: Sequence[str] = (),
        optional: Sequence[str] = (),
    ) -> None:
        known = [*required, *optional]
        for key in value:
            if key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
                raise self.error([*keypath, key], "unknown key", hint=hint)
        for key in required:
            if key not in value:
                raise self.error(keypath, f"missing required key {key!r}")

    def string(self, value: object, keypath: Sequence[str], *, example: str = "") -> str:
        if isinstance(value, bool) or not isinstance(value, str):
            hint = None
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                shown = example or str(value)
                hint = f'quote it: "{shown}" (YAML reads unquoted numbers as numbers; 3.10 is 3.1)'
            raise self.error(keypath, f"must be a string, got {_describe(value)}", hint=hint)
        if not value.strip():
            raise self.error(keypath, "must not be empty")
        return value

    def string_list(self, value: object, keypath: Sequence[str]) -> list[str]:
        if not isinstance(value, list):
            raise self.error(keypath, f"must be a list, got {_describe(value)}")
        return [self.string(item, [*keypath, str(i)]) for i, item in enumerate(value)]

    def boolean(self, value: object, keypath: Sequence[str]) -> bool:
        if not isinstance(value, bool):
            raise self.error(keypath, f"must be true or false, got {_describe(value)}")
        return value

    def string_map(self, value: object, keypath: Sequence[str]) -> dict[str, str]:
        mapping = self.mapping(value, keypath)
        return {k: self.string(v, [*keypath, k]) for k, v in mapping.items()}


def _describe(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


# --------------------------------------------------------------------------- parsing


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


def parse_manifest(text: str, *, path: Path) -> Manifest:
    """Parse manifest text; ``path`` is used for messages and to place the default lock."""
    try:
        node = yaml.compose(text, Loader=_UniqueKeyLoader)
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc.message}", hint=exc.hint) from None
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path}: not valid YAML: {exc}") from None
    r = _Reader(path, _line_marks(node))
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
            "sources",
            "build",
            "gates",
            "image",
            "components",
            "mirrors",
        ),
    )
    schema = top["schema"]
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise r.error(["schema"], f"unsupported schema {schema!r}; this tool reads schema 1")
    name = r.string(top["name"], ["name"])
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise r.error(["name"], f"{name!r} is not a valid name (letters, digits, '.', '_', '-')")
    release = r.string(top["release"], ["release"], example="0.28.0")
    target = _parse_target(r, top["target"])
    indexes = _parse_indexes(r, top["indexes"])
    default_index = r.string(top["default_index"], ["default_index"])
    if default_index not in indexes:
        raise r.error(
            ["default_index"],
            f"{default_index!r} is not one of the indexes ({', '.join(sorted(indexes))})",
        )
    packages = _parse_packages(r, top.get("packages", {}), indexes)
    requirements = _parse_requirements(r, top.get("requirements", []), ["requirements"])
    for i, req in enumerate(requirements):
        name_ = canonicalize_name(req.name)
        if name_ in packages:
            raise r.error(
                ["requirements", str(i)],
                f"{req.name} is already pinned under packages.{packages[name_].key}",
                hint="keep one of the two",
            )
    rules = _parse_rules(r, top.get("rules", {}), packages)
    base_image = None
    if "base_image" in top:
        base_image = r.string(top["base_image"], ["base_image"])
    python_install = _parse_python_install(r, top.get("python_install", {}))
    sdk_apt = _parse_sdk_apt(r, top["sdk_apt"]) if "sdk_apt" in top else None
    sources = _parse_sources(r, top.get("sources", {}))
    build = _parse_build(r, top.get("build", {}))
    gates = _parse_gates(r, top.get("gates", {}))
    image = _parse_image(r, top["image"], release) if "image" in top else None
    components = _parse_components(r, top.get("components", {}), indexes)
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
    mirrors = _parse_mirrors(r, top.get("mirrors", {}), indexes)
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
        sources=tuple(sources),
        build=build,
        gates=gates,
        image=image,
        components=components,
        mirrors=mirrors,
    )
    return _with_lock_inputs_hash(manifest)


def _parse_target(r: _Reader, value: object) -> Target:
    t = r.mapping(value, ["target"])
    r.keys(t, ["target"], required=("python", "arch", "glibc"))
    python_text = r.string(t["python"], ["target", "python"], example="3.12")
    m = re.fullmatch(r"3\.(\d+)", python_text)
    if not m:
        raise r.error(
            ["target", "python"], f"{python_text!r} is not a CPython X.Y version like 3.12"
        )
    arch = r.string(t["arch"], ["target", "arch"])
    if arch not in ARCHES:
        raise r.error(["target", "arch"], f"{arch!r} is not one of {', '.join(ARCHES)}")
    glibc_text = r.string(t["glibc"], ["target", "glibc"], example="2.35")
    g = re.fullmatch(r"2\.(\d+)", glibc_text)
    if not g or int(g.group(1)) < 5:
        raise r.error(["target", "glibc"], f"{glibc_text!r} is not a glibc 2.Y version like 2.35")
    return Target(python=(3, int(m.group(1))), arch=arch, glibc=(2, int(g.group(1))))


def _parse_indexes(r: _Reader, value: object) -> dict[str, IndexSpec]:
    raw = r.mapping(value, ["indexes"])
    if not raw:
        raise r.error(["indexes"], "at least one index is required")
    out: dict[str, IndexSpec] = {}
    for name, spec in raw.items():
        keypath = ["indexes", name]
        if not _INDEX_NAME_RE.fullmatch(name):
            raise r.error(keypath, "an index name is lowercase letters, digits, '-' and '_'")
        m = r.mapping(spec, keypath)
        r.keys(m, keypath, required=("url",), optional=("format",))
        url = r.string(m["url"], [*keypath, "url"])
        if "@" in url.partition("://")[2].split("/", 1)[0]:  # before any message shows the URL
            raise r.error(
                [*keypath, "url"],
                "credentials do not belong in the manifest",
                hint=(
                    f"set BUILD_IMAGE_INDEX_{name.upper().replace('-', '_')}_AUTH=user:token "
                    "in the environment instead"
                ),
            )
        if not re.match(r"^https?://[^/:]+(:[0-9]{1,5})?(/|$)", url):
            raise r.error([*keypath, "url"], f"{redact(url)!r} is not an http(s) URL")
        fmt = r.string(m.get("format", "simple"), [*keypath, "format"])
        if fmt not in INDEX_FORMATS:
            raise r.error([*keypath, "format"], f"{fmt!r} is not one of {', '.join(INDEX_FORMATS)}")
        out[name] = IndexSpec(name=name, url=url, format=fmt)  # type: ignore[arg-type]
    return out


def _parse_version(r: _Reader, value: object, keypath: list[str]) -> tuple[Version, str]:
    text = r.string(value, keypath, example="1.0")
    try:
        version = Version(text)
    except InvalidVersion:
        raise r.error(keypath, f"{text!r} is not a PEP 440 version") from None
    if str(version) != text:
        raise r.error(
            keypath,
            f"{text!r} is not in normal form; write {str(version)!r}",
            hint="the lock compares full versions, local label included, as text",
        )
    return version, text


def _parse_packages(
    r: _Reader, value: object, indexes: Mapping[str, IndexSpec]
) -> dict[NormalizedName, PackagePin]:
    raw = r.mapping(value, ["packages"])
    out: dict[NormalizedName, PackagePin] = {}
    for key, spec in raw.items():
        keypath = ["packages", key]
        if not _NAME_RE.fullmatch(key.lower()):
            raise r.error(keypath, f"{key!r} is not a valid project name")
        name = canonicalize_name(key)
        if name in out:
            raise r.error(keypath, f"{key!r} is the same project as {out[name].key!r}")
        m = r.mapping(spec, keypath)
        r.keys(m, keypath, required=("version", "index", "wheel"), optional=("deps",))
        deps = r.boolean(m.get("deps", True), [*keypath, "deps"])
        out[name] = _parse_pin(r, key, m, keypath, indexes, wheel=m["wheel"], deps=deps)
    return out


def _parse_pin(
    r: _Reader,
    key: str,
    m: Mapping[str, Any],
    keypath: list[str],
    indexes: Mapping[str, IndexSpec],
    *,
    wheel: object,
    deps: bool,
) -> PackagePin:
    """An exact pin bound to one index with its wheel kind (``packages.X`` and mooncake)."""
    version, version_text = _parse_version(r, m["version"], [*keypath, "version"])
    index = r.string(m["index"], [*keypath, "index"])
    if index not in indexes:
        raise r.error(
            [*keypath, "index"], f"{index!r} is not one of the indexes ({', '.join(indexes)})"
        )
    kind = r.string(wheel, [*keypath, "wheel"])
    if kind not in WHEEL_KINDS:
        raise r.error([*keypath, "wheel"], f"{kind!r} is not one of {', '.join(WHEEL_KINDS)}")
    return PackagePin(
        name=canonicalize_name(key),
        key=key,
        version=version,
        version_text=version_text,
        index=index,
        wheel=kind,
        deps=deps,
    )


def _parse_requirements(r: _Reader, value: object, keypath: list[str]) -> list[Requirement]:
    out: list[Requirement] = []
    seen: dict[NormalizedName, int] = {}
    for i, text in enumerate(r.string_list(value, keypath)):
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise r.error(
                [*keypath, str(i)], f"{text!r} is not a PEP 508 requirement: {exc}"
            ) from None
        if req.url:
            raise r.error(
                [*keypath, str(i)],
                f"{text!r} is a direct URL; only index requirements are locked",
            )
        name = canonicalize_name(req.name)
        if name in seen and not req.marker:
            raise r.error([*keypath, str(i)], f"{req.name} is already listed at item {seen[name]}")
        seen[name] = i
        out.append(req)
    return out


def _parse_rules(r: _Reader, value: object, packages: Mapping[NormalizedName, PackagePin]) -> Rules:
    m = r.mapping(value, ["rules"])
    r.keys(m, ["rules"], optional=("same_line", "line_map"))
    same: list[tuple[NormalizedName, ...]] = []
    groups = m.get("same_line", [])
    if not isinstance(groups, list):
        raise r.error(["rules", "same_line"], "must be a list of lists of package names")
    for i, group in enumerate(groups):
        names = r.string_list(group, ["rules", "same_line", str(i)])
        if len(names) < 2:
            raise r.error(["rules", "same_line", str(i)], "a group needs at least two packages")
        same.append(tuple(canonicalize_name(n) for n in names))
    maps: list[LineMap] = []
    raw_maps = r.mapping(m.get("line_map", {}), ["rules", "line_map"])
    for key, spec in raw_maps.items():
        keypath = ["rules", "line_map", key]
        mm = r.mapping(spec, keypath)
        r.keys(mm, keypath, required=("follows", "versions"))
        follows = canonicalize_name(r.string(mm["follows"], [*keypath, "follows"]))
        if canonicalize_name(key) in packages:
            raise r.error(
                keypath,
                f"{key} is pinned under packages; line_map chooses its version itself",
                hint="remove one of the two",
            )
        versions = r.mapping(mm["versions"], [*keypath, "versions"])
        if not versions:
            raise r.error([*keypath, "versions"], "needs at least one line")
        chosen: dict[str, str] = {}
        for line, ver in versions.items():
            if not _LINE_RE.fullmatch(line):
                raise r.error([*keypath, "versions", line], f"{line!r} is not a MAJOR.MINOR line")
            _, text = _parse_version(r, ver, [*keypath, "versions", line])
            chosen[line] = text
        maps.append(LineMap(name=canonicalize_name(key), follows=follows, versions=chosen))
    return Rules(same_line=tuple(same), line_map=tuple(maps))


def _parse_python_install(r: _Reader, value: object) -> PythonInstall:
    m = r.mapping(value, ["python_install"])
    keypath = ["python_install"]
    r.keys(m, keypath, optional=("provider", "mirror", "key_fingerprint", "key_url"))
    provider = r.string(m.get("provider", "distro"), [*keypath, "provider"])
    if provider not in PYTHON_PROVIDERS:
        raise r.error(
            [*keypath, "provider"], f"{provider!r} is not one of {', '.join(PYTHON_PROVIDERS)}"
        )
    mirror = r.string(m["mirror"], [*keypath, "mirror"]) if "mirror" in m else None
    fingerprint = None
    if "key_fingerprint" in m:
        fingerprint = _fingerprint(r, m["key_fingerprint"], [*keypath, "key_fingerprint"])
    key_url = r.string(m["key_url"], [*keypath, "key_url"]) if "key_url" in m else None
    for key, url in (("mirror", mirror), ("key_url", key_url)):
        if url is not None and not PLAIN_URL_RE.fullmatch(url):
            raise r.error(
                [*keypath, key],
                f"{redact(url)!r} is not an http(s) URL without credentials",
                hint="apt and the key fetch take a plain http(s) URL; the key is checked "
                "against key_fingerprint",
            )
    if provider == "deadsnakes":
        if mirror is None:
            raise r.error(keypath, "the deadsnakes provider needs a mirror URL")
        if fingerprint is None:
            raise r.error(
                keypath,
                "a mirror without a key_fingerprint cannot be verified",
                hint="add key_fingerprint: the 40-hex fingerprint of the archive's signing key",
            )
    elif mirror is not None or fingerprint is not None or key_url is not None:
        raise r.error(
            keypath, "mirror, key_fingerprint and key_url only apply to the deadsnakes provider"
        )
    return PythonInstall(
        provider=provider,  # type: ignore[arg-type]
        mirror=mirror,
        key_fingerprint=fingerprint,
        key_url=key_url,
    )


def _fingerprint(r: _Reader, value: object, keypath: list[str]) -> str:
    fingerprint = r.string(value, keypath).replace(" ", "").upper()
    if not _FINGERPRINT_RE.fullmatch(fingerprint):
        raise r.error(keypath, "must be a 40-hex-digit OpenPGP fingerprint")
    return fingerprint


def _parse_sdk_apt(r: _Reader, value: object) -> SdkApt:
    keypath = ["sdk_apt"]
    m = r.mapping(value, keypath)
    r.keys(
        m,
        keypath,
        required=("url", "suite", "component", "key_fingerprint", "packages"),
        optional=("key_url",),
    )
    url = _url(r, m["url"], [*keypath, "url"])
    words = {}
    for key in ("suite", "component"):
        word = r.string(m[key], [*keypath, key])
        if not _APT_WORD_RE.fullmatch(word):
            raise r.error([*keypath, key], f"{word!r} is not an apt {key} name")
        words[key] = word
    fingerprint = _fingerprint(r, m["key_fingerprint"], [*keypath, "key_fingerprint"])
    key_url = _url(r, m["key_url"], [*keypath, "key_url"]) if "key_url" in m else None
    packages = r.string_list(m["packages"], [*keypath, "packages"])
    if not packages:
        raise r.error([*keypath, "packages"], "needs at least one package")
    for i, pkg in enumerate(packages):
        if not _DEB_NAME_RE.fullmatch(pkg):
            raise r.error([*keypath, "packages", str(i)], f"{pkg!r} is not a Debian package name")
    return SdkApt(
        url=url,
        suite=words["suite"],
        component=words["component"],
        key_fingerprint=fingerprint,
        key_url=key_url,
        packages=tuple(packages),
    )


def _parse_sources(r: _Reader, value: object) -> list[Source]:
    m = r.mapping(value, ["sources"])
    out: list[Source] = []
    for name, spec in m.items():
        keypath = ["sources", name]
        if not _NAME_RE.fullmatch(name):
            raise r.error(keypath, f"{name!r} is not a valid source name")
        out.append(_parse_source(r, name, spec, keypath))
    return out


def _parse_source(r: _Reader, name: str, spec: object, keypath: list[str]) -> Source:
    s = r.mapping(spec, keypath)
    r.keys(s, keypath, optional=("git", "rev", "path", "env"))
    env = r.string_map(s.get("env", {}), [*keypath, "env"])
    for key in env:
        if not _ENV_NAME_RE.fullmatch(key):
            raise r.error([*keypath, "env", key], "not a valid environment variable name")
    if "git" in s:
        if "path" in s:
            raise r.error(keypath, "a source is either git + rev or path, not both")
        git = r.string(s["git"], [*keypath, "git"])
        if not _GIT_URL_RE.fullmatch(git) or "@" in git.partition("://")[2].split("/", 1)[0]:
            raise r.error(
                [*keypath, "git"],
                f"{redact(git)!r} is not a git URL this tool clones",
                hint="use https://, ssh:// or file:// (or git@host:path); no credentials, no "
                "ext:: or other transports that run commands",
            )
        if "rev" not in s:
            raise r.error(keypath, "a git source needs rev: a 40-hex commit id")
        rev = r.string(s["rev"], [*keypath, "rev"])
        if not _REV_RE.fullmatch(rev):
            raise r.error(
                [*keypath, "rev"],
                f"{rev!r} is not a 40-hex commit id",
                hint="branches and tags move; pin the commit (git rev-parse TAG^{commit})",
            )
        return Source(name=name, git=git, rev=rev, env=env)
    if "path" in s:
        if "rev" in s:
            raise r.error([*keypath, "rev"], "a path source has no rev")
        path = r.string(s["path"], [*keypath, "path"])
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise r.error(
                [*keypath, "path"],
                f"{path!r} is outside the repository",
                hint="a path source is a relative directory inside the repository",
            )
        return Source(name=name, path=path, env=env)
    raise r.error(keypath, "a source needs git + rev, or path")


def _url(r: _Reader, value: object, keypath: list[str]) -> str:
    url = r.string(value, keypath)
    if not PLAIN_URL_RE.fullmatch(url):
        raise r.error(
            keypath,
            f"{redact(url)!r} is not an http(s) URL without credentials",
            hint="credentials never go in the manifest; a mirror is a plain http(s) URL",
        )
    return url


def _parse_components(r: _Reader, value: object, indexes: Mapping[str, IndexSpec]) -> Components:
    m = r.mapping(value, ["components"])
    r.keys(m, ["components"], optional=COMPONENTS)
    vllm_rs = None
    mooncake = None
    if "vllm-rs" in m:
        vllm_rs = _parse_vllm_rs(r, m["vllm-rs"])
    if "mooncake" in m:
        mooncake = _parse_mooncake(r, m["mooncake"], indexes)
    return Components(vllm_rs=vllm_rs, mooncake=mooncake)


def _enabled(r: _Reader, m: Mapping[str, Any], keypath: list[str]) -> bool:
    return r.boolean(m.get("enabled", False), [*keypath, "enabled"])


def _parse_vllm_rs(r: _Reader, value: object) -> VllmRs | None:
    keypath = ["components", "vllm-rs"]
    m = r.mapping(value, keypath)
    r.keys(
        m,
        keypath,
        optional=("enabled", "source", "toolchain", "provider", "rustup_init", "binaries"),
    )
    if not _enabled(r, m, keypath):
        return None
    if "source" not in m:
        raise r.error(keypath, "missing required key 'source'", hint="{git, rev} or {path}")
    source = _parse_source(r, "vllm-rs", m["source"], [*keypath, "source"])
    toolchain = None
    if "toolchain" in m:
        toolchain = r.string(m["toolchain"], [*keypath, "toolchain"], example="1.83.0")
        if not _TOOLCHAIN_RE.fullmatch(toolchain):
            raise r.error(
                [*keypath, "toolchain"],
                f"{toolchain!r} is not a Rust toolchain version like 1.83.0",
                hint="omit it to use the source's rust-toolchain.toml",
            )
    provider = r.string(m.get("provider", "rustup"), [*keypath, "provider"])
    if provider not in RUST_PROVIDERS:
        raise r.error(
            [*keypath, "provider"], f"{provider!r} is not one of {', '.join(RUST_PROVIDERS)}"
        )
    rustup_init = None
    if "rustup_init" in m:
        rk = [*keypath, "rustup_init"]
        ri = r.mapping(m["rustup_init"], rk)
        r.keys(ri, rk, required=("url", "sha256"))
        sha = r.string(ri["sha256"], [*rk, "sha256"])
        if not _SHA256_RE.fullmatch(sha):
            raise r.error([*rk, "sha256"], "must be 64 lowercase hex digits")
        rustup_init = PinnedFile(url=_url(r, ri["url"], [*rk, "url"]), sha256=sha)
    if provider == "rustup" and rustup_init is None:
        raise r.error(
            keypath,
            "the rustup provider needs rustup_init: {url, sha256}",
            hint="every download is pinned: give the rustup-init URL and its sha256",
        )
    if provider == "distro" and rustup_init is not None:
        raise r.error([*keypath, "rustup_init"], "only applies to the rustup provider")
    binaries = r.string_list(m.get("binaries", ["vllm-rs"]), [*keypath, "binaries"])
    for i, b in enumerate(binaries):
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", b):
            raise r.error([*keypath, "binaries", str(i)], f"{b!r} is not a binary name")
    if not binaries:
        raise r.error([*keypath, "binaries"], "needs at least one binary")
    return VllmRs(
        source=source,
        toolchain=toolchain,
        provider=provider,  # type: ignore[arg-type]
        rustup_init=rustup_init,
        binaries=tuple(binaries),
    )


def _parse_mooncake(r: _Reader, value: object, indexes: Mapping[str, IndexSpec]) -> Mooncake | None:
    keypath = ["components", "mooncake"]
    m = r.mapping(value, keypath)
    r.keys(m, keypath, optional=("enabled", "package", "version", "index", "wheel"))
    if not _enabled(r, m, keypath):
        return None
    for key in ("version", "index"):
        if key not in m:
            raise r.error(keypath, f"missing required key {key!r}")
    key = r.string(m.get("package", MOONCAKE_PACKAGE), [*keypath, "package"])
    if not _NAME_RE.fullmatch(key.lower()):
        raise r.error([*keypath, "package"], f"{key!r} is not a valid project name")
    pin = _parse_pin(r, key, m, keypath, indexes, wheel=m.get("wheel", "native"), deps=True)
    return Mooncake(pin=pin)


def _parse_mirrors(r: _Reader, value: object, indexes: Mapping[str, IndexSpec]) -> Mirrors:
    m = r.mapping(value, ["mirrors"])
    r.keys(m, ["mirrors"], optional=(*MIRROR_NAMES, MIRROR_INDEXES))
    values: dict[str, Any] = {
        name.replace("-", "_"): _url(r, m[name], ["mirrors", name])
        for name in MIRROR_NAMES
        if name in m
    }
    if MIRROR_INDEXES in m:
        keypath = ["mirrors", MIRROR_INDEXES]
        raw = r.mapping(m[MIRROR_INDEXES], keypath)
        urls: dict[str, str] = {}
        for name, url in raw.items():
            if name not in indexes:
                close = difflib.get_close_matches(name, list(indexes), n=1)
                raise r.error(
                    [*keypath, name],
                    f"{name!r} is not one of the indexes ({', '.join(sorted(indexes))})",
                    hint=f"did you mean {close[0]!r}?" if close else None,
                )
            urls[name] = _url(r, url, [*keypath, name])
        values["indexes"] = urls
    return Mirrors(**values)


_COMPONENT_SWITCHES = {"BUILD_VLLM_RS": "vllm-rs", "BUILD_MOONCAKE": "mooncake"}


def _parse_build(r: _Reader, value: object) -> BuildSettings:
    m = r.mapping(value, ["build"])
    r.keys(m, ["build"], optional=("requirements", "args", "compiler", "apt_packages"))
    reqs = _parse_requirements(r, m.get("requirements", []), ["build", "requirements"])
    args = r.string_map(m.get("args", {}), ["build", "args"])
    for key in args:
        if not _ENV_NAME_RE.fullmatch(key):
            raise r.error(["build", "args", key], "not a valid build argument name")
        if key in _COMPONENT_SWITCHES:
            # the old switches were plain build args; a "1" here would build nothing new
            raise r.error(
                ["build", "args", key],
                "optional components are switched in the manifest, not by a build argument",
                hint=f"use components.{_COMPONENT_SWITCHES[key]}.enabled: true",
            )
    compiler = r.string(m.get("compiler", "gcc"), ["build", "compiler"])
    if not re.fullmatch(r"[A-Za-z0-9_./+-]+", compiler):
        raise r.error(
            ["build", "compiler"],
            f"{compiler!r} is not a compiler command name or path",
            hint="one word, e.g. gcc or /usr/local/musa/bin/mcc; ccache is put in front of it",
        )
    apt = r.string_list(m.get("apt_packages", []), ["build", "apt_packages"])
    for i, pkg in enumerate(apt):
        if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", pkg):
            raise r.error(
                ["build", "apt_packages", str(i)], f"{pkg!r} is not a Debian package name"
            )
    return BuildSettings(
        requirements=tuple(reqs), args=args, compiler=compiler, apt_packages=tuple(apt)
    )


def _parse_gates(r: _Reader, value: object) -> Gates:
    m = r.mapping(value, ["gates"])
    r.keys(m, ["gates"], optional=("imports",))
    imports = r.string_list(m.get("imports", []), ["gates", "imports"])
    for i, mod in enumerate(imports):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", mod):
            raise r.error(["gates", "imports", str(i)], f"{mod!r} is not a module name")
    return Gates(imports=tuple(imports))


TAG_FIELDS = ("release", "python", "arch", "date")


def _parse_image(r: _Reader, value: object, release: str) -> ImageSettings:
    m = r.mapping(value, ["image"])
    r.keys(
        m,
        ["image"],
        required=("repository",),
        optional=("release_tags", "nightly_tags", "variables"),
    )
    repository = r.string(m["repository"], ["image", "repository"])
    variables = r.string_map(m.get("variables", {}), ["image", "variables"])
    for key in variables:
        if key in TAG_FIELDS:
            raise r.error(["image", "variables", key], f"{key!r} is a built-in tag field")
    known = {*TAG_FIELDS, *variables}
    tags: dict[str, tuple[str, ...]] = {}
    for kind in ("release_tags", "nightly_tags"):
        items = r.string_list(m.get(kind, []), ["image", kind])
        for i, template in enumerate(items):
            for fieldname in _TAG_FIELD_RE.findall(template):
                if fieldname not in known:
                    close = difflib.get_close_matches(fieldname, sorted(known), n=1)
                    raise r.error(
                        ["image", kind, str(i)],
                        f"unknown variable {{{fieldname}}} in {template!r}",
                        hint=(f"did you mean {{{close[0]}}}? " if close else "")
                        + f"known: {', '.join(sorted(known))}",
                    )
        tags[kind] = tuple(items)
    return ImageSettings(
        repository=repository,
        release_tags=tags["release_tags"],
        nightly_tags=tags["nightly_tags"],
        variables=variables,
    )


# --------------------------------------------------------------------------- lock inputs


def lock_inputs(manifest: Manifest) -> dict[str, Any]:
    """Everything that changes what the resolver produces, as plain data.

    The lock records the sha256 of this (not of the file's bytes), so a comment or an
    image-only key does not make a lock stale, but any pin, index, rule or root does.
    """
    return {
        "schema": manifest.schema,
        "name": manifest.name,
        "target": {
            "python": manifest.target.python_str,
            "arch": manifest.target.arch,
            "glibc": f"{manifest.target.glibc[0]}.{manifest.target.glibc[1]}",
        },
        "indexes": {
            n: {"url": s.url, "format": s.format} for n, s in sorted(manifest.indexes.items())
        },
        "default_index": manifest.default_index,
        "packages": {
            n: {"version": p.version_text, "index": p.index, "wheel": p.wheel, "deps": p.deps}
            for n, p in sorted(manifest.packages.items())
        },
        "requirements": [str(q) for q in manifest.requirements],
        "build_requirements": [str(q) for q in manifest.build.requirements],
        "rules": {
            "same_line": [list(g) for g in manifest.rules.same_line],
            "line_map": {
                lm.name: {"follows": lm.follows, "versions": dict(sorted(lm.versions.items()))}
                for lm in manifest.rules.line_map
            },
        },
    }


def _with_lock_inputs_hash(manifest: Manifest) -> Manifest:
    blob = json.dumps(lock_inputs(manifest), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(blob.encode()).hexdigest()
    return Manifest(**{**manifest.__dict__, "lock_inputs_sha256": digest})
