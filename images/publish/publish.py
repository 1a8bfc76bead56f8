"""Publishing orchestration: push a gated image under its tags, prove which bytes every tag
means, and record it; pin, verify, roll back and diff images.

The side effects sit behind two ports: ``DockerPusher`` (``images/build/pushing.py``, the daemon)
and ``RegistryClient`` (``images/publish/registry.py``, the registry HTTP API). Planning and
rendering (tag rendering, drift, rollback plans, lock diffs, the bake file) are pure.

Interfaces with the image side (``build_image.py build``), each isolated in one function:
``built_image_from_report`` (the build report), ``image_lock_path`` (where an image carries
its lock) and ``LOCK_LABEL`` (the label with the lock's sha256).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from packaging.version import InvalidVersion, Version

from core.errors import (
    BuildImageError,
    DigestMismatchError,
    DriftError,
    NoImageSettingsError,
    PublishError,
    RegistryError,
    ReleaseTagMoveError,
    StaleImageError,
)
from images.build.render import IMAGE_LOCK_DIR, IMAGE_SBOM
from images.build.tags import Channel, ImageReference, TagContext, parse_reference, render_tags
from images.publish.records import (
    ReleaseRecord,
    RollbackPlan,
    TagMove,
    append_release_record,
    load_release_log,
)
from images.publish.registry import Credentials, FetchedManifest, ManifestInfo, RegistryClient
from manifest import Manifest
from resolver.lockfile import Lock

RELEASES_DIR = Path(__file__).resolve().parent / "releases"
LOCK_LABEL = "io.vllm-musa.lock.sha256"
LOCK_INPUTS_LABEL = "io.vllm-musa.lock-inputs.sha256"
TITLE_LABEL = "org.opencontainers.image.title"
REVISION_LABEL = "org.opencontainers.image.revision"
SOURCE_LABEL = "org.opencontainers.image.source"
VERSION_LABEL = "org.opencontainers.image.version"
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
DIFF_LABELS = (
    BASE_NAME_LABEL,
    BASE_DIGEST_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    VERSION_LABEL,
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
    def tag(self, image_id: str, name: str, tag: str) -> None: ...
    def push(self, name: str, tag: str, credentials: Credentials | None) -> str: ...
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

    @property
    def base_image_digest(self) -> str | None:
        if self.base_image and "@" in self.base_image:
            return self.base_image.rsplit("@", 1)[1]
        return None


def _repo_root(manifest: Manifest) -> Path:
    from images.build.workspace import Workspace

    return Workspace.of(manifest.path).root


def default_build_report(manifest: Manifest, target: str) -> Path:
    """The image side writes build/reports/<manifest stem>-<target>.json."""
    return _repo_root(manifest) / "build" / "reports" / f"{manifest.stem}-{target}.json"


def staged_context(manifest: Manifest, target: str) -> Path:
    """The image side stages the build context in build/context/<manifest stem>-<target>/."""
    return _repo_root(manifest) / "build" / "context" / f"{manifest.stem}-{target}"


def built_image_from_report(
    path: Path, *, target: str, dockerfile: Path | None = None
) -> BuiltImage:
    """The image a ``build_image.py build`` produced and gated, from its build report.

    Report keys read: ``image_id``, ``target``, ``gates`` ({name: passed}), ``lock_sha256``,
    ``lock_inputs_sha256``, ``base_image``, and ``dockerfile_sha256`` (else the sha256 of
    ``dockerfile``, the staged render, when it exists).
    """
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PublishError(
            f"{path}: no build report",
            hint="build and gate the image first: `build_image.py build STACK --target "
            f"{target}` (or pass --build-report FILE)",
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PublishError(f"{path}: cannot read the build report: {exc}") from None
    if not isinstance(doc, dict):
        raise PublishError(f"{path}: the build report is not a JSON object")
    image_id = doc.get("image_id")
    if not isinstance(image_id, str) or not image_id.startswith("sha256:"):
        raise PublishError(f"{path}: the build report has no image_id (sha256:...)")
    if doc.get("target", target) != target:
        raise PublishError(
            f"{path}: the build report is for target {doc.get('target')!r}, not {target!r}",
            hint=f"pass the report of a --target {target} build",
        )
    gates = doc.get("gates")
    if isinstance(gates, Mapping):
        failed = sorted(k for k, v in gates.items() if v is not True)
        if failed:
            raise PublishError(
                f"{path}: image {image_id} failed the gates {', '.join(failed)}",
                hint="only a gated image is published; fix the build and gate it again",
            )

    def opt(key: str) -> str | None:
        value = doc.get(key)
        return value if isinstance(value, str) and value else None

    dockerfile_sha256 = opt("dockerfile_sha256")
    if dockerfile_sha256 is None and dockerfile is not None and dockerfile.is_file():
        dockerfile_sha256 = hashlib.sha256(dockerfile.read_bytes()).hexdigest()
    return BuiltImage(
        image_id=image_id,
        report=path,
        dockerfile_sha256=dockerfile_sha256,
        base_image=opt("base_image"),
        lock_sha256=opt("lock_sha256"),
        lock_inputs_sha256=opt("lock_inputs_sha256"),
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


@dataclass(frozen=True, kw_only=True)
class PublishResult:
    record: ReleaseRecord | None  # None: already published, nothing pushed or written
    lines: tuple[str, ...]


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
    out = {s.name: s.rev for s in manifest.sources if s.rev}
    revision = labels.get(REVISION_LABEL)
    if revision and revision != "unknown":
        out["(image)"] = revision
    return dict(sorted(out.items()))


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
    checks = (
        (VERSION_LABEL, manifest.release, "release"),
        (TITLE_LABEL, manifest.name, "name"),
    )
    for label, want, key in checks:
        got = labels.get(label)
        if got and got != want:
            raise StaleImageError(
                f"{where} is labelled {label}={got!r}, but {manifest.path} has {key}: {want!r}",
                hint="build the image from this manifest, then publish it",
            )


def publish(
    request: PublishRequest,
    *,
    pusher: Pusher,
    registry: RegistryClient,
    credentials: Credentials | None,
    progress: Callable[[str], None],
) -> PublishResult:
    repo = parse_reference(request.repository)
    if repo.tag or repo.digest:
        raise PublishError(
            f"repository {request.repository!r} includes a tag or digest",
            hint="give the repository only; tags come from the manifest's image.*_tags",
        )
    tags = plan_tags(
        request.manifest, target=request.target, channel=request.channel, date=request.date
    )
    image = pusher.inspect(request.built.image_id)
    if image is None:
        raise PublishError(
            f"the build report {request.built.report} names image {request.built.image_id}, "
            "which the Docker daemon does not have",
            hint=f"build it again: `build_image.py build {request.manifest.path} --target "
            f"{request.target}`",
        )
    label_lock = image.labels.get(LOCK_LABEL)
    if label_lock and request.built.lock_sha256 and label_lock != request.built.lock_sha256:
        raise PublishError(
            f"image {image.id} carries lock {label_lock} (label {LOCK_LABEL}), but its build "
            f"report {request.built.report} says {request.built.lock_sha256}",
            hint="the report and the image do not belong together: build again",
        )
    check_image_matches_manifest(request.manifest, request.built, image.labels, image.id)
    # a broken record file must stop us before anything is pushed, not after
    load_release_log(request.record_path, stack=request.manifest.name)
    refs = [repo.with_tag(t) for t in tags]

    # Before anything is pushed: where does every tag point now?
    before: dict[str, ManifestInfo | None] = {}
    for ref in refs:
        before[str(ref)] = registry.lookup(ref.repository, ref.reference)
    known = {d.split("@", 1)[1] for d in image.repo_digests if d.split("@", 1)[0] == repo.name}
    if request.channel == "release":
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
        if all(before[str(r)] is not None for r in refs):
            return PublishResult(
                record=None,
                lines=tuple(
                    f"{r} is already this image ({info.digest}); nothing pushed or recorded"
                    for r in refs
                    if (info := before[str(r)]) is not None
                ),
            )

    pushed: dict[str, str] = {}
    for ref in refs:
        progress(f"pushing {ref}")
        try:
            pusher.tag(image.id, ref.name, ref.reference)
            pushed[str(ref)] = pusher.push(ref.name, ref.reference, credentials)
        except BuildImageError as exc:
            if not pushed:
                raise
            # some tags already moved: say exactly which, and from what, so nothing is lost
            was = {t: (b.digest if b else "absent") for t, b in before.items()}
            already = "; ".join(f"{t} -> {d} (was {was[t]})" for t, d in sorted(pushed.items()))
            raise PublishError(
                f"{exc.message}\nthese tags were pushed before the failure: {already}; nothing "
                "was recorded",
                hint="publish again once the registry answers (tags already on this image are "
                "kept), or point them back by hand with the digests above",
            ) from None
    digests = sorted(set(pushed.values()))
    if len(digests) != 1:
        raise DigestMismatchError(
            "the pushes reported different digests for one image: "
            + ", ".join(f"{t} {d}" for t, d in sorted(pushed.items())),
            hint="nothing was recorded; another push to this repository may have raced",
        )
    digest = digests[0]
    for ref in refs:
        served = registry.lookup(ref.repository, ref.reference)
        if served is None or served.digest != digest:
            raise DigestMismatchError(
                f"{ref}: the push reported {digest}, but the registry serves "
                f"{served.digest if served else 'no such tag'}",
                hint="nothing was recorded; someone else pushed this tag meanwhile: publish "
                "again, then run `build_image.py verify-pins`",
            )
    moves = tuple(
        TagMove(tag=t, from_digest=b.digest if b else None, to_digest=digest)
        for t, b in sorted(before.items())
        if b is None or b.digest != digest
    )
    labels = dict(image.labels)
    record = ReleaseRecord(
        stack=request.manifest.name,
        channel=request.channel,
        target=request.target,
        repository=repo.name,
        tags=tuple(sorted(str(r) for r in refs)),
        digest=digest,
        image_id=image.id,
        lock_sha256=labels.get(LOCK_LABEL) or request.built.lock_sha256,
        manifest_sha256=hashlib.sha256(request.manifest_bytes).hexdigest(),
        dockerfile_sha256=request.built.dockerfile_sha256,
        base_image=request.built.base_image or labels.get(BASE_NAME_LABEL),
        base_image_digest=request.built.base_image_digest or labels.get(BASE_DIGEST_LABEL),
        source_revisions=source_revisions(request.manifest, labels),
        tool_version=request.tool_version,
        time=request.now,
        moves=moves if request.channel == "nightly" else (),
        labels={k: v for k, v in labels.items() if k in DIFF_LABELS},
    )
    append_release_record(request.record_path, record)
    lines = [f"{r.pinned(digest)}  ({r.tag})" for r in refs]
    for move in record.moves:
        lines.append(f"moved {move.tag}: {move.from_digest or '(new)'} -> {move.to_digest}")
    lines.append(f"recorded in {request.record_path}")
    return PublishResult(record=record, lines=tuple(lines))


# ------------------------------------------------------------------------------ pin


def render_pin(ref: ImageReference, info: ManifestInfo) -> list[str]:
    if not info.is_index:
        return [ref.pinned(info.digest)]
    lines = [
        ref.pinned(info.digest),
        f"{ref} is a multi-arch index ({info.media_type}) of {len(info.platforms)} manifests; "
        "the digest above pins the index. Per platform:",
    ]
    lines += [f"  {p.platform:<16} {ref.pinned(p.digest)}" for p in info.platforms]
    return lines


# ------------------------------------------------------------------------------ rollback


def apply_rollback(
    plan: RollbackPlan,
    *,
    registry_for: Callable[[str], RegistryClient],
    record_path: Path,
    now: str,
    tool_version: str,
    progress: Callable[[str], None],
) -> ReleaseRecord:
    """Re-point the plan's tags to the previous digest (manifest copied by digest)."""
    refs = [parse_reference(t) for t in plan.tags]
    for ref in refs:  # refuse before anything moves
        served = registry_for(ref.registry).lookup(ref.repository, ref.reference)
        if served is None or served.digest != plan.current.digest:
            raise DriftError(
                f"{ref} serves {served.digest if served else 'nothing'}, not the recorded "
                f"{plan.current.digest}; nothing was re-pointed",
                hint="the tag was moved behind the tool's back: run `build_image.py verify-pins "
                "STACK` and settle that first",
            )
    manifests: dict[tuple[str, str], FetchedManifest] = {}
    for ref in refs:
        key = (ref.registry, ref.repository)
        client = registry_for(ref.registry)
        if key not in manifests:
            fetched = client.fetch(ref.repository, plan.digest)
            if fetched is None:
                raise RegistryError(
                    f"{ref.name}@{plan.digest}: the registry no longer has the previous image",
                    hint="it may have been garbage-collected; publish that image again",
                )
            manifests[key] = fetched
        progress(f"re-pointing {ref} -> {plan.digest}")
        client.put(ref.repository, ref.reference, manifests[key])
        served = client.lookup(ref.repository, ref.reference)
        if served is None or served.digest != plan.digest:
            raise DigestMismatchError(
                f"{ref}: after the re-point the registry serves "
                f"{served.digest if served else 'nothing'}, expected {plan.digest}"
            )
    prev = plan.previous
    record = ReleaseRecord(
        stack=prev.stack,
        channel="rollback",
        target=prev.target,
        repository=plan.current.repository,
        tags=plan.tags,
        digest=plan.digest,
        image_id=prev.image_id,
        lock_sha256=prev.lock_sha256,
        manifest_sha256=prev.manifest_sha256,
        dockerfile_sha256=prev.dockerfile_sha256,
        base_image=prev.base_image,
        base_image_digest=prev.base_image_digest,
        source_revisions=prev.source_revisions,
        tool_version=tool_version,
        time=now,
        moves=tuple(
            TagMove(tag=t, from_digest=plan.current.digest, to_digest=plan.digest)
            for t in plan.tags
        ),
        labels=prev.labels,
    )
    append_release_record(record_path, record)
    return record


# ------------------------------------------------------------------------------ image diff


@dataclass(frozen=True, kw_only=True)
class LockDiff:
    added: tuple[tuple[str, str], ...] = ()  # (name, version)
    removed: tuple[tuple[str, str], ...] = ()
    version_changed: tuple[tuple[str, str, str], ...] = ()  # (name, old, new)
    label_changed: tuple[tuple[str, str, str], ...] = ()  # local label only
    file_changed: tuple[tuple[str, str, str], ...] = ()  # same version, other file/bytes

    def empty(self) -> bool:
        return not (
            self.added or self.removed or self.version_changed or self.label_changed
            or self.file_changed
        )  # fmt: skip


def _public(version: str) -> str:
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def classify_lock_diff(a: Lock, b: Lock) -> LockDiff:
    pa, pb = a.by_name(), b.by_name()
    added, removed, changed, labels, files = [], [], [], [], []
    for name in sorted(set(pa) | set(pb)):
        x, y = pa.get(name), pb.get(name)
        if x is None and y is not None:
            added.append((str(name), y.version))
        elif y is None and x is not None:
            removed.append((str(name), x.version))
        elif x is not None and y is not None:
            if x.version != y.version:
                if _public(x.version) == _public(y.version):
                    labels.append((str(name), x.version, y.version))
                else:
                    changed.append((str(name), x.version, y.version))
            elif x.sha256 != y.sha256 or x.filename != y.filename:
                files.append((str(name), x.filename, y.filename))
    return LockDiff(
        added=tuple(added),
        removed=tuple(removed),
        version_changed=tuple(changed),
        label_changed=tuple(labels),
        file_changed=tuple(files),
    )


@dataclass(frozen=True, kw_only=True)
class DiffSide:
    name: str  # what the user gave
    lock: Lock
    image_id: str | None = None  # None: a lock on disk, not an image
    labels: Mapping[str, str] = field(default_factory=dict)
    built_from: Mapping[str, str] = field(default_factory=dict)  # source-built dist -> revision


def parse_sbom_sources(text: str) -> dict[str, str]:
    """Source-built distribution -> revision, from the image's CycloneDX SBOM (best effort)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return {}
    out: dict[str, str] = {}
    components = doc.get("components", []) if isinstance(doc, dict) else []
    for c in components if isinstance(components, list) else []:
        for prop in c.get("properties", []) if isinstance(c, dict) else []:
            if isinstance(prop, dict) and prop.get("name") == "vllm-musa:built-from":
                out[str(c.get("name"))] = str(prop.get("value"))
    return dict(sorted(out.items()))


def _base_image(labels: Mapping[str, str]) -> str:
    name, digest = labels.get(BASE_NAME_LABEL), labels.get(BASE_DIGEST_LABEL)
    if name and digest:
        return f"{name}@{digest}" if "@" not in name else name
    return name or digest or "(not labelled)"


def _compare(title: str, a: str, b: str) -> str:
    return f"{title}: {a} (same)" if a == b else f"{title}: {a} -> {b}"


def render_diff(a: DiffSide, b: DiffSide) -> list[str]:
    d = classify_lock_diff(a.lock, b.lock)
    lines = [f"--- {a.name}", f"+++ {b.name}"]

    def section(title: str, rows: Sequence[str]) -> None:
        if rows:
            lines.append(f"{title} ({len(rows)}):")
            lines.extend(f"  {row}" for row in rows)

    section("added", [f"+ {n} {v}" for n, v in d.added])
    section("removed", [f"- {n} {v}" for n, v in d.removed])
    section("version changed", [f"~ {n} {o} -> {v}" for n, o, v in d.version_changed])
    section(
        "local label only (same public version, another build)",
        [f"~ {n} {o} -> {v}" for n, o, v in d.label_changed],
    )
    section("same version, other file", [f"~ {n} {o} -> {v}" for n, o, v in d.file_changed])
    if d.empty():
        lines.append("the locks install the same distributions at the same versions")
    if a.lock.target != b.lock.target:
        lines.append(f"target: {a.lock.target.describe()} -> {b.lock.target.describe()}")
    if a.image_id is None and b.image_id is None:
        return lines
    if a.image_id is not None and b.image_id is not None:
        section("image", _compare_images(a, b))
    else:
        image = a if a.image_id is not None else b
        section(f"image {image.name} (the other side is a lock)", _describe_image(image))
    return lines


def _label(side: DiffSide, label: str) -> str | None:
    return side.labels.get(label) or None  # an empty label says nothing


def _describe_image(side: DiffSide) -> list[str]:
    rows = [
        f"image id: {side.image_id}",
        f"base image: {_base_image(side.labels)}",
        f"revision: {_label(side, REVISION_LABEL) or '(not labelled)'}",
    ]
    rows += [f"source {name}: {rev}" for name, rev in side.built_from.items()]
    return rows


def _compare_images(a: DiffSide, b: DiffSide) -> list[str]:
    rows = [
        _compare("image id", a.image_id or "", b.image_id or ""),
        _compare("base image", _base_image(a.labels), _base_image(b.labels)),
        _compare(
            "revision",
            _label(a, REVISION_LABEL) or "(not labelled)",
            _label(b, REVISION_LABEL) or "(not labelled)",
        ),
    ]
    for name in sorted(set(a.built_from) | set(b.built_from)):
        rows.append(
            _compare(
                f"source {name}",
                a.built_from.get(name, "(absent)"),
                b.built_from.get(name, "(absent)"),
            )
        )
    for label in DIFF_LABELS:
        if label in (BASE_NAME_LABEL, BASE_DIGEST_LABEL, REVISION_LABEL):
            continue
        va, vb = _label(a, label), _label(b, label)
        if va != vb:
            rows.append(f"{label}: {va or '(none)'} -> {vb or '(none)'}")
    return rows
