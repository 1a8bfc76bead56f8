"""The publishing commands of ``build_image.py``: publish, pin, verify-pins, rollback, diff, bake.

Each command's arguments sit next to its handler. Configuration (environment, Docker config,
clock) is read here, once, and passed down. docker and the HTTP transport are imported inside
the handlers so that the CLI starts fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.console import (
    Console,
    add_connection_arguments,
    add_deadline_argument,
    add_json_argument,
    add_stack_argument,
    count,
    network_settings,
    seconds,
)
from core.errors import ExitCode, UsageError
from manifest import TARGETS

if TYPE_CHECKING:
    from images.builder.workspace import Workspace
    from images.engine.port import ImagePusher
    from images.publish.diff import DiffSide
    from images.publish.registry import RegistryPool
    from manifest import Manifest


def add_commands(sub: Any) -> None:
    for add in (_add_publish, _add_pin, _add_verify_pins, _add_rollback, _add_diff, _add_bake):
        add(sub)


def _add_record(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="the release record (default: releases/<stack name>.json in the repository "
        "around STACK)",
    )


def _add_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--timeout",
        type=seconds,
        default=30.0,
        help="seconds per registry request, and for a Docker credential helper to answer, "
        "more than 0 (default 30)",
    )
    p.add_argument(
        "--retries",
        type=count,
        default=3,
        help="retries of a registry request after a connection failure, 429 or 5xx, "
        "0 or more (default 3)",
    )
    add_deadline_argument(p)
    add_connection_arguments(p)


# ------------------------------------------------------------------------------ helpers

DIFFERENT = 1  # diff: the two sides differ (0 the same, 2 trouble)


def _say(args: argparse.Namespace, console: Console, line: str) -> None:
    """A line of text: on stdout, or under --json (stdout is the document's) on stderr."""
    (console.note if args.json else console.print)(line)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0)


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _date(value: str | None, moment: dt.datetime) -> str:
    if value is None:
        return moment.strftime("%Y%m%d")
    try:
        dt.datetime.strptime(value, "%Y%m%d")
    except ValueError:
        raise UsageError(f"--date {value!r}: expected YYYYMMDD") from None
    return value


def _record_path(args: argparse.Namespace, manifest: Manifest, ws: Workspace) -> Path:
    path: Path = args.record or ws.release_record(manifest.name)
    return path


def registry_pool(args: argparse.Namespace) -> RegistryPool:
    """The registry clients and credentials of a command with the registry options."""
    from core.deadline import Deadline
    from images.publish.registry import RegistryPool, default_docker_config

    return RegistryPool(
        env=os.environ,
        docker_config=default_docker_config(os.environ, Path.home()),
        timeout=args.timeout,
        retries=args.retries,
        deadline=Deadline(args.deadline),
        network=network_settings(args, os.environ),
    )


# ------------------------------------------------------------------------------ publish


def _add_publish(sub: Any) -> None:
    p = sub.add_parser(
        "publish",
        help="push a built, gated image under its tags and record the digests",
        description="Push the image `build` produced for TARGET under the manifest's rendered "
        "release or nightly tags: its normalized OCI layout, copied as it is with skopeo (so "
        "the digest is the one `build` printed). Resolve each tag to its digest with the "
        "registry API, check it is that digest, and append a record to "
        "releases/<stack name>.json in "
        "the repository around STACK. Release tags never move; nightly tags move and the record "
        "says from what to what.",
    )
    add_stack_argument(p)
    p.add_argument("--target", required=True, choices=TARGETS)
    channel = p.add_mutually_exclusive_group()
    channel.add_argument("--nightly", action="store_const", dest="channel", const="nightly")
    channel.add_argument("--release", action="store_const", dest="channel", const="release")
    p.set_defaults(channel="nightly")
    p.add_argument(
        "--repository", default=None, help="replace image.repository (a staging registry)"
    )
    _add_record(p)
    p.add_argument(
        "--build-report",
        type=Path,
        default=None,
        metavar="FILE",
        help="the build report naming the image, as `build --build-report` wrote it (default: "
        "build/reports/<stem>-<target>.json)",
    )
    p.add_argument(
        "--date", default=None, metavar="YYYYMMDD", help="the {date} of tags (default: today, UTC)"
    )
    p.add_argument(
        "--no-serve-check",
        action="store_true",
        help="publish a release without a passing serve-check bundle of the image (the "
        "release record says it was skipped)",
    )
    _add_timeout(p)
    add_json_argument(p, "the tags, their digests and the record")
    p.set_defaults(handler=_cmd_publish)


def _serve_check_evidence(args: argparse.Namespace, ws: Workspace, image_id: str) -> dict[str, str]:
    """The release record's serve_check entry, from build/serve-check/<image id>/bundle.json."""
    import hashlib

    from images.publish.push import check_serve_check
    from images.serve.check import read_verdict

    path = ws.serve_check_dir(image_id) / "bundle.json"
    how = f"build_image.py serve-check {image_id} --stack {args.stack}"
    if args.no_serve_check:
        return check_serve_check(image_id, None, bundle_sha256=None, skip=True, how=how)
    try:
        verdict = read_verdict(path)
    except FileNotFoundError:
        return check_serve_check(image_id, None, bundle_sha256=None, skip=False, how=how)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return check_serve_check(image_id, verdict, bundle_sha256=digest, skip=False, how=how)


def _cmd_publish(args: argparse.Namespace, console: Console) -> int:
    from core.errors import NoImageSettingsError
    from core.version import tool_version
    from images.builder.tags import parse_reference
    from images.builder.workspace import Workspace
    from images.engine.docker_push import DockerPusher
    from images.engine.skopeo import Skopeo
    from images.publish.push import PublishRequest, built_image_from_report, publish
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    if manifest.image is None:
        raise NoImageSettingsError(
            f"{args.stack}: the manifest has no image: section",
            hint="add image: {repository: ..., release_tags: [...], nightly_tags: [...]}",
        )
    moment = _now()
    repository = args.repository or manifest.image.repository
    registry_host = parse_reference(repository).registry
    ws = Workspace.of(manifest.path)  # one git lookup for the report, the context and the record
    built = built_image_from_report(
        args.build_report or ws.report_path(manifest.stem, args.target),
        target=args.target,
        dockerfile=ws.context_dir(manifest.stem, args.target) / "Dockerfile",
        root=ws.root,
    )
    serve_check = None
    if args.channel == "release":
        serve_check = _serve_check_evidence(args, ws, built.image_id)
    request = PublishRequest(
        serve_check=serve_check,
        manifest=manifest,
        manifest_bytes=args.stack.read_bytes(),
        target=args.target,
        channel=args.channel,
        repository=repository,
        record_path=_record_path(args, manifest, ws),
        date=_date(args.date, moment),
        now=_iso(moment),
        tool_version=tool_version(),
        built=built,
    )
    with registry_pool(args) as pool:
        client = pool.client(registry_host)
        copier = Skopeo(env=os.environ, network=network_settings(args, os.environ))
        with DockerPusher() as pusher:
            result = publish(
                request,
                pusher=pusher,
                copier=copier,
                registry=client,
                credentials=pool.credentials(registry_host),
                progress=console.note,
            )
    if args.json:
        from images.publish.documents import publish_document

        console.json(publish_document(request, result))
    for line in result.lines:
        _say(args, console, line)
    return ExitCode.OK


# ------------------------------------------------------------------------------ pin


def _add_pin(sub: Any) -> None:
    p = sub.add_parser("pin", help="print REF as repo@sha256:... (the digest the registry serves)")
    p.add_argument("ref", help="REGISTRY/REPO:TAG")
    _add_timeout(p)
    add_json_argument(p, "the digest (per platform for a multi-arch index)")
    p.set_defaults(handler=_cmd_pin)


def _cmd_pin(args: argparse.Namespace, console: Console) -> int:
    from images.builder.tags import parse_reference
    from images.publish.pin import render_pin

    ref = parse_reference(args.ref, default_tag="latest")
    with registry_pool(args) as pool:
        info = pool.client(ref.registry).require(ref)
    if args.json:
        from images.publish.documents import pin_document

        console.json(pin_document(ref, info))
    for line in render_pin(ref, info):
        _say(args, console, line)
    return ExitCode.OK


# ------------------------------------------------------------------------------ verify-pins


def _add_verify_pins(sub: Any) -> None:
    p = sub.add_parser(
        "verify-pins",
        help="check that the registry still serves the recorded digest of every tag",
    )
    add_stack_argument(p)
    _add_record(p)
    _add_timeout(p)
    add_json_argument(p, "each tag's recorded and served digest")
    p.set_defaults(handler=_cmd_verify_pins)


def _cmd_verify_pins(args: argparse.Namespace, console: Console) -> int:
    from core.errors import DriftError
    from images.builder.workspace import Workspace
    from images.publish.pin import check_pins
    from images.records import load_release_log
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    path = _record_path(args, manifest, Workspace.of(manifest.path))
    log = load_release_log(path, stack=manifest.name)
    if not log.records:
        raise DriftError(
            f"{path}: no release records for {manifest.name}",
            hint="publish first, or pass --record FILE",
        )
    with registry_pool(args) as pool:
        checked = check_pins(
            log.records, lambda ref: pool.client(ref.registry).lookup(ref.repository, ref.reference)
        )
    if args.json:
        from images.publish.documents import verify_pins_document

        console.json(verify_pins_document(checked, stack=manifest.name, record=str(path)))
    for tag, digest in checked.ok_tags():
        _say(args, console, f"ok      {tag} {digest}")
    if checked.drifts:
        raise DriftError(
            f"{len(checked.drifts)} of {len(checked.expected)} tags drifted from {path}:\n  "
            + "\n  ".join(d.describe() for d in checked.drifts),
            hint="a tag was moved behind the tool's back: find out who moved it; to restore, "
            "publish again (nightly) or re-point it to the recorded digest",
        )
    _say(args, console, f"{len(checked.expected)} tags serve their recorded digests ({path})")
    return ExitCode.OK


# ------------------------------------------------------------------------------ rollback


def _add_rollback(sub: Any) -> None:
    p = sub.add_parser(
        "rollback",
        help="print (or with --apply re-point the moved nightly tags to) the previous digest",
    )
    add_stack_argument(p)
    _add_record(p)
    p.add_argument(
        "--target", default=None, choices=TARGETS, help="roll back the latest record of this target"
    )
    p.add_argument("--apply", action="store_true", help="re-point the tags and record it")
    _add_timeout(p)
    add_json_argument(p, "the plan (and with --apply the rollback record)")
    p.set_defaults(handler=_cmd_rollback)


def _cmd_rollback(args: argparse.Namespace, console: Console) -> int:
    from core.version import tool_version
    from images.builder.tags import parse_reference
    from images.builder.workspace import Workspace
    from images.publish.rollback import apply_rollback
    from images.records import load_release_log, plan_rollback
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    path = _record_path(args, manifest, Workspace.of(manifest.path))
    log = load_release_log(path, stack=manifest.name)
    plan = plan_rollback(log.records, target=args.target)
    repo = parse_reference(plan.current.repository)
    for line in (
        f"current:  {repo.pinned(plan.current.digest)}  "
        f"({plan.current.channel}, {plan.current.time})",
        f"previous: {repo.pinned(plan.previous.digest)}  ({plan.previous.channel}, "
        f"{plan.previous.time}, image {plan.previous.image_id})",
        *(f"  {tag}: {plan.current.digest} -> {plan.digest}" for tag in plan.tags),
    ):
        _say(args, console, line)
    applied = None
    if args.apply:
        with registry_pool(args) as pool:
            applied = apply_rollback(
                plan,
                registry_for=pool.client,
                record_path=path,
                now=_iso(_now()),
                tool_version=tool_version(),
                progress=console.note,
            )
    if args.json:
        from images.publish.documents import rollback_document

        console.json(
            rollback_document(plan, stack=manifest.name, record=str(path), applied=applied)
        )
    if applied is None:
        _say(args, console, "dry run; re-run with --apply to re-point these tags")
    else:
        _say(args, console, f"re-pointed {len(plan.tags)} tags; recorded in {path}")
    return ExitCode.OK


# ------------------------------------------------------------------------------ diff


def _add_diff(sub: Any) -> None:
    p = sub.add_parser(
        "diff",
        help="what differs between two locks or images, by distribution",
        description="A and B are lock directories, pylock.toml files, or image references "
        "(the lock is read out of the image). Exit 0 when they are the same, 1 when they "
        "differ, 2 when something went wrong (as diff(1) does).",
    )
    p.add_argument("a")
    p.add_argument("b")
    add_json_argument(p, "the differences")
    p.set_defaults(handler=_cmd_diff, trouble_exit_code=int(ExitCode.USAGE))


def _cmd_diff(args: argparse.Namespace, console: Console) -> int:
    from images.publish.diff import diff_document, differs, render_diff

    sides: list[DiffSide] = []
    pusher: ImagePusher | None = None
    try:
        for operand in (args.a, args.b):
            side, pusher = _diff_side(operand, pusher)
            sides.append(side)
    finally:
        if pusher is not None:
            pusher.close()
    a, b = sides
    if args.json:
        console.json(diff_document(a, b))
    for line in render_diff(a, b):
        _say(args, console, line)
    return DIFFERENT if differs(a, b) else ExitCode.OK


def _diff_side(operand: str, pusher: ImagePusher | None) -> tuple[DiffSide, ImagePusher | None]:
    from images.publish.diff import DiffSide, parse_sbom_sources
    from images.publish.push import image_lock_path, image_sbom_path
    from resolver.lockfile import PYLOCK, load_lock, parse_pylock

    path = Path(operand)
    if path.is_dir():
        return DiffSide(name=operand, lock=load_lock(path)), pusher
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        return DiffSide(name=operand, lock=parse_pylock(text, where=operand)), pusher
    if operand.endswith((PYLOCK, ".lock", "/")):
        raise UsageError(f"{operand}: no such lock file or directory")
    from core.errors import DockerError
    from images.engine.docker_push import DockerPusher

    if pusher is None:
        pusher = DockerPusher()
    image = pusher.inspect(operand)
    if image is None:
        raise DockerError(
            f"{operand}: neither a lock on disk nor an image in the Docker daemon",
            hint="give a lock directory, a pylock.toml, or a local image (docker pull it first)",
        )
    lock_path = image_lock_path()
    data = pusher.read_file(image.id, lock_path)
    lock = parse_pylock(data.decode("utf-8"), where=f"{operand}:{lock_path}")
    try:
        built_from = parse_sbom_sources(
            pusher.read_file(image.id, image_sbom_path()).decode("utf-8", "replace")
        )
    except DockerError:  # an image without an SBOM: the labels still say its revision
        built_from = {}
    side = DiffSide(
        name=operand, lock=lock, image_id=image.id, labels=image.labels, built_from=built_from
    )
    return side, pusher


# ------------------------------------------------------------------------------ bake


def _add_bake(sub: Any) -> None:
    p = sub.add_parser(
        "bake",
        help="write a docker-bake.json for several stacks and targets",
        description="One bake target per stack and build target, tagged "
        "<repository>:staging-<stem>-<target> only: release and nightly tags are applied by "
        "`publish`, after the gates, never by a bake.",
    )
    p.add_argument("stacks", nargs="+", type=Path, metavar="STACK")
    p.add_argument(
        "--target",
        action="append",
        dest="targets",
        default=None,
        choices=TARGETS,
        help="a build target (repeatable; default: final and vllm-openai)",
    )
    p.add_argument("--out", type=Path, default=Path("docker-bake.json"), metavar="FILE")
    p.set_defaults(handler=_cmd_bake)


def _cmd_bake(args: argparse.Namespace, console: Console) -> int:
    from core.fsutil import atomic_write_text
    from images.builder.workspace import Workspace
    from images.publish.bake import BakeTarget, render_bake
    from manifest import load_manifest

    manifests = [load_manifest(p) for p in args.stacks]
    targets = tuple(args.targets or TARGETS)
    out: Path = args.out
    plan = []
    for manifest in manifests:
        ws = Workspace.of(manifest.path)
        for target in targets:
            # a bake builds ungated images: staging tags only, whatever --push does with them
            tags = []
            if manifest.image is not None:
                tags = [f"{manifest.image.repository}:staging-{manifest.stem}-{target}"]
            plan.append(
                BakeTarget(
                    stack=manifest.stem,
                    target=target,
                    # absolute: buildx reads a relative context against its working directory
                    context=str(ws.context_dir(manifest.stem, target).resolve()),
                    arch=manifest.target.arch,
                    release=manifest.release,
                    args=_build_args(manifest, ws),
                    tags=tags,
                )
            )
    atomic_write_text(out, render_bake(plan))
    console.print(f"wrote {out}: {len(plan)} targets")
    console.print(
        "its contexts are absolute paths of this machine: the file is for this checkout only "
        "(do not commit it)"
    )
    console.print("stage each context first:")
    for m in manifests:
        for t in targets:
            console.print(f"  build_image.py stage {m.path} --target {t}")
    console.print(f"then, from any directory: docker buildx bake --file {out.resolve()}")
    console.print("and gate the results (build_image.py gate) before anything is published")
    return ExitCode.OK


def _build_args(manifest: Manifest, ws: Workspace) -> dict[str, str]:
    """Every build arg the render declares (images/builder/render.py), BASE_IMAGE included: a bake
    passes them all, as `build` would."""
    from images.builder.pipeline import label_args, require_base_image

    return label_args(manifest, ws, os.environ, base_image=require_base_image(manifest))
