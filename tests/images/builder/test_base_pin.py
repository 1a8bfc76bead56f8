"""The base image's tag resolved to its digest (``pin-base``) and written into the stack
manifest: the digest of a manifest and of an index's platform, the line rewritten with its
comment kept, and the refusals. The last test asks a real registry (Debian's docker-registry on
127.0.0.1:5000) through skopeo."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest

import build_image
from core.errors import ManifestError, RegistryError
from images.builder.base_pin import pin_base, platform_digest, repin_text
from images.engine.port import RegistryTarget
from manifest import load_manifest
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.environment import REGISTRY
from tests.support.images import MANIFEST, manifest

BASE = "registry.example/musa_sdk:5.2.0-devel-ubuntu22.04"
INDEX = "application/vnd.oci.image.index.v1+json"
AMD64 = "sha256:" + "a" * 64
ARM64 = "sha256:" + "b" * 64
LINE = 'base_image: "debian:bookworm-slim"'


def _index(*platforms: tuple[str, str]) -> bytes:
    entries = [
        {"digest": digest, "platform": {"os": "linux", "architecture": arch}}
        for arch, digest in platforms
    ]
    return json.dumps({"mediaType": INDEX, "manifests": entries}).encode()


class Registry:
    """A registry that serves one manifest for every reference, and records the questions."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.asked: list[RegistryTarget] = []

    def copy_to_dir(self, source: RegistryTarget, directory: Path) -> None:
        raise AssertionError("pin-base copies nothing")

    def raw_manifest(self, source: RegistryTarget) -> bytes:
        self.asked.append(source)
        return self.raw


def _with_base(base: str) -> str:
    assert LINE in MANIFEST
    return MANIFEST.replace(LINE, f'base_image: "{base}"   # the SDK image')


def test_a_single_manifest_is_pinned_by_the_sha256_of_its_bytes() -> None:
    raw = b'{"mediaType": "application/vnd.oci.image.manifest.v1+json"}'
    assert platform_digest(raw, reference=BASE, arch="x86_64") == (
        "sha256:" + hashlib.sha256(raw).hexdigest()
    )


def test_an_index_is_pinned_to_the_manifest_of_the_stacks_platform() -> None:
    raw = _index(("arm64", ARM64), ("amd64", AMD64))
    assert platform_digest(raw, reference=BASE, arch="x86_64") == AMD64
    assert platform_digest(raw, reference=BASE, arch="aarch64") == ARM64


def test_an_index_without_the_platform_is_refused_naming_what_it_has() -> None:
    raw = _index(("arm64", ARM64))
    with pytest.raises(RegistryError) as exc:
        platform_digest(raw, reference=BASE, arch="x86_64")
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    assert exc.value.message == (
        f"{BASE} ({digest}) is an index with no linux/amd64 image (it has: linux/arm64)"
    )
    assert exc.value.hint == "name a base image built for the stack's target.arch"


def test_pin_base_rewrites_the_line_and_keeps_its_comment(tmp_path: Path) -> None:
    m = manifest(tmp_path, _with_base(BASE))
    registry = Registry(_index(("amd64", AMD64)))
    assert pin_base(m, registry) == (f"{BASE}@{AMD64}", True)
    assert m.path.read_text() == _with_base(f"{BASE}@{AMD64}")
    assert registry.asked == [
        RegistryTarget(registry="registry.example", reference=BASE, plain_http=False)
    ]
    pinned = load_manifest(m.path)
    assert pin_base(pinned, registry) == (f"{BASE}@{AMD64}", False)  # the tag did not move
    registry.raw = _index(("amd64", ARM64))  # the vendor rebuilt the tag
    assert pin_base(pinned, registry) == (f"{BASE}@{ARM64}", True)
    assert registry.asked[-1].reference == BASE  # the tag is asked, never the old digest
    assert m.path.read_text() == _with_base(f"{BASE}@{ARM64}")


def test_a_base_without_a_tag_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path, _with_base(f"registry.example/musa_sdk@{AMD64}"))
    with pytest.raises(ManifestError) as exc:
        pin_base(m, Registry(b"{}"))
    assert exc.value.message == (
        f"{m.path}: base_image registry.example/musa_sdk@{AMD64} has no tag to resolve"
    )


def test_a_line_pin_base_cannot_rewrite_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    with pytest.raises(ManifestError) as exc:
        repin_text(f"base_image: {BASE}\n", path=path, base=BASE, pinned=f"{BASE}@{AMD64}")
    assert exc.value.message == (
        f'{path}: no line base_image: "{BASE}" to pin (pin-base rewrites one top-level line '
        "with a double-quoted value)"
    )
    assert (
        exc.value.hint
        == f'write base_image: "{BASE}" on a line of its own, then run pin-base again'
    )


@pytest.mark.docker
@pytest.mark.registry
def test_pin_base_asks_the_real_registry(tmp_path: Path) -> None:
    repo = f"{REGISTRY}/base-tests/pin-{uuid.uuid4().hex[:8]}"
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo 1 > /v\n")
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    subprocess.run(
        [DOCKER, "build", "-q", "-t", f"{repo}:5.2", str(tmp_path / "ctx")],
        capture_output=True, check=True, env=env,
    )  # fmt: skip
    subprocess.run([DOCKER, "push", "-q", f"{repo}:5.2"], capture_output=True, check=True)
    raw = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--raw", f"docker://{repo}:5.2"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    stack = manifest(tmp_path, _with_base(f"{repo}:5.2")).path
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main(["pin-base", str(stack)], out=out, err=err)
    assert code == 0, err.getvalue()
    pinned = f"{repo}:5.2@sha256:{hashlib.sha256(raw).hexdigest()}"
    assert out.getvalue() == f"base_image {pinned} (pinned in {stack})\n"
    assert load_manifest(stack).base_image == pinned
