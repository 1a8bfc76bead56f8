"""The Dockerfile: a typed render context, the Jinja2 render, and checks on the rendered text.

``build_render_context`` turns a manifest and its lock into a ``RenderContext`` (frozen, plain
data: names, versions, hashes, paths; never pre-built RUN lines). ``render_dockerfile`` fills
``Dockerfile.j2`` with it under ``StrictUndefined``; the output is byte-identical run
to run. ``check_build_args`` refuses a build arg that no ``ARG`` of the render declares (Docker
would silently ignore it) and ``check_no_credentials`` refuses build args that carry secrets.

The committed render of a stack lives next to its manifest: ``stack/<stem>.Dockerfile``
(``default_render_path``); ``build_image.py render STACK --check`` fails when it drifts.
This is the only module that imports jinja2.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from packaging.utils import canonicalize_name

from core.errors import BuildArgError, CredentialError, RenderError
from images.build.apt_plan import SDK_LIST, AptPlan, apt_plan
from manifest import Manifest
from resolver.lockfile import Lock

TEMPLATE = Path(__file__).with_name("Dockerfile.j2")

# Fixed, documented paths inside the image.
IMAGE_LOCK_DIR = "/opt/vllm-musa/lock"
IMAGE_SBOM = "/opt/vllm-musa/sbom.json"
IMAGE_COMPONENTS = "/opt/vllm-musa/components.json"  # which optional components were built
DEADSNAKES_KEY_FILE = "deadsnakes-key.asc"  # under LAYOUT.inputs
SDK_APT_KEY_FILE = "sdk-apt-key.asc"  # under LAYOUT.inputs
SDK_APT_KEYRING = "vendor-musa-sdk.gpg"  # under /etc/apt/keyrings/
RUSTUP_INIT_FILE = "rustup-init"  # under LAYOUT.inputs
APT_ATTEMPTS = 3  # apt calls inside the build: attempts, with backoff, before failing
CCACHE_DIR = "/root/.cache/ccache"  # a BuildKit cache mount, never a layer
UBUNTU_KEYSERVER = "https://keyserver.ubuntu.com/pks/lookup?op=get&options=mr&search=0x{fpr}"

# Build args that are passed by the engine; each must be declared by an ARG of the render.
ARG_BASE_IMAGE = "BASE_IMAGE"
ARG_VCS_REF = "VCS_REF"
ARG_IMAGE_SOURCE = "IMAGE_SOURCE"
ARG_COMPILER = "COMPILER"

_SECRET_NAME_RE = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|AUTH|CREDENTIAL|API_?KEY)", re.I)
_URL_USERINFO_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s]+@", re.I)
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_ARG_RE = re.compile(r"^\s*ARG\s+(.+)$", re.I)
_ARG_NAME_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(=.*)?$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, kw_only=True)
class ContextLayout:
    """Directories of the staged build context (``images/build/context.py`` writes them)."""

    lock: str = "lock"
    wheelhouse_runtime: str = "wheelhouse/runtime"
    wheelhouse_build: str = "wheelhouse/build"
    sources: str = "sources"
    tools: str = "tools"
    inputs: str = "inputs"
    apt: str = "apt"  # offline builds only: debs/<file>.deb and <step>.sha256


LAYOUT = ContextLayout()


@dataclass(frozen=True, kw_only=True)
class PythonInstallSpec:
    provider: str  # distro | deadsnakes
    mirror: str  # "" for distro
    key_url: str  # "" for distro
    key_fingerprint: str  # "" for distro


@dataclass(frozen=True, kw_only=True)
class SdkAptSpec:
    url: str  # mirrors.sdk-apt, else sdk_apt.url
    suite: str
    component: str
    key_url: str
    key_fingerprint: str
    keyring: str
    list_name: str


@dataclass(frozen=True, kw_only=True)
class PipWheel:
    filename: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class BuildArg:
    name: str
    default: str


@dataclass(frozen=True, kw_only=True)
class SourceStep:
    name: str  # the source's key; also the distribution it builds
    origin: str  # for the comment: "git URL @ rev" or "path demo/vllm"
    revision: str  # the 40-hex rev, or "path:<dir>"
    env: tuple[tuple[str, str], ...]  # sorted (name, value)


@dataclass(frozen=True, kw_only=True)
class MirrorSpec:
    """``mirrors:`` after command-line overrides; "" where none is set."""

    apt: str
    proxy: str
    rustup: str
    rustup_update_root: str
    cargo: str


@dataclass(frozen=True, kw_only=True)
class VllmRsSpec:
    origin: str
    provider: str  # rustup | distro
    toolchain: str  # "" : the source's rust-toolchain.toml
    rustup_init_url: str  # "" for distro
    rustup_init_sha256: str  # "" for distro
    binaries: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class RenderContext:
    """Everything the template reads; a test proves its fields are the template's variables."""

    stack_file: str
    stack: str
    release: str
    target_description: str
    lock_inputs_sha256: str
    lock_sha256: str  # sha256 of pylock.toml's bytes
    base_image: str
    python: str  # "3.12"
    python_install: PythonInstallSpec
    pip: PipWheel
    has_build_requirements: bool
    compiler: str
    build_args: tuple[BuildArg, ...]
    sources: tuple[SourceStep, ...]
    layout: ContextLayout
    ccache_dir: str
    image_lock_dir: str
    image_sbom: str
    image_source: str
    image_components: str
    components_marker: str  # the JSON written to image_components
    base_image_digest: str  # "" when not known: the label is left out
    mirrors: MirrorSpec
    retries: int
    offline: bool
    deadsnakes_key_file: str
    sdk_apt: SdkAptSpec | None  # None: no vendor apt repository, no sdk stage
    sdk_apt_key_file: str
    apt: AptPlan  # every apt install of the render
    vllm_rs: VllmRsSpec | None  # None: the component is off, nothing of it is rendered


def default_render_path(manifest: Manifest) -> Path:
    """Where the committed render of a stack lives: ``stack/<stem>.Dockerfile``."""
    return manifest.path.parent / f"{manifest.stem}.Dockerfile"


def sdk_apt_key_url(manifest: Manifest) -> str | None:
    sdk = manifest.sdk_apt
    if sdk is None:
        return None
    return sdk.key_url or UBUNTU_KEYSERVER.format(fpr=sdk.key_fingerprint)


def base_digest_of(ref: str) -> str:
    """The ``sha256:...`` digest pinned in an image reference, or ""."""
    _, sep, digest = ref.partition("@")
    return digest if sep and _DIGEST_RE.match(digest) else ""


def components_marker(manifest: Manifest) -> str:
    """The JSON the image keeps at IMAGE_COMPONENTS: each component, built or not."""
    c = manifest.components
    data = {
        "mooncake": (
            {"built": True, "package": c.mooncake.pin.name, "version": c.mooncake.pin.version_text}
            if c.mooncake
            else {"built": False}
        ),
        "vllm-rs": (
            {"built": True, "binaries": list(c.vllm_rs.binaries)} if c.vllm_rs else {"built": False}
        ),
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def build_render_context(
    manifest: Manifest,
    lock: Lock,
    *,
    lock_sha256: str,
    offline: bool = False,
    base_image_digest: str = "",
) -> RenderContext:
    """The render context of ``manifest`` with ``lock`` (which must be current for it).

    ``offline`` renders the --network none variant (each apt step installs the .deb files
    that ``build_image.py fetch`` downloaded for it, from the context).
    ``base_image_digest`` is the base image's digest when the caller knows it (the
    digest pinned in ``base_image`` is used otherwise).
    """
    if manifest.base_image is None:
        raise RenderError(
            f"{manifest.path}: no base_image",
            hint='add base_image: "<registry>/<image>:<tag>@sha256:<digest>" to the manifest',
        )
    pip = lock.by_name().get(canonicalize_name("pip"))
    if pip is None or pip.group != "runtime":
        raise RenderError(
            f"{manifest.path}: the lock has no runtime pip wheel; the image bootstraps pip "
            "from the lock's own pip wheel",
            hint=f'add "pip" to requirements in {manifest.path}, then run '
            f"`build_image.py lock {manifest.path}`",
        )
    pi = manifest.python_install
    mirrors = manifest.mirrors
    if pi.provider == "deadsnakes":
        assert pi.mirror is not None
        assert pi.key_fingerprint is not None
        spec = PythonInstallSpec(
            provider="deadsnakes",
            mirror=mirrors.deadsnakes or pi.mirror,
            key_url=pi.key_url or UBUNTU_KEYSERVER.format(fpr=pi.key_fingerprint),
            key_fingerprint=pi.key_fingerprint,
        )
    else:
        spec = PythonInstallSpec(provider="distro", mirror="", key_url="", key_fingerprint="")
    sources: list[SourceStep] = []
    for s in manifest.sources:
        if s.git is not None:
            origin, revision = f"git {s.git} @ {s.rev}", str(s.rev)
        else:
            origin, revision = f"path {s.path}", f"path:{s.path}"
        sources.append(
            SourceStep(
                name=s.name, origin=origin, revision=revision, env=tuple(sorted(s.env.items()))
            )
        )
    git_urls = [s.git for s in manifest.sources if s.git]
    sdk_apt = None
    if manifest.sdk_apt is not None:
        key_url = sdk_apt_key_url(manifest)
        assert key_url is not None
        sdk_apt = SdkAptSpec(
            url=mirrors.sdk_apt or manifest.sdk_apt.url,
            suite=manifest.sdk_apt.suite,
            component=manifest.sdk_apt.component,
            key_url=key_url,
            key_fingerprint=manifest.sdk_apt.key_fingerprint,
            keyring=SDK_APT_KEYRING,
            list_name=SDK_LIST,
        )
    vllm_rs = None
    rs = manifest.components.vllm_rs
    if rs is not None:
        if offline and rs.provider == "rustup":
            raise RenderError(
                f"{manifest.path}: components.vllm-rs: the rustup provider downloads the "
                "toolchain during the build, which an --offline build cannot do",
                hint="use provider: distro with rustc and cargo in the base image, or build "
                "without --offline",
            )
        src = rs.source
        vllm_rs = VllmRsSpec(
            origin=f"git {src.git} @ {src.rev}" if src.git else f"path {src.path}",
            provider=rs.provider,
            toolchain=rs.toolchain or "",
            rustup_init_url=rs.rustup_init.url if rs.rustup_init else "",
            rustup_init_sha256=rs.rustup_init.sha256 if rs.rustup_init else "",
            binaries=rs.binaries,
        )
    ctx = RenderContext(
        stack_file=manifest.path.name,
        stack=manifest.name,
        release=manifest.release,
        target_description=manifest.target.describe(),
        lock_inputs_sha256=lock.lock_inputs_sha256,
        lock_sha256=lock_sha256,
        base_image=manifest.base_image,
        python=manifest.target.python_str,
        python_install=spec,
        pip=PipWheel(filename=pip.filename, sha256=pip.sha256),
        has_build_requirements=bool(lock.build_only()),
        compiler=manifest.build.compiler,
        build_args=tuple(
            BuildArg(name=k, default=v) for k, v in sorted(manifest.build.args.items())
        ),
        sources=tuple(sources),
        layout=LAYOUT,
        ccache_dir=CCACHE_DIR,
        image_lock_dir=IMAGE_LOCK_DIR,
        image_sbom=IMAGE_SBOM,
        image_source=manifest_image_source(manifest, git_urls),
        image_components=IMAGE_COMPONENTS,
        components_marker=components_marker(manifest),
        base_image_digest=base_image_digest or base_digest_of(manifest.base_image),
        mirrors=MirrorSpec(
            apt=mirrors.apt or "",
            proxy=mirrors.proxy or "",
            rustup=mirrors.rustup or "",
            rustup_update_root=mirrors.rustup_update_root or "",
            cargo=mirrors.cargo or "",
        ),
        retries=APT_ATTEMPTS,
        offline=offline,
        deadsnakes_key_file=DEADSNAKES_KEY_FILE,
        sdk_apt=sdk_apt,
        sdk_apt_key_file=SDK_APT_KEY_FILE,
        apt=apt_plan(manifest),
        vllm_rs=vllm_rs,
    )
    _check_one_line(ctx, [], manifest.path)
    return ctx


def _check_one_line(value: Any, keypath: list[str], stack: Path) -> None:
    """No value of the context may hold a line break (or another control character).

    A Dockerfile instruction ends at a newline whatever the shell quoting around it says, so
    a value ending in one (YAML ``"jammy\\n"``) would start an instruction of its own.
    """
    if isinstance(value, str):
        if _CONTROL_RE.search(value):
            raise RenderError(
                f"{stack}: {'.'.join(keypath)} holds a line break or control character "
                f"({value[:60]!r}); it would break out of its Dockerfile line",
                hint="remove the line break from the manifest value (or the --mirror value)",
            )
    elif is_dataclass(value) and not isinstance(value, type):
        for f in fields(value):
            _check_one_line(getattr(value, f.name), [*keypath, f.name], stack)
    elif isinstance(value, tuple):
        for i, item in enumerate(value):
            _check_one_line(item, [*keypath, str(i)], stack)


def manifest_image_source(manifest: Manifest, git_urls: list[str]) -> str:
    """org.opencontainers.image.source: the last git source, else the image repository."""
    if git_urls:
        return git_urls[-1]
    if manifest.image is not None:
        return manifest.image.repository
    return ""


# --------------------------------------------------------------------------- rendering


def _double_quoted(value: str) -> str:
    """A Dockerfile double-quoted word: JSON escapes, and ``$`` kept literal."""
    return json.dumps(value).replace("$", "\\$")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - a Dockerfile, not HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["q"] = shlex.quote
    env.filters["dq"] = _double_quoted
    return env


def template_variables() -> set[str]:
    """The undeclared variables of ``Dockerfile.j2`` (what the context must provide)."""
    env = _environment()
    ast = env.parse(TEMPLATE.read_text(encoding="utf-8"))
    return set(jinja2.meta.find_undeclared_variables(ast))


def context_fields() -> set[str]:
    return {f.name for f in fields(RenderContext)}


def render_dockerfile(ctx: RenderContext) -> str:
    """The Dockerfile text for ``ctx``; pure and deterministic."""
    values = {f.name: getattr(ctx, f.name) for f in fields(RenderContext)}
    try:
        text = _environment().get_template(TEMPLATE.name).render(**values)
    except jinja2.UndefinedError as exc:
        raise RenderError(f"{TEMPLATE}: {exc.message}") from None
    # collapse runs of blank lines left by blocks, so the output reads as hand-written
    text = re.sub(r"\n{3,}", "\n\n", text)
    check_no_credentials_in_text(text, where="the rendered Dockerfile")
    return text


def render_diff(committed: str, fresh: str, *, path: str) -> str:
    return "".join(
        difflib.unified_diff(
            committed.splitlines(keepends=True),
            fresh.splitlines(keepends=True),
            fromfile=f"{path} (committed)",
            tofile=f"{path} (fresh render)",
        )
    )


# --------------------------------------------------------------------------- checks on the text


def declared_args(text: str) -> set[str]:
    """Names declared by ``ARG`` instructions anywhere in a Dockerfile."""
    names: set[str] = set()
    for line in text.splitlines():
        m = _ARG_RE.match(line)
        if not m:
            continue
        for word in shlex.split(m.group(1)):
            nm = _ARG_NAME_RE.match(word)
            if nm:
                names.add(nm.group(1))
    return names


def check_build_args(text: str, args: Mapping[str, str], *, where: str) -> None:
    """Every arg passed to the build must be declared by an ``ARG`` in ``text``."""
    declared = declared_args(text)
    missing = sorted(set(args) - declared)
    if missing:
        raise BuildArgError(
            f"build arg {', '.join(missing)} is not declared by any ARG in {where}; "
            "Docker would silently ignore it",
            hint="declare it in Dockerfile.j2 (build.args of the manifest are declared "
            "for you), or stop passing it",
        )


def check_no_credentials(args: Mapping[str, str]) -> None:
    """Build args end up in the image history: refuse anything that looks like a secret."""
    for name, value in sorted(args.items()):
        if _SECRET_NAME_RE.search(name):
            raise CredentialError(
                f"build arg {name} looks like a credential; build args are kept in the image "
                "history",
                hint="the wheelhouse is built on the host, so the image build needs no index "
                "credentials; pass a secret with a BuildKit secret mount if a step needs one",
            )
        if _URL_USERINFO_RE.search(value):
            raise CredentialError(
                f"build arg {name} holds a URL with credentials; build args are kept in the "
                "image history",
                hint="pass the URL without user:password@",
            )


def check_no_credentials_in_text(text: str, *, where: str) -> None:
    for number, line in enumerate(text.splitlines(), 1):
        if _URL_USERINFO_RE.search(line):
            raise CredentialError(
                f"{where}:{number}: a URL with credentials would be baked into the image",
                hint="remove user:password@ from the manifest URL",
            )
