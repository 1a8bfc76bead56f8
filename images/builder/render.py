"""The Dockerfile: a typed render context, the Jinja2 render, and checks on the rendered text.

``build_render_context`` turns a manifest and its lock into a ``RenderContext`` (plain data,
never pre-built RUN lines); ``render_dockerfile`` fills ``Dockerfile.j2`` with it under
``StrictUndefined``, byte-identical run to run. ``check_build_args`` refuses a build arg no
``ARG`` declares (Docker would silently ignore it), ``check_no_credentials`` one that carries
a secret. The only module that imports jinja2.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
from packaging.utils import canonicalize_name

from core.errors import BuildArgError, CredentialError, RenderError, UsageError
from images.builder.apt_plan import AptPlan
from images.builder.labels import ImageLabels, base_digest_of, image_labels, vllm_tag_of
from images.builder.plan import DepsLayer, InputPlan, deps_layers, plan_inputs
from images.builder.sbom_facts import SBOM_FACTS
from images.builder.third_party import (
    IMAGE_THIRD_PARTY,
    OVERLAY_SCRIPT,
    WORKSPACE,
    ProviderOverlay,
    provider_overlay,
)
from images.builder.vllm_rs import VllmRsStep, vllm_rs_marker, vllm_rs_step
from images.oci.normalize import rfc3339
from manifest import (
    Manifest,
    Mirrors,
    Musa,
    PythonInstall,
    Runtime,
    Sdk,
    SdkApt,
    Source,
)
from resolver.lockfile import Lock

TEMPLATE = Path(__file__).with_name("Dockerfile.j2")

# Fixed, documented paths inside the image.
IMAGE_LOCK_DIR = "/opt/vllm-musa/lock"
IMAGE_SBOM = "/opt/vllm-musa/sbom.json"
# what the base image already had for the target interpreter (installed.py base)
IMAGE_BASE_DISTRIBUTIONS = "/opt/vllm-musa/base-distributions.json"
IMAGE_COMPONENTS = "/opt/vllm-musa/components.json"  # which optional components were built
SDK_APT_KEYRING = "vendor-musa-sdk.gpg"  # under /etc/apt/keyrings/
APT_ATTEMPTS = 3  # apt calls inside the build: attempts, with backoff, before failing
CCACHE_DIR = "/root/.cache/ccache"  # a BuildKit cache mount, never a layer
# the fix the render's SDK check names when a command or a library is missing, by sdk.from
SDK_FIXES = {
    "base": "sdk.from is base, so the base image must have the MUSA SDK: use a MUSA SDK "
    "base_image, point musa.path/musa.library_path at its directories, or install it with "
    "sdk.from: apt",
    "apt": "sdk.from is apt: add the sdk_apt package that has it, or point "
    "musa.path/musa.library_path at its directories",
}

# Build args that are passed by the engine; each must be declared by an ARG of the render.
ARG_BASE_IMAGE = "BASE_IMAGE"
ARG_TOOLING_REVISION = "TOOLING_REVISION"  # io.vllm-musa.tooling.revision: this tool's commit
ARG_IMAGE_CREATED = "IMAGE_CREATED"  # org.opencontainers.image.created: that commit's time
STAGE_TIME_ARGS = ("DEPS_TIME", "SOURCES_TIME")  # each stage's SOURCE_DATE_EPOCH (stage_times)

_SECRET_NAME_RE = re.compile(r"(TOKEN|PASSWORD|PASSWD|SECRET|AUTH|CREDENTIAL|API_?KEY)", re.I)
_URL_USERINFO_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s]+@", re.I)
_ARG_RE = re.compile(r"^\s*ARG\s+(.+)$", re.I)
_ARG_NAME_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(=.*)?$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, kw_only=True)
class ContextLayout:
    """Directories of the staged build context (``images/builder/context.py`` writes them)."""

    lock: str = "lock"
    wheelhouse_runtime: str = "wheelhouse/runtime"
    wheelhouse_build: str = "wheelhouse/build"
    sources: str = "sources"
    tools: str = "tools"
    inputs: str = "inputs"
    apt: str = "apt"  # offline builds only: debs/<file>.deb and <step>.sha256
    # the SBOM writer and its facts: mounted by the SBOM step only, so a new lock reruns
    # that step and no other (every apt step mounts tools/)
    sbom: str = "sbom"
    # offline builds with components.vllm-rs: the vendored crates (vendor/, config.toml)
    crates: str = "crates"
    # the runtime lock split into the deps stage's layers (deps_layers), mounted by those
    # steps only
    deps: str = "deps"


LAYOUT = ContextLayout()


@dataclass(frozen=True, kw_only=True)
class PipWheel:
    filename: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class BuildArg:
    name: str
    default: str


@dataclass(frozen=True, kw_only=True)
class EnvVar:
    name: str
    value: str  # rendered as is: validated path characters, and ${VAR} references on purpose


@dataclass(frozen=True, kw_only=True)
class SourceStep:
    name: str  # the source's key; also the distribution it builds
    origin: str  # for the comment: "git URL @ rev" or "path demo/vllm"
    revision: str  # the 40-hex rev, or "path:<dir>"
    env: tuple[tuple[str, str], ...]  # sorted (name, value)


@dataclass(frozen=True, kw_only=True)
class WorkspaceStep:
    """The driving source (``third_party``), built as upstream builds it: its tree with the
    driven sources under ``third_party/``, installed in ``dir`` with ``pip install -e .``."""

    name: str
    origin: str
    revision: str
    dir: str = WORKSPACE
    env: tuple[tuple[str, str], ...]  # the driver's env, sorted; PIP_NO_INDEX=1 is added
    third_party: tuple[tuple[str, str], ...]  # (dir, origin of the source staged there)
    record: str = IMAGE_THIRD_PARTY  # the driven trees' record in the image
    # FlashInfer's provider, overlaid into the installed flashinfer (third_party.py), or None
    overlay: ProviderOverlay | None = None
    overlay_script: str = OVERLAY_SCRIPT


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
    python_install: PythonInstall
    pip: PipWheel
    deps_layers: tuple[DepsLayer, ...]  # the deps stage's pip steps, in order
    has_build_requirements: bool
    build_args: tuple[BuildArg, ...]
    sources: tuple[SourceStep, ...]  # built as wheels, in manifest order
    workspace: WorkspaceStep | None  # the driving source, built in place
    source_revisions: tuple[str, ...]  # NAME=REVISION of every source, for the SBOM
    layout: ContextLayout = LAYOUT
    ccache_dir: str = CCACHE_DIR
    image_lock_dir: str = IMAGE_LOCK_DIR
    image_sbom: str = IMAGE_SBOM
    image_base_distributions: str = IMAGE_BASE_DISTRIBUTIONS
    sbom_facts: str = SBOM_FACTS  # the lock's facts for the SBOM writer, in the context's sbom/
    labels: ImageLabels
    # com.mthreads.vllm.version, upstream's label of the vLLM tag (vllm_tag_of); "" leaves it out
    vllm_tag: str
    image_components: str = IMAGE_COMPONENTS
    components_marker: str  # the JSON written to image_components
    base_image_digest: str  # "" when not known: the label is left out
    mirrors: Mirrors  # applied once, before the render: the effective manifest's
    retries: int = APT_ATTEMPTS
    offline: bool
    apt: AptPlan  # every apt install of the render (the plan's)
    sdk_apt: SdkApt | None  # None: no vendor apt repository, no sdk stage
    sdk_apt_keyring: str = SDK_APT_KEYRING
    sdk: Sdk | None  # None: nothing about the SDK is checked
    sdk_fix: str  # the fix the SDK check's errors name ("" without sdk:)
    vllm_rs: VllmRsStep | None  # None: the component is off, nothing of it is rendered
    inputs: InputPlan  # resolved URLs (mirrors, key URLs) and context file names
    runtime: Runtime  # runtime.library_links (its apt packages are in ``apt``)
    musa: Musa | None  # None: no MUSA environment
    musa_env: tuple[EnvVar, ...]  # the ENV of the python stage that musa sets (musa_env_of)


def musa_env_of(musa: Musa | None) -> tuple[EnvVar, ...]:
    """The environment ``musa:`` sets from the python stage on, in upstream's order.

    One ENV instruction substitutes every ``${VAR}`` with the value from before it, so the
    directories are written out (never ``${MUSA_HOME}/bin``). LD_LIBRARY_PATH keeps the base's
    value without an empty entry (which would mean the current directory).
    """
    if musa is None:
        return ()
    env = [EnvVar(name="MUSA_HOME", value=musa.home)]
    if musa.path:
        env.append(EnvVar(name="PATH", value=":".join(musa.path) + ":${PATH}"))
    if musa.library_path:
        value = ":".join(musa.library_path) + "${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
        env.append(EnvVar(name="LD_LIBRARY_PATH", value=value))
    env += [
        EnvVar(name="MTGPU_TARGET", value=musa.gpu_arch),
        EnvVar(name="TORCH_MUSA_ARCH_LIST", value=musa.torch_arch),
        EnvVar(name="MATE_MUSA_ARCH_LIST", value=musa.mate_arch),
    ]
    return tuple(env)


def default_render_path(manifest: Manifest) -> Path:
    """Where the committed render of a stack lives: ``stack/<stem>.Dockerfile``."""
    return manifest.path.parent / f"{manifest.stem}.Dockerfile"


def build_args_for(
    manifest: Manifest,
    *,
    base_image: str | None,
    tooling_revision: str,
    epoch: int | None,
    stage_times: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The build args of a build of ``manifest``: its build.args, the tooling revision, the
    labels' creation time (``epoch``), each stage tier's time (``stage_times``, default
    ``epoch``), and BASE_IMAGE when the command line replaces the base image."""
    args = dict(manifest.build.args)
    args[ARG_TOOLING_REVISION] = tooling_revision
    args[ARG_IMAGE_CREATED] = "" if epoch is None else rfc3339(epoch)
    for arg in STAGE_TIME_ARGS:
        args[arg] = str(epoch or 0)
    args |= stage_times or {}
    if base_image is not None:
        args[ARG_BASE_IMAGE] = base_image
    return args


def source_date_epoch(env: Mapping[str, str], commit_time: Callable[[], str]) -> int | None:
    """The build's time, in seconds since 1970: ``SOURCE_DATE_EPOCH`` when set, else the time
    of the tooling commit (``commit_time``, ISO 8601); None when neither is known. Never the
    wall clock: the same inputs give the same image."""
    epoch = env.get("SOURCE_DATE_EPOCH", "")
    if epoch:
        if not epoch.isdigit() or len(epoch) > 12:
            raise UsageError(
                f"SOURCE_DATE_EPOCH={epoch[:40]!r} is not a number of seconds since 1970",
                hint="set SOURCE_DATE_EPOCH=$(git log -1 --format=%ct), or unset it to use the "
                "time of the tooling commit",
            )
        return int(epoch)
    text = commit_time()
    if not text:
        return None
    return int(datetime.fromisoformat(text).timestamp())


def source_origin(source: Source) -> str:
    """How a source reads in a comment: "git URL @ rev", "sdist NAME VERSION" or "path DIR"."""
    if source.git is not None:
        return f"git {source.git} @ {source.rev}"
    if source.sdist is not None:
        at = f" @ {source.rev}" if source.rev else ""
        return f"sdist {source.sdist.project} {source.sdist.version_text}{at}"
    return f"path {source.path}"


def source_revision(source: Source) -> str:
    """What the SBOM says a source was built from: its rev, "sdist:NAME-VERSION" or "path:DIR"."""
    if source.rev is not None:
        return source.rev
    if source.sdist is not None:
        return f"sdist:{source.sdist.project}-{source.sdist.version_text}"
    return f"path:{source.path}"


def workspace_step(manifest: Manifest) -> WorkspaceStep | None:
    """The driving source's build step, or None when no source drives others."""
    driver = next((s for s in manifest.sources if s.third_party), None)
    if driver is None:
        return None
    third_party = []
    for t in driver.third_party:
        driven = manifest.source(t.source)
        assert driven is not None
        third_party.append((t.dir, source_origin(driven)))
    return WorkspaceStep(
        name=driver.name,
        origin=source_origin(driver),
        revision=source_revision(driver),
        env=tuple(sorted({**driver.env, "PIP_NO_INDEX": "1"}.items())),
        third_party=tuple(third_party),
        overlay=provider_overlay(manifest),
    )


def components_marker(manifest: Manifest) -> str:
    """The JSON the image keeps at IMAGE_COMPONENTS: each component, built or not."""
    c = manifest.components
    data = {
        "mooncake": (
            {"built": True, "package": c.mooncake.pin.name, "version": c.mooncake.pin.version_text}
            if c.mooncake
            else {"built": False}
        ),
        "vllm-rs": vllm_rs_marker(manifest),
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def build_render_context(
    manifest: Manifest,
    lock: Lock,
    *,
    lock_sha256: str,
    offline: bool = False,
    base_image_digest: str = "",
    plan: InputPlan | None = None,
    product_pins: Mapping[str, str] | None = None,
) -> RenderContext:
    """The render context of ``manifest`` with ``lock`` (current for it). ``offline``: the
    --network none variant (apt steps install the fetched .deb files from the context).
    ``base_image_digest``: the base's digest when known (else the one pinned in
    ``base_image``). ``product_pins``: the product source's ``third_party/PINS``
    (``vllm_tag_of``)."""
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
    built = [s for s in manifest.built_sources() if not s.third_party]
    sources = tuple(
        SourceStep(
            name=s.name,
            origin=source_origin(s),
            revision=source_revision(s),
            env=tuple(sorted(s.env.items())),
        )
        for s in built
    )
    workspace = workspace_step(manifest)
    rs = vllm_rs_step(
        manifest, lock, workspace_dir=workspace.dir if workspace else None, offline=offline
    )
    inputs = plan or plan_inputs(manifest, lock)
    labels = image_labels(manifest)
    ctx = RenderContext(
        stack_file=manifest.path.name,
        stack=manifest.name,
        release=manifest.release,
        target_description=manifest.target.describe(),
        lock_inputs_sha256=lock.lock_inputs_sha256,
        lock_sha256=lock_sha256,
        base_image=manifest.base_image,
        python=manifest.target.python_str,
        python_install=manifest.python_install,
        pip=PipWheel(filename=pip.filename, sha256=pip.sha256),
        deps_layers=deps_layers(lock),
        has_build_requirements=bool(lock.build_only()),
        build_args=tuple(
            BuildArg(name=k, default=v) for k, v in sorted(manifest.build.args.items())
        ),
        sources=sources,
        workspace=workspace,
        source_revisions=tuple(f"{s.name}={source_revision(s)}" for s in manifest.sources),
        labels=labels,
        vllm_tag=vllm_tag_of(labels, product_pins),
        components_marker=components_marker(manifest),
        base_image_digest=base_image_digest or base_digest_of(manifest.base_image),
        mirrors=manifest.mirrors,
        offline=offline,
        apt=inputs.apt,
        sdk_apt=manifest.sdk_apt,
        sdk=manifest.sdk,
        sdk_fix=SDK_FIXES[manifest.sdk.origin] if manifest.sdk else "",
        vllm_rs=rs,
        inputs=inputs,
        runtime=manifest.runtime,
        musa=manifest.musa,
        musa_env=musa_env_of(manifest.musa),
    )
    _check_one_line(ctx, [], manifest.path)
    return ctx


def _check_one_line(value: Any, keypath: list[str], stack: Path) -> None:
    """No value of the context may hold a line break (or another control character): a
    Dockerfile instruction ends at a newline whatever the shell quoting says."""
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
    env.filters["origin"] = source_origin
    return env


def render_dockerfile(ctx: RenderContext) -> str:
    """The Dockerfile text for ``ctx``; pure and deterministic."""
    values = {f.name: getattr(ctx, f.name) for f in fields(RenderContext)}
    try:
        text = _environment().get_template(TEMPLATE.name).render(**values)
    except jinja2.UndefinedError as exc:
        raise RenderError(f"{TEMPLATE}: {exc.message}") from None
    # collapse runs of blank lines left by blocks, so the output reads as hand-written
    text = re.sub(r"\n{3,}", "\n\n", text)
    for number, line in enumerate(text.splitlines(), 1):
        if _URL_USERINFO_RE.search(line):
            raise CredentialError(
                f"the rendered Dockerfile:{number}: a URL with credentials would be baked into "
                "the image",
                hint="remove user:password@ from the manifest URL",
            )
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
    """Names a build may pass: those ``ARG`` declares anywhere in a Dockerfile, less
    ``SOURCE_DATE_EPOCH``, which each stage derives from its tier's time."""
    names: set[str] = set()
    for line in text.splitlines():
        m = _ARG_RE.match(line)
        if not m:
            continue
        for word in shlex.split(m.group(1)):
            nm = _ARG_NAME_RE.match(word)
            if nm:
                names.add(nm.group(1))
    return names - {"SOURCE_DATE_EPOCH"}


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
