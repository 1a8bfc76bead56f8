"""Publishing against a real registry (Debian's docker-registry on 127.0.0.1:5000) and a real
Docker daemon: push + digest resolution (checked with skopeo), a refused release-tag move, a
drift after a tag is re-pointed behind the tool's back, rollback, a diff of two real images,
and the failures (registry down, wrong password, a missing tag) that must leave the release
record byte-for-byte untouched.

Test images are tiny: one layer holding only the lock at the image's lock path, with OCI
labels, normalized as a build normalizes its image and loaded into the daemon. The tests are marked ``registry``: tests/conftest.py skips them when
the registries, the daemon or skopeo are missing, and fails them instead when CI=true
(tests/support/environment.py). Addresses: BUILD_IMAGE_TEST_REGISTRY (default 127.0.0.1:5000)
and BUILD_IMAGE_TEST_AUTH_REGISTRY (default 127.0.0.1:5001, the htpasswd instance).
"""

from __future__ import annotations

import base64
import gc
import hashlib
import io
import json
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

import build_image
from core.errors import RegistryAuthError
from core.tables import human_size, render_table
from images.builder.render import IMAGE_LOCK_DIR
from images.builder.tags import parse_reference
from images.engine.skopeo import Skopeo
from images.oci.layout import find_manifest
from images.oci.normalize import NormalizedImage
from images.publish.registry import Registry
from manifest import Target
from resolver.lockfile import Lock, LockedPackage, render_pylock
from testbed.serving import write_serve_check
from tests.support.environment import AUTH_REGISTRY, REGISTRY
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.saved_images import loaded_image

pytestmark = pytest.mark.registry

TARGET = "vllm-openai"
PASSWORD = "not-the-password-0451"

STACK = """\
schema: 1
name: pubtest
release: "0.28.0"
target: {{python: "3.12", arch: x86_64, glibc: "2.35"}}
indexes:
  vendor: {{url: "http://127.0.0.1:9/simple"}}
default_index: vendor
image:
  repository: "{repository}"
  release_tags: ["vllm-openai:v{{release}}-{{cpu}}-ph1-musa{{musa}}"]
  nightly_tags: ["vllm-openai:nightly-{{date}}", "vllm-openai:nightly"]
  variables: {{cpu: amd64, musa: "5.2.0"}}
"""


@pytest.fixture(scope="module")
def registry() -> str:
    """The open registry; tests/conftest.py has checked it, the daemon and skopeo."""
    return REGISTRY


@dataclass
class Run:
    code: int
    out: str
    err: str


class Env:
    """A stack manifest, a release record and build reports in tmp_path, and the CLI."""

    def __init__(self, tmp: Path, repository: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp = tmp
        self.repository = repository
        self.stack = tmp / "stack" / "pubtest.yaml"
        self.stack.parent.mkdir(parents=True)
        self.stack.write_text(STACK.format(repository=repository), encoding="utf-8")
        self.record = tmp / "releases" / "pubtest.json"
        docker_config = tmp / "docker-config"
        docker_config.mkdir()
        monkeypatch.setenv("DOCKER_CONFIG", str(docker_config))  # no host credentials
        monkeypatch.delenv("BUILD_IMAGE_REGISTRY_USER", raising=False)
        monkeypatch.delenv("BUILD_IMAGE_REGISTRY_PASSWORD", raising=False)
        self.images: list[str] = []  # the local references made by image()
        self.image_ids: list[str] = []
        self.layouts: dict[str, NormalizedImage] = {}  # image id -> its normalized image

    def cli(self, *argv: str) -> Run:
        out, err = io.StringIO(), io.StringIO()
        code = build_image.main(list(argv), out=out, err=err)
        return Run(code, out.getvalue(), err.getvalue())

    def image(self, name: str, torch_label: str, revision: str) -> str:
        """A tiny image carrying a lock at the image's lock path, labelled with the tooling
        ``revision`` it was built by, normalized as a build leaves it and loaded into the
        daemon; returns its id."""
        lock_text = render_pylock(_lock(torch_label)).encode()
        files = {
            f"{IMAGE_LOCK_DIR}/pylock.toml".lstrip("/"): lock_text,
            "etc/image-name": f"{name} {uuid.uuid4()}\n".encode(),
        }
        labels = {
            "io.vllm-musa.lock.sha256": uuid.uuid4().hex,
            "io.vllm-musa.tooling.revision": revision,
            "org.opencontainers.image.base.name": "debian:bookworm-slim",
        }
        ref = f"publish-test/{name}:{uuid.uuid4().hex[:8]}"
        image = loaded_image(
            self.tmp / "images" / ref, files, tag=TARGET, labels=labels, docker=DOCKER, name=ref
        )
        self.images.append(ref)
        self.image_ids.append(image.config_digest)
        self.layouts[image.config_digest] = image
        return image.config_digest

    def report(self, image_id: str, name: str = "report", *, base_image: str = "") -> Path:
        path = self.tmp / f"{name}.json"
        doc = {"image_id": image_id, "target": TARGET, "base_image": base_image}
        image = self.layouts.get(image_id)  # None: an image the daemon does not have
        if image is not None:
            doc |= {"digest": image.manifest_digest, "oci_layout": str(image.layout)}
        path.write_text(json.dumps(doc), encoding="utf-8")
        return path

    def publish(self, report: Path, *extra: str, channel: str = "--nightly") -> Run:
        return self.cli(
            "publish",
            str(self.stack),
            "--target",
            TARGET,
            channel,
            "--build-report",
            str(report),
            "--record",
            str(self.record),
            "--no-attach",
            *extra,
        )  # fmt: skip  (stand-in images: no SBOM or lock to attach)

    def records(self) -> list[dict[str, Any]]:
        doc = json.loads(self.record.read_text(encoding="utf-8"))
        records: list[dict[str, Any]] = doc["records"]
        return records

    def cleanup(self) -> None:
        if self.image_ids:  # with every tag publish (or a test) gave them
            subprocess.run([DOCKER, "rmi", "-f", *self.image_ids], capture_output=True, check=False)


def _lock(torch_label: str) -> Lock:
    def pkg(name: str, version: str) -> LockedPackage:
        return LockedPackage(
            name=canonicalize_name(name),
            version=version,
            index="vendor",
            index_url="http://127.0.0.1:9/simple",
            filename=f"{name}-{version}-cp312-cp312-linux_x86_64.whl",
            url=f"http://127.0.0.1:9/{name}.whl",
            sha256=("1" if "s5000" in version else "0") * 64,
            size=1,
            kind="native",
            origin="pin",
            required_by=(),
        )

    return Lock(
        stack="pubtest",
        target=Target(python=(3, 12), arch="x86_64", glibc=(2, 35)),
        lock_inputs_sha256="a" * 64,
        packages=(pkg("numpy", "1.26.4"), pkg("torch", f"2.11.0.post2+{torch_label}")),
    )


@pytest.fixture
def env(registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    e = Env(tmp_path, f"{registry}/publish-tests/{uuid.uuid4().hex[:12]}", monkeypatch)
    yield e
    e.cleanup()


def skopeo_digest(ref: str) -> str:
    done = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{ref}"],
        capture_output=True,
        check=True,
    )
    raw = subprocess.run(
        ["skopeo", "manifest-digest", "/dev/stdin"], input=done.stdout, capture_output=True,
        check=True,
    )  # fmt: skip
    digest = raw.stdout.decode().strip()
    inspected = json.loads(
        subprocess.run(
            ["skopeo", "inspect", "--tls-verify=false", f"docker://{ref}"],
            capture_output=True,
            check=True,
        ).stdout
    )
    assert inspected["Digest"] == digest
    return digest


def docker_push_behind_the_back(image_id: str, ref: str) -> None:
    subprocess.run([DOCKER, "tag", image_id, ref], check=True, capture_output=True)
    subprocess.run([DOCKER, "push", ref], check=True, capture_output=True)


# ------------------------------------------------------------------------------ publish


def test_publish_nightly_digest_matches_skopeo(env: Env) -> None:
    image_a = env.image("a", "musa5.2.0", "1111")
    run = env.publish(env.report(image_a), "--date", "20261129")
    assert run.code == 0, run.err
    [rec] = env.records()
    digest = rec["digest"]
    repo = env.repository
    assert rec["tags"] == [f"{repo}:nightly", f"{repo}:nightly-20261129"]
    assert rec["image_id"] == image_a
    assert rec["channel"] == "nightly"
    assert rec["target"] == TARGET
    assert rec["source_revisions"] == {"(tooling)": "1111"}
    for tag in rec["tags"]:
        assert skopeo_digest(tag) == digest
    # a new repository and no base on its registry: the copy uploads the config and the layer
    _, manifest = find_manifest(env.layouts[image_a].layout, TARGET)
    size = manifest["config"]["size"] + sum(x["size"] for x in manifest["layers"])
    assert rec["upload"] == {
        "blobs_mounted": 0, "blobs_reused": 0, "blobs_uploaded": 2,
        "bytes_mounted": 0, "bytes_reused": 0, "bytes_uploaded": size,
    }  # fmt: skip
    assert run.out.splitlines() == [
        f"{repo}@{digest}  (nightly)",
        f"{repo}@{digest}  (nightly-20261129)",
        f"moved {repo}:nightly: (new) -> {digest}",
        f"moved {repo}:nightly-20261129: (new) -> {digest}",
        f"uploaded 2 blobs ({human_size(size)}); reused 0 blobs (0 B)",
        f"recorded in {env.record}",
    ]
    pin = env.cli("pin", f"{repo}:nightly")
    assert (pin.code, pin.out) == (0, f"{repo}@{digest}\n")


PINNED_BASE = "debian:bookworm-slim@sha256:" + "b" * 64  # a release needs a pinned base


def test_release_tag_never_moves(env: Env) -> None:
    image_a = env.image("a", "musa5.2.0", "1111")
    bundle = write_serve_check(env.tmp, image_a)
    first = env.publish(env.report(image_a, "a", base_image=PINNED_BASE), channel="--release")
    assert first.code == 0, first.err
    [rec] = env.records()
    tag = f"{env.repository}:v0.28.0-amd64-ph1-musa5.2.0"
    assert rec["tags"] == [tag]
    assert rec["moves"] == []
    assert rec["serve_check"] == {
        "bundle_sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
        "status": "passed",
    }
    before = env.record.read_bytes()

    again = env.publish(env.report(image_a, "a", base_image=PINNED_BASE), channel="--release")
    assert (again.code, again.out) == (
        0,
        f"{tag} is already this image ({rec['digest']}); nothing pushed or recorded\n",
    )

    image_b = env.image("b", "musa5.2.0s5000", "2222")
    write_serve_check(env.tmp, image_b)
    refused = env.publish(env.report(image_b, "b", base_image=PINNED_BASE), channel="--release")
    assert refused.code == 1
    assert refused.err == (
        "error[release-tag-exists]: release tags never move, and these already exist with "
        f"another image:\n  {tag} is {rec['digest']}\nnothing was pushed\n"
        "hint: a new release needs a new release version (the manifest's release:); to test a "
        "rebuild use --nightly or a staging --repository\n"
    )
    assert env.record.read_bytes() == before
    assert skopeo_digest(tag) == rec["digest"]


def test_drift_after_a_tag_is_moved_behind_the_tools_back(env: Env) -> None:
    image_a = env.image("a", "musa5.2.0", "1111")
    assert env.publish(env.report(image_a), "--date", "20261129").code == 0
    ok = env.cli("verify-pins", str(env.stack), "--record", str(env.record))
    assert ok.code == 0, ok.err
    [rec] = env.records()

    image_c = env.image("c", "musa5.2.0", "3333")
    docker_push_behind_the_back(image_c, f"{env.repository}:nightly")
    served = skopeo_digest(f"{env.repository}:nightly")
    before = env.record.read_bytes()
    drift = env.cli("verify-pins", str(env.stack), "--record", str(env.record))
    assert drift.code == 1
    assert drift.out == f"ok      {env.repository}:nightly-20261129 {rec['digest']}\n"
    assert drift.err == (
        f"error[drift]: 1 of 2 tags drifted from {env.record}:\n"
        f"  {env.repository}:nightly: recorded {rec['digest']}, the registry serves {served}\n"
        "hint: a tag was moved behind the tool's back: find out who moved it; to restore, "
        "publish again (nightly) or re-point it to the recorded digest\n"
    )
    assert env.record.read_bytes() == before
    # a rollback refuses to act on a drifted tag
    refused = env.cli("rollback", str(env.stack), "--record", str(env.record), "--apply")
    assert refused.code == 1
    assert "error[rollback]" in refused.err  # the only record moved no existing tag
    assert env.record.read_bytes() == before


def test_nightly_moves_are_recorded_and_rolled_back(env: Env) -> None:
    repo = env.repository
    image_a = env.image("a", "musa5.2.0", "1111")
    image_b = env.image("b", "musa5.2.0s5000", "2222")
    assert env.publish(env.report(image_a, "a"), "--date", "20261129").code == 0
    assert env.publish(env.report(image_b, "b"), "--date", "20261130").code == 0
    first, second = env.records()
    da, db = first["digest"], second["digest"]
    assert da != db
    assert second["moves"] == [
        {"from": da, "tag": f"{repo}:nightly", "to": db},
        {"from": None, "tag": f"{repo}:nightly-20261130", "to": db},
    ]
    assert env.cli("verify-pins", str(env.stack), "--record", str(env.record)).code == 0

    dry = env.cli("rollback", str(env.stack), "--record", str(env.record))
    assert dry.code == 0, dry.err
    assert dry.out.splitlines() == [
        f"current:  {repo}@{db}  (nightly, {second['time']})",
        f"previous: {repo}@{da}  (nightly, {first['time']}, image {image_a})",
        f"  {repo}:nightly: {db} -> {da}",
        "dry run; re-run with --apply to re-point these tags",
    ]
    assert skopeo_digest(f"{repo}:nightly") == db

    applied = env.cli("rollback", str(env.stack), "--record", str(env.record), "--apply")
    assert applied.code == 0, applied.err
    assert applied.out.splitlines()[-1] == f"re-pointed 1 tags; recorded in {env.record}"
    assert skopeo_digest(f"{repo}:nightly") == da
    assert skopeo_digest(f"{repo}:nightly-20261130") == db
    third = env.records()[-1]
    assert third["channel"] == "rollback"
    assert third["digest"] == da
    assert third["image_id"] == image_a
    assert third["moves"] == [{"from": db, "tag": f"{repo}:nightly", "to": da}]
    verify = env.cli("verify-pins", str(env.stack), "--record", str(env.record))
    assert verify.code == 0, verify.err
    assert verify.out.splitlines()[-1] == f"3 tags serve their recorded digests ({env.record})"


# ------------------------------------------------------------------------------ diff


def test_diff_of_two_images_whose_locks_differ_by_a_local_label(env: Env) -> None:
    image_a = env.image("a", "musa5.2.0", "1111")
    image_b = env.image("b", "musa5.2.0s5000", "2222")
    a, b = env.images
    run = env.cli("diff", a, b)
    assert run.code == 1, run.err  # they differ
    lines = run.out.splitlines()
    assert lines[:7] == [
        f"--- {a}",
        f"+++ {b}",
        "1 distribution differs (1 local label only):",
        *render_table(
            [
                ("distribution", "change", "a", "b", "size a", "size b"),
                (
                    *("torch", "label", "2.11.0.post2+musa5.2.0"),
                    *("2.11.0.post2+musa5.2.0s5000", "1 B", "1 B"),
                ),
            ],
            right=(4, 5),
        ),
        "a: 2 distributions, 2 B",
        "b: 2 distributions, 2 B (size change: 0 B)",
    ]
    assert lines[7:12] == [
        "image (5):",
        f"  image id: {image_a} -> {image_b}",
        "  base image: debian:bookworm-slim (same)",
        "  revision: (not labelled) (same)",
        "  tooling revision: 1111 -> 2222",
    ]
    assert lines[12].startswith("  io.vllm-musa.lock.sha256: ")
    # an image against its own lock on disk
    lock_file = env.tmp / "pylock.toml"
    lock_file.write_text(render_pylock(_lock("musa5.2.0s5000")), encoding="utf-8")
    same = env.cli("diff", str(lock_file), b)
    assert same.code == 0, same.err  # the same distributions: an image is compared by its lock
    assert same.out.splitlines()[2] == (
        "the locks install the same distributions at the same versions"
    )


# ------------------------------------------------------------------------------ failures


def _seed_record(env: Env) -> bytes:
    """A record file with one (made-up) record, to prove failures do not touch it."""
    rec = {
        "channel": "nightly",
        "digest": "sha256:" + "1" * 64,
        "image_id": "sha256:" + "2" * 64,
        "manifest_sha256": "3" * 64,
        "repository": env.repository,
        "stack": "pubtest",
        "tags": [f"{env.repository}:gone"],
        "target": TARGET,
        "time": "2026-11-29T00:00:00Z",
        "tool_version": "0.1.0",
    }
    env.record.parent.mkdir(parents=True, exist_ok=True)
    data = (
        json.dumps({"records": [rec], "schema": 1, "stack": "pubtest"}, indent=2) + "\n"
    ).encode()
    env.record.write_bytes(data)
    return data


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_registry_down(env: Env) -> None:
    seeded = _seed_record(env)
    down = f"127.0.0.1:{_free_port()}"
    image_a = env.image("a", "musa5.2.0", "1111")
    run = env.publish(env.report(image_a), "--repository", f"{down}/x", "--retries", "0")
    assert run.code == 1
    assert run.err == (
        f"error[registry-unreachable]: cannot reach the registry {down} at http://{down} "
        "(connection refused, 1 attempt)\n"
        "hint: is the registry running and the repository right? (image.repository in the "
        "manifest, or --repository)\n"
    )
    assert env.record.read_bytes() == seeded


def test_tag_that_does_not_exist(env: Env) -> None:
    seeded = _seed_record(env)
    run = env.cli("pin", f"{env.repository}:no-such-tag")
    assert run.code == 1
    assert run.err == (
        f"error[tag-not-found]: {env.repository}:no-such-tag: the registry has no such tag\n"
        "hint: check the spelling (`skopeo list-tags --tls-verify=false "
        f"docker://{env.repository}` lists the tags)\n"
    )
    verify = env.cli("verify-pins", str(env.stack), "--record", str(env.record))
    assert verify.code == 1
    assert verify.err.splitlines()[:2] == [
        f"error[drift]: 1 of 1 tags drifted from {env.record}:",
        f"  {env.repository}:gone: recorded sha256:{'1' * 64}, the registry no longer has the tag",
    ]
    rollback = env.cli("rollback", str(env.stack), "--record", str(env.record), "--apply")
    assert rollback.code == 1
    assert env.record.read_bytes() == seeded


@pytest.fixture
def auth_registry() -> str:
    """The htpasswd registry; tests/conftest.py has checked that it answers 401."""
    return AUTH_REGISTRY


def test_wrong_password(env: Env, auth_registry: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seeded = _seed_record(env)
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_USER", "release-bot")
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_PASSWORD", PASSWORD)
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_HOST", auth_registry)
    image_a = env.image("a", "musa5.2.0", "1111")
    run = env.publish(env.report(image_a), "--repository", f"{auth_registry}/pubtest/vllm")
    assert run.code == 1
    assert run.err == (
        f"error[registry-auth]: the registry {auth_registry} refused the credentials of user "
        "'release-bot' (from BUILD_IMAGE_REGISTRY_USER/BUILD_IMAGE_REGISTRY_PASSWORD): HTTP 401\n"
        "hint: check the user and password; credentials come from BUILD_IMAGE_REGISTRY_USER "
        "and BUILD_IMAGE_REGISTRY_PASSWORD (for the host BUILD_IMAGE_REGISTRY_HOST names), else "
        "from the Docker config: its credential helper for the host (credHelpers, else "
        "credsStore), else its auths (`docker login REGISTRY`); never from the manifest\n"
    )
    token = base64.b64encode(f"release-bot:{PASSWORD}".encode()).decode()
    assert PASSWORD not in run.out + run.err
    assert token not in run.out + run.err
    assert env.record.read_bytes() == seeded


def test_no_credentials_for_a_registry_that_needs_them(auth_registry: str) -> None:
    skopeo = Skopeo(env=os.environ)
    registry = Registry(skopeo, env={}, docker_config=None, timeout=30)
    with pytest.raises(RegistryAuthError) as exc:
        registry.lookup(parse_reference(f"{auth_registry}/pubtest/vllm:nightly"))
    assert exc.value.message == (
        f"the registry {auth_registry} requires a login and no credentials were found for it"
    )


def test_publish_with_credentials_to_the_auth_registry(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = os.environ.get("CI_REGISTRY_AUTH_USER", "ci")
    password = os.environ.get("CI_REGISTRY_AUTH_PASSWORD", "ci-password")
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_USER", user)
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_PASSWORD", password)
    monkeypatch.setenv("BUILD_IMAGE_REGISTRY_HOST", AUTH_REGISTRY)
    repo = f"{AUTH_REGISTRY}/publish-tests/{uuid.uuid4().hex[:12]}"
    image_a = env.image("a", "musa5.2.0", "1111")
    run = env.publish(env.report(image_a), "--repository", repo, "--date", "20261129")
    assert run.code == 0, run.err
    [rec] = env.records()
    assert rec["repository"] == repo
    inspected = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--creds", f"{user}:{password}",
         "--format", "{{.Digest}}", f"docker://{repo}:nightly"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert inspected.stdout.strip() == rec["digest"]
    assert password not in env.record.read_text() + run.out + run.err


def test_publish_with_credentials_from_a_credential_helper(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper's login goes to the registry client and to the daemon's push alike."""
    user = os.environ.get("CI_REGISTRY_AUTH_USER", "ci")
    password = os.environ.get("CI_REGISTRY_AUTH_PASSWORD", "ci-password")
    bin_dir = env.tmp / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-vmi-live"
    answer = json.dumps({"ServerURL": AUTH_REGISTRY, "Username": user, "Secret": password})
    helper.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{answer}'\n", encoding="utf-8")
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    config = Path(os.environ["DOCKER_CONFIG"]) / "config.json"
    config.write_text(json.dumps({"credHelpers": {AUTH_REGISTRY: "vmi-live"}}), encoding="utf-8")
    repo = f"{AUTH_REGISTRY}/publish-tests/{uuid.uuid4().hex[:12]}"
    image_a = env.image("a", "musa5.2.0", "1111")
    run = env.publish(env.report(image_a), "--repository", repo, "--date", "20261129")
    assert run.code == 0, run.err
    [rec] = env.records()
    pinned = env.cli("pin", f"{repo}:nightly")
    assert (pinned.code, pinned.out) == (0, f"{repo}@{rec['digest']}\n")
    assert password not in env.record.read_text() + run.out + run.err


# the docker SDK leaks its socket when the version probe fails (not ours to close)
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_daemon_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    e = Env(tmp_path, "127.0.0.1:5000/publish-tests/daemon-down", monkeypatch)
    seeded = _seed_record(e)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    run = e.publish(e.report("sha256:" + "9" * 64))
    assert run.code == 1
    first, hint = run.err.splitlines()
    assert first.startswith("error[docker]: cannot reach the Docker daemon: ")
    assert hint == (
        "hint: start the Docker daemon (or set DOCKER_HOST), then check with `docker version`"
    )
    assert e.record.read_bytes() == seeded
    gc.collect()  # collect the leaked socket while the filter above applies


def test_a_release_without_a_passing_serve_check_is_refused(env: Env) -> None:
    image_a = env.image("a", "musa5.2.0", "1111")
    report = env.report(image_a, "a", base_image=PINNED_BASE)
    missing = env.publish(report, channel="--release")
    assert missing.code == 1
    assert missing.err == (
        f"error[serve-check-missing]: a release needs a passing serve-check of image {image_a}, "
        "and there is none\n"
        f"hint: run `build_image.py serve-check {image_a} --stack {env.stack}` (on a host with "
        "the device), or publish with --no-serve-check (the release record says it was "
        "skipped)\n"
    )
    write_serve_check(env.tmp, image_a, passed=False)
    failed = env.publish(report, channel="--release")
    assert failed.code == 1
    assert failed.err.splitlines()[0] == (
        f"error[serve-check-missing]: the serve-check of image {image_a} failed: request "
        "capital: the answer 'Paris' does not contain 'Beijing'"
    )
    assert not env.record.exists()  # nothing pushed, nothing recorded


def test_no_serve_check_is_recorded_in_the_release_record(env: Env) -> None:
    image_a = env.image("a", "musa5.2.0", "1111")
    report = env.report(image_a, "a", base_image=PINNED_BASE)
    done = env.publish(report, "--no-serve-check", channel="--release")
    assert done.code == 0, done.err
    [rec] = env.records()
    assert rec["serve_check"] == {"reason": "--no-serve-check", "status": "skipped"}
