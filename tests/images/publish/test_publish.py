"""Pure parts of publishing: tag rendering, references, release records, drift, rollback plans,
lock diffs, Docker config credentials, the bake file. No daemon, no registry."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import build_image
from core.errors import (
    ManifestError,
    PublishError,
    ReferenceError_,
    RegistryCredentialsError,
    ReleaseRecordError,
    RollbackError,
)
from images.build.tags import TagContext, parse_reference, render_tag, render_tags
from images.publish.bake import BakeTarget, render_bake
from images.publish.publish import DiffSide, classify_lock_diff, plan_tags, render_diff
from images.publish.records import (
    ReleaseLog,
    ReleaseRecord,
    TagMove,
    append_release_record,
    compute_drift,
    expected_digests,
    load_release_log,
    parse_release_log,
    plan_rollback,
    render_release_log,
)
from images.publish.registry import (
    find_credentials,
    is_loopback,
    parse_challenge,
    parse_docker_config,
    redact,
)
from manifest import Target, parse_manifest
from resolver.lockfile import Lock, LockedPackage

D1, D2, D3 = ("sha256:" + c * 64 for c in "123")
REPO = "127.0.0.1:5000/mcconline/vllm"

STACK = """\
schema: 1
name: pubtest
release: "0.28.0"
target: {python: "3.12", arch: x86_64, glibc: "2.35"}
indexes:
  vendor: {url: "http://127.0.0.1:9/simple"}
default_index: vendor
image:
  repository: "registry.mthreads.com/mcconline/inference/vllm"
  release_tags: ["vllm-openai:v{release}-{cpu}-ph1-musa{musa}"]
  nightly_tags: ["vllm-openai:nightly-{date}", "vllm-openai:nightly", "py{python}-{arch}"]
  variables: {cpu: amd64, musa: "5.2.0"}
"""


def ctx(**kw: str) -> TagContext:
    base = {"release": "0.28.0", "python": "3.12", "arch": "x86_64", "date": "20261130"}
    base.update(kw)
    return TagContext(variables={"cpu": "amd64", "musa": "5.2.0"}, **base)


# ------------------------------------------------------------------------------ tags


def test_render_release_tag_like_the_published_ones() -> None:
    assert render_tag("v{release}-{cpu}-ph1-musa{musa}", ctx()) == "v0.28.0-amd64-ph1-musa5.2.0"


def test_render_tags_selects_the_target_prefix_and_sorts() -> None:
    templates = ["vllm-openai:nightly-{date}", "vllm-openai:nightly", "final:f-{date}", "any"]
    assert render_tags(templates, target="vllm-openai", context=ctx(), kind="nightly") == [
        "any",
        "nightly",
        "nightly-20261130",
    ]
    assert render_tags(templates, target="final", context=ctx(), kind="nightly") == [
        "any",
        "f-20261130",
    ]


def test_render_tags_without_a_tag_for_the_target_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tags(["vllm-openai:v{release}"], target="final", context=ctx(), kind="release")
    assert exc.value.message == "image.release_tags has no tag for target 'final'"
    assert exc.value.hint == (
        "add a template such as 'final:...' (or one without a target prefix) under "
        "image.release_tags"
    )


def test_unknown_variable_is_a_manifest_error() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tag("v{release}-{gpu}", ctx())
    assert exc.value.message == "tag template 'v{release}-{gpu}': unknown variable {gpu}"
    assert exc.value.hint == (
        "known: arch, cpu, date, musa, python, release; add it under image.variables"
    )


def test_manifest_rejects_unknown_tag_variable_at_parse_time(tmp_path: Path) -> None:
    text = STACK.replace("musa{musa}", "musa{sdk}")
    with pytest.raises(ManifestError) as exc:
        parse_manifest(text, path=tmp_path / "s.yaml")
    assert "unknown variable {sdk}" in exc.value.message


def test_rendered_tag_must_be_a_docker_tag() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tag("v{release}+{cpu}", ctx())
    assert exc.value.message == (
        "tag template 'v{release}+{cpu}' renders to 'v0.28.0+amd64', which is not a valid "
        "Docker tag"
    )


def test_plan_tags_from_the_manifest(tmp_path: Path) -> None:
    m = parse_manifest(STACK, path=tmp_path / "s.yaml")
    assert plan_tags(m, target="vllm-openai", channel="release", date="20261130") == [
        "v0.28.0-amd64-ph1-musa5.2.0"
    ]
    assert plan_tags(m, target="vllm-openai", channel="nightly", date="20261130") == [
        "nightly",
        "nightly-20261130",
        "py3.12-x86_64",
    ]


def test_bad_date_is_refused() -> None:
    with pytest.raises(ManifestError) as exc:
        render_tags(["x-{date}"], target="final", context=ctx(date="2026-11-30"), kind="nightly")
    assert exc.value.message == "tag date '2026-11-30' is not YYYYMMDD"


# ------------------------------------------------------------------------------ references


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag", "digest"),
    [
        ("registry.mthreads.com/mcconline/inference/vllm:v0.28.0", "registry.mthreads.com",
         "mcconline/inference/vllm", "v0.28.0", None),
        ("127.0.0.1:5000/x/y", "127.0.0.1:5000", "x/y", None, None),
        ("localhost/y:t", "localhost", "y", "t", None),
        ("debian:bookworm-slim", "docker.io", "library/debian", "bookworm-slim", None),
        ("user/img", "docker.io", "user/img", None, None),
        (f"127.0.0.1:5000/x@{D1}", "127.0.0.1:5000", "x", None, D1),
        (f"127.0.0.1:5000/x:t@{D1}", "127.0.0.1:5000", "x", "t", D1),
    ],
)  # fmt: skip
def test_parse_reference(
    text: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (
        registry,
        repository,
        tag,
        digest,
    )


def test_parse_reference_default_tag_and_pinned() -> None:
    ref = parse_reference("127.0.0.1:5000/x", default_tag="latest")
    assert str(ref) == "127.0.0.1:5000/x:latest"
    assert ref.pinned(D1) == f"127.0.0.1:5000/x@{D1}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "'' is not an image reference"),
        ("x@sha256:12", "'x@sha256:12': 'sha256:12' is not a sha256 digest"),
        ("127.0.0.1:5000/Upper:t", "'127.0.0.1:5000/Upper:t': repository component 'Upper' is not valid"),
        ("x:-bad", "'x:-bad': '-bad' is not a valid tag"),
    ],
)  # fmt: skip
def test_parse_reference_errors(text: str, message: str) -> None:
    with pytest.raises(ReferenceError_) as exc:
        parse_reference(text)
    assert exc.value.message == message


# ------------------------------------------------------------------------------ records


def record(
    digest: str,
    *,
    tags: tuple[str, ...] = (f"{REPO}:nightly",),
    channel: str = "nightly",
    moves: tuple[TagMove, ...] = (),
    time: str = "2026-11-30T00:00:00Z",
    target: str = "vllm-openai",
) -> ReleaseRecord:
    return ReleaseRecord(
        stack="pubtest",
        channel=channel,  # type: ignore[arg-type]
        target=target,
        repository=REPO,
        tags=tags,
        digest=digest,
        image_id="sha256:" + "e" * 64,
        lock_sha256="f" * 64,
        manifest_sha256="a" * 64,
        dockerfile_sha256=None,
        base_image="debian:bookworm-slim",
        base_image_digest=None,
        source_revisions={"vllm-musa": "070c0ea09ec266972fd6097937fde97d400d70ed"},
        tool_version="0.1.0",
        time=time,
        moves=moves,
    )


def test_record_serialization_is_deterministic_and_sorted() -> None:
    log = ReleaseLog(stack="pubtest").appended(record(D1))
    text = render_release_log(log)
    assert text == render_release_log(parse_release_log(text, where="r.json", stack="pubtest"))
    doc = json.loads(text)
    assert list(doc) == ["records", "schema", "stack"]
    assert list(doc["records"][0]) == sorted(doc["records"][0])
    assert doc["records"][0]["digest"] == D1
    assert doc["records"][0]["tags"] == [f"{REPO}:nightly"]
    assert text.endswith("}\n")
    assert json.dumps(doc, indent=2, sort_keys=True) + "\n" == text


def test_append_keeps_earlier_records_verbatim(tmp_path: Path) -> None:
    path = tmp_path / "releases" / "pubtest.json"
    append_release_record(path, record(D1))
    doc = json.loads(path.read_text())
    doc["records"][0]["note"] = "added by a release engineer"  # a key this tool does not know
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    append_release_record(path, record(D2, time="2026-12-01T00:00:00Z"))
    again = json.loads(path.read_text())
    assert again["records"][0]["note"] == "added by a release engineer"
    assert [r["digest"] for r in again["records"]] == [D1, D2]
    assert [p.name for p in path.parent.iterdir()] == ["pubtest.json"]  # no temp or lock file


def test_missing_record_file_is_an_empty_log(tmp_path: Path) -> None:
    assert load_release_log(tmp_path / "none.json", stack="pubtest").records == ()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema=2), "r.json: schema: unsupported schema 2; expected 1"),
        (lambda d: d.update(stack="other"), "r.json: stack: is 'other', but this is the stack 'pubtest'"),
        (lambda d: d["records"][0].update(digest="abc"), "r.json: records.0.digest: 'abc' is not a sha256:... digest"),
        (lambda d: d["records"][0].pop("tags"), "r.json: records.0.tags: missing"),
        (lambda d: d["records"][0].update(channel="weekly"), "r.json: records.0.channel: 'weekly' is not one of ('release', 'nightly', 'rollback')"),
    ],
)  # fmt: skip
def test_bad_record_files_name_the_key(mutate: object, message: str) -> None:
    doc = json.loads(render_release_log(ReleaseLog(stack="pubtest").appended(record(D1))))
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(ReleaseRecordError) as exc:
        parse_release_log(json.dumps(doc), where="r.json", stack="pubtest")
    assert exc.value.message == message
    assert exc.value.hint == (
        "the file is written by `build_image.py publish`; restore it from version control"
    )


# ------------------------------------------------------------------------------ drift


def test_expected_digest_is_the_latest_record_of_each_tag() -> None:
    records = [
        record(D1, tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261129")),
        record(D2, tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261130")),
    ]
    assert expected_digests(records) == {
        f"{REPO}:nightly": D2,
        f"{REPO}:nightly-20261129": D1,
        f"{REPO}:nightly-20261130": D2,
    }


def test_compute_drift() -> None:
    expected = {"a": D1, "b": D2, "c": D3}
    drifts = compute_drift(expected, {"a": D1, "b": D3, "c": None})
    assert [d.describe() for d in drifts] == [
        f"b: recorded {D2}, the registry serves {D3}",
        f"c: recorded {D3}, the registry no longer has the tag",
    ]
    assert compute_drift(expected, expected) == []


# ------------------------------------------------------------------------------ rollback


def test_rollback_undoes_the_moves_of_the_latest_record() -> None:
    first = record(D1, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=None, to_digest=D1),))
    second = record(
        D2,
        tags=(f"{REPO}:nightly", f"{REPO}:nightly-20261130"),
        moves=(
            TagMove(tag=f"{REPO}:nightly", from_digest=D1, to_digest=D2),
            TagMove(tag=f"{REPO}:nightly-20261130", from_digest=None, to_digest=D2),
        ),
    )
    plan = plan_rollback([first, second], target=None)
    assert plan.digest == D1
    assert plan.previous is first
    assert plan.tags == (f"{REPO}:nightly",)


def test_rollback_without_a_moved_tag_is_refused() -> None:
    only = record(D1, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=None, to_digest=D1),))
    with pytest.raises(RollbackError) as exc:
        plan_rollback([only], target=None)
    assert exc.value.message == (
        f"the latest record (nightly 2026-11-30T00:00:00Z, {D1}) moved no existing tag, so "
        "there is nothing to roll back"
    )


def test_rollback_to_an_unrecorded_digest_is_refused() -> None:
    moved = record(D2, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=D3, to_digest=D2),))
    with pytest.raises(RollbackError) as exc:
        plan_rollback([moved], target=None)
    assert exc.value.message == (
        f"{D3} (where {REPO}:nightly pointed before) is in no earlier record: it was not "
        "published by this tool"
    )


def test_rollback_of_an_unknown_target() -> None:
    with pytest.raises(RollbackError) as exc:
        plan_rollback([record(D1)], target="final")
    assert exc.value.message == (
        "no nightly record for target 'final' (release tags never move, so only nightly tags "
        "roll back)"
    )


def test_rollback_ignores_release_records() -> None:
    first = record(D1)
    second = record(D2, moves=(TagMove(tag=f"{REPO}:nightly", from_digest=D1, to_digest=D2),))
    release = record(D3, channel="release", tags=(f"{REPO}:v0.28.0",), target="final")
    assert plan_rollback([first, second, release], target=None).digest == D1


# ------------------------------------------------------------------------------ lock diff


def _pkg(name: str, version: str, sha: str = "0") -> LockedPackage:
    return LockedPackage(
        name=canonicalize_name(name),
        version=version,
        index="vendor",
        index_url="http://127.0.0.1/simple",
        filename=f"{name}-{version}-py3-none-any.whl",
        url=f"http://127.0.0.1/{name}.whl",
        sha256=sha * 64,
        size=1,
        kind="pure",
        origin="pin",
        required_by=(),
    )


def _lock(*packages: LockedPackage) -> Lock:
    return Lock(
        stack="pubtest",
        target=Target(python=(3, 12), arch="x86_64", glibc=(2, 35)),
        lock_inputs_sha256="a" * 64,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
    )


def test_classify_lock_diff() -> None:
    a = _lock(
        _pkg("torch", "2.11.0.post2+musa5.2.0"),
        _pkg("numpy", "1.26.3"),
        _pkg("gone", "1.0"),
        _pkg("mate", "0.2.7", "1"),
    )
    b = _lock(
        _pkg("torch", "2.11.0.post2+musa5.2.0s5000"),
        _pkg("numpy", "1.26.4"),
        _pkg("new", "2.0"),
        _pkg("mate", "0.2.7", "2"),
    )
    d = classify_lock_diff(a, b)
    assert d.added == (("new", "2.0"),)
    assert d.removed == (("gone", "1.0"),)
    assert d.version_changed == (("numpy", "1.26.3", "1.26.4"),)
    assert d.label_changed == (("torch", "2.11.0.post2+musa5.2.0", "2.11.0.post2+musa5.2.0s5000"),)
    assert d.file_changed == (
        ("mate", "mate-0.2.7-py3-none-any.whl", "mate-0.2.7-py3-none-any.whl"),
    )


def test_label_gained_or_lost_is_a_label_change() -> None:
    d = classify_lock_diff(_lock(_pkg("mate", "0.2.7")), _lock(_pkg("mate", "0.2.7+musa")))
    assert d.label_changed == (("mate", "0.2.7", "0.2.7+musa"),)
    assert d.version_changed == ()


def test_render_diff_of_two_locks() -> None:
    a = DiffSide(name="a", lock=_lock(_pkg("torch", "2.11.0.post2+musa5.2.0")))
    b = DiffSide(name="b", lock=_lock(_pkg("torch", "2.11.0.post2+musa5.2.0s5000")))
    assert render_diff(a, b) == [
        "--- a",
        "+++ b",
        "local label only (same public version, another build) (1):",
        "  ~ torch 2.11.0.post2+musa5.2.0 -> 2.11.0.post2+musa5.2.0s5000",
    ]
    assert render_diff(a, a)[2:] == [
        "the locks install the same distributions at the same versions"
    ]


# ------------------------------------------------------------------------------ credentials


def _config(tmp_path: Path, auths: dict[str, object]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"auths": auths}))
    return path


def test_docker_config_base64_auth(tmp_path: Path) -> None:
    token = base64.b64encode(b"alice:pa:ss").decode()
    path = _config(tmp_path, {"127.0.0.1:5001": {"auth": token}})
    creds = find_credentials("127.0.0.1:5001", env={}, docker_config=path)
    assert creds is not None
    assert (creds.username, creds.password, creds.source) == ("alice", "pa:ss", str(path))
    assert "pa:ss" not in repr(creds)
    assert find_credentials("127.0.0.1:5000", env={}, docker_config=path) is None


def test_environment_wins_over_docker_config(tmp_path: Path) -> None:
    path = _config(tmp_path, {"r.example": {"auth": base64.b64encode(b"a:b").decode()}})
    env = {
        "BUILD_IMAGE_REGISTRY_USER": "ci",
        "BUILD_IMAGE_REGISTRY_PASSWORD": "tok",
        "BUILD_IMAGE_REGISTRY_HOST": "r.example",
    }
    creds = find_credentials("r.example", env=env, docker_config=path)
    assert creds is not None
    assert (creds.username, creds.password) == ("ci", "tok")
    # another host never gets the environment's credentials
    assert find_credentials("other.example", env=env, docker_config=None) is None


def test_environment_credentials_need_their_host() -> None:
    env = {"BUILD_IMAGE_REGISTRY_USER": "ci", "BUILD_IMAGE_REGISTRY_PASSWORD": "tok"}
    with pytest.raises(RegistryCredentialsError) as exc:
        find_credentials("r.example", env=env, docker_config=None)
    assert exc.value.message == (
        "BUILD_IMAGE_REGISTRY_USER/BUILD_IMAGE_REGISTRY_PASSWORD are set but "
        "BUILD_IMAGE_REGISTRY_HOST is not"
    )


def test_half_set_environment_is_refused() -> None:
    with pytest.raises(RegistryCredentialsError) as exc:
        find_credentials("r", env={"BUILD_IMAGE_REGISTRY_USER": "ci"}, docker_config=None)
    assert exc.value.message == (
        "only one of BUILD_IMAGE_REGISTRY_USER and BUILD_IMAGE_REGISTRY_PASSWORD is set"
    )


def test_bad_base64_in_docker_config(tmp_path: Path) -> None:
    with pytest.raises(RegistryCredentialsError) as exc:
        parse_docker_config(json.dumps({"auths": {"r": {"auth": "%%%"}}}), where="c.json")
    assert exc.value.message == "c.json: auths.r.auth is not base64 of USER:PASSWORD"


def test_redact_and_challenge() -> None:
    assert redact("user bob pass hunter2 x", ["hunter2"]) == "user bob pass *** x"
    c = parse_challenge(
        'Bearer realm="https://auth.example/token",service="registry.example",'
        'scope="repository:x:pull"'
    )
    assert c.scheme == "bearer"
    assert c.params == {
        "realm": "https://auth.example/token",
        "service": "registry.example",
        "scope": "repository:x:pull",
    }
    assert parse_challenge('Basic realm="basic-realm"').scheme == "basic"


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1:5000", True), ("localhost:5000", True), ("[::1]:5000", True),
     ("127.1.2.3", True), ("registry.mthreads.com", False), ("10.0.0.1:5000", False)],
)  # fmt: skip
def test_plain_http_only_for_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# ------------------------------------------------------------------------------ bake


def test_bake_file_for_stacks_and_targets() -> None:
    plan = [
        BakeTarget(
            stack=f"vllm-musa-0.28.0-{cpu}", target=target, context=f"build/context/{cpu}-{target}",
            arch="x86_64", release="0.28.0", args={"MTGPU_TARGET": "mp_31", "VCS_REF": "abc"},
            tags=[f"r.example/vllm:v0.28.0-{cpu}-ph1-musa5.2.0"],
        )
        for cpu in ("amd64", "hygon")
        for target in ("vllm-openai", "final")
    ]  # fmt: skip
    text = render_bake(plan)
    assert text == render_bake(list(reversed(plan)))  # order-independent, byte-identical
    doc = json.loads(text)
    assert doc["group"] == {
        "default": {
            "targets": [
                "vllm-musa-0_28_0-amd64-final",
                "vllm-musa-0_28_0-amd64-vllm-openai",
                "vllm-musa-0_28_0-hygon-final",
                "vllm-musa-0_28_0-hygon-vllm-openai",
            ]
        }
    }
    assert doc["target"]["vllm-musa-0_28_0-hygon-vllm-openai"] == {
        "args": {"MTGPU_TARGET": "mp_31", "VCS_REF": "abc"},
        "context": "build/context/hygon-vllm-openai",
        "contexts": {},
        "dockerfile": "Dockerfile",
        "labels": {"org.opencontainers.image.version": "0.28.0"},
        "platforms": ["linux/amd64"],
        "tags": ["r.example/vllm:v0.28.0-hygon-ph1-musa5.2.0"],
        "target": "vllm-openai",
    }
    with pytest.raises(PublishError) as exc:
        render_bake([plan[0], plan[0]])
    assert exc.value.message == "two bake targets are named 'vllm-musa-0_28_0-amd64-vllm-openai'"


def test_bake_command_writes_the_file(tmp_path: Path) -> None:
    stack = tmp_path / "stack" / "pubtest.yaml"
    stack.parent.mkdir()
    stack.write_text(STACK)
    out = tmp_path / "docker-bake.json"
    err = io.StringIO()
    code = build_image.main(
        ["bake", str(stack), "--target", "vllm-openai", "--out", str(out)],
        out=io.StringIO(), err=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    doc = json.loads(out.read_text())
    [(name, target)] = doc["target"].items()
    assert name == "pubtest-vllm-openai"
    # never a release or nightly tag: those follow the gates, in publish
    assert target["tags"] == [
        "registry.mthreads.com/mcconline/inference/vllm:staging-pubtest-vllm-openai"
    ]
    assert target["context"] == "build/context/pubtest-vllm-openai"
