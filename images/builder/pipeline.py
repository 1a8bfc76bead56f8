"""The build side as library calls: ``fetch``, ``stage`` and ``build``.

``build`` is the whole pipeline of one target: stage the context, build it with BuildKit (no
tag), normalize the image, run the gates, write the build report, and only when every gate
passed apply the tags and write the report again; a failed gate raises ``GateError`` after
the report is written. ``stage`` stages a context without Docker (online), to build it
elsewhere; ``fetch`` fills the cache with every input, for an ``--offline`` build. A
request's manifest is the effective one (``images.builder.overrides``).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from core.errors import RenderError, UsageError
from core.file_store import FileStore, default_cache_dir
from core.network import DEFAULT_OPTIONS, NetworkOptions
from core.progress import DownloadProgress
from images.builder.base_source import BASE_STORE, normalizing_for, stored_base
from images.builder.context import Fetch, StagedContext, load_current_lock, stage_context
from images.builder.gates import GateResult, evaluate_gates, probe_facts, require_gates
from images.builder.installed_gate import base_distributions
from images.builder.plan import plan_inputs
from images.builder.render import (
    build_args_for,
    check_build_args,
    check_no_credentials,
    source_date_epoch,
)
from images.builder.report import BuildReport, BuildSteps, ReportLayer, write_build_report
from images.builder.reproducible import Normalized, normalize_built, settle_context
from images.builder.stage_times import stage_times
from images.builder.tags import parse_reference
from images.builder.workspace import Workspace
from images.engine.port import BaseImageFetcher, BuildEngine, BuildRequest
from manifest import Manifest
from resolver.lockfile import BUILD_REQUIREMENTS, REQUIREMENTS, Lock, LockedPackage

Progress = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class FetchRequest:
    """The inputs of a build of ``manifest`` and where they come from."""

    manifest: Manifest  # the effective manifest
    workspace: Workspace
    env: Mapping[str, str]  # the environment (index credentials, the cache, SOURCE_DATE_EPOCH)
    options: NetworkOptions = DEFAULT_OPTIONS  # the command's (core.network.network_options)
    cache_dir: Path | None = None  # None: the default cache
    index_overrides: tuple[str, ...] = ()  # --index NAME=URL
    lock_dir: Path | None = None  # None: manifest.default_lock_dir()
    note: Callable[[str], None] | None = None  # where the cache reports what it removed
    downloads: DownloadProgress | None = None  # where downloads show their bars (a terminal)

    def cache_root(self) -> Path:
        return self.cache_dir or default_cache_dir(dict(self.env))

    def cache(self) -> FileStore:
        return FileStore(self.cache_root(), note=self.note)

    def host_options(self) -> NetworkOptions:
        """The options of the host's requests for the build: the command's, with
        ``mirrors.proxy`` as the proxy when they name none."""
        network = self.options.network.or_proxy(self.manifest.mirrors.proxy, "mirrors.proxy")
        return replace(self.options, network=network)


@dataclass(frozen=True, kw_only=True)
class BaseImage:
    """What Docker knows of the base image: its registry digest ("" unknown), its local id."""

    digest: str = ""
    id: str = ""


@dataclass(frozen=True, kw_only=True)
class StageRequest(FetchRequest):
    """The context of one target, staged from the inputs."""

    target: str
    out_dir: Path | None = None  # None: workspace.context_dir(stem, target)

    @functools.cached_property
    def build_time(self) -> int:
        """The build's time (``source_date_epoch``), asked once; 0 when not known."""
        return source_date_epoch(self.env, self.workspace.commit_time) or 0


@dataclass(frozen=True, kw_only=True)
class ImageBuildRequest:
    stage: StageRequest
    report_path: Path
    tags: tuple[str, ...] = ()
    base_image_arg: str | None = None  # --base-image: passed as the BASE_IMAGE build arg
    network: str | None = None  # for RUN steps; an offline build always has none
    no_cache: bool = False
    progress: str = "plain"  # BuildKit's display (images.engine.port.progress_mode)
    layout: Path | None = None  # the normalized image's; None: workspace.image_layout(...)


def require_base_image(manifest: Manifest) -> str:
    if manifest.base_image is None:
        raise RenderError(
            f"{manifest.path}: no base_image",
            hint='add base_image: "<registry>/<image>:<tag>@sha256:<digest>" to the manifest',
        )
    return manifest.base_image


def check_tags(tags: tuple[str, ...] | list[str]) -> None:
    """Every tag is an image reference without a digest (checked before anything is built)."""
    for tag in tags:
        if parse_reference(tag).digest:
            raise UsageError(f"--tag {tag!r}: a tag cannot carry a digest")


@contextlib.contextmanager
def wheel_fetch(request: FetchRequest) -> Iterator[Fetch]:
    """A function that downloads one locked wheel through IndexClient (closed on exit)."""
    from resolver.endpoints import IndexEndpoint, effective_endpoints, parse_index_overrides
    from resolver.index_client import open_client
    from resolver.simple_page import IndexFile

    manifest = request.manifest
    overrides = parse_index_overrides(list(request.index_overrides))
    endpoints = effective_endpoints(manifest, overrides, request.env)
    client = open_client(
        request.cache_dir,
        request.env,
        request.host_options(),
        note=request.note,
        progress=request.downloads,
    )

    def mirrored(endpoint: IndexEndpoint, p: LockedPackage) -> str:
        """Where a mirror of ``p``'s index serves its file: the URL its page lists (a mirror
        may keep files under a path of its own), else the file's path on the mirror's host.
        The bytes are checked against the lock either way."""
        page = client.project_files(endpoint, p.name)
        for listed in page or ():
            if listed.filename == p.filename:
                return listed.url
        file, mirror = urlsplit(p.url), urlsplit(endpoint.url)
        return urlunsplit((mirror.scheme, mirror.netloc, file.path, file.query, ""))

    def fetch(p: LockedPackage) -> Path:
        endpoint = endpoints[p.index]
        moved = endpoint.url != manifest.indexes[p.index].url  # --index or mirrors.indexes
        url = mirrored(endpoint, p) if moved else p.url
        file = IndexFile(filename=p.filename, url=url, hashes={"sha256": p.sha256}, size=p.size)
        return client.download(endpoint, file, label=f"{p.name} {p.version}").path

    try:
        yield fetch
    finally:
        client.close()


def stage(request: StageRequest, *, base: BaseImage | None = None) -> StagedContext:
    """Refuse a missing or stale lock, fill the wheelhouse, stage the context. ``base`` is
    what Docker knows of the base image (without it, the digest pinned in ``base_image``); an
    offline stage needs its local id (the apt steps' .deb files are fetched per base image).
    """
    m = request.manifest
    if request.options.offline and (base is None or not base.id):
        raise UsageError(
            "an offline stage needs the base image's local id",
            hint="stage with `build_image.py stage --offline` (Docker reads the id), or online",
        )
    base = base or BaseImage()
    ws = request.workspace
    with wheel_fetch(request) as fetch:
        staged = stage_context(
            m,
            request.lock_dir or m.default_lock_dir(),
            request.out_dir or ws.context_dir(m.stem, request.target),
            repo_root=ws.root,
            cache=request.cache(),
            git_cache=request.cache_root() / "git",
            fetch=fetch,
            options=request.host_options(),
            base_image_digest=base.digest,
            base_image_id=base.id,
        )
    # what the build copies from the context: the same modes and mtimes on every host
    settle_context(staged.directory, epoch=request.build_time)
    return staged


def base_image_of(engine: BuildEngine, manifest: Manifest, *, offline: bool) -> BaseImage:
    """The base image, present locally (pulled unless offline): its digest and, offline, its id."""
    ref = require_base_image(manifest)
    engine.ensure_base_image(ref, pull=not offline)
    return BaseImage(digest=engine.repo_digest(ref), id=engine.inspect(ref).id if offline else "")


def label_args(
    manifest: Manifest,
    ws: Workspace,
    env: Mapping[str, str],
    *,
    base_image: str | None,
    lock_dir: Path | None = None,
) -> dict[str, str]:
    """The build args of a build (``render.build_args_for``), with the tooling revision of
    ``ws`` and each stage tier's time (``images.builder.stage_times``)."""
    epoch = source_date_epoch(env, ws.commit_time)
    times = None
    if epoch is not None:
        lock_dir = lock_dir or manifest.default_lock_dir()
        build_reqs = lock_dir / BUILD_REQUIREMENTS
        times = stage_times(
            epoch=epoch,
            workspace=ws,
            manifest_path=manifest.path,
            lock_requirements=lock_dir / REQUIREMENTS,
            build_requirements=build_reqs if build_reqs.is_file() else None,
            path_sources=[ws.root / s.path for s in manifest.sources if s.path is not None],
        ).build_args()
    return build_args_for(
        manifest,
        base_image=base_image,
        tooling_revision=ws.vcs_ref(),
        epoch=epoch,
        stage_times=times,
    )


def build_report(
    request: ImageBuildRequest,
    staged: StagedContext,
    image: Normalized,
    *,
    gates: Mapping[str, bool],
) -> BuildReport:
    """The report of a build of ``staged`` into ``image``, before tags and durations; paths
    relative to the repository (no path of the build machine)."""
    staging = request.stage
    m = staging.manifest
    return BuildReport(
        stack=staging.workspace.relative(m.path),
        target=staging.target,
        image_id=image.image_id,
        digest=image.digest,
        oci_layout=staging.workspace.relative(image.layout),
        source_date_epoch=image.epoch,
        base_image=require_base_image(m),
        lock_sha256=staged.lock_sha256,
        lock_inputs_sha256=staged.lock.lock_inputs_sha256,
        dockerfile_sha256=staged.dockerfile_sha256,
        offline=staging.options.offline,
        network="none" if staging.options.offline else (request.network or "default"),
        components=m.components.enabled(),
        fetched=staged.fetched,
        gates=dict(gates),
        compressor=image.compressor,
        layers=tuple(
            ReportLayer(
                digest=layer.digest,
                size=layer.size,
                diff_id=layer.diff_id,
                origin=layer.origin,
                clamp=None if layer.origin == "base" else layer.clamp,
                step=layer.step,
            )
            for layer in image.layers
        ),
    )


def _gate(
    engine: BuildEngine, image_id: str, m: Manifest, lock: Lock, progress: Progress
) -> tuple[list[GateResult], tuple[str, ...]]:
    """The gates of the built image, each shown, and the base image's own distributions
    (``name version (location)``) as the build recorded them."""
    facts = probe_facts(engine, image_id, m)
    results = evaluate_gates(facts, m, lock)
    for r in results:
        progress(f"gate {r.name}: {'ok' if r.ok else 'FAILED'}")
    from_base = tuple(d.describe() for d in base_distributions(facts)[0])
    for line in from_base:
        progress(f"from the base image: {line}")
    return results, from_base


def _normalize(
    engine: BuildEngine,
    built_id: str,
    request: ImageBuildRequest,
    progress: Progress,
    fetcher: BaseImageFetcher | None,
) -> Normalized:
    """The daemon's image ``built_id`` normalized and loaded back."""
    staging = request.stage
    ws = staging.workspace
    base_ref = request.base_image_arg or require_base_image(staging.manifest)
    started = time.monotonic()
    how = normalizing_for(
        base_ref,
        engine=engine,
        cache_root=staging.cache_root(),
        env=staging.env,
        fetcher=None if (staging.options.offline or request.base_image_arg) else fetcher,
        progress=progress,
    )
    fetched = round(time.monotonic() - started, 3)  # the base's blobs into the store, if new
    normalized = normalize_built(
        engine,
        built_id,
        layout=request.layout or ws.image_layout(staging.manifest.stem, staging.target),
        epoch=staging.build_time,
        tag=staging.target,
        how=how,
        base_bytes=engine.inspect(base_ref).size,
        progress=progress,
    )
    progress(
        f"normalized {normalized.image_id}: digest {normalized.digest}, "
        f"{len(normalized.dropped)} build record(s) removed"
    )
    return replace(normalized, durations_s={"base_fetch": fetched, **normalized.durations_s})


def build(
    request: ImageBuildRequest,
    *,
    engine: BuildEngine,
    fetcher: BaseImageFetcher | None = None,
    progress: Progress = lambda _line: None,
    reported: Callable[[BuildReport], None] = lambda _report: None,
) -> BuildReport:
    """Stage, build, gate, report, tag: one target of one stack. ``fetcher`` copies a pinned
    base's blobs from its registry (None: the daemon's layers are kept). ``reported`` sees
    each report as it is written (the one of failed gates too)."""
    started = t = time.monotonic()
    durations: dict[str, float] = {}
    check_tags(request.tags)  # a bad tag is refused now, not after the build and the gates
    staging = request.stage
    m = staging.manifest
    ws = staging.workspace
    base = base_image_of(engine, m, offline=staging.options.offline)
    durations["base_image"] = round(time.monotonic() - t, 3)
    t = time.monotonic()
    staged = stage(staging, base=base)
    durations["context"] = round(time.monotonic() - t, 3)
    build_args = label_args(
        m, ws, staging.env, base_image=request.base_image_arg, lock_dir=staging.lock_dir
    )
    check_no_credentials(build_args)
    check_build_args(staged.dockerfile_text, build_args, where=str(staged.dockerfile))
    t = time.monotonic()
    steps = BuildSteps()
    progress(f"building {m.path} --target {staging.target} with {engine.builder().description}")
    built_id = engine.build(
        BuildRequest(
            context=staged.directory,
            dockerfile=staged.dockerfile,
            target=staging.target,
            build_args=build_args,
            iidfile=staged.directory.parent / f"{m.stem}-{staging.target}.iid",
            network="none" if staging.options.offline else request.network,
            no_cache=request.no_cache,
            on_output=steps,
            progress=request.progress,
        )
    )
    durations["build"] = round(time.monotonic() - t, 3)
    normalized = _normalize(engine, built_id, request, progress, fetcher)
    image_id = normalized.image_id
    durations |= normalized.durations_s
    size = engine.inspect(image_id).size
    t = time.monotonic()
    results, from_base = _gate(engine, image_id, m, staged.lock, progress)
    durations["gates"] = round(time.monotonic() - t, 3)
    wheels = len(staged.lock.wheels())
    cache = {"wheels_cached": wheels - len(staged.fetched), "wheels_fetched": len(staged.fetched)}
    if request.progress == "plain":  # BuildKit's steps are read from its plain display only
        cache |= steps.counts()
    report = replace(
        build_report(request, staged, normalized, gates={r.name: r.ok for r in results}),
        base_distributions=from_base,
        size_bytes=size,
        cache=cache,
        stages_s=steps.stage_seconds(),
    )
    try:
        require_gates(results, image=image_id)
    finally:
        durations["total"] = round(time.monotonic() - started, 3)
        gated = replace(report, durations_s=dict(durations))
        write_build_report(request.report_path, gated)
        reported(gated)
    t = time.monotonic()
    for tag in request.tags:
        engine.tag(image_id, tag)
    durations["tag"] = round(time.monotonic() - t, 3)
    durations["total"] = round(time.monotonic() - started, 3)
    report = replace(report, tags=request.tags, durations_s=dict(durations))
    write_build_report(request.report_path, report)
    reported(report)
    return report


def fetch(
    request: FetchRequest,
    *,
    engine: BuildEngine,
    fetcher: BaseImageFetcher | None = None,
    network: str | None = None,
) -> list[str]:
    """Every input of the plan in the cache (a line each), the apt steps' .deb files included
    (apt in a container on ``network``), and with ``fetcher`` a base pinned by digest in the
    host's store of base images."""
    from images.builder.apt_fetch import fetch_debs
    from images.builder.context import fetch_inputs

    m = request.manifest
    lock = load_current_lock(m, request.lock_dir or m.default_lock_dir())
    plan = plan_inputs(m, lock)
    cache_root = request.cache_root()
    cache = request.cache()
    options = request.host_options()
    base = require_base_image(m)
    with wheel_fetch(request) as wheel:
        done = fetch_inputs(
            plan,
            cache=cache,
            git_cache=cache_root / "git",
            fetch=wheel,
            options=options,
            stack=str(m.path),
            repo_root=request.workspace.root,
        )
        engine.ensure_base_image(base, pull=True)
        steps, _ = fetch_debs(
            plan,
            engine=engine,
            cache=cache,
            options=options,
            stack=str(m.path),
            base_image=base,
            base_image_id=engine.inspect(base).id,
            network=network,
        )
    for step, files in steps.items():
        done.append(f"apt step {step}: {len(files)} .deb file(s)")
    stored = stored_base(base, store_root=cache_root / BASE_STORE, fetcher=fetcher)
    if stored is not None:
        done.append(f"base image {base}: {len(stored.descriptors)} layer blob(s)")
    return done
