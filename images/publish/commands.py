"""The publishing commands of ``build_image.py``: publish, pin, verify-pins, rollback, diff, bake.

Each command's arguments sit next to its handler. Configuration (environment, Docker config,
clock) is read here, once, and passed down. docker and skopeo's client are imported inside the
handlers so that the CLI starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.console import (
    Console,
    add_connection_arguments,
    add_deadline_argument,
    add_json_argument,
    add_stack_argument,
    count,
    seconds,
)
from core.errors import ExitCode, UsageError
from images.publish.verify_commands import add_compared_lock, add_public_key
from manifest import TARGETS

if TYPE_CHECKING:
    from images.attest.keys import SigningKey
    from images.engine.port import ImageInspector
    from images.publish.diff import DiffSide
    from images.publish.registry import Registry
    from images.records import ReleaseLog
    from manifest import Manifest


def add_commands(sub: Any) -> None:
    from images.publish.verify_commands import add_verify

    for add in (_add_publish, _add_pin, _add_verify_pins, _add_rollback, _add_diff, _add_bake):
        add(sub)
    add_verify(sub, add_registry_options=_add_timeout)


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
        help="seconds per attempt of a registry request (each skopeo inspect, re-point), and "
        "for a Docker credential helper to answer, more than 0 (default 30)",
    )
    p.add_argument(
        "--retries",
        type=count,
        default=3,
        help="retries of a registry request (skopeo --retry-times), 0 or more (default 3)",
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


def _date(value: str | None, moment: dt.datetime) -> str:
    if value is None:
        return moment.strftime("%Y%m%d")
    try:
        dt.datetime.strptime(value, "%Y%m%d")
    except ValueError:
        raise UsageError(f"--date {value!r}: expected YYYYMMDD") from None
    return value


def _release_log(args: argparse.Namespace) -> tuple[Manifest, Path, ReleaseLog]:
    """The stack manifest, its release record file (``--record``, else
    ``releases/<stack name>.json`` in the repository around the stack) and what it holds."""
    from images.builder.workspace import Workspace
    from images.records import load_release_log
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    path: Path = args.record or Workspace.of(manifest.path).release_record(manifest.name)
    return manifest, path, load_release_log(path, stack=manifest.name)


def registry_of(args: argparse.Namespace) -> Registry:
    """The registries of a command with the registry options, asked through skopeo."""
    from core.network import network_options
    from images.engine.skopeo import Skopeo, default_docker_config
    from images.engine.skopeo_artifacts import SkopeoArtifacts
    from images.publish.registry import Registry

    options = network_options(args, os.environ)
    skopeo = Skopeo(env=os.environ, options=options)
    artifacts = SkopeoArtifacts(env=os.environ, options=options)
    config = default_docker_config(os.environ, Path.home())
    return Registry(
        skopeo, env=os.environ, docker_config=config, timeout=args.timeout, artifacts=artifacts
    )


# ------------------------------------------------------------------------------ publish


def _add_publish(sub: Any) -> None:
    p = sub.add_parser(
        "publish",
        help="push a built, gated image under its tags and record the digests",
        description="Push the image `build` produced for TARGET under the manifest's rendered "
        "release or nightly tags: its normalized OCI layout, copied as it is with skopeo (so "
        "the digest is the one `build` printed). Resolve each tag to its digest (skopeo "
        "inspect --raw), check it is that digest, and append a record to "
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
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="DIR",
        help="the lock directory the image was built from, which its provenance lists "
        "(default: the manifest's <stem>.lock/)",
    )
    p.add_argument(
        "--sign-key",
        type=Path,
        default=None,
        metavar="FILE",
        help="sign the image and its attestations in cosign's format with this private key: "
        "cosign's encrypted key file (cosign.key) or a PKCS#8 PEM key; its passphrase comes "
        "from --sign-key-passphrase-file or COSIGN_PASSWORD, never from an argument",
    )
    p.add_argument(
        "--sign-key-passphrase-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="a file whose first line is the signing key's passphrase",
    )
    p.add_argument(
        "--no-attach",
        action="store_true",
        help="attach no SBOM, provenance or signature to the digest (a registry that refuses "
        "OCI artifacts); refused for a release of a stack with image.require_signature",
    )
    _add_timeout(p)
    add_json_argument(p, "the tags, their digests and the record")
    p.set_defaults(handler=_cmd_publish)


def _cmd_publish(args: argparse.Namespace, console: Console) -> int:
    from core.version import tool_version
    from images.builder.workspace import Workspace
    from images.engine.docker_inspect import DockerInspector
    from images.publish import push
    from manifest import load_manifest

    manifest = load_manifest(args.stack)
    repository = args.repository or push.image_settings(manifest).repository
    attach = None
    if not args.no_attach:
        from images.publish.attach import AttachPlan

        attach = AttachPlan(signer=_signing_key(args), lock_dir=args.lock)
    elif args.sign_key is not None:
        raise UsageError("--sign-key signs what publish attaches: it cannot go with --no-attach")
    push.check_signing(manifest, args.channel, attach)
    moment = _now()
    ws = Workspace.of(manifest.path)  # one git lookup for the report, the context and the record
    report_path = args.build_report or ws.report_path(manifest.stem, args.target)
    report = push.gated_report(
        report_path,
        target=args.target,
        dockerfile=ws.context_dir(manifest.stem, args.target) / "Dockerfile",
    )
    serve_check = None
    if args.channel == "release":
        serve_check = push.serve_check_entry(
            ws.serve_check_dir(report.image_id) / "bundle.json",
            report.image_id,
            skip=args.no_serve_check,
            how=f"build_image.py serve-check {report.image_id} --stack {args.stack}",
        )
    request = push.PublishRequest(
        serve_check=serve_check,
        manifest=manifest,
        manifest_bytes=args.stack.read_bytes(),
        target=args.target,
        channel=args.channel,
        repository=repository,
        record_path=args.record or ws.release_record(manifest.name),
        date=_date(args.date, moment),
        now=f"{moment:%Y-%m-%dT%H:%M:%SZ}",
        tool_version=tool_version(),
        report=report,
        report_path=report_path,
        root=ws.root,
    )
    registry = registry_of(args)
    with DockerInspector() as inspector:
        result = push.publish(
            request, inspector=inspector, registry=registry, progress=console.note, attach=attach
        )
    if args.json:
        from images.publish.documents import publish_document

        console.json(publish_document(request, result))
    for line in result.lines:
        _say(args, console, line)
    return ExitCode.OK


def _signing_key(args: argparse.Namespace) -> SigningKey | None:
    """The key of ``--sign-key``, opened with its passphrase (file, else COSIGN_PASSWORD)."""
    if args.sign_key is None:
        if args.sign_key_passphrase_file is not None:
            raise UsageError("--sign-key-passphrase-file is for a --sign-key: give both")
        return None
    from images.attest.keys import load_signing_key, signing_passphrase

    passphrase = signing_passphrase(args.sign_key_passphrase_file, os.environ)
    return load_signing_key(args.sign_key, passphrase)


# ------------------------------------------------------------------------------ pin


def _add_pin(sub: Any) -> None:
    p = sub.add_parser("pin", help="print REF as repo@sha256:... (the digest the registry serves)")
    p.add_argument("ref", help="REGISTRY/REPO:TAG")
    _add_timeout(p)
    add_json_argument(p, "the digest (per platform for a multi-arch index)")
    p.set_defaults(handler=_cmd_pin)


def _cmd_pin(args: argparse.Namespace, console: Console) -> int:
    from images.builder.tags import parse_reference
    from images.publish.tag_digests import render_pin

    ref = parse_reference(args.ref, default_tag="latest")
    info = registry_of(args).require(ref)
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
        description="Check that every tag of the release record still serves its recorded "
        "digest; then, for each recorded digest with attachments, run the checks of `verify`: "
        "its signature and attestations (where the record says it was signed, and every "
        "release of a stack with image.require_signature), its SBOM and provenance artifacts, "
        "and that the provenance records the recorded lock. Exit 1 naming what drifted or "
        "failed.",
    )
    add_stack_argument(p)
    _add_record(p)
    add_public_key(p)
    add_compared_lock(p)
    _add_timeout(p)
    add_json_argument(p, "each tag's recorded and served digest, and each digest's checks")
    p.set_defaults(handler=_cmd_verify_pins)


def _cmd_verify_pins(args: argparse.Namespace, console: Console) -> int:
    from core.errors import DriftError, SignatureError
    from images.publish.tag_digests import check_pins
    from images.publish.verify_commands import (
        failed,
        public_key,
        render,
        verify_records,
    )

    manifest, path, log = _release_log(args)
    if not log.records:
        raise DriftError(
            f"{path}: no release records for {manifest.name}",
            hint="publish first, or pass --record FILE",
        )
    registry = registry_of(args)
    checked = check_pins(log.records, registry.lookup)
    verified = verify_records(
        registry,
        log.records,
        manifest=manifest,
        key=public_key(args.public_key, manifest),
        lock_dir=args.lock,
    )
    if args.json:
        from images.publish.documents import verify_pins_document

        doc = verify_pins_document(
            checked, stack=manifest.name, record=str(path), verified=verified
        )
        console.json(doc)
    for tag, digest in checked.ok_tags():
        _say(args, console, f"ok      {tag} {digest}")
    for v in verified:
        _say(args, console, v.reference)
        for line in render(v):
            _say(args, console, line)
    if checked.drifts:
        raise DriftError(
            f"{len(checked.drifts)} of {len(checked.expected)} tags drifted from {path}:\n  "
            + "\n  ".join(d.describe() for d in checked.drifts),
            hint="a tag was moved behind the tool's back: find out who moved it; to restore, "
            "publish again (nightly) or re-point it to the recorded digest",
        )
    bad = [v for v in verified if not v.ok]
    if bad:
        raise (
            failed(bad[0])
            if len(bad) == 1
            else SignatureError(
                f"{len(bad)} recorded digests fail their checks:\n  "
                + "\n  ".join(f"{v.reference}: {f}" for v in bad for f in v.failures()),
                hint=failed(bad[0]).hint,
            )
        )
    _say(args, console, f"{len(checked.expected)} tags serve their recorded digests ({path})")
    if verified:
        _say(args, console, f"{len(verified)} recorded digests with attachments pass their checks")
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
    from images.publish.rollback import apply_rollback
    from images.records import plan_rollback

    manifest, path, log = _release_log(args)
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
        applied = apply_rollback(
            plan,
            registry=registry_of(args),
            record_path=path,
            now=f"{_now():%Y-%m-%dT%H:%M:%SZ}",
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
    from images.engine.docker_inspect import DockerInspector
    from images.publish.diff import diff_document, differs, render_diff

    with contextlib.ExitStack() as stack:
        # the Docker daemon is reached only for an operand that is no lock on disk
        inspector = functools.cache(lambda: stack.enter_context(DockerInspector()))
        a, b = (_diff_side(operand, inspector) for operand in (args.a, args.b))
    if args.json:
        console.json(diff_document(a, b))
    for line in render_diff(a, b):
        _say(args, console, line)
    return DIFFERENT if differs(a, b) else ExitCode.OK


def _diff_side(operand: str, inspector: Callable[[], ImageInspector]) -> DiffSide:
    from core.errors import DockerError
    from images.builder.render import IMAGE_LOCK_DIR, IMAGE_SBOM
    from images.publish.diff import DiffSide, parse_sbom_sources
    from resolver.lockfile import PYLOCK, load_lock, parse_pylock

    path = Path(operand)
    if path.is_dir():
        return DiffSide(name=operand, lock=load_lock(path))
    if path.is_file():
        text = path.read_text(encoding="utf-8")
        return DiffSide(name=operand, lock=parse_pylock(text, where=operand))
    if operand.endswith((PYLOCK, ".lock", "/")):
        raise UsageError(f"{operand}: no such lock file or directory")
    image = inspector().inspect(operand)
    if image is None:
        raise DockerError(
            f"{operand}: neither a lock on disk nor an image in the Docker daemon",
            hint="give a lock directory, a pylock.toml, or a local image (docker pull it first)",
        )
    lock_path = f"{IMAGE_LOCK_DIR}/pylock.toml"
    data = inspector().read_file(image.id, lock_path)
    lock = parse_pylock(data.decode("utf-8"), where=f"{operand}:{lock_path}")
    try:
        sbom = inspector().read_file(image.id, IMAGE_SBOM).decode("utf-8", "replace")
    except DockerError:  # an image without an SBOM: the labels still say its revision
        sbom = ""
    return DiffSide(
        name=operand,
        lock=lock,
        image_id=image.id,
        labels=image.labels,
        built_from=parse_sbom_sources(sbom),
    )


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
    from images.builder.pipeline import label_args, require_base_image
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
                    # every build arg the render declares, BASE_IMAGE included, as `build`
                    args=label_args(
                        manifest, ws, os.environ, base_image=require_base_image(manifest)
                    ),
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
