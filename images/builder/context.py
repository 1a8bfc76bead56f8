"""The build context: everything ``docker build`` sees, staged into one directory.

Layout (``images.builder.render.LAYOUT``)::

    Dockerfile                  the render for this manifest and lock
    lock/                       the lock files, as on disk
    wheelhouse/{runtime,build}/ the lock's wheels, from the content-addressed cache
    deps/                       the runtime lock split into the deps stage's layers
    sources/<name>/             each source: a git tree at its rev, a path, an unpacked sdist
    sbom/                       the SBOM writer (in_image/sbom.py) and its facts (sbom_facts.py)
    tools/                      the scripts the build runs, the record of the driven trees
    inputs/<file>               the archive keys (online) and the pinned downloads (rustup-init)
    apt/, crates/               --offline only: each apt step's .deb files, the vendored crates

Every input comes from ``plan_inputs(manifest, lock)``: ``fetch_inputs`` fills the cache from
it (with no fetch function: the offline check naming the first input not fetched), and
``stage_context`` places it. The cache is not trusted: every wheel is hashed as placed against
the lock (an sdist before it is unpacked), and a cached file that does not match is removed
and fetched again. A git source is refused unless ``git rev-parse HEAD`` is its rev; a path
source must resolve inside the repository.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import ContextError, HashMismatchError, LockError, OfflineMissingError
from core.file_store import FileStore, sha256_of
from core.filenames import child_path
from core.network import DEFAULT_OPTIONS, NetworkConfig, NetworkOptions
from images.builder.inputs import FETCH_HINT, ensure_by_url, ensure_pinned
from images.builder.labels import VLLM_TAG_LABEL, product_source
from images.builder.plan import (
    InputPlan,
    SdistSourceInput,
    SourceInput,
    deps_layers,
    plan_inputs,
)
from images.builder.render import LAYOUT, build_render_context, render_dockerfile
from images.builder.sbom_facts import SBOM_FACTS, render_sbom_facts
from images.builder.third_party import (
    OVERLAY_SCRIPT,
    THIRD_PARTY_RECORD,
    DrivenTree,
    check_and_record,
    provider_overlay,
    record_json,
)
from images.builder.vllm_rs import CRATES_MOUNT
from manifest import PINS_FILE, Manifest
from resolver.lockfile import (
    BUILD_REQUIREMENTS,
    PYLOCK,
    Lock,
    LockedPackage,
    load_lock,
    render_requirement_lines,
)
from sources.read import git_reader, path_reader, sdist_reader
from sources.sdist import SdistArchive
from sources.third_party_pins import parse_pins
from sources.trees import (
    checkout_git_source,
    ensure_git_rev,
    extract_sdist,
    stage_path_source,
)

IN_IMAGE = Path(__file__).with_name("in_image")  # scripts that run inside the image

# Fetch a locked wheel that is not in the cache; returns the path of the verified file.
Fetch = Callable[[LockedPackage], Path]


@dataclass(frozen=True, kw_only=True)
class StagedContext:
    directory: Path
    dockerfile: Path
    dockerfile_text: str
    lock: Lock
    lock_sha256: str
    fetched: tuple[str, ...]  # filenames that were not in the cache
    dockerfile_sha256: str


def lock_file_sha256(lock_dir: Path) -> str:
    return hashlib.sha256((lock_dir / PYLOCK).read_bytes()).hexdigest()


def load_current_lock(manifest: Manifest, lock_dir: Path) -> Lock:
    """The lock in ``lock_dir``, refused when missing or written for other manifest inputs."""
    lock = load_lock(lock_dir)
    if lock.lock_inputs_sha256 != manifest.lock_inputs_sha256:
        raise LockError(
            f"{lock_dir} is stale: it was locked for inputs {lock.lock_inputs_sha256[:12]}, "
            f"but {manifest.path} now has inputs {manifest.lock_inputs_sha256[:12]}",
            hint=f"run `build_image.py lock {manifest.path}` and review the change",
        )
    if lock.build_only() and not (lock_dir / BUILD_REQUIREMENTS).is_file():
        raise LockError(
            f"{lock_dir}: the lock has build-stage packages but no {BUILD_REQUIREMENTS}",
            hint=f"run `build_image.py lock {manifest.path}` to rewrite the lock directory",
        )
    return lock


def render_for(
    manifest: Manifest,
    lock_dir: Path,
    *,
    repo_root: Path,
    cache: FileStore,
    git_cache: Path,
    options: NetworkOptions = DEFAULT_OPTIONS,
) -> tuple[Lock, str]:
    """The current lock and the Dockerfile rendered from it (``options.offline``: the
    ``--network none`` variant), as a build renders it; a git product source lacking its
    revision is fetched through ``options.network``."""
    lock, _, text = _render(
        manifest, lock_dir, repo_root=repo_root, cache=cache, git_cache=git_cache, options=options
    )
    return lock, text


def _render(
    manifest: Manifest,
    lock_dir: Path,
    *,
    repo_root: Path,
    cache: FileStore,
    git_cache: Path,
    options: NetworkOptions,
    digest: str = "",
    fetch: Fetch | None = None,
    offline_hint: str | None = None,
) -> tuple[Lock, InputPlan, str]:
    """The current lock, its plan, and the Dockerfile rendered from them with the product
    source's ``third_party/PINS`` at its pinned revision (``read_product_pins``)."""
    lock = load_current_lock(manifest, lock_dir)
    plan = plan_inputs(manifest, lock)
    pins = read_product_pins(
        manifest,
        plan,
        repo_root=repo_root,
        cache=cache,
        git_cache=git_cache,
        fetch=fetch,
        offline_hint=offline_hint,
        network=options.network,
    )
    ctx = build_render_context(
        manifest,
        lock,
        lock_sha256=lock_file_sha256(lock_dir),
        offline=options.offline,
        base_image_digest=digest,
        plan=plan,
        product_pins=pins,
    )
    return lock, plan, render_dockerfile(ctx)


def _write_tools(tools: Path, manifest: Manifest, driven: list[DrivenTree]) -> None:
    """The scripts the build runs (the FlashInfer overlay's when the manifest has one) and
    the record of the driven trees."""
    tools.mkdir()
    overlay = provider_overlay(manifest)
    scripts = [*sorted(IN_IMAGE.glob("*.sh")), IN_IMAGE / "installed.py"]
    if overlay is not None:
        scripts.append(IN_IMAGE / OVERLAY_SCRIPT)
    for script in scripts:
        shutil.copy2(script, tools / script.name)
    (tools / THIRD_PARTY_RECORD).write_text(record_json(driven, overlay), encoding="utf-8")


def read_product_pins(
    manifest: Manifest,
    plan: InputPlan,
    *,
    repo_root: Path,
    cache: FileStore,
    git_cache: Path,
    fetch: Fetch | None = None,
    offline_hint: str | None = None,
    network: NetworkConfig | None = None,
) -> dict[str, str] | None:
    """The product source's ``third_party/PINS`` at its pinned revision, whose ``VLLM_TAG``
    labels the image (``labels.vllm_tag_of``); None without a product source or a PINS.

    A git source is read in the cache clone (fetched through ``network`` when it lacks the
    rev; offline, ``offline_hint`` names the fix instead), an sdist in the locked archive
    (from the cache, else ``fetch``), a path source in the repository."""
    product = product_source(manifest)
    if product is None:
        return None
    where = f"sources.{product.name} ({PINS_FILE}, for the label {VLLM_TAG_LABEL})"
    entry = next(e for e in plan.sources if e.source.name == product.name)
    if isinstance(entry, SdistSourceInput):
        path = _sdist_file(entry, cache=cache, fetch=fetch, where=where)
        p = entry.locked
        read = sdist_reader(SdistArchive(path, filename=p.filename, sha256=p.sha256, where=where))
    elif product.git is not None:
        ensure_git_rev(product, git_cache, where=where, offline_hint=offline_hint, network=network)
        read = git_reader(product, git_cache, where=where, network=network)
    else:
        read = path_reader(product, repo_root, where=where)
    data = read(PINS_FILE)
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")
    return parse_pins(text, where=f"sources.{product.name}: {PINS_FILE}")


def place_file(src: Path, dest: Path) -> None:
    """``src`` at ``dest``: hard-linked where the filesystem allows, else copied."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _wheelhouse_path(directory: Path, sub: str, p: LockedPackage) -> Path:
    """``directory/sub/<filename>``, refused unless the lock's filename is a plain file name
    that stays directly in ``sub`` (a lock is data: never a path out of the context)."""
    try:
        return child_path(directory / sub, p.filename)
    except ValueError as exc:
        raise ContextError(
            f"{p.name} {p.version}: refusing to place the locked file in {sub}/ of the build "
            f"context: {exc}",
            hint="the lock was edited, or written from a hostile index: lock again",
        ) from None


def fill_wheelhouse(
    wheels: Sequence[LockedPackage], directory: Path, cache: FileStore, fetch: Fetch | None
) -> list[str]:
    """Place every locked wheel under ``directory/{runtime,build}``, each hashed as placed
    against the lock; return the names that had to be fetched."""
    fetched: list[str] = []
    for p in wheels:
        sub = LAYOUT.wheelhouse_runtime if p.group == "runtime" else LAYOUT.wheelhouse_build
        dest = _wheelhouse_path(directory, sub, p)
        if cache.has_file(p.sha256):
            place_file(cache.file_path(p.sha256), dest)
            got = sha256_of(dest)
            if got == p.sha256:
                continue
            dest.unlink()
            cache.evict(p.sha256, f"does not hash to its name (its bytes hash to {got})")
        if fetch is None:
            raise ContextError(
                f"{p.name} {p.version}: {p.filename} (sha256 {p.sha256[:16]}...) is not in the "
                f"cache {cache.root}",
                hint="run the build with network access to the index, or lock again",
            )
        place_file(fetch(p), dest)
        got = sha256_of(dest)
        if got != p.sha256:
            dest.unlink()
            raise HashMismatchError(
                f"{p.name} {p.version}: {p.filename} hashes to {got}, the lock has {p.sha256}",
                hint="the index serves other bytes than were locked; do not build from them",
            )
        fetched.append(p.filename)
    return fetched


def fetch_inputs(
    plan: InputPlan,
    *,
    cache: FileStore,
    git_cache: Path,
    fetch: Fetch | None,
    options: NetworkOptions,
    stack: str,
    repo_root: Path | None = None,
) -> list[str]:
    """Fill the cache with every input of ``plan``; return a line per input. With ``fetch``
    None, the first input not in the cache is an ``OfflineMissingError`` (the offline check).
    With ``repo_root`` (where path sources resolve), the crates of ``plan.crates`` too."""
    done: list[str] = []
    for p in (*plan.wheels, *(s.locked for s in plan.sdist_sources)):
        what = "sdist" if p.filename.endswith(".tar.gz") else "wheel"
        if cache.verified_file(p.sha256) is None:  # re-hashed: a planted file is removed
            if fetch is None:
                raise OfflineMissingError(
                    f"offline build: {what} {p.name} {p.version} ({p.filename}) is not fetched",
                    hint=FETCH_HINT.format(stack=stack),
                )
            path = fetch(p)
            if sha256_of(path) != p.sha256:
                raise HashMismatchError(
                    f"{p.name} {p.version}: {p.filename} does not have the locked sha256",
                    hint="the index serves other bytes than were locked; do not build from them",
                )
        done.append(f"{what} {p.filename}")
    for git in plan.git_sources:
        ensure_git_rev(
            git.source,
            git_cache,
            where=git.where,
            offline_hint=_offline_hint(options, stack),
            network=options.network,
        )
        done.append(f"source {git.where} {git.source.git} @ {git.source.rev}")
    if not options.offline:  # an offline build installs verified .deb files: no key
        for key in plan.archive_keys:
            ensure_by_url(cache, key.label, key.url, options, stack=stack)
            done.append(f"{key.label} {key.url}")
    for pinned in plan.pinned_files:
        ensure_pinned(cache, pinned.label, pinned.pinned, options, stack=stack)
        done.append(f"{pinned.name} {pinned.pinned.url}")
    crates = plan.crates
    if crates is not None and repo_root is not None:
        from images.builder.cargo_vendor import fetch_cargo_vendor

        with tempfile.TemporaryDirectory(prefix="vllm-rs-") as tmp:
            tree = Path(tmp) / "tree"
            _stage_entry(
                crates.tree,
                tree,
                cache=cache,
                fetch=fetch,
                repo_root=repo_root,
                git_cache=git_cache,
                options=options,
                stack=stack,
            )
            vendored = fetch_cargo_vendor(
                tree / crates.workspace,
                cache=cache,
                options=options,
                stack=stack,
                mirrors=plan.mirrors,
            )
        if vendored is not None:
            done.append("the crates of components.vllm-rs (cargo vendor)")
    return done


def _sdist_file(
    entry: SdistSourceInput, *, cache: FileStore, fetch: Fetch | None, where: str
) -> Path:
    """The locked sdist of ``entry`` in the cache, re-hashed (fetched if missing and ``fetch``)."""
    p = entry.locked
    path = cache.verified_file(p.sha256)  # a cached file that does not match is removed
    if path is None:
        if fetch is None:
            raise ContextError(
                f"{where}: {p.filename} (sha256 {p.sha256[:16]}...) is not in the cache "
                f"{cache.root}",
                hint="run the build with network access to the index, or fetch first",
            )
        path = fetch(p)
    got = sha256_of(path)
    if got != p.sha256:
        raise HashMismatchError(
            f"{where}: {p.filename} hashes to {got}, the lock has {p.sha256}",
            hint="the cached or served bytes are not the locked sdist; do not build from them",
        )
    return path


def _offline_hint(options: NetworkOptions, stack: str) -> str | None:
    """None online; offline, the hint naming ``fetch`` for a source that is not fetched."""
    return FETCH_HINT.format(stack=stack) if options.offline else None


def _stage_entry(
    entry: SourceInput,
    dest: Path,
    *,
    cache: FileStore,
    fetch: Fetch | None,
    repo_root: Path,
    git_cache: Path,
    options: NetworkOptions,
    stack: str,
) -> None:
    """Stage one source of the plan into ``dest``: unpacked, checked out or copied."""
    if isinstance(entry, SdistSourceInput):
        path = _sdist_file(entry, cache=cache, fetch=fetch, where=entry.where)
        if dest.exists() and any(dest.iterdir()):
            raise ContextError(
                f"{entry.where}: {entry.dest} is not empty in the staged sources",
                hint="the driving source must not ship the tree its third_party stages",
            )
        extract_sdist(path, dest, where=f"{entry.where} ({entry.locked.filename})")
    elif entry.source.git is not None:
        checkout_git_source(
            entry.source,
            git_cache,
            dest,
            where=entry.where,
            offline_hint=_offline_hint(options, stack),
            network=options.network,
        )
    else:
        stage_path_source(entry.source, repo_root, dest, where=entry.where)


def _stage_inputs(
    plan: InputPlan, out_dir: Path, *, cache: FileStore, options: NetworkOptions, stack: str
) -> None:
    """``inputs/``: the archive keys (online builds) and the pinned downloads."""
    inputs = out_dir / LAYOUT.inputs
    inputs.mkdir()
    if not options.offline:
        for key in plan.archive_keys:
            path = ensure_by_url(cache, key.label, key.url, options, stack=stack)
            place_file(path, inputs / key.file)
    for pinned in plan.pinned_files:
        path = ensure_pinned(cache, pinned.label, pinned.pinned, options, stack=stack)
        place_file(path, inputs / pinned.file)


# what a staged context holds at its top: a directory holding anything else is not one
CONTEXT_ENTRIES = frozenset(
    {"Dockerfile", *(getattr(LAYOUT, f.name).split("/")[0] for f in dataclasses.fields(LAYOUT))}
)


def _clear_earlier_context(out_dir: Path) -> None:
    """Remove the context an earlier run staged in ``out_dir``; a directory holding anything
    a staged context does not hold is refused, never deleted."""
    if not out_dir.exists():
        return
    foreign = sorted(p.name for p in out_dir.iterdir() if p.name not in CONTEXT_ENTRIES)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ContextError(
            f"{out_dir} holds what no staged build context holds ({shown}): it is not replaced",
            hint="stage into a new or empty directory, or one an earlier stage wrote",
        )
    shutil.rmtree(out_dir)


def stage_context(
    manifest: Manifest,
    lock_dir: Path,
    out_dir: Path,
    *,
    repo_root: Path,
    cache: FileStore,
    git_cache: Path,
    fetch: Fetch | None,
    options: NetworkOptions = DEFAULT_OPTIONS,
    base_image_digest: str = "",
    base_image_id: str = "",
) -> StagedContext:
    """Stage the build context of ``manifest`` into ``out_dir`` (replaced whole), the
    Dockerfile rendered first (a render error stops the stage before anything is staged).

    With ``options.offline`` nothing is downloaded: the first input not in the cache is named
    in an ``OfflineMissingError``; the apt steps' .deb files are those of ``base_image_id``.
    """
    from images.builder.apt_fetch import offline_debs, stage_debs

    stack = str(manifest.path)
    offline = options.offline
    lock, plan, text = _render(
        manifest,
        lock_dir,
        repo_root=repo_root,
        cache=cache,
        git_cache=git_cache,
        options=options,
        digest=base_image_digest,
        fetch=None if offline else fetch,
        offline_hint=_offline_hint(options, stack),
    )
    if offline:
        # name the first missing input before anything is staged
        fetch_inputs(
            plan,
            cache=cache,
            git_cache=git_cache,
            fetch=None,
            options=options,
            stack=stack,
            repo_root=repo_root,
        )
        assert manifest.base_image is not None  # render_for refuses a manifest without
        debs = offline_debs(
            plan,
            cache=cache,
            stack=stack,
            base_image=manifest.base_image,
            base_image_id=base_image_id,
        )
    _clear_earlier_context(out_dir)
    out_dir.mkdir(parents=True)
    fetched = fill_wheelhouse(plan.wheels, out_dir, cache, None if offline else fetch)
    for sub in (LAYOUT.wheelhouse_runtime, LAYOUT.wheelhouse_build):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    lock_out = out_dir / LAYOUT.lock
    lock_out.mkdir()
    for f in sorted(lock_dir.iterdir()):
        if f.is_file():
            shutil.copy2(f, lock_out / f.name)
    for entry in plan.sources:
        _stage_entry(
            entry,
            out_dir / LAYOUT.sources / entry.dest,
            cache=cache,
            fetch=None if offline else fetch,
            repo_root=repo_root,
            git_cache=git_cache,
            options=options,
            stack=stack,
        )
    driven = check_and_record(manifest, out_dir / LAYOUT.sources)
    if offline and plan.crates is not None:
        from images.builder.cargo_vendor import fetch_cargo_vendor, stage_cargo_vendor

        tree = out_dir / LAYOUT.sources / plan.crates.tree.dest
        vendored = fetch_cargo_vendor(
            tree / plan.crates.workspace,
            cache=cache,
            options=options,
            stack=stack,
            mirrors=plan.mirrors,
        )
        stage_cargo_vendor(vendored, out_dir / LAYOUT.crates, mount=CRATES_MOUNT)
    (out_dir / LAYOUT.deps).mkdir()  # the requirements file of each layer of the deps stage
    for layer in deps_layers(lock):
        lines = render_requirement_lines(lock, layer.packages, what=f"deps layer: {layer.what}")
        (out_dir / LAYOUT.deps / layer.file).write_text(lines, encoding="utf-8")
    _write_tools(out_dir / LAYOUT.tools, manifest, driven)
    sbom = out_dir / LAYOUT.sbom
    sbom.mkdir()
    shutil.copy2(IN_IMAGE / "sbom.py", sbom / "sbom.py")
    (sbom / SBOM_FACTS).write_text(render_sbom_facts(manifest, lock), encoding="utf-8")
    _stage_inputs(plan, out_dir, cache=cache, options=options, stack=stack)
    if offline:
        stage_debs(debs, cache, out_dir)
    dockerfile = out_dir / "Dockerfile"
    dockerfile.write_text(text, encoding="utf-8")
    return StagedContext(
        directory=out_dir,
        dockerfile=dockerfile,
        dockerfile_text=text,
        lock=lock,
        lock_sha256=lock_file_sha256(lock_dir),
        fetched=tuple(fetched),
        dockerfile_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(),
    )
