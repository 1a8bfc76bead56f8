"""The serving commands of ``build_image.py``: ``serve-check`` and ``ab``.

The profile comes from the stack manifest's ``serving:`` (``--stack STACK``) or from a profile
file (``--profile FILE``); a relative ``model.path`` is under the repository around that file
(the demo's), and ``--model-path`` replaces it (the model's directory on the GPU host). Docker is
``DOCKER_HOST``'s: a remote GPU host's daemon (``ssh://user@host``, ``tcp://host:2376``) runs
the servers there, and the client reaches them on that host (``--server-host`` to say
otherwise). Configuration is read here, once, and passed down.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.console import Console
from core.errors import AbRegressionError, ServeError, UsageError

if TYPE_CHECKING:
    from manifest.serving import ServingProfile


def add_commands(sub: Any) -> None:
    _add_serve_check(sub)
    _add_ab(sub)


def _add_profile(p: argparse.ArgumentParser) -> None:
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", type=Path, help="a stack manifest with a serving: section")
    where.add_argument("--profile", type=Path, metavar="FILE", help="a serving profile file")
    p.add_argument(
        "--model-path",
        default=None,
        metavar="PATH",
        help="the model's directory on the Docker host (replaces model.path)",
    )
    p.add_argument(
        "--server-host",
        default=None,
        metavar="HOST",
        help="where the client reaches the server (default: 127.0.0.1 for a local daemon, "
        "else the host of DOCKER_HOST)",
    )


def _profile(
    args: argparse.Namespace,
) -> tuple[ServingProfile, Path, str | None, dict[str, Any]]:
    """The profile (model.path made absolute), the file it came from, the stack's name when
    that file is a manifest, and the profile as the evidence shows it (model.path as given)."""
    from images.builder.workspace import Workspace
    from manifest import load_manifest, load_serving_profile
    from manifest.serving import profile_to_json

    name: str | None = None
    if args.stack is not None:
        manifest = load_manifest(args.stack)
        if manifest.serving is None:
            raise UsageError(
                f"{args.stack} has no serving: section",
                hint="add one (docs/manifest.md, serving) or pass --profile FILE",
            )
        profile, source, name = manifest.serving, args.stack, manifest.name
    else:
        profile, source = load_serving_profile(args.profile), args.profile
    given = args.model_path or profile.model.path
    path = given if given.startswith("/") else str(Workspace.of(source).root / given)
    shown = profile_to_json(
        dataclasses.replace(profile, model=dataclasses.replace(profile.model, path=given))
    )
    model = dataclasses.replace(profile.model, path=path)
    return dataclasses.replace(profile, model=model), source, name, shown


def _run_id() -> str:
    import secrets

    now = dt.datetime.now(dt.timezone.utc)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


# ------------------------------------------------------------------------- serve-check


def _add_serve_check(sub: Any) -> None:
    p = sub.add_parser(
        "serve-check",
        help="start IMAGE's server, send the profile's check requests, match its log",
        description="The semantic smoke of one image: its server (the profile's launch "
        "settings) must become healthy within the deadline, answer every check request as "
        "expected, and log every required pattern. An evidence bundle (image ID, digests, "
        "launch arguments, answers, log tail) goes to build/serve-check/<image id>/, pass or "
        "fail. Exit 0, or 1 naming what failed.",
    )
    p.add_argument("image", help="the image to check (a tag, an ID or REPO@sha256:...)")
    _add_profile(p)
    p.set_defaults(handler=_serve_check)


def _serve_check(args: argparse.Namespace, console: Console) -> int:
    from core.transport import Deadline, Transport
    from images.builder.workspace import Workspace
    from images.engine.docker_serve import DockerServingEngine
    from images.serve.check import run_serve_check, write_bundle
    from images.serve.launch import server_host

    profile, source, _name, shown = _profile(args)
    ws = Workspace.of(source)
    with contextlib.closing(DockerServingEngine(env=dict(os.environ))) as engine:
        facts = engine.image(args.image)
        if facts is None:
            raise ServeError(
                f"the image {args.image} is not on the Docker host ({engine.docker_host})",
                hint="build or pull it first",
            )
        host = server_host(engine.docker_host, args.server_host)
        with Transport(  # a stream of tokens may pause: no floor on its rate
            timeout=profile.ab.request_timeout, deadline=Deadline(None), min_rate=None
        ) as transport:
            bundle, log = run_serve_check(
                engine,
                transport,
                profile,
                args.image,
                facts,
                run_id=_run_id(),
                host=host,
                now=f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ}",
                root=ws.root,
                profile_doc=shown,
            )
    path = write_bundle(ws.serve_check_dir(facts.id), bundle, log)
    for outcome in bundle.checks:
        state = "ok" if outcome.passed else f"FAILED: {outcome.reason}"
        console.note(f"check {outcome.name}: {state}")
    for pattern, line in bundle.log_patterns.items():
        console.note(f"log {pattern!r}: {'ok: ' + line.strip() if line else 'FAILED: no line'}")
    console.print(f"evidence: {ws.relative(path)}")
    if not bundle.passed:
        raise ServeError(
            f"serve-check of {args.image} ({facts.id}) failed:\n"
            + "\n".join(f"  - {f}" for f in bundle.failures)
            + (
                f"\nthe last lines of the server log:\n{bundle.log_tail}" if bundle.log_tail else ""
            ),
            hint=f"the evidence bundle {ws.relative(path)} has the answers and the launch line",
        )
    console.print(f"serve-check passed: {args.image} ({facts.id})")
    return 0


# ---------------------------------------------------------------------------------- ab


def _add_ab(sub: Any) -> None:
    p = sub.add_parser(
        "ab",
        help="A/B the serving of CANDIDATE against the pinned CONTROL (fail-closed)",
        description="Preflight (the control pinned by digest or by its release record, both "
        "images present, the devices free), then the server lifetimes of the profile's order, "
        "each driving warmups and measured runs per concurrency level with a streaming "
        "client; then the report (Markdown, JSON, PNG) under build/ab/<run id>/. Exit 1 when "
        "the preflight fails, any request fails, or a threshold is crossed; else 0.",
    )
    p.add_argument("control", help="the image it replaces: REPO@sha256:..., or a recorded tag")
    p.add_argument("candidate", help="the new image (a tag, an ID or REPO@sha256:...)")
    _add_profile(p)
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="FILE",
        help="the release record that pins a control given by tag (default: "
        "releases/<stack name>.json with --stack)",
    )
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help="report directory")
    p.add_argument(
        "--client",
        choices=("builtin", "vllm-bench"),
        default="builtin",
        help="who sends the requests: the built-in streaming client (default), or `vllm bench "
        "serve` from the candidate image (it needs the model's tokenizer under model.mount)",
    )
    p.set_defaults(handler=_ab)


def _ab(args: argparse.Namespace, console: Console) -> int:
    from images.builder.workspace import Workspace
    from images.engine.docker_serve import DockerServingEngine
    from images.records import expected_digests, load_release_log
    from images.serve.ab import LOCK_IN_IMAGE, preflight, run_ab
    from images.serve.launch import server_host
    from images.serve.plot import render_png
    from images.serve.report import write_report

    profile, source, name, shown = _profile(args)
    ws = Workspace.of(source)
    # the tags a release record pins (the control may be given by one of them)
    path = args.record or (ws.release_record(name) if name is not None else None)
    pinned, record = {}, "no release record (pass --record FILE)"
    if path is not None:
        pinned = expected_digests(load_release_log(path, stack=name).records)
        record = ws.relative(path)
    run_id = _run_id()
    with contextlib.closing(DockerServingEngine(env=dict(os.environ))) as engine:
        checked = preflight(
            engine,
            profile,
            args.control,
            args.candidate,
            pinned=pinned,
            record=record,
            run_id=run_id,
        )
        locks: dict[str, str | None] = {}
        for image in (checked.control, checked.candidate):
            data = engine.read_file(image.facts.id, LOCK_IN_IMAGE)
            locks[image.role] = None if data is None else data.decode("utf-8", "replace")
        result = run_ab(
            engine,
            profile,
            checked,
            run_id=run_id,
            server_host=server_host(engine.docker_host, args.server_host),
            lock_texts=locks,
            on_progress=console.note,
            root=ws.root,
            profile_doc=shown,
            client=args.client,
        )
    out = args.out or ws.ab_dir(run_id)
    png = render_png(result.rows, f"A/B {run_id}")
    written = write_report(out, result, profile.ab.confidence, png)
    if png is None:
        console.note(
            "no report.png: matplotlib is not installed (pip install 'vllm-musa-image[plot]')"
        )
    console.print((out / "report.md").read_text(encoding="utf-8"))
    console.print(f"report: {', '.join(ws.relative(p) for p in written if p.suffix != '.log')}")
    if not result.verdict.passed:
        raise AbRegressionError(
            f"the candidate {args.candidate} is refused against {args.control}:\n"
            + "\n".join(f"  - {r}" for r in result.verdict.reasons),
            hint=f"the report in {ws.relative(out)} has every request; thresholds are the "
            "profile's ab.thresholds",
        )
    return 0
