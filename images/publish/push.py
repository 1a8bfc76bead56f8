"""Publishing a gated image: plan its tags, check that the image is the one the manifest
describes, push it under every tag, prove which digest each tag now serves, and record it.

The side effects sit behind three ports: ``Pusher`` (what the Docker daemon has of the image),
``ImageCopier`` (``images/engine/skopeo.py``: the build's normalized OCI layout copied to the
registry with its digests preserved, so the digest the build computed is the digest the
registry serves) and ``RegistryClient`` (``images/publish/registry.py``, the registry HTTP
API). Before the first copy, ``images/publish/uploads.py`` mounts the base image's layers from
its repository on the same registry and counts what the copy uploads and what it reuses.
Tag planning and the checks are pure.

Interfaces with the image side (``build_image.py build``), each isolated in one place:
``built_image_from_report`` (the build report, read by ``images.builder.report``, then
publishing's own checks: the target, the gates), the labels an image carries
(``LOCK_LABEL``, ...) and where it carries its lock and SBOM (``image_lock_path``,
``image_sbom_path``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from core.errors import (
    BuildImageError,
    DigestMismatchError,
    NoImageSettingsError,
    PublishError,
    ReleaseTagMoveError,
    ServeCheckMissingError,
    StaleImageError,
)
from core.network import is_loopback
from images.builder.render import (
    IMAGE_LOCK_DIR,
    IMAGE_SBOM,
    UNKNOWN_REVISION,
    base_digest_of,
    image_labels,
    product_source,
    vllm_source,
)
from images.builder.report import read_build_report
from images.builder.tags import (
    Channel,
    ImageReference,
    TagContext,
    parse_reference,
    render_tags,
)
from images.engine.port import ImageCopier, RegistryTarget
from images.oci.layout import find_manifest
from images.publish.registry import Credentials, ManifestInfo, RegistryClient
from images.publish.uploads import prepare_upload, render_upload
from images.records import (
    ReleaseRecord,
    TagMove,
    UploadStats,
    append_release_record,
    load_release_log,
)
from manifest import Manifest, Source

LOCK_LABEL = "io.vllm-musa.lock.sha256"
LOCK_INPUTS_LABEL = "io.vllm-musa.lock-inputs.sha256"
TITLE_LABEL = "org.opencontainers.image.title"
REVISION_LABEL = "org.opencontainers.image.revision"  # the product source's commit
SOURCE_LABEL = "org.opencontainers.image.source"  # the product source's https git URL
VERSION_LABEL = "org.opencontainers.image.version"  # v{release} (render.image_version)
LICENSES_LABEL = "org.opencontainers.image.licenses"  # image.licenses
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
VLLM_REVISION_LABEL = "io.vllm-musa.vllm.revision"  # the vLLM source's commit
VLLM_VERSION_LABEL = "io.vllm-musa.vllm.version"
TOOLING_REVISION_LABEL = "io.vllm-musa.tooling.revision"  # this tool's commit
TOOLING_KEY = "(tooling)"  # source_revisions: the commit of the tool that built the image
DIFF_LABELS = (
    BASE_NAME_LABEL,
    BASE_DIGEST_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    VERSION_LABEL,
    VLLM_REVISION_LABEL,
    VLLM_VERSION_LABEL,
    TOOLING_REVISION_LABEL,
    LOCK_LABEL,
    LOCK_INPUTS_LABEL,
)


# ------------------------------------------------------------------------------ the ports


class LocalImageLike(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def repo_digests(self) -> tuple[str, ...]: ...


class Pusher(Protocol):
    def inspect(self, ref: str) -> LocalImageLike | None: ...
    def read_file(self, ref: str, path: str) -> bytes: ...


# ------------------------------------------------------------------------------ image side


@dataclass(frozen=True, kw_only=True)
class BuiltImage:
    image_id: str
    report: Path
    dockerfile_sha256: str | None = None
    base_image: str | None = None
    lock_sha256: str | None = None
    lock_inputs_sha256: str | None = None
    digest: str | None = None  # the normalized image's manifest digest
    layout: Path | None = None  # its OCI layout; the image is its ``target`` tag there
    compressor: str | None = None  # what compressed its own layers (None: not said)

    @property
    def base_image_digest(self) -> str | None:
        if self.base_image and "@" in self.base_image:
            return self.base_image.rsplit("@", 1)[1]
        return None


def built_image_from_report(
    path: Path, *, target: str, dockerfile: Path | None = None, root: Path | None = None
) -> BuiltImage:
    """The image a ``build_image.py build`` produced and gated, from its build report.

    The report must be for ``target`` and every gate in it must have passed. Its
    ``dockerfile_sha256``, when empty, is the sha256 of ``dockerfile`` (the staged render),
    when that exists. Its ``oci_layout`` is read relative to ``root`` (the repository), else
    to the report's directory.
    """
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
    dockerfile_sha256 = report.dockerfile_sha256 or None
    if dockerfile_sha256 is None and dockerfile is not None and dockerfile.is_file():
        dockerfile_sha256 = hashlib.sha256(dockerfile.read_bytes()).hexdigest()
    return BuiltImage(
        image_id=report.image_id,
        report=path,
        dockerfile_sha256=dockerfile_sha256,
        base_image=report.base_image or None,
        lock_sha256=report.lock_sha256 or None,
        lock_inputs_sha256=report.lock_inputs_sha256 or None,
        digest=report.digest or None,
        layout=(root or path.parent) / report.oci_layout if report.oci_layout else None,
        compressor=report.compressor or None,
    )


def image_lock_path() -> str:
    """Where an image built by this tool carries its pylock.toml."""
    return f"{IMAGE_LOCK_DIR}/pylock.toml"


def image_sbom_path() -> str:
    """Where an image built by this tool carries its SBOM."""
    return IMAGE_SBOM


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
    built: BuiltImage
    # what the release record says of the serve-check (check_serve_check); None for nightly
    serve_check: Mapping[str, str] | None = None


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    record: ReleaseRecord | None  # None: already published, nothing pushed or written
    lines: tuple[str, ...]
    tags: Mapping[str, str] = field(default_factory=dict)  # each tag -> the digest it serves
    # what the first copy uploaded and reused (later tags reuse everything); all 0 when
    # nothing was pushed
    upload: UploadStats = field(default_factory=UploadStats)


def plan_tags(manifest: Manifest, *, target: str, channel: Channel, date: str) -> list[str]:
    if manifest.image is None:
        raise NoImageSettingsError(
            f"{manifest.path}: the manifest has no image: section",
            hint="add image: {repository: ..., release_tags: [...], nightly_tags: [...]}",
        )
    context = TagContext(
        release=manifest.release,
        python=manifest.target.python_str,
        arch=manifest.target.arch,
        date=date,
        variables=manifest.image.variables,
    )
    templates = manifest.image.release_tags if channel == "release" else manifest.image.nightly_tags
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


def check_image_matches_manifest(
    manifest: Manifest, built: BuiltImage, labels: Mapping[str, str], image_id: str
) -> None:
    """Refuse an image built from other pins (or for another release or stack) than the
    manifest whose tags it is about to get: the published tag must never drift from the pins.

    Every statement the build report and the image labels make is checked; an image without
    them (not built by ``build_image.py build``) is judged by what it does say.
    """
    where = f"image {image_id} (build report {built.report})"
    inputs = {
        f"label {LOCK_INPUTS_LABEL}": labels.get(LOCK_INPUTS_LABEL),
        "build report lock_inputs_sha256": built.lock_inputs_sha256,
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


def check_base_pinned(
    manifest: Manifest, built: BuiltImage, labels: Mapping[str, str], image_id: str
) -> None:
    """Refuse a release of an image whose base image was not pinned by digest.

    The base is the build report's ``base_image``, else the image's base.name label. A digest
    the build read from a tag (the base.digest label) does not count: the reference must pin
    it, so a rebuild starts from the same base."""
    base = built.base_image or labels.get(BASE_NAME_LABEL) or ""
    if not base:
        raise PublishError(
            f"a release needs a base image pinned by digest, and image {image_id} names no base "
            f"image (its build report {built.report} has no base_image, the image no "
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


def check_serve_check(
    image_id: str,
    bundle: tuple[str, bool, tuple[str, ...]] | None,
    *,
    bundle_sha256: str | None,
    skip: bool,
    how: str,
) -> dict[str, str]:
    """What a release record says of the serve-check, or a refusal: a release needs a passing
    serve-check bundle of this very image, unless ``--no-serve-check`` says otherwise (and
    the record says so). ``bundle``: (image ID, passed, failures) of the bundle found."""
    if skip:
        return {"status": "skipped", "reason": "--no-serve-check"}
    if bundle is None:
        raise ServeCheckMissingError(
            f"a release needs a passing serve-check of image {image_id}, and there is none",
            hint=f"run `{how}` (on a host with the device), or publish with --no-serve-check "
            "(the release record says it was skipped)",
        )
    bundle_image, passed, failures = bundle
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
    assert bundle_sha256 is not None
    return {"status": "passed", "bundle_sha256": bundle_sha256}


def _check_release(request: PublishRequest, image: LocalImageLike) -> None:
    """A release needs a base pinned by digest and the outcome of the image's serve-check."""
    check_base_pinned(request.manifest, request.built, image.labels, image.id)
    if request.serve_check is None:
        raise ServeCheckMissingError(
            f"a release of image {image.id} needs the outcome of its serve-check",
            hint="check_serve_check says what the release record holds of it",
        )


def _repository(request: PublishRequest) -> ImageReference:
    """The repository the tags go to; a tag or digest in it is refused."""
    repo = parse_reference(request.repository)
    if repo.tag or repo.digest:
        raise PublishError(
            f"repository {request.repository!r} includes a tag or digest",
            hint="give the repository only; tags come from the manifest's image.*_tags",
        )
    return repo


def _local_image(request: PublishRequest, pusher: Pusher) -> LocalImageLike:
    """The image the build report names, as the Docker daemon has it; refused when the
    daemon does not have it or it carries another lock than the report says."""
    built = request.built
    image = pusher.inspect(built.image_id)
    if image is None:
        raise PublishError(
            f"the build report {built.report} names image {built.image_id}, "
            "which the Docker daemon does not have",
            hint=f"build it again: `build_image.py build {request.manifest.path} --target "
            f"{request.target}`",
        )
    label_lock = image.labels.get(LOCK_LABEL)
    if label_lock and built.lock_sha256 and label_lock != built.lock_sha256:
        raise PublishError(
            f"image {image.id} carries lock {label_lock} (label {LOCK_LABEL}), but its build "
            f"report {built.report} says {built.lock_sha256}",
            hint="the report and the image do not belong together: build again",
        )
    return image


def _tags_now(
    registry: RegistryClient, refs: list[ImageReference]
) -> dict[str, ManifestInfo | None]:
    """Where every tag points now (None: the tag does not exist)."""
    return {str(ref): registry.lookup(ref.repository, ref.reference) for ref in refs}


def _release_done(
    refs: list[ImageReference],
    before: Mapping[str, ManifestInfo | None],
    known: set[str],
) -> PublishResult | None:
    """Before a release is pushed: refuse a release tag that exists with another image than
    ``known`` (the digests the image has in this repository); when every tag already serves
    this image, the result that says so (nothing to push or record); else None."""
    moved = [
        (ref, info)
        for ref, info in ((r, before[str(r)]) for r in refs)
        if info is not None and info.digest not in known
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


@dataclass(frozen=True, kw_only=True)
class _Layout:
    path: Path
    tag: str
    digest: str


def _built_layout(request: PublishRequest, image_id: str) -> _Layout:
    """The build's normalized image, checked: the report names its layout and digest, and
    the layout holds that manifest, whose config is the gated image ``image_id``."""
    built = request.built
    again = (
        f"build it again: `build_image.py build {request.manifest.path} --target {request.target}`"
    )
    if built.layout is None or built.digest is None:
        raise PublishError(
            f"the build report {built.report} names no normalized image (digest, oci_layout)",
            hint=f"it was written by an older build_image.py; {again}",
        )
    digest, manifest = find_manifest(built.layout, request.target)
    config = str(manifest.get("config", {}).get("digest", ""))
    if digest != built.digest or config != image_id:
        raise StaleImageError(
            f"{built.layout}: the layout's image {request.target} is {digest} (config "
            f"{config}), but the build report {built.report} says {built.digest} (image "
            f"{image_id})",
            hint=f"the layout and the report do not belong together; {again}",
        )
    return _Layout(path=built.layout, tag=request.target, digest=digest)


def _push_all(
    refs: list[ImageReference],
    layout: _Layout,
    before: Mapping[str, ManifestInfo | None],
    *,
    copier: ImageCopier,
    credentials: Credentials | None,
    progress: Callable[[str], None],
) -> dict[str, str]:
    """Copy the layout's image to every tag: each tag -> the digest its copy reported. A
    failure after some tags moved says which, and from what, so nothing is lost."""
    pushed: dict[str, str] = {}
    for ref in refs:
        progress(f"pushing {ref}")
        target = RegistryTarget(
            registry=ref.registry, reference=str(ref), plain_http=is_loopback(ref.registry)
        )
        try:
            pushed[str(ref)] = copier.push_layout(layout.path, layout.tag, target, credentials)
        except BuildImageError as exc:
            if not pushed:
                raise
            was = {t: (b.digest if b else "absent") for t, b in before.items()}
            already = "; ".join(f"{t} -> {d} (was {was[t]})" for t, d in sorted(pushed.items()))
            raise PublishError(
                f"{exc.message}\nthese tags were pushed before the failure: {already}; nothing "
                "was recorded",
                hint="publish again once the registry answers (tags already on this image are "
                "kept), or point them back by hand with the digests above",
            ) from None
    return pushed


def _served_digest(
    registry: RegistryClient,
    refs: list[ImageReference],
    pushed: Mapping[str, str],
    built: str,
) -> str:
    """The built digest, once every copy reported it and the registry serves it under every
    tag."""
    differ = {t: d for t, d in pushed.items() if d != built}
    if differ:
        raise DigestMismatchError(
            f"the build's image is {built}, but the copies reported "
            + ", ".join(f"{t} {d}" for t, d in sorted(differ.items())),
            hint="nothing was recorded; the registry rewrote the manifest: publish to a "
            "registry that keeps OCI manifests as they are",
        )
    for ref in refs:
        served = registry.lookup(ref.repository, ref.reference)
        if served is None or served.digest != built:
            raise DigestMismatchError(
                f"{ref}: the push reported {built}, but the registry serves "
                f"{served.digest if served else 'no such tag'}",
                hint="nothing was recorded; someone else pushed this tag meanwhile: publish "
                "again, then run `build_image.py verify-pins`",
            )
    return built


def _release_record(
    request: PublishRequest,
    *,
    repository: str,
    refs: list[ImageReference],
    image: LocalImageLike,
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
    built = request.built
    return ReleaseRecord(
        stack=request.manifest.name,
        channel=request.channel,
        target=request.target,
        repository=repository,
        tags=tuple(sorted(str(r) for r in refs)),
        digest=digest,
        image_id=image.id,
        lock_sha256=labels.get(LOCK_LABEL) or built.lock_sha256,
        manifest_sha256=hashlib.sha256(request.manifest_bytes).hexdigest(),
        dockerfile_sha256=built.dockerfile_sha256,
        base_image=built.base_image or labels.get(BASE_NAME_LABEL),
        base_image_digest=built.base_image_digest or labels.get(BASE_DIGEST_LABEL),
        source_revisions=source_revisions(request.manifest, labels),
        tool_version=request.tool_version,
        time=request.now,
        moves=moves if request.channel == "nightly" else (),
        labels={k: v for k, v in labels.items() if k in DIFF_LABELS},
        serve_check=request.serve_check,
        upload=upload,
        compressor=built.compressor,
    )


def publish(
    request: PublishRequest,
    *,
    pusher: Pusher,
    copier: ImageCopier,
    registry: RegistryClient,
    credentials: Credentials | None,
    progress: Callable[[str], None],
) -> PublishResult:
    """Push the gated image of ``request`` under every tag it plans, check the registry
    serves its digest under all of them, and append the release record. Before the first
    copy, the layers the repository lacks are mounted from the base image's repository when
    that is on the same registry; what the copy uploads and reuses is on the result and in
    the record.

    Everything is checked before anything is pushed: the repository, the image (the daemon
    has it, it is the report's and the manifest's, its layout holds it with the report's
    digest), a release's base pin and serve-check,
    the record file, and (a release) that no release tag would move. A release already
    published is a result with no record: nothing is pushed or written."""
    repo = _repository(request)
    tags = plan_tags(
        request.manifest, target=request.target, channel=request.channel, date=request.date
    )
    image = _local_image(request, pusher)
    layout = _built_layout(request, image.id)
    check_image_matches_manifest(request.manifest, request.built, image.labels, image.id)
    if request.channel == "release":
        _check_release(request, image)
    # a broken record file must stop us before anything is pushed, not after
    load_release_log(request.record_path, stack=request.manifest.name)
    refs = [repo.with_tag(t) for t in tags]
    before = _tags_now(registry, refs)  # before anything is pushed: where does every tag point?
    if request.channel == "release":
        done = _release_done(refs, before, {layout.digest})
        if done is not None:
            return done
    upload = prepare_upload(
        registry,
        destination=repo,
        layout=layout.path,
        tag=layout.tag,
        base_image=request.built.base_image,
        progress=progress,
    )
    pushed = _push_all(
        refs, layout, before, copier=copier, credentials=credentials, progress=progress
    )
    digest = _served_digest(registry, refs, pushed, layout.digest)
    record = _release_record(
        request,
        repository=repo.name,
        refs=refs,
        image=image,
        digest=digest,
        before=before,
        upload=upload,
    )
    append_release_record(request.record_path, record)
    lines = [f"{r.pinned(digest)}  ({r.tag})" for r in refs]
    for move in record.moves:
        lines.append(f"moved {move.tag}: {move.from_digest or '(new)'} -> {move.to_digest}")
    lines.append(render_upload(upload))
    lines.append(f"recorded in {request.record_path}")
    return PublishResult(
        record=record,
        lines=tuple(lines),
        tags=dict.fromkeys(sorted(before), digest),
        upload=upload,
    )
