"""``build_image.py verify-rebuild``: rebuild a published image from its record and compare.

The record names the stack manifest (by its bytes), the lock and the tooling commit; this
checkout must be that commit. The rebuild is ``build --no-cache`` of the recorded target, its
report and normalized image under ``build/verify/<digest>/``, so the workspace's own build is
left alone. The same digest: exit 0. Another digest: exit 1 (``error[not-reproduced]``) after a
file-level report per layer, made against the published image, which is copied from the
registry into ``build/verify/<digest>/published/`` (``images.engine.skopeo``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.console import (
    Console,
    add_index_argument,
    add_json_argument,
    add_network_arguments,
)
from core.errors import ExitCode

if TYPE_CHECKING:
    from images.oci.diff import ImageDiff
    from images.publish.rebuild import Verdict
    from images.records import ReleaseRecord

PUBLISHED_TAG = "published"


def add_commands(sub: Any) -> None:
    from images.builder.commands import add_build_options

    p = sub.add_parser(
        "verify-rebuild",
        help="rebuild a published image from its record and check it has the same digest",
        description="Find the release record of RECORD_OR_REF (a release log such as "
        "releases/<stack>.json: its latest record; or an image reference: the latest record of "
        "the digest it serves), the stack manifest with the recorded bytes (under stack/, or "
        "--stack), and check this checkout is the recorded tooling commit. Then build the "
        "recorded target again without the layer cache, with the recorded lock, and compare "
        "the digest of the normalized image with the recorded one. The same digest exits 0. "
        "Another exits 1 and says, layer by layer, which files differ and how (content, mode, "
        "mtime, owner, added, removed), against the published image copied from the registry.",
    )
    p.add_argument("record_or_ref", metavar="RECORD_OR_REF")
    p.add_argument(
        "--record",
        type=Path,
        nargs="+",
        default=None,
        metavar="FILE",
        help="the release logs to find the record of a REF in (default: releases/*.json of this "
        "checkout)",
    )
    p.add_argument(
        "--stack",
        type=Path,
        default=None,
        help="the stack manifest (default: the one under stack/ with the recorded bytes)",
    )
    add_index_argument(p)
    add_network_arguments(p)
    add_build_options(p)
    add_json_argument(p, "the verdict and the file-level report")
    p.set_defaults(handler=cmd_verify_rebuild)


def cmd_verify_rebuild(args: argparse.Namespace, console: Console) -> int:
    from core.errors import NotReproducedError
    from images.builder.commands import run_build
    from images.builder.tags import parse_reference
    from images.builder.workspace import Workspace
    from images.oci.diff import diff_images
    from images.publish.commands import registry_of
    from images.publish.rebuild import check_commit, find_record, find_stack, judge

    ws = Workspace.of(args.stack) if args.stack else Workspace.here()
    record = find_record(
        args.record_or_ref,
        root=ws.root,
        served=lambda ref: registry_of(args).require(parse_reference(ref)).digest,
        logs=args.record,
    )
    stack = find_stack(record, root=ws.root, given=args.stack)
    check_commit(record, ws.vcs_ref())
    console.note(f"rebuilding {record.digest}: {ws.relative(stack)} --target {record.target}")
    where = ws.root / "build" / "verify" / record.digest.removeprefix("sha256:")[:16]
    build_args = argparse.Namespace(**{**vars(args), "stack": stack, "target": record.target})
    report = run_build(
        build_args, console, report_path=where / "report.json", layout=where / "rebuilt"
    )
    verdict = judge(record, report)
    if verdict.same:
        _show(args, console, verdict, None)
        if record.attestations is not None:
            _same_documents(args, console, record, stack, where / "report.json")
        return ExitCode.OK
    if verdict.same_content:  # no file differs: say how the bytes do
        _show(args, console, verdict, None)
        raise NotReproducedError(
            f"the rebuild of {record.target} is {verdict.rebuilt_digest}, not the recorded "
            f"{record.digest}: {verdict.compressed_apart()}",
            hint="rebuild where the record's compressor (its zlib version) is, and with the "
            "base pinned by digest as the record's base_image is",
        )
    published = where / "published"
    pinned = parse_reference(record.repository).pinned(record.digest)
    registry_of(args).pull(parse_reference(pinned), published, PUBLISHED_TAG)
    diff = diff_images(published, PUBLISHED_TAG, where / "rebuilt", record.target)
    _show(args, console, verdict, diff)
    raise NotReproducedError(
        f"the rebuild of {record.target} is {verdict.rebuilt_digest}, not the recorded "
        f"{record.digest}",
        hint="the report above names each file that differs; make the step that writes it "
        "deterministic (SOURCE_DATE_EPOCH, sorted output, no host paths)",
    )


def _same_documents(
    args: argparse.Namespace, console: Console, record: ReleaseRecord, stack: Path, report: Path
) -> None:
    """The rebuilt image's SBOM and provenance, made again as ``publish`` made them, are the
    documents the record says were attached: refused (``error[not-reproduced]``) if not."""
    from core.errors import NotReproducedError
    from images.attest.artifacts import sha256_digest
    from images.builder.render import IMAGE_SBOM
    from images.builder.report import read_build_report
    from images.builder.tags import parse_reference
    from images.engine.docker_inspect import DockerInspector
    from images.publish.attach import AttachInputs, provenance_statement

    attached = record.attestations
    assert attached is not None
    rebuilt = read_build_report(report)
    with DockerInspector() as inspector:
        image = inspector.inspect(rebuilt.image_id)
        sbom = inspector.read_file(rebuilt.image_id, IMAGE_SBOM)
    assert image is not None  # run_build loaded it
    assert rebuilt.source_date_epoch is not None  # a normalized image has its time
    inputs = AttachInputs(
        repository=parse_reference(record.repository),
        report_path=report,
        manifest_path=stack,
        lock_dir=args.lock,
        sbom=sbom or b"",  # none: the SBOM differs, and gather says why
        labels=dict(image.labels),
        source_date_epoch=rebuilt.source_date_epoch,
        release=record.channel == "release",
        tool_version=record.tool_version,
    )
    documents = {
        "SBOM": (sha256_digest(sbom or b""), attached.sbom_document),
        "provenance": (
            sha256_digest(provenance_statement(inputs, record.digest)),
            attached.provenance_document,
        ),
    }
    differ = [
        f"the {name} is {got}, the published {want}"
        for name, (got, want) in documents.items()
        if got != want
    ]
    if differ:
        raise NotReproducedError(
            f"the rebuild of {record.target} is {record.digest}, but " + "; ".join(differ),
            hint="the document names what varies between builds (docs/json.md, Provenance)",
        )
    line = f"the same SBOM {attached.sbom_document} and provenance {attached.provenance_document}"
    (console.note if args.json else console.print)(line)


def _show(
    args: argparse.Namespace,
    console: Console,
    verdict: Verdict,
    diff: ImageDiff | None,
) -> None:
    from images.oci.diff import render_text
    from images.publish.documents import verify_rebuild_document

    record = verdict.record
    if args.json:
        console.json(verify_rebuild_document(verdict, diff))
        return
    if verdict.same:
        console.print(f"reproduced {record.target}: {record.digest}")
        return
    console.print(f"NOT reproduced {record.target}: recorded {record.digest}")
    console.print(f"                    rebuilt {verdict.rebuilt_digest}")
    if diff is not None:
        for line in render_text(diff):
            console.print(line)
