"""The SLSA provenance of a built image (images/attest/provenance.py), made from the real demo
stack (stack/demo-v028.yaml and its committed lock), a build report written in ``tmp_path`` and
a small CycloneDX SBOM with two Debian packages: the statement's fields, its bytes (the same on
every call and for inputs in any order), reading it back, comparing it with a lock, and the
refusals."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from core.errors import AttestationError
from images.attest.provenance import (
    BUILD_TYPE,
    LockedFile,
    ProvenanceInputs,
    SourcePin,
    gather,
    lock_differences,
    locked_files_of,
    parse_sbom_debs,
    read_statement,
    run_record,
    source_pins,
    statement_bytes,
)
from images.builder.labels import TOOLING_REVISION_LABEL
from images.builder.report import BuildReport, write_build_report
from manifest import Source, load_manifest
from resolver.lockfile import load_lock

ROOT = Path(__file__).resolve().parents[3]
STACK = ROOT / "stack" / "demo-v028.yaml"
LOCK_DIR = ROOT / "stack" / "demo-v028.lock"
LOCK_SHA256 = hashlib.sha256((LOCK_DIR / "pylock.toml").read_bytes()).hexdigest()
MANIFEST_SHA256 = hashlib.sha256(STACK.read_bytes()).hexdigest()
IMAGE_HEX = "c8e2a4f6b0d1c3e5a7f9b2d4c6e8a0f1b3d5c7e9a2f4b6d8c0e1a3f5b7d9c2e4"
BASE_HEX = "7d3c5e9a1b2f4d6c8e0a3b5d7f9c1e2a4b6d8f0c3e5a7b9d1f2c4e6a8b0d3f5c"
BASE = f"debian:bookworm-slim@sha256:{BASE_HEX}"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPOSITORY = "registry.example:5000/vllm-musa/vllm"
BUILDER = "https://github.com/MooreThreads/vllm-musa-image@0.1.0"
COMPRESSOR = "gzip/zlib-ng-1.1.0+2.3.3/level-6/block-1048576"
NUMPY = "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
NUMPY_SHA256 = "666dbfb6ec68962c033a450943ded891bed2d54e6755e35e5835d63f4f6931d5"
CURL = "pkg:deb/debian/libcurl4@7.88.1-10%2Bdeb12u14?arch=amd64&distro=debian-12"
CA = "pkg:deb/debian/ca-certificates@20230311?arch=all&distro=debian-12"


def sbom(*, lock_sha256: str = LOCK_SHA256, debs: bool = True) -> bytes:
    """A CycloneDX 1.5 SBOM as the image's sbom.py writes it, cut down: two Debian packages
    and one Python distribution."""
    components: list[dict[str, Any]] = [
        {"type": "library", "name": "numpy", "version": "1.26.4", "purl": "pkg:pypi/numpy@1.26.4"}
    ]
    if debs:
        components += [
            {"type": "library", "name": "libcurl4", "version": "7.88.1-10+deb12u14", "purl": CURL},
            {"type": "library", "name": "ca-certificates", "version": "20230311", "purl": CA},
        ]
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "metadata": {
            "component": {
                "type": "container",
                "properties": [{"name": "vllm-musa:lock-sha256", "value": lock_sha256}],
            }
        },
        "components": components,
    }
    return json.dumps(doc, indent=2, sort_keys=True).encode()


def write_report(tmp_path: Path, **changes: Any) -> Path:
    fields: dict[str, Any] = {
        "stack": "stack/demo-v028.yaml",
        "target": "final",
        "image_id": "sha256:" + "e" * 64,
        "digest": f"sha256:{IMAGE_HEX}",
        "base_image": BASE,
        "lock_sha256": LOCK_SHA256,
        "lock_inputs_sha256": load_manifest(STACK).lock_inputs_sha256,
        "source_date_epoch": 1764633600,
        "compressor": COMPRESSOR,
    }
    fields.update(changes)
    path = tmp_path / "report.json"
    write_build_report(path, BuildReport(**fields))
    return path


def inputs_of(tmp_path: Path, **changes: Any) -> ProvenanceInputs:
    """``gather`` of the demo stack, with ``changes`` to its keyword arguments."""
    kwargs: dict[str, Any] = {
        "report_path": changes.get("report_path") or write_report(tmp_path),
        "manifest_path": STACK,
        "sbom": sbom(),
        "labels": {TOOLING_REVISION_LABEL: COMMIT},
        "repository": REPOSITORY,
        "builder_id": BUILDER,
    }
    kwargs.update(changes)
    return gather(**kwargs)


@pytest.fixture
def inputs(tmp_path: Path) -> ProvenanceInputs:
    return inputs_of(tmp_path)


def statement_of(inputs: ProvenanceInputs) -> dict[str, Any]:
    doc = json.loads(statement_bytes(inputs))
    assert isinstance(doc, dict)
    return doc


def dependencies(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    deps = doc["predicate"]["buildDefinition"]["resolvedDependencies"]
    return [d for d in deps if d["annotations"]["kind"] == kind]


# ------------------------------------------------------------------------------ the statement


def test_the_statement_names_the_image_and_what_it_was_built_from(
    inputs: ProvenanceInputs,
) -> None:
    doc = statement_of(inputs)
    assert doc["_type"] == "https://in-toto.io/Statement/v1"
    assert doc["predicateType"] == "https://slsa.dev/provenance/v1"
    assert doc["subject"] == [{"name": REPOSITORY, "digest": {"sha256": IMAGE_HEX}}]
    definition = doc["predicate"]["buildDefinition"]
    assert definition["buildType"] == BUILD_TYPE
    assert definition["externalParameters"] == {
        "manifest": {"path": "stack/demo-v028.yaml", "sha256": MANIFEST_SHA256},
        "lock": {"sha256": LOCK_SHA256},
        "target": "final",
        "tooling": {
            "repository": "https://github.com/MooreThreads/vllm-musa-image",
            "commit": COMMIT,
        },
    }
    assert definition["internalParameters"] == {
        "source_date_epoch": 1764633600,
        "source_date": "2025-12-02T00:00:00Z",
        "compressor": COMPRESSOR,
    }
    assert doc["predicate"]["runDetails"] == {"builder": {"id": BUILDER}}


def test_the_base_image_comes_first_by_its_digest(inputs: ProvenanceInputs) -> None:
    deps = statement_of(inputs)["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[0] == {
        "name": "base-image",
        "uri": BASE,
        "digest": {"sha256": BASE_HEX},
        "annotations": {"kind": "base-image"},
    }


def test_every_locked_file_is_a_dependency_by_its_url_and_sha256(inputs: ProvenanceInputs) -> None:
    locked = dependencies(statement_of(inputs), "locked-file")
    assert len(locked) == len(load_lock(LOCK_DIR).packages) == 161
    assert [d["name"] for d in locked] == sorted(d["name"] for d in locked)
    numpy = next(d for d in locked if d["name"] == NUMPY)
    assert numpy == {
        "name": NUMPY,
        "uri": "https://files.pythonhosted.org/packages/3a/d0/edc009c27b406c4f9cbc79274d6e46d634d139075492ad055e3d68445925/"
        + NUMPY,
        "digest": {"sha256": NUMPY_SHA256},
        "annotations": {
            "kind": "locked-file",
            "distribution": "numpy",
            "version": "1.26.4",
            "group": "runtime",
        },
    }
    groups = {d["annotations"]["group"] for d in locked}
    assert groups == {"runtime", "build", "source"}


def test_each_source_is_pinned_as_the_manifest_pins_it(inputs: ProvenanceInputs) -> None:
    assert dependencies(statement_of(inputs), "source") == [
        {
            "name": "sources.flashinfer",
            "uri": "http://127.0.0.1:8631/files/flashinfer-0.2.7.tar.gz",
            "digest": {
                "sha256": "d7066ed89cfb0a5fc60b933749630d242507ba190b6f450f3ce4e6e477ea785c"
            },
            "annotations": {
                "kind": "source",
                "from": "sdist",
                "rev": "5e4b43c411a5280329d8b1fd362b2656d389f3ef",
            },
        },
        {
            "name": "sources.vllm",
            "uri": "https://files.pythonhosted.org/packages/22/39/096d88cfe34ee43a8b6e7c957d1ad6338fa5256474d6ff9a32008c6f8cd6/vllm-0.28.0.tar.gz",
            "digest": {
                "sha256": "ac96dd0ec5be9c13f2aa4bfb50498c4727110406f6e4980b58a4097e4d18634a"
            },
            "annotations": {
                "kind": "source",
                "from": "sdist",
                "rev": "2cf0a6915ce544dc493a0990f2ea38d81601128a",
            },
        },
        {
            "name": "sources.vllm-musa",
            "uri": f"git+https://github.com/MooreThreads/vllm-musa-image@{COMMIT}#demo/vllm-musa-v028",
            "digest": {"gitCommit": COMMIT},
            "annotations": {"kind": "source", "from": "path"},
        },
    ]


def test_a_git_source_is_pinned_by_its_commit() -> None:
    rev = "b" * 40
    manifest = dataclasses.replace(
        load_manifest(STACK),
        sources=(Source(name="vllm", git="https://github.com/vllm-project/vllm.git", rev=rev),),
    )
    pins = source_pins(
        manifest, load_lock(LOCK_DIR), tooling_repository="https://t.example", tooling_commit=COMMIT
    )
    assert [(p.name, p.origin, p.uri, p.git_commit, p.sha256) for p in pins] == [
        ("vllm", "git", f"git+https://github.com/vllm-project/vllm.git@{rev}", rev, None)
    ]


def test_an_sdist_source_the_lock_does_not_have_is_refused() -> None:
    lock = load_lock(LOCK_DIR)
    lock = dataclasses.replace(lock, packages=tuple(p for p in lock.packages if p.name != "vllm"))
    with pytest.raises(AttestationError) as exc:
        source_pins(load_manifest(STACK), lock, tooling_repository="t", tooling_commit=COMMIT)
    assert exc.value.message == "sources.vllm is an sdist, and the lock has none for it"


def test_the_debian_packages_come_from_the_sbom_by_purl_without_a_hash(
    inputs: ProvenanceInputs,
) -> None:
    assert dependencies(statement_of(inputs), "deb") == [
        {
            "name": "ca-certificates",
            "uri": CA,
            "annotations": {"kind": "deb", "version": "20230311"},
        },
        {
            "name": "libcurl4",
            "uri": CURL,
            "annotations": {"kind": "deb", "version": "7.88.1-10+deb12u14"},
        },
    ]


def test_the_dependencies_are_in_a_fixed_order_of_kinds(inputs: ProvenanceInputs) -> None:
    deps = statement_of(inputs)["predicate"]["buildDefinition"]["resolvedDependencies"]
    kinds = [d["annotations"]["kind"] for d in deps]
    assert kinds == ["base-image"] + ["source"] * 3 + ["locked-file"] * 161 + ["deb"] * 2


# ------------------------------------------------------------------------------ the bytes


def test_the_bytes_are_canonical_json(inputs: ProvenanceInputs) -> None:
    data = statement_bytes(inputs)
    doc = json.loads(data)
    assert data == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("ascii")
    assert not data.endswith(b"\n")


def test_the_same_inputs_give_the_same_bytes_in_any_order(
    inputs: ProvenanceInputs, tmp_path: Path
) -> None:
    again = inputs_of(tmp_path)
    shuffled = dataclasses.replace(
        inputs,
        locked_files=tuple(reversed(inputs.locked_files)),
        sources=tuple(reversed(inputs.sources)),
        debs=tuple(reversed(inputs.debs)),
    )
    assert statement_bytes(inputs) == statement_bytes(again) == statement_bytes(shuffled)
    assert shuffled == inputs


def test_nothing_of_the_run_is_in_the_statement(inputs: ProvenanceInputs) -> None:
    data = statement_bytes(inputs)
    started = datetime(2026, 12, 1, 10, 0, 0, tzinfo=timezone.utc)
    finished = started + timedelta(minutes=3, seconds=4)
    assert run_record("builder-7", started, finished, statement=data) == {
        "schema": "build-image/provenance-run/1",
        "host": "builder-7",
        "started": "2026-12-01T10:00:00Z",
        "finished": "2026-12-01T10:03:04Z",
        "statement_sha256": hashlib.sha256(data).hexdigest(),
    }
    assert b"builder-7" not in data
    assert statement_bytes(inputs) == data


def test_a_run_record_refuses_a_time_without_a_zone() -> None:
    with pytest.raises(ValueError, match="must carry a time zone"):
        run_record("h", datetime(2026, 1, 1), datetime(2026, 1, 1), statement=b"{}")


# ------------------------------------------------------------------------------ reading back


def test_a_statement_reads_back_as_its_inputs(inputs: ProvenanceInputs) -> None:
    data = statement_bytes(inputs)
    read = read_statement(data)
    assert read.inputs == inputs
    assert read.sha256 == hashlib.sha256(data).hexdigest()
    assert read.inputs.image_digest == f"sha256:{IMAGE_HEX}"
    assert read.inputs.manifest_sha256 == MANIFEST_SHA256
    assert read.locked_sha256[NUMPY] == NUMPY_SHA256


def test_the_provenance_agrees_with_the_lock_it_was_made_from(inputs: ProvenanceInputs) -> None:
    recorded = read_statement(statement_bytes(inputs))
    assert lock_differences(recorded, locked_files_of(load_lock(LOCK_DIR))) == []


def test_lock_differences_name_each_file_that_differs(inputs: ProvenanceInputs) -> None:
    recorded = read_statement(statement_bytes(inputs))
    files = [f for f in locked_files_of(load_lock(LOCK_DIR)) if not f.filename.startswith("pip-")]
    pip = next(f.filename for f in inputs.locked_files if f.filename.startswith("pip-"))
    pip_sha256 = recorded.locked_sha256[pip]
    files = [dataclasses.replace(f, sha256="f" * 64) if f.filename == NUMPY else f for f in files]
    added = LockedFile(
        filename="six-1.17.0-py2.py3-none-any.whl",
        distribution="six",
        version="1.17.0",
        url="https://files.example/six-1.17.0-py2.py3-none-any.whl",
        sha256="1" * 64,
    )
    assert lock_differences(recorded, [*files, added]) == [
        f"{NUMPY}: the provenance records sha256 {NUMPY_SHA256}, the lock {'f' * 64}",
        f"{pip}: only in the provenance (sha256 {pip_sha256})",
        f"six-1.17.0-py2.py3-none-any.whl: only in the lock (sha256 {'1' * 64})",
    ]


def test_a_mirror_url_is_not_a_difference(inputs: ProvenanceInputs) -> None:
    recorded = read_statement(statement_bytes(inputs))
    moved = [
        dataclasses.replace(f, url="https://mirror.example/" + f.filename)
        for f in locked_files_of(load_lock(LOCK_DIR))
    ]
    assert lock_differences(recorded, moved) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: d | {"predicateType": "https://slsa.dev/provenance/v0.2"},
            "the provenance's predicateType is 'https://slsa.dev/provenance/v0.2', not "
            "'https://slsa.dev/provenance/v1'",
        ),
        (
            lambda d: d | {"subject": []},
            "the provenance's subject does not have one entry",
        ),
        (
            lambda d: _without(d, "predicate", "buildDefinition", "externalParameters", "target"),
            "the provenance's predicate.buildDefinition.externalParameters.target is missing",
        ),
        (
            lambda d: _set(
                d, 5, "predicate", "buildDefinition", "internalParameters", "compressor"
            ),
            "the provenance's predicate.buildDefinition.internalParameters.compressor is not a "
            "string",
        ),
        (
            lambda d: _without(
                d, "predicate", "buildDefinition", "resolvedDependencies", 4, "digest"
            ),
            "the provenance's predicate.buildDefinition.resolvedDependencies[4].digest is missing",
        ),
    ],
)
def test_a_statement_of_another_shape_is_refused(
    inputs: ProvenanceInputs, change: Any, message: str
) -> None:
    doc = change(statement_of(inputs))
    with pytest.raises(AttestationError) as exc:
        read_statement(json.dumps(doc).encode())
    assert exc.value.message == message


def test_a_statement_that_is_not_json_is_refused() -> None:
    with pytest.raises(AttestationError, match=r"^the provenance's document is not JSON \("):
        read_statement(b"\x89PNG")


def _without(doc: dict[str, Any], *path: str | int) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return doc


def _set(doc: dict[str, Any], value: object, *path: str | int) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    parent: Any = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


# ------------------------------------------------------------------------------ refusals


def test_a_report_without_a_digest_is_refused(tmp_path: Path) -> None:
    report = write_report(tmp_path, digest="")
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, report_path=report)
    assert exc.value.message == f"{report}: the build report has no digest"
    assert exc.value.hint == "build the image again: `build_image.py build STACK --target TARGET`"


def test_a_report_without_a_build_time_is_refused(tmp_path: Path) -> None:
    report = write_report(tmp_path, source_date_epoch=None)
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, report_path=report)
    assert exc.value.message == f"{report}: the build report has no source_date_epoch"
    assert exc.value.hint == "build from a git checkout, or with SOURCE_DATE_EPOCH set"


def test_a_base_not_pinned_is_refused_unless_its_digest_is_given(tmp_path: Path) -> None:
    report = write_report(tmp_path, base_image="debian:bookworm-slim")
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, report_path=report)
    assert exc.value.message == (
        f"{report}: base_image 'debian:bookworm-slim' is not pinned by digest, and no base "
        "digest was given"
    )
    assert exc.value.hint == (
        "pin it (`build_image.py pin-base STACK`, or base_image: debian:bookworm-slim@sha256:...) "
        "and build again, or give the base digest the build used"
    )
    given = inputs_of(tmp_path, report_path=report, base_digest=f"sha256:{BASE_HEX}")
    deps = statement_of(given)["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[0]["uri"] == "debian:bookworm-slim"
    assert deps[0]["digest"] == {"sha256": BASE_HEX}


def test_a_base_digest_that_contradicts_the_pin_is_refused(tmp_path: Path) -> None:
    report = write_report(tmp_path)
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, base_digest="sha256:" + "0" * 64)
    assert exc.value.message == (
        f"{report}: base_image {BASE} is pinned to another digest than the base digest given "
        f"(sha256:{'0' * 64})"
    )


def test_a_lock_the_image_was_not_built_from_is_refused(tmp_path: Path) -> None:
    report = write_report(tmp_path, lock_sha256="2" * 64)
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, report_path=report)
    assert exc.value.message == (
        f"{LOCK_DIR / 'pylock.toml'} (sha256 {LOCK_SHA256}) is not the lock the image was built "
        f"from ({report}: lock_sha256 {'2' * 64})"
    )


def test_a_manifest_the_image_was_not_built_from_is_refused(tmp_path: Path) -> None:
    report = write_report(tmp_path, lock_inputs_sha256="3" * 64)
    inputs_sha256 = load_manifest(STACK).lock_inputs_sha256
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, report_path=report)
    assert exc.value.message == (
        f"{STACK} is not the manifest the image was built from (its lock inputs have sha256 "
        f"{inputs_sha256}, {report}: {'3' * 64})"
    )


@pytest.mark.parametrize("label", [None, "unknown"])
def test_an_image_without_its_tooling_commit_is_refused(tmp_path: Path, label: str | None) -> None:
    labels = {} if label is None else {TOOLING_REVISION_LABEL: label}
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, labels=labels)
    shown = label or "absent"
    assert exc.value.message == (
        f"the image has no tooling commit (its io.vllm-musa.tooling.revision label is {shown})"
    )
    assert exc.value.hint == "build the image from a git checkout of this tool"


def test_the_sbom_of_another_lock_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, sbom=sbom(lock_sha256="4" * 64))
    assert exc.value.message == f"the SBOM names lock {'4' * 64}, the build report {LOCK_SHA256}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (sbom(debs=False), "the SBOM lists no Debian package (pkg:deb/...)"),
        (b'{"bomFormat": "SPDX"}', "the SBOM is not CycloneDX with components"),
        (b"not json", "the SBOM is not JSON: Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_an_sbom_without_debian_packages_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(AttestationError) as exc:
        parse_sbom_debs(data)
    assert exc.value.message == message
    assert exc.value.hint == "give the SBOM this tool wrote in the image (/opt/vllm-musa/sbom.json)"


def test_a_missing_lock_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AttestationError) as exc:
        inputs_of(tmp_path, lock_dir=tmp_path / "nowhere.lock")
    assert exc.value.message == f"{tmp_path / 'nowhere.lock' / 'pylock.toml'}: no lock"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"repository": f"{REPOSITORY}:nightly"},
            f"provenance: the repository is '{REPOSITORY}:nightly'; it must be a repository "
            "without a tag or a digest",
        ),
        (
            {"image_digest": "sha256:abc"},
            "provenance: the image_digest is 'sha256:abc'; it must be sha256:<64 hex digits>",
        ),
        (
            {"tooling_commit": "main"},
            "provenance: the tooling_commit is 'main'; it must be a commit id",
        ),
        ({"builder_id": ""}, "provenance: the builder_id is ''; it must not be empty"),
        (
            {"sources": (SourcePin(name="x", origin="git", uri="git+https://x.example@main"),)},
            "provenance: sources.x has no digest of its git",
        ),
        (
            {"debs": 2 * parse_sbom_debs(sbom())[:1]},
            f"provenance: two entries with purl {CURL!r}",
        ),
    ],
)
def test_inputs_of_the_wrong_shape_are_refused(
    inputs: ProvenanceInputs, change: dict[str, Any], message: str
) -> None:
    with pytest.raises(AttestationError) as exc:
        dataclasses.replace(inputs, **change)
    assert exc.value.message == message
