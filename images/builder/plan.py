"""The inputs of one build, enumerated once: ``plan_inputs(manifest, lock) -> InputPlan``.

Pure. Every consumer reads the same plan: ``fetch`` fills the cache from it, the staging
places it, an ``--offline`` build checks it, the apt fetch downloads its apt steps, and the
render takes its resolved URLs and file names. The manifest is the effective one (mirrors
applied): an apt source's ``url`` is its mirror when one is set. An archive key comes from the
manifest's ``key_url``, else the Ubuntu keyserver, never from a mirror of the archive it signs.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from core.errors import LockError
from images.builder.apt_plan import (
    DEADSNAKES_LIST,
    LEVEL_DEADSNAKES,
    LEVEL_SDK,
    SDK_LIST,
    AptPlan,
    AptSource,
    ArchiveKey,
    apt_plan,
)
from manifest import RUST_WORKSPACE, Manifest, Mirrors, PinnedFile, Source
from resolver.lockfile import Lock, LockedPackage

# file names in the build context, under LAYOUT.inputs
DEADSNAKES_KEY_FILE = "deadsnakes-key.asc"
SDK_APT_KEY_FILE = "sdk-apt-key.asc"
RUSTUP_INIT_FILE = "rustup-init"
UBUNTU_KEYSERVER = "https://keyserver.ubuntu.com/pks/lookup?op=get&options=mr&search=0x{fpr}"


@dataclass(frozen=True, kw_only=True)
class GitSourceInput:
    """A source tree at a git revision: cloned into the git cache, checked out, verified."""

    where: str  # the manifest key path: "sources.vllm"
    source: Source  # source.git and source.rev are set
    dest: str  # where it is staged, under LAYOUT.sources: "vllm", "vllm-musa/third_party/vllm"


@dataclass(frozen=True, kw_only=True)
class PathSourceInput:
    """A source tree inside the repository, copied as it is."""

    where: str
    source: Source  # source.path is set
    dest: str


@dataclass(frozen=True, kw_only=True)
class SdistSourceInput:
    """A source distribution locked by its hash: fetched like a wheel, unpacked in the context."""

    where: str
    source: Source  # source.sdist is set
    dest: str
    locked: LockedPackage


SourceInput = GitSourceInput | PathSourceInput | SdistSourceInput


@dataclass(frozen=True, kw_only=True)
class PinnedInput:
    """A file downloaded by URL and refused unless it has the manifest's sha256."""

    name: str  # for the fetch's lines: "rustup-init"
    label: str  # the manifest key path, for messages: "components.vllm-rs.rustup_init"
    pinned: PinnedFile
    file: str  # its name in the build context, under LAYOUT.inputs


@dataclass(frozen=True, kw_only=True)
class CratesInput:
    """The crates of vLLM's Cargo workspace, vendored on the host for an offline build."""

    tree: SourceInput  # vLLM's tree, as staged (before any patch series)
    workspace: str  # the Cargo workspace in it: RUST_WORKSPACE


@dataclass(frozen=True, kw_only=True)
class InputPlan:
    """Everything a build of one manifest and lock reads from outside the repository."""

    wheels: tuple[LockedPackage, ...]  # every locked wheel, in lock order (no sdist)
    # by destination (a driver before the sources staged into it)
    sources: tuple[SourceInput, ...]
    sdk_apt: AptSource | None  # the vendor SDK repository (sdk_apt)
    deadsnakes: AptSource | None  # python_install.provider: deadsnakes
    pinned_files: tuple[PinnedInput, ...]  # rustup-init (components.vllm-rs, rustup)
    apt: AptPlan  # every apt install of the render
    crates: CratesInput | None  # components.vllm-rs: the crates an offline build vendors
    mirrors: Mirrors  # where apt, cargo and the proxy fetch from (applied above already)

    @property
    def apt_sources(self) -> tuple[AptSource, ...]:
        """The extra apt sources, in the order of their levels (sdk, then deadsnakes)."""
        return tuple(s for s in (self.sdk_apt, self.deadsnakes) if s is not None)

    @property
    def archive_keys(self) -> tuple[ArchiveKey, ...]:
        """The keys an online build fetches on the host (deadsnakes, then sdk_apt)."""
        return tuple(s.key for s in (self.deadsnakes, self.sdk_apt) if s is not None)

    @property
    def git_sources(self) -> tuple[GitSourceInput, ...]:
        return tuple(s for s in self.sources if isinstance(s, GitSourceInput))

    @property
    def sdist_sources(self) -> tuple[SdistSourceInput, ...]:
        return tuple(s for s in self.sources if isinstance(s, SdistSourceInput))


def keyserver_url(fingerprint: str) -> str:
    return UBUNTU_KEYSERVER.format(fpr=fingerprint)


def _source_input(source: Source, where: str, dest: str, lock: Lock) -> SourceInput:
    if source.git is not None:
        return GitSourceInput(where=where, source=source, dest=dest)
    if source.sdist is not None:
        sd = source.sdist
        locked = next((p for p in lock.sources() if p.name == sd.project), None)
        if locked is None or str(Version(locked.version)) != str(Version(sd.version_text)):
            raise LockError(
                f"{where}: the lock has no sdist of {sd.project} {sd.version_text}",
                hint=f"lock again: build_image.py lock {lock.stack}",
            )
        return SdistSourceInput(where=where, source=source, dest=dest, locked=locked)
    return PathSourceInput(where=where, source=source, dest=dest)


def source_dests(manifest: Manifest) -> dict[str, str]:
    """Where each source is staged under LAYOUT.sources: its own name, or, for a source
    another one drives, ``<driver>/third_party/<dir>`` (upstream's layout)."""
    out = {s.name: s.name for s in manifest.sources}
    for driver in manifest.sources:
        for t in driver.third_party:
            out[t.source] = f"{driver.name}/third_party/{t.dir}"
    return out


def plan_inputs(manifest: Manifest, lock: Lock) -> InputPlan:
    """The inputs of a build of ``manifest`` (mirrors applied) from ``lock``."""
    mirrors = manifest.mirrors
    dests = source_dests(manifest)
    sources: list[SourceInput] = [
        _source_input(s, f"sources.{s.name}", dests[s.name], lock)
        for s in sorted(manifest.sources, key=lambda s: dests[s.name])
    ]
    sdk_apt = None
    if manifest.sdk_apt is not None:
        sdk = manifest.sdk_apt
        sdk_apt = AptSource(
            level=LEVEL_SDK,
            list_name=SDK_LIST,
            url=mirrors.sdk_apt or sdk.url,
            suite=sdk.suite,
            component=sdk.component,
            key=ArchiveKey(
                label="the key of sdk_apt",
                keypath="sdk_apt.key_fingerprint",
                url=sdk.key_url or keyserver_url(sdk.key_fingerprint),
                fingerprint=sdk.key_fingerprint,
                file=SDK_APT_KEY_FILE,
            ),
        )
    deadsnakes = None
    pi = manifest.python_install
    if pi.provider == "deadsnakes":
        assert pi.mirror is not None
        assert pi.key_fingerprint is not None
        deadsnakes = AptSource(
            level=LEVEL_DEADSNAKES,
            list_name=DEADSNAKES_LIST,
            url=mirrors.deadsnakes or pi.mirror,
            suite="",
            component="main",
            key=ArchiveKey(
                label="the Deadsnakes key",
                keypath="python_install.key_fingerprint",
                url=pi.key_url or keyserver_url(pi.key_fingerprint),
                fingerprint=pi.key_fingerprint,
                file=DEADSNAKES_KEY_FILE,
            ),
        )
    pinned: list[PinnedInput] = []
    crates = None
    rs = manifest.components.vllm_rs
    if rs is not None:
        tree = next(s for s in sources if s.where == f"sources.{rs.tree}")
        crates = CratesInput(tree=tree, workspace=RUST_WORKSPACE)
        if rs.rustup_init is not None:
            pinned.append(
                PinnedInput(
                    name="rustup-init",
                    label="components.vllm-rs.rustup_init",
                    pinned=rs.rustup_init,
                    file=RUSTUP_INIT_FILE,
                )
            )
    return InputPlan(
        wheels=tuple(lock.wheels()),
        sources=tuple(sources),
        sdk_apt=sdk_apt,
        deadsnakes=deadsnakes,
        pinned_files=tuple(pinned),
        apt=apt_plan(manifest),
        crates=crates,
        mirrors=mirrors,
    )


@dataclass(frozen=True, kw_only=True)
class DepsLayer:
    """One layer of the deps stage: its requirements file and the wheels it installs."""

    file: str
    what: str
    packages: tuple[LockedPackage, ...]


def deps_layers(lock: Lock) -> tuple[DepsLayer, ...]:
    """The runtime lock in layers by how often they change: the manifest's pinned packages
    (the vendor stack: the largest wheels), then the rest; an empty layer is left out."""
    runtime = lock.runtime()
    layers = (
        DepsLayer(
            file="pinned.txt",
            what="the manifest's pinned packages (packages:): the vendor stack",
            packages=tuple(p for p in runtime if p.origin == "pin"),
        ),
        DepsLayer(
            file="locked.txt",
            what="the requirements and every dependency the lock resolved",
            packages=tuple(p for p in runtime if p.origin != "pin"),
        ),
    )
    return tuple(layer for layer in layers if layer.packages)
