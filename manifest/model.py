"""The stack manifest's model: frozen dataclasses, no I/O and no YAML.

Both stages read the same objects: the resolver the lock keys (``target``, ``indexes``,
``packages``, ``requirements``, ``rules``), the image side the image keys. ``lock_inputs`` is
the part of a manifest that changes what the resolver produces.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from manifest.serving import ServingProfile

if TYPE_CHECKING:  # packaging's objects are made by the reader; the model only names them
    from packaging.requirements import Requirement
    from packaging.utils import NormalizedName
    from packaging.version import Version

SCHEMA_VERSION = 1
WheelKind = Literal["native", "abi3", "pure"]
WHEEL_KINDS: tuple[WheelKind, ...] = ("native", "abi3", "pure")
ARCHES = ("x86_64", "aarch64")
INDEX_FORMATS = ("simple", "find-links")
PYTHON_PROVIDERS = ("deadsnakes", "distro")
RUST_PROVIDERS = ("rustup", "distro")
COMPONENTS = ("vllm-rs", "mooncake")
# mirrors: each optional (their names: manifest.names.MIRROR_NAMES); a command line
# --mirror NAME=URL replaces one.
# mirrors.indexes (NAME: URL per Python index) is the manifest's form of --index NAME=URL.
MIRROR_INDEXES = "indexes"
MOONCAKE_PACKAGE = "mooncake-transfer-engine-musa"  # upstream's (docker/musa.Dockerfile)
# vLLM's Rust frontend, as vLLM 0.28.0 lays it out: tools/build_rust.py builds, with
# setuptools-rust `build_rust --inplace`, the Cargo workspace under rust/ (one Cargo.lock) into
# the package directory vllm/: the binary vllm-rs (where vllm/envs.py's "auto" lookup finds it)
# and the PyO3 modules vllm/_rust_*.so (setup.py's PRECOMPILED_RUST_EXTENSION_MEMBER_REGEX)
VLLM_RS_TREE = "vllm"  # components.vllm-rs.tree's default: the source that is vLLM's tree
RUST_WORKSPACE = "rust"
RUST_BUILD_REQUIREMENT = "setuptools-rust"
# URLs that end up in a Dockerfile (apt sources, key fetches, mirrors): a plain URL with no
# credentials, whitespace or shell metacharacters, so no value can run a command or add an
# instruction, whatever the template does with it
PLAIN_URL_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~/%+=,:-]*)?$")
TAG_FIELDS = ("release", "python", "arch", "date")  # built-in fields of image tag templates
TAG_FIELD_RE = re.compile(r"\{([^{}]*)\}")  # a field of an image tag template: {name}
# image.licenses' default (the org.opencontainers.image.licenses label and the SBOM):
# vLLM's license, and vllm-musa's
DEFAULT_IMAGE_LICENSES = "Apache-2.0"
MUSA_HOME = "/usr/local/musa"  # musa.home's default, as upstream's devel stage has it


# The targets this tool computes wheel tags and markers for. CPython 3.8 to 3.14: a newer line
# is added here once its tags are known. glibc 2.Y up to 2.99 (2.5 is manylinux1, x86_64 only;
# aarch64 starts at 2.17), so a target's manylinux tags are at most a hundred.
PYTHON_VERSIONS: tuple[tuple[int, int], ...] = tuple((3, minor) for minor in range(8, 15))
GLIBC_LOWEST: Mapping[str, tuple[int, int]] = {"x86_64": (2, 5), "aarch64": (2, 17)}
GLIBC_HIGHEST = (2, 99)


@dataclass(frozen=True, kw_only=True)
class Target:
    """The interpreter inside the image. Never read from the host.

    Only a target this tool knows can be made (``PYTHON_VERSIONS``, ``ARCHES``, glibc from
    ``GLIBC_LOWEST[arch]`` to ``GLIBC_HIGHEST``): anything else is a ``ValueError``, so no
    caller (a lock file's reader included) computes tags for CPython 3.99 or glibc 2.99999999.
    """

    python: tuple[int, int]
    arch: str
    glibc: tuple[int, int]

    def __post_init__(self) -> None:
        problem = target_problem(self.python, self.arch, self.glibc)
        if problem:
            raise ValueError(problem)

    @property
    def python_str(self) -> str:
        return _dotted(self.python)

    @property
    def glibc_str(self) -> str:
        return _dotted(self.glibc)

    @property
    def cp_tag(self) -> str:
        return f"cp{self.python[0]}{self.python[1]}"

    def describe(self) -> str:
        return (
            f"CPython {self.python_str} ({self.cp_tag}), linux {self.arch}, glibc {self.glibc_str}"
        )


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def target_problem(python: tuple[int, ...], arch: str, glibc: tuple[int, ...]) -> str | None:
    """What is wrong with a target, or None when this tool supports it."""
    if tuple(python) not in PYTHON_VERSIONS:
        first, last = _dotted(PYTHON_VERSIONS[0]), _dotted(PYTHON_VERSIONS[-1])
        return f"CPython {_dotted(python)} is not supported (CPython {first} to {last})"
    if arch not in ARCHES:
        return f"{arch!r} is not one of {', '.join(ARCHES)}"
    lowest = GLIBC_LOWEST[arch]
    if len(glibc) != 2 or not lowest <= tuple(glibc) <= GLIBC_HIGHEST:
        return (
            f"glibc {_dotted(glibc)} is not supported on {arch} "
            f"(glibc {_dotted(lowest)} to {_dotted(GLIBC_HIGHEST)})"
        )
    return None


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


SDK_FROM = ("base", "apt")
# what sdk: checks when it does not say: upstream's compiler and runtime library
SDK_COMMANDS = ("mcc",)
SDK_LIBRARIES = ("libmusart.so",)


@dataclass(frozen=True, kw_only=True)
class Sdk:
    """``sdk:``: where the image's MUSA SDK comes from, and what the build checks of it.

    ``origin`` is ``sdk.from``: ``base`` keeps the base image's SDK, ``apt`` installs
    ``sdk_apt.packages``, each pinned to the ``runtime`` line (``5.2``: a ``-5-2`` name suffix)
    or to an explicit ``=version``. ``commands`` must be on PATH and ``libraries`` known to
    the dynamic linker (``ldconfig -p``) in the python stage, after the ``musa:`` environment.
    """

    origin: Literal["base", "apt"]
    runtime: str | None = None  # apt only: "5.2"
    commands: tuple[str, ...] = SDK_COMMANDS
    libraries: tuple[str, ...] = SDK_LIBRARIES

    @property
    def package_suffix(self) -> str:
        """The name suffix of the runtime line's packages: ``5.2`` -> ``-5-2``."""
        return "-" + (self.runtime or "").replace(".", "-")


DEFAULT_PRODUCT_SOURCE = "vllm-musa"  # the product when no source says product: true
VLLM_SOURCE = "vllm"  # the source whose commit the io.vllm-musa.vllm.* labels name


@dataclass(frozen=True, kw_only=True)
class SdistRef:
    """``sources.<name>.sdist``: a source distribution on a manifest index, locked by its hash
    like a wheel (fetched and verified on the host, never downloaded in the build)."""

    index: str
    project: NormalizedName
    version: Version
    version_text: str


@dataclass(frozen=True, kw_only=True)
class ThirdParty:
    """``sources.<driver>.third_party.<dir>``: another source staged into the driving source's
    ``third_party/<dir>`` at the revision the driver's ``third_party/PINS`` names under ``pin``
    (which must equal that source's ``rev``). ``patches`` is the driver's directory of the
    strict patch series applied to the tree (files it touches are exempt from the pristine
    check), or None. ``installed``: the driver's build installs the tree as a distribution
    (vLLM); false when it only compiles some of its files (upstream's FlashInfer kernels)."""

    dir: str
    source: str
    pin: str
    patches: str | None = None
    installed: bool = True


PINS_FILE = "third_party/PINS"  # KEY=VALUE, as upstream vllm-musa has it


@dataclass(frozen=True, kw_only=True)
class Source:
    """A source tree built inside the image: a git repository at a revision, a path, or a
    locked sdist (whose ``rev`` is the commit it was cut from).

    A source with ``third_party`` drives the build of those sources (upstream vllm-musa's
    setup.py builds vLLM): it is built in the image's workspace with ``pip install -e .``,
    and the sources it drives are not built on their own. ``requirements_files`` (runtime)
    and ``build_requirements_files`` are read at the pinned revision and locked.
    """

    name: str
    git: str | None = None
    rev: str | None = None
    path: str | None = None  # relative to the manifest's repository root
    sdist: SdistRef | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    product: bool = False  # the image's product: its source and revision labels name this source
    third_party: tuple[ThirdParty, ...] = ()
    requirements_files: tuple[str, ...] = ()
    build_requirements_files: tuple[str, ...] = ()

    @property
    def kind(self) -> Literal["git", "path", "sdist"]:
        if self.sdist is not None:
            return "sdist"
        return "git" if self.git is not None else "path"


@dataclass(frozen=True, kw_only=True)
class Override:
    """``overrides.<name>``: the stack installs ``name`` at exactly ``version`` although some
    requirement (a dependency's metadata or a source's requirements file) excludes it. The
    resolver ignores those requirements on ``name``; the lock records each, and the image's
    ``pip check`` gate forgives exactly these and nothing else."""

    name: NormalizedName
    key: str
    version: Version
    version_text: str
    reason: str
    index: str | None = None  # None: the default index


@dataclass(frozen=True, kw_only=True)
class PinnedFile:
    """A file the build downloads: fetched by URL, refused unless it has this sha256."""

    url: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class VllmRs:
    """``components.vllm-rs``: vLLM's Rust frontend, built from vLLM's own tree by vLLM's own
    build entry and installed into the ``vllm`` package, where vLLM looks for it.

    ``tree`` names the source that is vLLM's tree; a tree another source drives is built as
    that build left it (patched). ``provider`` rustup runs the tree's ``build_rust.sh`` with
    rustup-init pinned by sha256, on the toolchain of the tree's rust-toolchain.toml; distro
    installs the base distribution's rustc and cargo (checked against ``toolchain`` when set)
    and runs the script's build step, ``tools/build_rust.py --release``.
    """

    tree: str
    toolchain: str | None  # distro only: the rustc version the build requires
    provider: Literal["rustup", "distro"]
    rustup_init: PinnedFile | None


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
    # image side: the apt packages of the build stage, on top of its fixed toolchain
    apt_packages: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Musa:
    """``musa:``: the MUSA environment of the image, from the python stage on (so the build
    stage and the final image have it). ``path`` and ``library_path`` are absolute directories
    (the manifest's relative entries are resolved under ``home``); ``gpu_arch`` is ``mp_XY``."""

    gpu_arch: str
    home: str = MUSA_HOME
    visible_devices: str = "all"  # MTHREADS_VISIBLE_DEVICES of the final image
    path: tuple[str, ...] = ()  # prepended to PATH
    library_path: tuple[str, ...] = ()  # prepended to LD_LIBRARY_PATH, and in ld.so.conf.d

    @property
    def torch_arch(self) -> str:
        """TORCH_MUSA_ARCH_LIST: ``mp_31`` -> ``31``."""
        return self.gpu_arch.removeprefix("mp_")

    @property
    def mate_arch(self) -> str:
        """MATE_MUSA_ARCH_LIST (dotted): ``mp_31`` -> ``3.1``."""
        digits = self.torch_arch
        return f"{digits[:-1]}.{digits[-1]}"


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """``runtime:``: what the image needs at run time beyond the interpreter: apt packages of
    the python stage (so of the final image), and library links ``(link, target)`` made there,
    followed by ``ldconfig``; and the shared libraries the host provides at run time (soname ->
    why: a GPU driver's library, injected by its container runtime), which the linkage gate
    accepts where the image has none."""

    apt_packages: tuple[str, ...] = ()
    library_links: tuple[tuple[str, str], ...] = ()
    host_libraries: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Gates:
    # modules imported in the image (CPU-safe); modules only located with find_spec, never
    # imported (GPU-bound: importing them needs a device the builder does not have)
    imports: tuple[str, ...] = ()
    find_spec: tuple[str, ...] = ()
    # distribution (as written) -> the exact version it must be installed at (the built sources)
    versions: Mapping[str, str] = field(default_factory=dict)
    # shared-library sonames the dynamic linker must find in the image
    libraries: tuple[str, ...] = ()
    # distribution -> a file (relative to site-packages, or the editable tree's root) that a
    # patch of the series adds: proof that the installed tree is the patched one
    markers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ImageSettings:
    repository: str
    release_tags: tuple[str, ...] = ()
    nightly_tags: tuple[str, ...] = ()
    variables: Mapping[str, str] = field(default_factory=dict)
    licenses: str = DEFAULT_IMAGE_LICENSES  # an SPDX license expression
    description: str = ""  # "": the render's default (images.builder.labels.image_description)
    require_signature: bool = False  # a release must be signed; nightlies are not affected
    public_key: str | None = None  # the PEM public key's path, under the repository root


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
    sdk: Sdk | None = None  # None: nothing about the SDK is checked
    sources: tuple[Source, ...] = ()
    build: BuildSettings = field(default_factory=BuildSettings)
    gates: Gates = field(default_factory=Gates)
    image: ImageSettings | None = None
    components: Components = field(default_factory=Components)
    mirrors: Mirrors = field(default_factory=Mirrors)
    musa: Musa | None = None  # None: no MUSA environment is set
    runtime: Runtime = field(default_factory=Runtime)
    overrides: Mapping[NormalizedName, Override] = field(default_factory=dict)
    serving: ServingProfile | None = None  # None: no serve-check or A/B profile
    lock_inputs_sha256: str = ""
    # the 1-based line of each key path in the file (("packages", "torch", "version") -> 23),
    # for messages that name the manifest's file:line after it was read; never compared
    key_lines: Mapping[tuple[str, ...], int] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def stem(self) -> str:
        return self.path.name.removesuffix(".yaml").removesuffix(".yml")

    def default_lock_dir(self) -> Path:
        return self.path.parent / f"{self.stem}.lock"

    def index_of(self, name: NormalizedName) -> str:
        pin = self.packages.get(name)
        if pin:
            return pin.index
        override = self.overrides.get(name)
        if override and override.index:
            return override.index
        return self.default_index

    def source(self, name: str) -> Source | None:
        return next((s for s in self.sources if s.name == name), None)

    def driven_sources(self) -> frozenset[str]:
        """Names of the sources another source's ``third_party`` stages and builds."""
        return frozenset(t.source for s in self.sources for t in s.third_party)

    def installed_sources(self) -> tuple[Source, ...]:
        """The sources that end up as installed distributions: the built ones, and the
        driven ones their driver installs."""
        driven_installed = {t.source for s in self.sources for t in s.third_party if t.installed}
        driven = self.driven_sources()
        return tuple(s for s in self.sources if s.name not in driven or s.name in driven_installed)

    def built_sources(self) -> tuple[Source, ...]:
        """The sources built on their own, in manifest order (not the driven ones)."""
        driven = self.driven_sources()
        return tuple(s for s in self.sources if s.name not in driven)


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
            "glibc": manifest.target.glibc_str,
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
        **_lock_sources(manifest),
    }


def _lock_sources(manifest: Manifest) -> dict[str, Any]:
    """The keys overrides and sources, present only when a manifest has them (so a manifest
    without either keeps its lock-inputs sha256)."""
    out: dict[str, Any] = {}
    if manifest.overrides:
        out["overrides"] = {
            n: {"version": o.version_text, "index": o.index, "reason": o.reason}
            for n, o in sorted(manifest.overrides.items())
        }
    read = {
        s.name: _source_lock_inputs(s)
        for s in manifest.sources
        if s.sdist or s.requirements_files or s.build_requirements_files
    }
    if read:
        out["sources"] = read
    return out


def _source_lock_inputs(source: Source) -> dict[str, Any]:
    """What the resolver reads of a source: where it is and which requirements files."""
    where: dict[str, Any]
    if source.sdist is not None:
        sd = source.sdist
        where = {"sdist": {"index": sd.index, "project": sd.project, "version": sd.version_text}}
    elif source.git is not None:
        where = {"git": source.git}
    else:
        where = {"path": source.path}
    return {
        **where,
        "rev": source.rev,
        "requirements_files": list(source.requirements_files),
        "build_requirements_files": list(source.build_requirements_files),
    }


def lock_inputs_sha256(manifest: Manifest) -> str:
    """The sha256 the lock records of ``lock_inputs(manifest)``."""
    import hashlib  # OpenSSL's, loaded when a manifest is read, not to build a command line

    blob = json.dumps(lock_inputs(manifest), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()
