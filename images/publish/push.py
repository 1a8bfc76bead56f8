"""Publishing a gated image: plan its tags, check that the image is the one the manifest
describes, push it under every tag, prove which digest each tag now serves, and record it.

The side effects sit behind ``ImageInspector`` (what the Docker daemon has of the image) and
``Registry`` (skopeo: the build's normalized OCI layout copied with its digests preserved, so
the digest the build computed is the digest the registry serves). Tag planning and the checks
are pure. The image side hands over the build report (``gated_report`` adds publishing's
checks: the target, the gates) and the labels an image carries (``images.builder.labels``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from core.errors import (
    BuildImageError,
    DigestMismatchError,
    NoImageSettingsError,
    PublishError,
    ReleaseTagMoveError,
    ServeCheckMissingError,
    StaleImageError,
)
from images.builder.labels import (
    BASE_DIGEST_LABEL,
    BASE_NAME_LABEL,
    DIFF_LABELS,
    LICENSES_LABEL,
    LOCK_INPUTS_LABEL,
    LOCK_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    TITLE_LABEL,
    TOOLING_KEY,
    TOOLING_REVISION_LABEL,
    UNKNOWN_REVISION,
    VERSION_LABEL,
    VLLM_REVISION_LABEL,
    VLLM_VERSION_LABEL,
    base_digest_of,
    image_labels,
    product_source,
    vllm_source,
)
from images.builder.render import IMAGE_SBOM
from images.builder.report import BuildReport, read_build_report
from images.builder.tags import (
    Channel,
    ImageReference,
    TagContext,
    parse_reference,
    render_tags,
)
from images.engine.port import ImageInspector, LocalImage
from images.engine.skopeo import CopyReport, ManifestInfo
from images.oci.layout import blob_path, find_manifest
from images.publish.attach import (
    AttachInputs,
    Attachments,
    AttachPlan,
    prepare,
    render_attestations,
    write_run_record,
)
from images.publish.registry import Registry
from images.publish.uploads import render_upload, upload_stats
from images.records import (
    ReleaseRecord,
    TagMove,
    UploadStats,
    append_release_record,
    load_release_log,
)
from images.serve.check import read_verdict
from manifest import ImageSettings, Manifest, Source

# ------------------------------------------------------------------------------ image side


def gated_report(path: Path, *, target: str, dockerfile: Path | None = None) -> BuildReport:
    """The build report ``path``, refused unless it is for ``target`` and every gate passed.
    An empty ``dockerfile_sha256`` is filled from ``dockerfile`` (the staged render), if any."""
    report = read_build_report(path)
    if report.target != target:
        raise PublishError(
            f"{path}: the build report is for target {report.target!r}, not {target!r}",
            hint=f"pass the report of a --target {target} build",
        )
    failed = report.failed_gates
    if failed:
        raise PublishError(
            f"{path}: image {report.image_id} failed the gates {', '.join(failed)}",
            hint="only a gated image is published; fix the build and gate it again",
        )
    if not report.dockerfile_sha256 and dockerfile is not None and dockerfile.is_file():
        sha256 = hashlib.sha256(dockerfile.read_bytes()).hexdigest()
        return replace(report, dockerfile_sha256=sha256)
    return report


# ------------------------------------------------------------------------------ publish


@dataclass(frozen=True, kw_only=True)
class PublishRequest:
    manifest: Manifest
    manifest_bytes: bytes
    target: str
    channel: Channel
    repository: str  # registry/repository (no tag)
    record_path: Path
    date: str  # YYYYMMDD
    now: str  # ISO 8601 UTC
    tool_version: str
    report: BuildReport  # the gated image's build report (gated_report)
    report_path: Path
    root: Path  # the repository: the report's oci_layout is under it
    # what the release record says of the serve-check (serve_check_entry); None for nightly
    serve_check: Mapping[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    record: ReleaseRecord | None  # None: already published, nothing pushed or written
    lines: tuple[str, ...]
    tags: Mapping[str, str] = field(default_factory=dict)  # each tag -> the digest it serves
    # what the first copy uploaded and reused (later tags reuse everything); all 0 when
    # nothing was pushed
    upload: UploadStats = field(default_factory=UploadStats)


def image_settings(manifest: Manifest) -> ImageSettings:
    """The manifest's ``image:`` section, which publishing needs."""
    if manifest.image is None:
        raise NoImageSettingsError(
            f"{manifest.path}: the manifest has no image: section",
            hint="add image: {repository: ..., release_tags: [...], nightly_tags: [...]}",
        )
    return manifest.image


def plan_tags(manifest: Manifest, *, target: str, channel: Channel, date: str) -> list[str]:
    image = image_settings(manifest)
    context = TagContext(
        release=manifest.release,
        python=manifest.target.python_str,
        arch=manifest.target.arch,
        date=date,
        variables=image.variables,
    )
    templates = image.release_tags if channel == "release" else image.nightly_tags
    return render_tags(templates, target=target, context=context, kind=channel)


def source_revisions(manifest: Manifest, labels: Mapping[str, str]) -> dict[str, str]:
    """Each git source's pinned commit, and under ``(tooling)`` the commit of the tool that
    built the image (its label), when known."""
    out = {s.name: s.rev for s in manifest.sources if s.rev}
    tooling = labels.get(TOOLING_REVISION_LABEL)
    if tooling and tooling != UNKNOWN_REVISION:
        out[TOOLING_KEY] = tooling
    return dict(sorted(out.items()))


def _says(source: Source | None, role: str, key: str) -> str:
    """What the manifest says of the label of ``source``'s ``key`` (git or rev)."""
    if source is None:
        return f"no {role}"
    if source.git is None:
        return f"sources.{source.name} as a path source, which is not labelled"
    return f"sources.{source.name}.{key}: {source.git if key == 'git' else source.rev!r}"


def _label_checks(manifest: Manifest) -> list[tuple[str, str, str]]:
    """(label, the value the manifest gives it ("": none), what the manifest says), for each
    label that names an input of the manifest."""
    want = image_labels(manifest)
    product, vllm = product_source(manifest), vllm_source(manifest)
    release = f"release: {manifest.release!r}"
    return [
        (VERSION_LABEL, want.version, f"{release}, labelled {want.version!r}"),
        (TITLE_LABEL, manifest.name, f"name: {manifest.name!r}"),
        (LICENSES_LABEL, want.licenses, f"image.licenses: {want.licenses!r}"),
        (SOURCE_LABEL, want.source, _says(product, "product source", "git")),
        (REVISION_LABEL, want.revision, _says(product, "product source", "rev")),
        (VLLM_REVISION_LABEL, want.vllm_revision, _says(vllm, "source named vllm", "rev")),
        (
            VLLM_VERSION_LABEL,
            want.vllm_version,
            release if want.vllm_version else _says(vllm, "source named vllm", "git"),
        ),
    ]


def check_image_matches_manifest(request: PublishRequest, image: LocalImage) -> None:
    """Refuse an image built from other pins (or for another release or stack) than the
    manifest whose tags it is about to get: the published tag must never drift from the pins.
    Every statement the build report and the image labels make is checked."""
    manifest, labels = request.manifest, image.labels
    where = f"image {image.id} (build report {request.report_path})"
    inputs = {
        f"label {LOCK_INPUTS_LABEL}": labels.get(LOCK_INPUTS_LABEL),
        "build report lock_inputs_sha256": request.report.lock_inputs_sha256,
    }
    for source, value in inputs.items():
        if value and value != manifest.lock_inputs_sha256:
            raise StaleImageError(
                f"{where} was built from lock inputs {value[:12]} ({source}), but "
                f"{manifest.path} now has lock inputs {manifest.lock_inputs_sha256[:12]}; "
                "its tags would name pins the image does not have",
                hint=f"lock and build again (`build_image.py build {manifest.path} --target "
                "...`), or publish from the commit the image was built from",
            )
    for label, want, says in _label_checks(manifest):
        got = labels.get(label)
        if got and got != want:
            raise StaleImageError(
                f"{where} is labelled {label}={got!r}, but {manifest.path} has {says}",
                hint="build the image from this manifest, then publish it",
            )


def check_base_pinned(request: PublishRequest, image: LocalImage) -> None:
    """Refuse a release of an image whose base image (the report's ``base_image``, else its
    base.name label) is not pinned by digest, so that a rebuild starts from the same base; a
    digest the build read from a tag (the base.digest label) does not count."""
    manifest, image_id = request.manifest, image.id
    base = request.report.base_image or image.labels.get(BASE_NAME_LABEL) or ""
    if not base:
        raise PublishError(
            f"a release needs a base image pinned by digest, and image {image_id} names no base "
            f"image (its build report {request.report_path} has no base_image, the image no "
            f"{BASE_NAME_LABEL} label)",
            hint=f"build it again with `build_image.py build {manifest.path}`, from a base_image "
            "REF@sha256:...",
        )
    if not base_digest_of(base):
        name = base.partition("@")[0]
        raise PublishError(
            f"a release needs a base image pinned by digest, and image {image_id} was built "
            f"FROM {base!r}, a tag that can move",
            hint=f"run `build_image.py pin-base {manifest.path}` (or set base_image: "
            f"{name}@sha256:<digest> in it), build and publish again (--nightly publishes a "
            "tagged base)",
        )


def serve_check_entry(bundle: Path, image_id: str, *, skip: bool, how: str) -> dict[str, str]:
    """What a release record says of the serve-check, or a refusal: a release needs a passing
    serve-check ``bundle`` of this very image, unless ``--no-serve-check`` (``skip``) says
    otherwise (and the record says so). ``how``: the command that makes a bundle."""
    if skip:
        return {"status": "skipped", "reason": "--no-serve-check"}
    try:
        bundle_image, passed, failures = read_verdict(bundle)
    except FileNotFoundError:
        raise ServeCheckMissingError(
            f"a release needs a passing serve-check of image {image_id}, and there is none",
            hint=f"run `{how}` (on a host with the device), or publish with --no-serve-check "
            "(the release record says it was skipped)",
        ) from None
    if bundle_image != image_id:
        raise ServeCheckMissingError(
            f"the serve-check bundle found for image {image_id} is of image {bundle_image}",
            hint=f"run `{how}` again",
        )
    if not passed:
        raise ServeCheckMissingError(
            f"the serve-check of image {image_id} failed: " + "; ".join(failures),
            hint=f"fix the image and run `{how}` again; nothing was pushed",
        )
    return {"status": "passed", "bundle_sha256": hashlib.sha256(bundle.read_bytes()).hexdigest()}


def _local_image(request: PublishRequest, inspector: ImageInspector) -> LocalImage:
    """The image the build report names, as the Docker daemon has it; refused when the
    daemon does not have it or it carries another lock than the report says."""
    report, where = request.report, request.report_path
    image = inspector.inspect(report.image_id)
    if image is None:
        raise PublishError(
            f"the build report {where} names image {report.image_id}, "
            "which the Docker daemon does not have",
            hint=f"build it again: `build_image.py build {request.manifest.path} --target "
            f"{request.target}`",
        )
    label_lock = image.labels.get(LOCK_LABEL)
    if label_lock and report.lock_sha256 and label_lock != report.lock_sha256:
        raise PublishError(
            f"image {image.id} carries lock {label_lock} (label {LOCK_LABEL}), but its build "
            f"report {where} says {report.lock_sha256}",
            hint="the report and the image do not belong together: build again",
        )
    return image


def _release_done(
    refs: list[ImageReference], before: Mapping[str, ManifestInfo | None], built: str
) -> PublishResult | None:
    """Before a release is pushed: refuse a release tag that exists with another image than
    the digest ``built``; when every tag already serves it, the result that says so (nothing
    to push or record); else None."""
    moved = [
        (ref, info)
        for ref, info in ((r, before[str(r)]) for r in refs)
        if info is not None and info.digest != built
    ]
    if moved:
        listing = "\n  ".join(f"{ref} is {info.digest}" for ref, info in moved)
        raise ReleaseTagMoveError(
            "release tags never move, and these already exist with another image:\n  "
            f"{listing}"
            f"\nnothing was pushed",
            hint="a new release needs a new release version (the manifest's release:); to "
            "test a rebuild use --nightly or a staging --repository",
        )
    if not all(before[str(r)] is not None for r in refs):
        return None
    return PublishResult(
        record=None,
        lines=tuple(
            f"{r} is already this image ({info.digest}); nothing pushed or recorded"
            for r in refs
            if (info := before[str(r)]) is not None
        ),
        tags={t: info.digest for t, info in sorted(before.items()) if info is not None},
    )


def _built_layout(request: PublishRequest, image_id: str) -> tuple[Path, str]:
    """The build's normalized image (its layout, with the image tagged as the target, and its
    digest), checked: the report names them, and the layout holds that manifest, whose config
    is the gated image ``image_id``."""
    report, where = request.report, request.report_path
    again = (
        f"build it again: `build_image.py build {request.manifest.path} --target {request.target}`"
    )
    if not report.oci_layout or not report.digest:
        raise PublishError(
            f"the build report {where} names no normalized image (digest, oci_layout)",
            hint=f"it was written by an older build_image.py; {again}",
        )
    layout = request.root / report.oci_layout
    digest, manifest = find_manifest(layout, request.target)
    config = str(manifest.get("config", {}).get("digest", ""))
    if digest != report.digest or config != image_id:
        raise StaleImageError(
            f"{layout}: the layout's image {request.target} is {digest} (config "
            f"{config}), but the build report {where} says {report.digest} (image "
            f"{image_id})",
            hint=f"the layout and the report do not belong together; {again}",
        )
    return layout, digest


def _push_all(
    refs: list[ImageReference],
    layout: Path,
    tag: str,
    before: Mapping[str, ManifestInfo | None],
    *,
    registry: Registry,
    progress: Callable[[str], None],
) -> dict[str, CopyReport]:
    """Copy the layout's image to every tag: each tag -> what its copy did. A failure after
    some tags moved says which, and from what, so nothing is lost."""
    pushed: dict[str, CopyReport] = {}
    for ref in refs:
        progress(f"pushing {ref}")
        try:
            pushed[str(ref)] = registry.push(layout, tag, ref)
        except BuildImageError as exc:
            if not pushed:
                raise
            was = {t: (b.digest if b else "absent") for t, b in before.items()}
            already = "; ".join(
                f"{t} -> {r.digest} (was {was[t]})" for t, r in sorted(pushed.items())
            )
            raise PublishError(
                f"{exc.message}\nthese tags were pushed before the failure: {already}; nothing "
                "was recorded",
                hint="publish again once the registry answers (tags already on this image are "
                "kept), or point them back by hand with the digests above",
            ) from None
    return pushed


def _check_served(
    registry: Registry, refs: list[ImageReference], pushed: Mapping[str, str], built: str
) -> None:
    """Every copy reported the built digest, and the registry serves it under every tag."""
    differ = {t: d for t, d in pushed.items() if d != built}
    if differ:
        raise DigestMismatchError(
            f"the build's image is {built}, but the copies reported "
            + ", ".join(f"{t} {d}" for t, d in sorted(differ.items())),
            hint="nothing was recorded; the registry rewrote the manifest: publish to a "
            "registry that keeps OCI manifests as they are",
        )
    for ref in refs:
        served = registry.lookup(ref)
        if served is None or served.digest != built:
            raise DigestMismatchError(
                f"{ref}: the push reported {built}, but the registry serves "
                f"{served.digest if served else 'no such tag'}",
                hint="nothing was recorded; someone else pushed this tag meanwhile: publish "
                "again, then run `build_image.py verify-pins`",
            )


def _release_record(
    request: PublishRequest,
    *,
    repository: str,
    refs: list[ImageReference],
    image: LocalImage,
    digest: str,
    before: Mapping[str, ManifestInfo | None],
    upload: UploadStats,
) -> ReleaseRecord:
    """The record of ``image`` published as ``digest`` under ``refs``; a nightly one also
    records each tag it moved (``before``: where each pointed before the push)."""
    moves = tuple(
        TagMove(tag=t, from_digest=b.digest if b else None, to_digest=digest)
        for t, b in sorted(before.items())
        if b is None or b.digest != digest
    )
    labels = dict(image.labels)
    report = request.report
    return ReleaseRecord(
        stack=request.manifest.name,
        channel=request.channel,
        target=request.target,
        repository=repository,
        tags=tuple(sorted(str(r) for r in refs)),
        digest=digest,
        image_id=image.id,
        lock_sha256=labels.get(LOCK_LABEL) or report.lock_sha256 or None,
        manifest_sha256=hashlib.sha256(request.manifest_bytes).hexdigest(),
        dockerfile_sha256=report.dockerfile_sha256 or None,
        base_image=report.base_image or labels.get(BASE_NAME_LABEL),
        base_image_digest=base_digest_of(report.base_image) or labels.get(BASE_DIGEST_LABEL),
        source_revisions=source_revisions(request.manifest, labels),
        tool_version=request.tool_version,
        time=request.now,
        moves=moves if request.channel == "nightly" else (),
        labels={k: v for k, v in labels.items() if k in DIFF_LABELS},
        serve_check=request.serve_check,
        upload=upload,
        compressor=report.compressor or None,
    )


def check_signing(manifest: Manifest, channel: Channel, plan: AttachPlan | None) -> None:
    """A release of a stack whose ``image.require_signature`` is true needs a signing key
    (and the attachments it signs): refused before anything is read or pushed."""
    image = image_settings(manifest)
    if channel != "release" or not image.require_signature:
        return
    if plan is None or plan.signer is None:
        why = "--no-attach was given" if plan is None else "no --sign-key was given"
        raise PublishError(
            f"{manifest.path}: image.require_signature is true, so a release is signed, "
            f"and {why}; nothing was pushed",
            hint="publish --release with --sign-key FILE (cosign.key, or a PKCS#8 PEM key; its "
            "passphrase in COSIGN_PASSWORD or --sign-key-passphrase-file)",
        )


def _attachments(
    request: PublishRequest,
    plan: AttachPlan,
    *,
    image: LocalImage,
    layout: Path,
    digest: str,
    inspector: ImageInspector,
) -> Attachments:
    """The SBOM, provenance and signatures of the image, made before anything is pushed."""
    sbom = inspector.read_file(image.id, IMAGE_SBOM)
    if sbom is None:
        raise PublishError(
            f"image {image.id} has no SBOM at {IMAGE_SBOM}, which publish attaches",
            hint=f"build it with `build_image.py build {request.manifest.path} --target "
            f"{request.target}` (every build writes one), or publish with --no-attach",
        )
    assert request.report.source_date_epoch is not None  # _built_layout: a normalized image
    inputs = AttachInputs(
        repository=parse_reference(request.repository),
        report_path=request.report_path,
        manifest_path=request.manifest.path,
        lock_dir=plan.lock_dir,
        sbom=sbom,
        labels=dict(image.labels),
        source_date_epoch=request.report.source_date_epoch,
        release=request.channel == "release",
        tool_version=request.tool_version,
    )
    return prepare(blob_path(layout, digest).read_bytes(), inputs, plan.signer)


def publish(
    request: PublishRequest,
    *,
    inspector: ImageInspector,
    registry: Registry,
    progress: Callable[[str], None],
    attach: AttachPlan | None = None,
) -> PublishResult:
    """Push the gated image of ``request`` under every tag it plans, check the registry
    serves its digest under all of them, and append the release record (with what the first
    copy uploaded, reused and mounted).

    Everything is checked before anything is pushed: the repository, the image (the daemon
    has it, it is the report's and the manifest's, its layout holds it with the report's
    digest), a release's base pin and serve-check, the record file, and (a release) that no
    release tag would move. A release already published is a result with no record.

    With ``attach`` the SBOM and the provenance (and, with its key, the signatures) are made
    before anything is pushed, and attached to the digest before the tags move
    (``images.publish.attach``): a tag never names a digest whose documents are missing."""
    repo = parse_reference(request.repository)  # where the tags go
    if repo.tag or repo.digest:
        raise PublishError(
            f"repository {request.repository!r} includes a tag or digest",
            hint="give the repository only; tags come from the manifest's image.*_tags",
        )
    tags = plan_tags(
        request.manifest, target=request.target, channel=request.channel, date=request.date
    )
    check_signing(request.manifest, request.channel, attach)
    image = _local_image(request, inspector)
    layout, built = _built_layout(request, image.id)
    check_image_matches_manifest(request, image)
    if request.channel == "release":
        check_base_pinned(request, image)
        if request.serve_check is None:
            raise ServeCheckMissingError(
                f"a release of image {image.id} needs the outcome of its serve-check",
                hint="serve_check_entry says what the release record holds of it",
            )
    # a broken record file must stop us before anything is pushed, not after
    load_release_log(request.record_path, stack=request.manifest.name)
    made = (
        _attachments(request, attach, image=image, layout=layout, digest=built, inspector=inspector)
        if attach is not None
        else None
    )
    refs = [repo.with_tag(t) for t in tags]
    # before anything is pushed: where every tag points (None: the tag does not exist)
    before = {str(ref): registry.lookup(ref) for ref in refs}
    if request.channel == "release":
        done = _release_done(refs, before, built)
        if done is not None:
            return done
    attestations = None
    if made is not None:
        attestations = made.push(registry, progress)
        write_run_record(request.report_path.with_suffix(".run.json"), made, started=request.now)
    pushed = _push_all(refs, layout, request.target, before, registry=registry, progress=progress)
    upload = upload_stats(layout, request.target, pushed[str(refs[0])], repo, progress)
    _check_served(registry, refs, {t: r.digest for t, r in pushed.items()}, built)
    record = _release_record(
        request,
        repository=repo.name,
        refs=refs,
        image=image,
        digest=built,
        before=before,
        upload=upload,
    )
    record = replace(record, attestations=attestations)
    append_release_record(request.record_path, record)
    lines = [f"{r.pinned(built)}  ({r.tag})" for r in refs]
    for move in record.moves:
        lines.append(f"moved {move.tag}: {move.from_digest or '(new)'} -> {move.to_digest}")
    lines.append(render_upload(upload))
    if attestations is not None:
        lines.extend(render_attestations(attestations))
    lines.append(f"recorded in {request.record_path}")
    return PublishResult(
        record=record,
        lines=tuple(lines),
        tags=dict.fromkeys(sorted(before), built),
        upload=upload,
    )
