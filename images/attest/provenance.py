"""The SLSA provenance of a built image: an in-toto Statement v1 whose predicate is SLSA
provenance v1 (docs/json.md, "Provenance"), written as canonical JSON.

``statement_bytes(inputs)`` is a pure function of a ``ProvenanceInputs``: the same inputs, in
any order, give the same bytes, so the digest of what is pushed is stable. What varies from
run to run (the host, the start and finish times) is never in it: ``run_record`` is a
separate document. ``gather`` makes the inputs from what a build leaves (its report, the
manifest, the lock's ``pylock.toml``, the image's SBOM and labels), and is the only function
here that reads a file. ``read_statement`` reads a statement back, and ``lock_differences``
compares its locked files with a lock's.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from core.errors import AttestationError
from core.json_output import document
from images.builder.labels import TOOLING_REVISION_LABEL, UNKNOWN_REVISION, base_digest_of
from images.builder.report import read_build_report
from manifest import Manifest, load_manifest
from resolver.lockfile import PYLOCK, Lock, parse_pylock

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
# This tool's repository. pyproject.toml has no [project.urls]; the SBOM's serial numbers are
# derived from the same URL (images/builder/in_image/sbom.py SERIAL_NAMESPACE).
TOOL_REPOSITORY = "https://github.com/MooreThreads/vllm-musa-image"
# What this tool's build is, as an identifier: it grows when a field changes meaning
BUILD_TYPE = f"{TOOL_REPOSITORY}/build/v1"
# resolvedDependencies[].annotations.kind, in the order the list has them
BASE_KIND, SOURCE_KIND, LOCKED_KIND, DEB_KIND = "base-image", "source", "locked-file", "deb"
SourceOrigin = Literal["git", "path", "sdist"]
_REBUILD = "build the image again: `build_image.py build STACK --target TARGET`"
_SBOM = "give the SBOM this tool wrote in the image (/opt/vllm-musa/sbom.json)"


@dataclass(frozen=True, kw_only=True)
class LockedFile:
    """A file of the lock (a wheel, or a source's sdist): the lock's ``group`` it is in."""

    filename: str
    distribution: str
    version: str
    url: str
    sha256: str
    group: str = "runtime"  # runtime | build | source

    def annotations(self) -> dict[str, str]:
        return {"distribution": self.distribution, "version": self.version, "group": self.group}


@dataclass(frozen=True, kw_only=True)
class SourcePin:
    """A source the image builds (``sources.<name>``): a git repository at ``git_commit``, a
    directory of this tool's repository at its commit (``path``), or a locked sdist
    (``sha256``; ``rev``, the commit the manifest says it was cut from)."""

    name: str
    origin: SourceOrigin
    uri: str
    git_commit: str | None = None  # git, path
    sha256: str | None = None  # sdist
    rev: str | None = None  # sdist, when the manifest gives one

    def digest(self) -> dict[str, str]:
        return {"gitCommit": self.git_commit} if self.git_commit else {"sha256": str(self.sha256)}

    def annotations(self) -> dict[str, str]:
        return {"from": self.origin} | ({"rev": self.rev} if self.rev else {})


@dataclass(frozen=True, kw_only=True)
class DebPackage:
    """A Debian package installed in the image, as its SBOM records it (no hash: dpkg's
    status, which the SBOM is made from, has none)."""

    name: str
    version: str
    purl: str  # pkg:deb/<os>/<name>@<version>?arch=...


@dataclass(frozen=True, kw_only=True)
class ProvenanceInputs:
    """Everything the statement says, checked when made; the lists are kept sorted (locked
    files by filename, sources by name, Debian packages by purl), so the order they are given
    in changes nothing."""

    repository: str  # registry/repository, no tag
    image_digest: str  # sha256:... of the image manifest
    manifest_path: str  # the stack manifest, by its path in the repository
    manifest_sha256: str  # of its bytes
    lock_sha256: str  # of the lock's pylock.toml (what the release record's lock_sha256 is)
    target: str
    tooling_repository: str
    tooling_commit: str
    source_date_epoch: int
    compressor: str
    base_image: str  # the FROM reference, as the build report has it
    base_digest: str  # sha256:..., or "": not known (a base only the local daemon has)
    locked_files: tuple[LockedFile, ...]
    sources: tuple[SourcePin, ...]
    debs: tuple[DebPackage, ...]
    builder_id: str

    def __post_init__(self) -> None:
        for name, (pattern, shape, hint) in _SHAPES.items():
            value = getattr(self, name)
            ok = isinstance(value, str) and re.fullmatch(pattern, value) is not None
            _require(ok, f"the {name} is {value!r}; it must {shape}", hint)
        epoch = self.source_date_epoch
        ok = isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0
        _require(ok, f"the source_date_epoch is {epoch!r}; it must be seconds", _REBUILD)
        for f in self.locked_files:
            ok = re.fullmatch(_HEX64, f.sha256) is not None
            _require(ok, f"{f.filename}: the sha256 is {f.sha256!r}", "lock again")
        for s in self.sources:  # one digest: a commit (git, path) or a sha256 (sdist)
            sdist = s.origin == "sdist"
            ok = bool(s.sha256) == sdist and bool(s.git_commit) != sdist
            _require(ok, f"sources.{s.name} has no digest of its {s.origin}", "lock again")
        object.__setattr__(self, "locked_files", _sorted_unique(self.locked_files, "filename"))
        object.__setattr__(self, "sources", _sorted_unique(self.sources, "name"))
        object.__setattr__(self, "debs", _sorted_unique(self.debs, "purl"))


_HEX64 = "[0-9a-f]{64}"
_GIVEN = (r"\S.*", "not be empty", "give it")
# field -> (the pattern its text matches whole, that shape in words, the fix)
_SHAPES: dict[str, tuple[str, str, str]] = {
    "repository": (
        r"(?:[^/@\s]+/)*[^/:@\s]+",
        "be a repository without a tag or a digest",
        "give the repository alone (registry/name)",
    ),
    "image_digest": (f"sha256:{_HEX64}", "be sha256:<64 hex digits>", _REBUILD),
    "base_digest": (f"(?:sha256:{_HEX64})?", "be sha256:<64 hex digits>", "pin the base image"),
    "manifest_sha256": (_HEX64, "be 64 hex digits", "give the sha256 of the manifest's bytes"),
    "lock_sha256": (_HEX64, "be 64 hex digits", "give the sha256 of the lock's pylock.toml"),
    "tooling_commit": (
        "[0-9a-f]{40}(?:[0-9a-f]{24})?",
        "be a commit id",
        "build from a git checkout of this tool",
    ),
    **dict.fromkeys(
        ("manifest_path", "target", "tooling_repository", "compressor", "base_image", "builder_id"),
        _GIVEN,
    ),
}


def _require(ok: bool, message: str, hint: str) -> None:
    if not ok:
        raise AttestationError(f"provenance: {message}", hint=hint)


def _sorted_unique(items: Iterable[Any], key: str) -> tuple[Any, ...]:
    """``items`` sorted by ``key``; two with the same key are refused."""
    out = tuple(sorted(items, key=lambda item: str(getattr(item, key))))
    for a, b in itertools.pairwise(out):
        same = getattr(a, key) == getattr(b, key)
        _require(not same, f"two entries with {key} {getattr(a, key)!r}", "give each once")
    return out


# ------------------------------------------------------------------------------ the statement


def statement(inputs: ProvenanceInputs) -> dict[str, Any]:
    """The in-toto Statement v1 with its SLSA provenance v1 predicate, as plain data."""
    i = inputs
    when = datetime.fromtimestamp(i.source_date_epoch, tz=timezone.utc)
    dependencies = [
        _dep(BASE_KIND, "base-image", i.base_image, _sha256_of(i.base_digest)),
        *(
            _dep(SOURCE_KIND, f"sources.{s.name}", s.uri, s.digest(), **s.annotations())
            for s in i.sources
        ),
        *(
            _dep(LOCKED_KIND, f.filename, f.url, {"sha256": f.sha256}, **f.annotations())
            for f in i.locked_files
        ),
        *(_dep(DEB_KIND, d.name, d.purl, {}, version=d.version) for d in i.debs),
    ]
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": i.repository, "digest": {"sha256": _hex(i.image_digest)}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {
                    "manifest": {"path": i.manifest_path, "sha256": i.manifest_sha256},
                    "lock": {"sha256": i.lock_sha256},
                    "target": i.target,
                    "tooling": {"repository": i.tooling_repository, "commit": i.tooling_commit},
                },
                "internalParameters": {
                    "source_date_epoch": i.source_date_epoch,
                    "source_date": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "compressor": i.compressor,
                },
                "resolvedDependencies": dependencies,
            },
            "runDetails": {"builder": {"id": i.builder_id}},
        },
    }


def _dep(kind: str, name: str, uri: str, digest: Mapping[str, str], **notes: str) -> dict[str, Any]:
    """A ResourceDescriptor of ``resolvedDependencies`` (no ``digest`` key when it has none)."""
    out: dict[str, Any] = {"name": name, "uri": uri, "annotations": {"kind": kind, **notes}}
    return out | ({"digest": dict(digest)} if digest else {})


def _sha256_of(digest: str) -> dict[str, str]:
    return {"sha256": _hex(digest)} if digest else {}


def _hex(digest: str) -> str:
    return digest.removeprefix("sha256:")


def canonical_json(doc: Any) -> bytes:
    """Sorted keys, no whitespace between tokens, ASCII only (anything else as ``\\uXXXX``),
    no trailing newline: one byte string for one document."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def statement_bytes(inputs: ProvenanceInputs) -> bytes:
    """What is pushed and signed: ``statement(inputs)`` as canonical JSON."""
    return canonical_json(statement(inputs))


def run_record(
    host: str, started: datetime, finished: datetime, *, statement: bytes
) -> dict[str, Any]:
    """``build-image/provenance-run/1``: what varies from one run to the next, kept out of the
    statement (docs/json.md): the host, the start and finish (UTC), and the sha256 of the
    statement's bytes this run made. ``started`` and ``finished`` carry a time zone."""
    if started.tzinfo is None or finished.tzinfo is None:
        raise ValueError("run_record: started and finished must carry a time zone")
    return document(
        "provenance-run",
        {
            "finished": _utc(finished),
            "host": host,
            "started": _utc(started),
            "statement_sha256": hashlib.sha256(statement).hexdigest(),
        },
    )


def _utc(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------ the inputs


def locked_files_of(lock: Lock) -> tuple[LockedFile, ...]:
    """Every file of ``lock``: the runtime and build wheels and the sources' sdists."""
    return tuple(
        LockedFile(
            filename=p.filename,
            distribution=str(p.name),
            version=p.version,
            url=p.url,
            sha256=p.sha256,
            group=p.group,
        )
        for p in lock.packages
    )


def source_pins(
    manifest: Manifest, lock: Lock, *, tooling_repository: str, tooling_commit: str
) -> tuple[SourcePin, ...]:
    """Each of ``manifest``'s sources as it is pinned: a git source by its rev; a path source
    as that directory of this tool's repository at ``tooling_commit``; an sdist by the
    sha256 its lock entry has."""
    pins = []
    sdists = {r: p for p in lock.sources() for r in p.required_by}
    for s in manifest.sources:
        if s.git is not None and s.rev is not None:
            uri = f"git+{s.git}@{s.rev}"  # the reader refuses credentials in it
            pins.append(SourcePin(name=s.name, origin="git", uri=uri, git_commit=s.rev))
        elif s.path is not None:
            uri = f"git+{tooling_repository}@{tooling_commit}#{s.path}"
            pins.append(SourcePin(name=s.name, origin="path", uri=uri, git_commit=tooling_commit))
        else:
            locked = sdists.get(f"(sources.{s.name})")
            if locked is None:
                raise AttestationError(
                    f"sources.{s.name} is an sdist, and the lock has none for it",
                    hint="lock again: `build_image.py lock STACK`",
                )
            url, sha256 = locked.url, locked.sha256
            pins.append(SourcePin(name=s.name, origin="sdist", uri=url, sha256=sha256, rev=s.rev))
    return tuple(pins)


def parse_sbom_debs(sbom: bytes) -> tuple[DebPackage, ...]:
    """The Debian packages (``pkg:deb/`` components) of a CycloneDX SBOM's bytes."""
    try:
        doc = json.loads(sbom)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AttestationError(f"the SBOM is not JSON: {exc}", hint=_SBOM) from None
    components = doc.get("components") if isinstance(doc, dict) else None
    if not isinstance(components, list) or doc.get("bomFormat") != "CycloneDX":
        raise AttestationError("the SBOM is not CycloneDX with components", hint=_SBOM)
    debs = []
    for c in components:
        purl = c.get("purl") if isinstance(c, dict) else None
        if not (isinstance(purl, str) and purl.startswith("pkg:deb/")):
            continue
        name, version = c.get("name"), c.get("version")
        if not (isinstance(name, str) and name and isinstance(version, str) and version):
            raise AttestationError(f"the SBOM's {purl} has no name or version", hint=_SBOM)
        debs.append(DebPackage(name=name, version=version, purl=purl))
    if not debs:
        raise AttestationError("the SBOM lists no Debian package (pkg:deb/...)", hint=_SBOM)
    return tuple(debs)


def _sbom_lock_sha256(sbom: bytes) -> str:
    """The lock sha256 the SBOM's image component names ("" when none)."""
    meta = json.loads(sbom).get("metadata")
    component = meta.get("component") if isinstance(meta, dict) else None
    props = component.get("properties") if isinstance(component, dict) else None
    for p in props if isinstance(props, list) else []:
        if isinstance(p, dict) and p.get("name") == "vllm-musa:lock-sha256":
            return str(p.get("value") or "")
    return ""


def gather(
    *,
    report_path: Path,
    manifest_path: Path,
    sbom: bytes,
    labels: Mapping[str, str],
    repository: str,
    builder_id: str,
    lock_dir: Path | None = None,
    base_digest: str | None = None,
    tooling_repository: str = TOOL_REPOSITORY,
    require_base_digest: bool = True,
) -> ProvenanceInputs:
    """The inputs of the statement of the image the build report at ``report_path`` describes,
    built from the manifest at ``manifest_path`` and locked by ``lock_dir`` (default: the
    manifest's ``<stem>.lock/``): the only files this module reads. ``labels`` are the image's,
    ``sbom`` the bytes of the SBOM in it; ``base_digest``, the base's digest when the report's
    ``base_image`` is a tag (the image's ``org.opencontainers.image.base.digest`` label)."""
    report = read_build_report(report_path)
    manifest = load_manifest(manifest_path)
    manifest_bytes = manifest_path.read_bytes()  # what the release record hashes too
    pylock_path = (lock_dir or manifest.default_lock_dir()) / PYLOCK
    try:
        pylock = pylock_path.read_bytes()
    except FileNotFoundError:
        raise AttestationError(
            f"{pylock_path}: no lock", hint="give the lock directory the image was built from"
        ) from None
    # -------- what was read, checked against the build report: from here on, no I/O
    epoch_hint = "build from a git checkout, or with SOURCE_DATE_EPOCH set"
    for key, given, hint in (
        ("digest", report.digest, _REBUILD),
        ("source_date_epoch", report.source_date_epoch is not None, epoch_hint),
        ("compressor", report.compressor, _REBUILD),
        ("stack", report.stack, _REBUILD),
        ("base_image", report.base_image, _REBUILD),
    ):
        if not given:
            raise AttestationError(f"{report_path}: the build report has no {key}", hint=hint)
    assert report.source_date_epoch is not None
    base = _base_digest(
        report.base_image, f"{report_path}:", base_digest, required=require_base_digest
    )
    pylock_sha256 = hashlib.sha256(pylock).hexdigest()
    if report.lock_sha256 != pylock_sha256:
        raise AttestationError(
            f"{pylock_path} (sha256 {pylock_sha256}) is not the lock the image was built from "
            f"({report_path}: lock_sha256 {report.lock_sha256 or 'absent'})",
            hint="give the lock directory of that build, or build the image again",
        )
    if report.lock_inputs_sha256 not in ("", manifest.lock_inputs_sha256):
        raise AttestationError(
            f"{manifest_path} is not the manifest the image was built from (its lock inputs "
            f"have sha256 {manifest.lock_inputs_sha256}, {report_path}: "
            f"{report.lock_inputs_sha256})",
            hint="give the manifest of that build",
        )
    debs = parse_sbom_debs(sbom)
    if (sbom_lock := _sbom_lock_sha256(sbom)) not in ("", pylock_sha256):
        raise AttestationError(
            f"the SBOM names lock {sbom_lock}, the build report {pylock_sha256}", hint=_SBOM
        )
    commit = labels.get(TOOLING_REVISION_LABEL, "")
    if commit in ("", UNKNOWN_REVISION):
        raise AttestationError(
            f"the image has no tooling commit (its {TOOLING_REVISION_LABEL} label is "
            f"{commit or 'absent'})",
            hint="build the image from a git checkout of this tool",
        )
    lock = parse_pylock(pylock.decode("utf-8"), where=str(pylock_path))
    return ProvenanceInputs(
        repository=repository,
        image_digest=report.digest,
        manifest_path=report.stack,
        manifest_sha256=hashlib.sha256(manifest_bytes).hexdigest(),
        lock_sha256=pylock_sha256,
        target=report.target,
        tooling_repository=tooling_repository,
        tooling_commit=commit,
        source_date_epoch=report.source_date_epoch,
        compressor=report.compressor,
        base_image=report.base_image,
        base_digest=base,
        locked_files=locked_files_of(lock),
        sources=source_pins(
            manifest, lock, tooling_repository=tooling_repository, tooling_commit=commit
        ),
        debs=debs,
        builder_id=builder_id,
    )


def _base_digest(ref: str, where: str, given: str | None, *, required: bool) -> str:
    """The base image's digest: pinned in its reference ``ref``, else ``given``; else ""
    unless ``required`` (a release's base is pinned)."""
    pinned = base_digest_of(ref)
    if pinned and given and given != pinned:
        raise AttestationError(
            f"{where} base_image {ref} is pinned to another digest than the base digest "
            f"given ({given})",
            hint="give the digest the base image is pinned to, or none",
        )
    if not (pinned or given or required):
        return ""
    if not (pinned or given):
        name = ref.partition("@")[0]
        raise AttestationError(
            f"{where} base_image {ref!r} is not pinned by digest, and no base digest was given",
            hint=f"pin it (`build_image.py pin-base STACK`, or base_image: {name}@sha256:...) "
            "and build again, or give the base digest the build used",
        )
    return pinned or str(given)


# ------------------------------------------------------------------------------ reading back


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """A statement read back: the inputs it records, and the sha256 of its bytes."""

    inputs: ProvenanceInputs
    sha256: str

    @property
    def locked_sha256(self) -> dict[str, str]:
        """Each locked file's filename -> the sha256 the statement records."""
        return {f.filename: f.sha256 for f in self.inputs.locked_files}


Key = str | int


def _bad(path: tuple[Key, ...], what: str) -> AttestationError:
    where = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
    return AttestationError(
        f"the provenance's {where or 'document'} {what}",
        hint="give an in-toto Statement v1 with SLSA provenance v1 as this tool writes it "
        "(docs/json.md)",
    )


def _at(doc: Any, *path: Key, kind: type = str) -> Any:
    """The value at ``path`` of ``doc``, of type ``kind`` (a string: not empty)."""
    value = doc
    for n, key in enumerate(path):
        if isinstance(value, dict) and isinstance(key, str) and key in value:
            value = value[key]
            continue
        if not (isinstance(value, list) and isinstance(key, int) and key < len(value)):
            raise _bad(path[: n + 1], "is missing")
        value = value[key]
    if not isinstance(value, kind) or isinstance(value, bool) or (kind is str and not value):
        raise _bad(path, f"is not {'a string' if kind is str else kind.__name__}")
    return value


def read_statement(data: bytes) -> Provenance:
    """Read a statement ``statement_bytes`` wrote; keys it does not know are ignored."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _bad((), f"is not JSON ({exc})") from None
    bd = ("predicate", "buildDefinition")
    for path, want in (
        (("_type",), STATEMENT_TYPE),
        (("predicateType",), PREDICATE_TYPE),
        ((*bd, "buildType"), BUILD_TYPE),
    ):
        if (got := _at(doc, *path)) != want:
            raise _bad(path, f"is {got!r}, not {want!r}")
    if len(_at(doc, "subject", kind=list)) != 1:
        raise _bad(("subject",), "does not have one entry")
    ext, internal = (*bd, "externalParameters"), (*bd, "internalParameters")
    deps: dict[str, list[tuple[Key, ...]]] = {}
    for n, _ in enumerate(_at(doc, *bd, "resolvedDependencies", kind=list)):
        entry = (*bd, "resolvedDependencies", n)
        deps.setdefault(_at(doc, *entry, "annotations", "kind"), []).append(entry)
    if len(deps.get(BASE_KIND, [])) != 1:
        raise _bad((*bd, "resolvedDependencies"), f"does not have one {BASE_KIND}")
    base = deps[BASE_KIND][0]
    inputs = ProvenanceInputs(
        repository=_at(doc, "subject", 0, "name"),
        image_digest="sha256:" + _at(doc, "subject", 0, "digest", "sha256"),
        manifest_path=_at(doc, *ext, "manifest", "path"),
        manifest_sha256=_at(doc, *ext, "manifest", "sha256"),
        lock_sha256=_at(doc, *ext, "lock", "sha256"),
        target=_at(doc, *ext, "target"),
        tooling_repository=_at(doc, *ext, "tooling", "repository"),
        tooling_commit=_at(doc, *ext, "tooling", "commit"),
        source_date_epoch=_at(doc, *internal, "source_date_epoch", kind=int),
        compressor=_at(doc, *internal, "compressor"),
        base_image=_at(doc, *base, "uri"),
        base_digest=(
            "sha256:" + _at(doc, *base, "digest", "sha256")
            if "digest" in _at(doc, *base, kind=dict)
            else ""
        ),
        locked_files=tuple(
            LockedFile(
                filename=_at(doc, *p, "name"),
                url=_at(doc, *p, "uri"),
                sha256=_at(doc, *p, "digest", "sha256"),
                **{k: _at(doc, *p, "annotations", k) for k in ("distribution", "version", "group")},
            )
            for p in deps.get(LOCKED_KIND, [])
        ),
        sources=tuple(_read_source(doc, p) for p in deps.get(SOURCE_KIND, [])),
        debs=tuple(
            DebPackage(
                name=_at(doc, *p, "name"),
                version=_at(doc, *p, "annotations", "version"),
                purl=_at(doc, *p, "uri"),
            )
            for p in deps.get(DEB_KIND, [])
        ),
        builder_id=_at(doc, "predicate", "runDetails", "builder", "id"),
    )
    return Provenance(inputs=inputs, sha256=hashlib.sha256(data).hexdigest())


def _read_source(doc: Any, path: tuple[Key, ...]) -> SourcePin:
    name, origin = _at(doc, *path, "name"), _at(doc, *path, "annotations", "from")
    if not name.startswith("sources.") or origin not in ("git", "path", "sdist"):
        raise _bad(path, "is not a source (name sources.NAME, from git, path or sdist)")
    sdist = origin == "sdist"
    has_rev = "rev" in _at(doc, *path, "annotations", kind=dict)
    return SourcePin(
        name=name.removeprefix("sources."),
        origin=origin,
        uri=_at(doc, *path, "uri"),
        git_commit=None if sdist else _at(doc, *path, "digest", "gitCommit"),
        sha256=_at(doc, *path, "digest", "sha256") if sdist else None,
        rev=_at(doc, *path, "annotations", "rev") if has_rev else None,
    )


def lock_differences(recorded: Provenance, locked_files: Iterable[LockedFile]) -> list[str]:
    """How the locked files ``recorded`` differ from ``locked_files`` (a lock's, e.g.
    ``locked_files_of(load_lock(DIR))``), by filename: one line per file whose sha256 differs
    or that only one side has, sorted; empty when they agree. URLs are not compared: the same
    file from a mirror is the same file."""
    had = recorded.locked_sha256
    now = {f.filename: f.sha256 for f in locked_files}
    lines = []
    for name in sorted(had.keys() | now.keys()):
        a, b = had.get(name), now.get(name)
        if a is None:
            lines.append(f"{name}: only in the lock (sha256 {b})")
        elif b is None:
            lines.append(f"{name}: only in the provenance (sha256 {a})")
        elif a != b:
            lines.append(f"{name}: the provenance records sha256 {a}, the lock {b}")
    return lines
