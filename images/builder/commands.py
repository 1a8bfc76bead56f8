"""The image commands of ``build_image.py``: ``render``, ``pin-base``, ``fetch``, ``stage``,
``build``, ``gate``.

Each command's arguments sit next to its handler ``(args, console) -> int``, which parses,
calls the library (``images.builder.pipeline``) and prints. jinja2 and the docker SDK are
imported inside the handlers, so ``build_image.py lock`` starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from core.console import (
    Console,
    add_index_argument,
    add_json_argument,
    add_name_url_argument,
    add_network_arguments,
    add_stack_argument,
)
from core.errors import ExitCode
from manifest import MIRROR_NAMES, TARGETS

if TYPE_CHECKING:
    from images.builder.pipeline import FetchRequest
    from images.builder.report import BuildReport
    from images.engine.port import BaseImageFetcher, BuildEngine
    from manifest import Manifest

R = TypeVar("R", bound="FetchRequest")


def add_commands(sub: Any) -> None:
    for add in (_add_render, _add_pin_base, _add_fetch, _add_stage, _add_build, _add_gate):
        add(sub)


def _add_stack(p: argparse.ArgumentParser) -> None:
    add_stack_argument(p)
    _add_lock(p)


def _add_lock(p: argparse.ArgumentParser, also: str = "") -> None:
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"the lock directory (default: stack/<stem>.lock/){also}",
    )


def _add_mirror(p: argparse.ArgumentParser) -> None:
    add_name_url_argument(
        p, "--mirror", replaces=f"mirrors.NAME of the manifest ({', '.join(MIRROR_NAMES)})"
    )


def _add_base_image(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base-image", default=None, metavar="REF", help="replace base_image")


def effective_manifest(args: argparse.Namespace) -> Manifest:
    """The manifest of ``args.stack`` with ``--mirror`` and ``--base-image`` applied, once."""
    from images.builder.overrides import apply_overrides, parse_mirror_overrides
    from manifest import load_manifest

    return apply_overrides(
        load_manifest(args.stack),
        mirrors=parse_mirror_overrides(args.mirror),
        base_image=args.base_image,
    )


def _request(kind: type[R], args: argparse.Namespace, console: Console, **fields: Any) -> R:
    """A request of ``kind`` for ``args`` (with ``fields``); the cache is checked usable first."""
    from core.chosen_paths import usable_cache_dir
    from core.file_store import default_cache_dir
    from core.network import network_options
    from images.builder.workspace import Workspace

    return kind(
        manifest=effective_manifest(args),
        workspace=Workspace.of(args.stack),
        env=os.environ,
        options=network_options(args, os.environ),
        cache_dir=usable_cache_dir(args.cache_dir, default_cache_dir(os.environ)),
        index_overrides=tuple(args.index),
        lock_dir=args.lock,
        note=console.note,
        downloads=console.downloads(),
        **fields,
    )


def _engine(console: Console | None = None, *, asked: bool = False) -> BuildEngine:
    """The engine; its build output goes to ``console`` as notes, or (``asked``: an explicit
    ``--progress``) at every level, ``-q`` included."""
    from images.engine.docker_build import DockerEngine

    cli = os.environ.get("BUILD_IMAGE_DOCKER")
    if console is None:
        return DockerEngine(cli=cli, env=os.environ)
    output = console.say if asked else console.note
    return DockerEngine(cli=cli, env=os.environ, on_output=output, on_terminal=console.draw)


def add_build_options(p: argparse.ArgumentParser) -> None:
    """The options of a build another command runs (``verify-rebuild``): with the manifest's
    base image, online, without the layer cache, and no tag."""
    _add_lock(p, "; its sha256 must be the record's")
    _add_run_network(p)
    _add_mirror(p)
    _add_progress(p)
    p.set_defaults(base_image=None, offline=False, no_cache=True, tag=[])


def _add_run_network(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--network", default=None, help="network for RUN steps (host: reach 127.0.0.1 mirrors)"
    )


def _add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--progress",
        choices=("auto", "plain", "tty", "quiet"),  # images.engine.port.PROGRESS_MODES
        default="auto",
        help="how BuildKit shows the build (docker build --progress): auto (the default) is "
        "tty on a terminal and plain otherwise, quiet under -q; plain prints every step's "
        "lines, tty redraws a summary in place, quiet shows nothing but errors",
    )


def _add_render(sub: Any) -> None:
    p = sub.add_parser(
        "render",
        help="render the Dockerfile of a stack from its lock",
        description="Render Dockerfile.j2 for STACK and its lock (deterministic), with the "
        "product source's third_party/PINS read at its pinned revision, as a build renders it "
        "(a git source from the cache's clone, fetched when missing). "
        "Prints it, or writes --out FILE. With --check, compare with the committed render "
        "(--out, default stack/<stem>.Dockerfile) and fail with a diff when it differs.",
    )
    _add_stack(p)
    p.add_argument("--out", type=Path, default=None, metavar="FILE")
    p.add_argument("--check", action="store_true", help="fail when the committed render differs")
    _add_mirror(p)
    add_network_arguments(p)  # --cache-dir (a git source's clone) and how its fetch connects
    p.add_argument(
        "--offline", action="store_true", help="render the --network none variant (no apt)"
    )
    p.set_defaults(handler=cmd_render, base_image=None)  # render keeps the manifest's


def cmd_render(args: argparse.Namespace, console: Console) -> int:
    from core.errors import RenderError
    from core.file_store import FileStore, default_cache_dir
    from core.fsutil import atomic_write_text
    from core.network import network_options
    from images.builder.context import render_for
    from images.builder.render import default_render_path, render_diff
    from images.builder.workspace import Workspace

    manifest = effective_manifest(args)
    cache = FileStore(args.cache_dir or default_cache_dir(os.environ), note=console.note)
    _, text = render_for(
        manifest,
        args.lock or manifest.default_lock_dir(),
        repo_root=Workspace.of(args.stack).root,
        cache=cache,
        git_cache=cache.root / "git",
        options=network_options(args, os.environ),
    )
    if args.check:
        path: Path = args.out or default_render_path(manifest)
        hint = f"run `build_image.py render {args.stack} --out {path}` and commit it"
        try:
            committed = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise RenderError(f"{path}: no committed render", hint=hint) from None
        if committed != text:
            diff = render_diff(committed, text, path=str(path))
            raise RenderError(
                f"{path} differs from a fresh render of {args.stack}:\n{diff}", hint=hint
            )
        console.print(f"{path}: current")
        return ExitCode.OK
    if args.out:
        atomic_write_text(args.out, text)
        console.print(f"rendered {args.stack} -> {args.out}")
    else:
        console.out.write(text)
    return ExitCode.OK


def _add_pin_base(sub: Any) -> None:
    p = sub.add_parser(
        "pin-base",
        help="pin the manifest's base_image tag to the digest its registry serves now",
        description="Ask the base image's registry (skopeo inspect) which manifest the "
        'base_image tag names now, and rewrite the manifest\'s base_image: "TAG" line to '
        '"TAG@sha256:<hex>" (an index: the manifest of the stack\'s platform). Run again, '
        "it moves the digest to what the tag names then. Part of a stack's first lock; "
        "commit the manifest with the lock.",
    )
    add_stack_argument(p)
    add_network_arguments(p)
    p.set_defaults(handler=cmd_pin_base)


def cmd_pin_base(args: argparse.Namespace, console: Console) -> int:
    from core.network import network_options
    from images.builder.base_pin import pin_base
    from images.engine.skopeo import Skopeo
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    skopeo = Skopeo(env=os.environ, options=network_options(args, os.environ))
    pinned, changed = pin_base(manifest, skopeo)
    verb = "pinned in" if changed else "already pinned in"
    console.print(f"base_image {pinned} ({verb} {args.stack})")
    return ExitCode.OK


def _add_fetch(sub: Any) -> None:
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
    _add_base_image(p)
    add_index_argument(p)
    _add_mirror(p)
    add_network_arguments(p)
    p.add_argument(
        "--network", default=None, help="network of the apt container (host: reach 127.0.0.1)"
    )
    p.set_defaults(handler=cmd_fetch)


def cmd_fetch(args: argparse.Namespace, console: Console) -> int:
    from images.builder.pipeline import FetchRequest, fetch

    request = _request(FetchRequest, args, console)
    fetcher = _base_fetcher(request, args)
    with contextlib.closing(_engine()) as engine:
        lines = fetch(request, engine=engine, fetcher=fetcher, network=args.network)
    for line in lines:
        console.note(f"fetched {line}")
    console.print(f"fetched {len(lines)} input(s) of {args.stack} into {request.cache_root()}")
    return ExitCode.OK


def _add_stage(sub: Any) -> None:
    p = sub.add_parser(
        "stage",
        help="stage the build context of a stack (to build it elsewhere)",
        description="Refuse a missing or stale lock; fill the wheelhouse from the cache "
        "(downloading only what is missing, verified); stage the build context of TARGET "
        "(default build/context/<stem>-<target>/, or --out DIR) and print its directory. "
        "Docker is needed only with --offline (the apt steps' .deb files are fetched per "
        "base image).",
    )
    _add_stack(p)
    p.add_argument("--target", required=True, choices=TARGETS)
    p.add_argument("--out", type=Path, default=None, metavar="DIR")
    _add_base_image(p)
    add_index_argument(p)
    add_network_arguments(p)
    _add_mirror(p)
    p.add_argument(
        "--offline",
        action="store_true",
        help="stage the --network none variant, from inputs already fetched",
    )
    p.set_defaults(handler=cmd_stage)


def cmd_stage(args: argparse.Namespace, console: Console) -> int:
    from core.chosen_paths import check_out_dir
    from images.builder.pipeline import StageRequest, base_image_of, stage

    if args.out is not None:  # before the work, not after it
        check_out_dir(args.out, writes="the build context")
    request = _request(StageRequest, args, console, target=args.target, out_dir=args.out)
    base = None
    if args.offline:
        with contextlib.closing(_engine()) as engine:
            base = base_image_of(engine, request.manifest, offline=True)
    staged = stage(request, base=base)
    console.print(str(staged.directory))
    return ExitCode.OK


def _add_build(sub: Any) -> None:
    p = sub.add_parser(
        "build",
        help="build the image of a stack from its lock, gate it, then tag it",
        description="Refuse a missing or stale lock; fill the wheelhouse from the cache "
        "(downloading only what is missing, verified); stage the context; build TARGET with "
        "BuildKit (no tag); run the gates; apply the tags only when every gate passes; write a "
        "build report (default build/reports/<stem>-<target>.json). "
        "The docker CLI is `docker` on PATH, else /usr/bin/docker; BUILD_IMAGE_DOCKER=PATH (or "
        "a name on PATH) picks one, and a value that is missing, not executable or does not "
        "build with BuildKit is an error, never replaced by another CLI.",
    )
    _add_stack(p)
    p.add_argument("--target", required=True, choices=TARGETS)
    p.add_argument("--tag", action="append", default=[], metavar="T", help="repeatable")
    _add_base_image(p)
    add_index_argument(p)
    add_network_arguments(p)
    _add_run_network(p)
    p.add_argument(
        "--build-report",
        type=Path,
        default=None,
        metavar="FILE",
        help="where to write the build report, which `publish --build-report` reads "
        "(default: build/reports/<stem>-<target>.json)",
    )
    p.add_argument("--no-cache", action="store_true", help="build without the layer cache")
    _add_mirror(p)
    p.add_argument(
        "--offline",
        action="store_true",
        help="build with the network off (--network none), from inputs already fetched "
        "(`build_image.py fetch`, with the same --base-image)",
    )
    add_json_argument(
        p,
        "the image, its size, the gates, the stages' times and the cache hits (also when a "
        "gate fails)",
    )
    _add_progress(p)
    p.set_defaults(handler=cmd_build)


def run_build(
    args: argparse.Namespace,
    console: Console,
    *,
    report_path: Path,
    layout: Path | None = None,
    reported: Callable[[BuildReport], None] = lambda _report: None,
) -> BuildReport:
    """The build ``args`` ask for, its report written to ``report_path`` and its normalized
    image to ``layout`` (None: the workspace's)."""
    from images.builder.pipeline import ImageBuildRequest, StageRequest, build
    from images.engine.port import progress_mode

    request = ImageBuildRequest(
        stage=_request(StageRequest, args, console, target=args.target),
        report_path=report_path,
        tags=tuple(args.tag),
        base_image_arg=args.base_image,
        network=args.network,
        no_cache=args.no_cache,
        progress=progress_mode(args.progress, terminal=console.on_terminal, quiet=console.quiet),
        layout=layout,
    )
    fetcher = _base_fetcher(request.stage, args)
    with contextlib.closing(_engine(console, asked=args.progress != "auto")) as engine:
        return build(
            request, engine=engine, fetcher=fetcher, progress=console.note, reported=reported
        )


def _base_fetcher(request: FetchRequest, args: argparse.Namespace) -> BaseImageFetcher | None:
    """skopeo, to copy a base pinned by digest from its registry (an online build of the
    manifest's base only); None otherwise."""
    from images.builder.base_source import pinned_base
    from images.engine.skopeo import Skopeo

    base_image = request.manifest.base_image
    offline = request.options.offline
    if offline or args.base_image or base_image is None or pinned_base(base_image) is None:
        return None
    return Skopeo(env=request.env, options=request.host_options())


def cmd_build(args: argparse.Namespace, console: Console) -> int:
    from core.errors import GateError
    from images.builder.pipeline import check_tags
    from images.builder.report import build_document, render_build_summary
    from images.builder.workspace import Workspace

    check_tags(args.tag)  # a bad tag is refused now, not after the build and the gates
    manifest = effective_manifest(args)
    workspace = Workspace.of(args.stack)
    report_path: Path = args.build_report or workspace.report_path(manifest.stem, args.target)
    reports: list[BuildReport] = []
    try:
        report = run_build(args, console, report_path=report_path, reported=reports.append)
    except GateError:
        if args.json and reports:  # the gates' results are the document's, failed or not
            console.json(build_document(reports[-1], report_path=str(report_path)))
        raise
    if args.json:
        console.json(build_document(report, report_path=str(report_path)))
    say = console.note if args.json else console.print  # --json: stdout is the document's
    for line in render_build_summary(report):
        say(line)
    for tag in report.tags:
        say(f"tagged {tag}")
    say(f"report: {report_path}")
    return ExitCode.OK


def _add_gate(sub: Any) -> None:
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


def cmd_gate(args: argparse.Namespace, console: Console) -> int:
    from images.builder.context import load_current_lock
    from images.builder.gates import require_gates, run_gates
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    lock = load_current_lock(manifest, args.lock or manifest.default_lock_dir())
    with contextlib.closing(_engine()) as engine:
        results = run_gates(engine, args.image, manifest, lock)
    if args.json:
        console.json([{"name": r.name, "ok": r.ok, "output": r.output} for r in results])
    else:
        for r in results:
            first, *rest = r.output.splitlines() or [""]
            console.print(f"{'ok    ' if r.ok else 'FAILED'} {r.name}: {first}")
            for line in rest:  # e.g. the pip check lines an override forgives, by name
                console.print(f"           {line}")
    require_gates(results, image=args.image)
    return ExitCode.OK
