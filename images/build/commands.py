"""The image commands of ``build_image.py``: ``render``, ``fetch``, ``build`` and ``gate``.

``--mirror NAME=URL`` replaces one of the manifest's ``mirrors:`` for this run (never the lock
inputs); ``fetch`` fills the cache with every input, and ``build --offline`` then builds with
``--network none`` from those inputs only, naming the first one missing.

``add_commands`` registers them; each handler is ``(args, console) -> int``. jinja2 and the
docker SDK are imported inside the handlers (through the modules that own them), so
``build_image.py lock`` starts fast.

Where things go (relative to the repository root, all under the git-ignored ``build/``):
``build/context/<stem>-<target>/`` the staged build context, ``build/reports/<stem>-<target>.json``
the build report. The committed render of a stack is ``stack/<stem>.Dockerfile``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from core.console import (
    Console,
    add_index_argument,
    add_network_arguments,
    add_stack_argument,
)
from core.errors import ExitCode, UsageError
from core.urls import redact, split_credentials
from manifest import TARGETS

if TYPE_CHECKING:
    from images.build.context import StagedContext
    from images.build.engine import Engine
    from manifest import Manifest
    from resolver.lockfile import LockedPackage

REPORT_DIR = Path("build") / "reports"
CONTEXT_DIR = Path("build") / "context"


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "render",
        help="render the Dockerfile of a stack from its lock",
        description="Render Dockerfile.j2 for STACK and its lock (deterministic). "
        "Prints it, or writes --out FILE. With --check, compare with the committed render "
        "(--out, default stack/<stem>.Dockerfile) and fail with a diff when it differs.",
    )
    _add_stack(p)
    p.add_argument("--out", type=Path, default=None, metavar="FILE")
    p.add_argument("--check", action="store_true", help="fail when the committed render differs")
    _add_mirror(p)
    p.add_argument(
        "--offline", action="store_true", help="render the --network none variant (no apt)"
    )
    p.set_defaults(handler=cmd_render)

    p = sub.add_parser(
        "fetch",
        help="fill the cache with everything a build of STACK needs (for build --offline)",
        description="Download into the content-addressed cache every input of a build: the "
        "locked wheels (verified by hash), the git sources at their revisions, rustup-init "
        "(verified against the manifest's sha256), the archive keys, and the .deb files of "
        "every apt step (apt runs in a container of the base image, signature checks on). "
        "Then `build --offline` needs no network.",
    )
    _add_stack(p)
    p.add_argument("--base-image", default=None, metavar="REF", help="replace base_image")
    add_index_argument(p)
    _add_mirror(p)
    add_network_arguments(p)
    p.add_argument(
        "--network", default=None, help="network of the apt container (host: reach 127.0.0.1)"
    )
    p.set_defaults(handler=cmd_fetch)

    p = sub.add_parser(
        "build",
        help="build the image of a stack from its lock, gate it, then tag it",
        description="Refuse a missing or stale lock; fill the wheelhouse from the cache "
        "(downloading only what is missing, verified); stage the context; build TARGET with "
        "BuildKit (no tag); run the gates; apply the tags only when every gate passes; write a "
        "build report (default build/reports/<stem>-<target>.json).",
    )
    _add_stack(p)
    p.add_argument("--target", required=True, choices=TARGETS)
    p.add_argument("--tag", action="append", default=[], metavar="T", help="repeatable")
    p.add_argument("--base-image", default=None, metavar="REF", help="replace base_image")
    add_index_argument(p)
    add_network_arguments(p)
    p.add_argument(
        "--network", default=None, help="network for RUN steps (host: reach 127.0.0.1 mirrors)"
    )
    p.add_argument("--report", type=Path, default=None, metavar="FILE")
    p.add_argument("--no-cache", action="store_true", help="build without the layer cache")
    _add_mirror(p)
    p.add_argument(
        "--offline",
        action="store_true",
        help="build with the network off (--network none), from inputs already fetched "
        "(`build_image.py fetch`, with the same --base-image)",
    )
    p.set_defaults(handler=cmd_build)

    p = sub.add_parser(
        "gate",
        help="run the acceptance gates in a built image",
        description="Run the gates of STACK in IMAGE (an id or a reference); "
        "exit 1 when any fails.",
    )
    p.add_argument("image")
    _add_stack(p)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(handler=cmd_gate)


def _add_stack(p: argparse.ArgumentParser) -> None:
    add_stack_argument(p)
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="DIR",
        help="the lock directory (default: stack/<stem>.lock/)",
    )


def _add_mirror(p: argparse.ArgumentParser) -> None:
    from manifest import MIRROR_NAMES

    p.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="NAME=URL",
        help=f"replace mirrors.NAME of the manifest ({', '.join(MIRROR_NAMES)}); repeatable",
    )


# ------------------------------------------------------------------------------ helpers


def parse_mirror_overrides(values: list[str]) -> dict[str, str]:
    """``--mirror NAME=URL`` values, checked like the manifest's ``mirrors:``."""
    from manifest import MIRROR_NAMES
    from manifest import PLAIN_URL_RE as PLAIN_URL  # the manifest's rule for mirrors:

    out: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if not sep or not name or not url:
            raise UsageError(f"--mirror {value!r}: expected NAME=URL")
        if name not in MIRROR_NAMES:
            raise UsageError(
                f"--mirror {name}=...: no mirror named {name!r}",
                hint=f"mirrors are: {', '.join(MIRROR_NAMES)}",
            )
        # fullmatch: the rule's "$" would let a trailing newline through. The value reaches
        # apt-get.sh's sed script and the build's shell: no metacharacter may pass.
        if not PLAIN_URL.fullmatch(url):
            raise UsageError(
                f"--mirror {name}={redact(url)}: not an http(s) URL without credentials",
                hint="a mirror is a plain http(s) URL (letters, digits and ._~/%+=,:- only)",
            )
        out[name] = url
    return out


def effective_manifest(args: argparse.Namespace) -> Manifest:
    """The manifest with the command line's --mirror and --base-image applied.

    Neither changes the lock inputs: mirrors and the base image are image-side only.
    """
    import dataclasses

    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    overrides = parse_mirror_overrides(getattr(args, "mirror", []))
    changes: dict[str, Any] = {}
    if overrides:
        changes["mirrors"] = manifest.mirrors.replace(overrides)
    base = getattr(args, "base_image", None)
    if base:
        changes["base_image"] = base
    return dataclasses.replace(manifest, **changes) if changes else manifest


def _fetch_settings(args: argparse.Namespace, manifest: Manifest, *, offline: bool) -> Any:
    from images.build.inputs import FetchSettings

    return FetchSettings(
        stack=str(args.stack),
        offline=offline,
        proxy=manifest.mirrors.proxy,
        attempts=max(1, args.retries + 1),
        timeout=args.timeout,
    )


def repo_root_of(manifest_path: Path) -> Path:
    """The git top level around the manifest, else the parent of its directory."""
    res = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=manifest_path.resolve().parent,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode == 0 and res.stdout.strip():
        return Path(res.stdout.strip())
    return manifest_path.resolve().parent.parent


def _vcs_ref(root: Path) -> str:
    res = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False
    )
    return res.stdout.strip() if res.returncode == 0 else "unknown"


def build_args_for(manifest: Manifest, *, base_image: str | None, vcs_ref: str) -> dict[str, str]:
    from images.build.render import ARG_BASE_IMAGE, ARG_VCS_REF

    args = dict(manifest.build.args)
    args[ARG_VCS_REF] = vcs_ref
    if base_image is not None:
        args[ARG_BASE_IMAGE] = base_image
    return args


def _with_origin(url: str, index_url: str) -> str:
    """``url`` moved to the scheme and host of ``index_url`` (a mirror given by --index)."""
    a, b = urlsplit(url), urlsplit(index_url)
    return urlunsplit((b.scheme, b.netloc, a.path, a.query, ""))


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    from core.fsutil import atomic_write_text

    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------ commands


def cmd_render(args: argparse.Namespace, console: Console) -> int:
    from core.errors import RenderError
    from core.fsutil import atomic_write_text
    from images.build.context import render_for
    from images.build.render import default_render_path, render_diff

    manifest = effective_manifest(args)
    _, text = render_for(manifest, args.lock or manifest.default_lock_dir(), offline=args.offline)
    if args.check:
        path: Path = args.out or default_render_path(manifest)
        try:
            committed = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RenderError(
                f"{path}: no committed render",
                hint=f"run `build_image.py render {args.stack} --out {path}` and commit it",
            ) from None
        if committed != text:
            raise RenderError(
                f"{path} differs from a fresh render of {args.stack}:\n"
                + render_diff(committed, text, path=str(path)),
                hint=f"run `build_image.py render {args.stack} --out {path}` and commit it",
            )
        console.print(f"{path}: current")
        return ExitCode.OK
    if args.out:
        atomic_write_text(args.out, text)
        console.print(f"rendered {args.stack} -> {args.out}")
    else:
        console.out.write(text)
    return ExitCode.OK


def _fetcher(args: argparse.Namespace, manifest: Manifest) -> tuple[Any, Any]:
    """A function that downloads one locked wheel through IndexClient, and the client."""
    from resolver.endpoints import effective_endpoints, parse_index_overrides
    from resolver.index_client import open_client
    from resolver.simple_page import IndexFile

    overrides = parse_index_overrides(args.index)
    endpoints = effective_endpoints(manifest, overrides, os.environ)
    client = open_client(args.cache_dir, os.environ, timeout=args.timeout, retries=args.retries)

    def fetch(p: LockedPackage) -> Path:
        endpoint = endpoints[p.index]
        moved = endpoint.url != manifest.indexes[p.index].url  # --index or mirrors.indexes
        url = _with_origin(p.url, endpoint.url) if moved else p.url
        file = IndexFile(filename=p.filename, url=url, hashes={"sha256": p.sha256}, size=p.size)
        return client.download(endpoint, file, label=f"{p.name} {p.version}").path

    return fetch, client


def _stage(
    args: argparse.Namespace,
    manifest: Manifest,
    root: Path,
    *,
    base_image_digest: str,
    base_image_id: str,
) -> StagedContext:
    """Refuse a missing or stale lock, fill the wheelhouse, stage the context."""
    from images.build.context import stage_context
    from resolver.cache import Cache, default_cache_dir

    cache_root: Path = args.cache_dir or default_cache_dir(dict(os.environ))
    fetch, client = _fetcher(args, manifest)
    try:
        return stage_context(
            manifest,
            args.lock or manifest.default_lock_dir(),
            root / CONTEXT_DIR / f"{manifest.stem}-{args.target}",
            repo_root=root,
            cache=Cache(cache_root),
            git_cache=cache_root / "git",
            fetch=fetch,
            settings=_fetch_settings(args, manifest, offline=args.offline),
            base_image_digest=base_image_digest,
            base_image_id=base_image_id,
        )
    finally:
        client.close()


def _base_image(manifest: Manifest) -> str:
    if manifest.base_image is None:
        from core.errors import RenderError

        raise RenderError(
            f"{manifest.path}: no base_image",
            hint='add base_image: "<registry>/<image>:<tag>@sha256:<digest>" to the manifest',
        )
    return manifest.base_image


def _image_source_arg(dockerfile_text: str, root: Path) -> dict[str, str]:
    """IMAGE_SOURCE when the render has none (path sources only, as in the demo): this
    repository's URL, so org.opencontainers.image.source is never empty."""
    from images.build.render import ARG_IMAGE_SOURCE

    if f'ARG {ARG_IMAGE_SOURCE}=""' not in dockerfile_text:
        return {}
    res = subprocess.run(
        ["git", "remote", "get-url", "origin"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    url = res.stdout.strip() if res.returncode == 0 else ""
    if url:  # a CI clone URL may carry a token (https://ci-token:xyz@host/...): never a label
        url = split_credentials(url)[0]
    return {ARG_IMAGE_SOURCE: url or f"file://{root}"}


def cmd_fetch(args: argparse.Namespace, console: Console) -> int:
    from images.build.apt_fetch import fetch_debs
    from images.build.context import fetch_inputs, load_current_lock
    from images.build.engine import Engine
    from images.build.plan import plan_inputs
    from resolver.cache import Cache, default_cache_dir

    manifest = effective_manifest(args)
    lock = load_current_lock(manifest, args.lock or manifest.default_lock_dir())
    plan = plan_inputs(manifest, lock)
    cache_root: Path = args.cache_dir or default_cache_dir(dict(os.environ))
    cache = Cache(cache_root)
    settings = _fetch_settings(args, manifest, offline=False)
    base = _base_image(manifest)
    fetch, client = _fetcher(args, manifest)
    engine = Engine(cli=os.environ.get("BUILD_IMAGE_DOCKER"), env=os.environ)
    try:
        done = fetch_inputs(
            plan,
            cache=cache,
            git_cache=cache_root / "git",
            fetch=fetch,
            settings=settings,
            repo_root=repo_root_of(args.stack),
        )
        engine.ensure_base_image(base, pull=True)
        steps, _ = fetch_debs(
            plan,
            engine=engine,
            cache=cache,
            settings=settings,
            base_image=base,
            base_image_id=str(engine.inspect(base)["Id"]),
            network=args.network,
        )
        for step, files in steps.items():
            done.append(f"apt step {step}: {len(files)} .deb file(s)")
    finally:
        client.close()
        engine.close()
    for line in done:
        console.note(f"fetched {line}")
    console.print(f"fetched {len(done)} input(s) of {args.stack} into {cache_root}")
    return ExitCode.OK


def _check_tags(tags: list[str]) -> None:
    from images.build.tags import parse_reference

    for tag in tags:
        if parse_reference(tag).digest:
            raise UsageError(f"--tag {tag!r}: a tag cannot carry a digest")


def cmd_build(args: argparse.Namespace, console: Console) -> int:
    from images.build.engine import BuildRequest, Engine
    from images.build.gates import require_gates, run_gates
    from images.build.render import check_build_args, check_no_credentials

    durations: dict[str, float] = {}
    started = t = time.monotonic()
    _check_tags(args.tag)  # a bad tag is refused now, not after the build and the gates
    manifest = effective_manifest(args)
    root = repo_root_of(args.stack)
    engine = Engine(
        cli=os.environ.get("BUILD_IMAGE_DOCKER"), env=os.environ, on_output=console.note
    )
    base = _base_image(manifest)
    try:
        engine.ensure_base_image(base, pull=not args.offline)
        base_digest = engine.repo_digest(base)
        base_id = str(engine.inspect(base)["Id"]) if args.offline else ""
        staged = _stage(args, manifest, root, base_image_digest=base_digest, base_image_id=base_id)
        durations["context"] = round(time.monotonic() - t, 3)
        build_args = build_args_for(manifest, base_image=args.base_image, vcs_ref=_vcs_ref(root))
        build_args.update(_image_source_arg(staged.dockerfile_text, root))
        check_no_credentials(build_args)
        check_build_args(staged.dockerfile_text, build_args, where=str(staged.dockerfile))
        t = time.monotonic()
        engine.builder()
        console.note(
            f"building {args.stack} --target {args.target} with {engine.builder().description}"
        )
        image_id = engine.build(
            BuildRequest(
                context=staged.directory,
                dockerfile=staged.dockerfile,
                target=args.target,
                build_args=build_args,
                iidfile=staged.directory.parent / f"{manifest.stem}-{args.target}.iid",
                network="none" if args.offline else args.network,
                no_cache=args.no_cache,
            )
        )
        durations["build"] = round(time.monotonic() - t, 3)
        t = time.monotonic()
        results = run_gates(engine, image_id, manifest, staged.lock)
        durations["gates"] = round(time.monotonic() - t, 3)
        for r in results:
            console.note(f"gate {r.name}: {'ok' if r.ok else 'FAILED'}")
        report: dict[str, Any] = {
            "stack": str(args.stack),
            "target": args.target,
            "image_id": image_id,
            "tags": [],
            "base_image": base,
            "lock_sha256": staged.lock_sha256,
            "lock_inputs_sha256": staged.lock.lock_inputs_sha256,
            "dockerfile_sha256": staged.dockerfile_sha256,
            "offline": bool(args.offline),
            "network": "none" if args.offline else (args.network or "default"),
            "components": list(manifest.components.enabled()),
            "fetched": list(staged.fetched),
            "gates": {r.name: r.ok for r in results},
            "durations_s": durations,
        }
        report_path: Path = args.report or root / REPORT_DIR / f"{manifest.stem}-{args.target}.json"
        try:
            require_gates(results, image=image_id)
        finally:
            durations["total"] = round(time.monotonic() - started, 3)
            _write_json(report_path, report)
        t = time.monotonic()
        for tag in args.tag:
            engine.tag(image_id, tag)
        durations["tag"] = round(time.monotonic() - t, 3)
        durations["total"] = round(time.monotonic() - started, 3)
        report["tags"] = list(args.tag)
        _write_json(report_path, report)
    finally:
        engine.close()
    console.print(f"built {args.target}: {image_id}")
    for tag in args.tag:
        console.print(f"tagged {tag}")
    console.print(f"report: {report_path}")
    return ExitCode.OK


def cmd_gate(args: argparse.Namespace, console: Console) -> int:
    from images.build.context import load_current_lock
    from images.build.engine import Engine
    from images.build.gates import require_gates, run_gates
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    lock = load_current_lock(manifest, args.lock or manifest.default_lock_dir())
    engine: Engine = Engine(cli=os.environ.get("BUILD_IMAGE_DOCKER"), env=os.environ)
    try:
        results = run_gates(engine, args.image, manifest, lock)
    finally:
        engine.close()
    if args.json:
        console.print(
            json.dumps(
                [{"name": r.name, "ok": r.ok, "output": r.output} for r in results], indent=2
            )
        )
    else:
        for r in results:
            first = r.output.splitlines()[0] if r.output else ""
            console.print(f"{'ok    ' if r.ok else 'FAILED'} {r.name}: {first}")
    require_gates(results, image=args.image)
    return ExitCode.OK
