"""Shared builders for the publishing tests: digests, a stack manifest written to disk, a
release record, and a stand-in for skopeo that plays a registry."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import ClassVar

from images.engine.port import Credentials, RegistryTarget
from images.engine.skopeo import (
    DOCKER_MANIFEST,
    OCI_INDEX,
    CopyReport,
    ManifestInfo,
    parse_manifest_info,
)
from images.oci.layout import blob_path, find_manifest, manifest_parts
from images.records import ReleaseRecord, TagMove
from manifest import Manifest, parse_manifest

D1, D2, D3 = ("sha256:" + c * 64 for c in "123")
REPO = "127.0.0.1:5000/mcconline/vllm"


def served_digest(ref: str) -> str:
    """The digest the registry serves for ``ref``, as skopeo reads it (plain http)."""
    done = subprocess.run(
        ["skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}", f"docker://{ref}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def write_manifest(tmp: Path, text: str, name: str = "pubtest.yaml") -> Manifest:
    """``text`` written to ``tmp/stack/<name>`` and parsed."""
    path = tmp / "stack" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return parse_manifest(text, path=path)


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


TAGGED_STACK = """\
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


# ------------------------------------------------------------------------------ a registry

MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "layers": []}).encode()
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()
AMD = "sha256:" + "a" * 64
ARM = "sha256:" + "b" * 64
INDEX = json.dumps(
    {
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [
            {"digest": AMD, "platform": {"os": "linux", "architecture": "amd64"}},
            {"digest": ARM, "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        ],
    }
).encode()
INDEX_DIGEST = "sha256:" + hashlib.sha256(INDEX).hexdigest()


class FakeSkopeo:
    """Stands in for ``images.engine.skopeo.Skopeo`` (patched in by the ``registry``
    fixture): one registry of ``tags`` (tag -> digest), ``manifests`` (digest -> bytes) and
    ``blobs``, read and written as skopeo would; every call is logged with the user it was
    given (None: anonymous)."""

    tags: ClassVar[dict[str, str]] = {}
    manifests: ClassVar[dict[str, bytes]] = {}
    blobs: ClassVar[set[str]] = set()
    calls: ClassVar[list[tuple[str, str, str | None]]] = []

    def __init__(self, **_settings: object) -> None:
        pass

    @classmethod
    def reset(cls) -> None:
        cls.tags, cls.manifests, cls.blobs, cls.calls = {}, {}, set(), []
        cls.manifests[DIGEST], cls.manifests[INDEX_DIGEST] = MANIFEST, INDEX
        cls.tags.update({"t": DIGEST, "multi": INDEX_DIGEST})

    @classmethod
    def add(cls, seed: bytes) -> str:
        """A manifest made from ``seed``, stored; returns its digest."""
        body = json.dumps(
            {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "layers": [], "seed": seed.hex()}
        ).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        cls.manifests[digest] = body
        return digest

    def _log(self, call: str, target: RegistryTarget, credentials: Credentials | None) -> str:
        self.calls.append((call, target.reference, credentials.username if credentials else None))
        name, at, digest = target.reference.partition("@")
        return digest if at else name.rpartition(":")[2]

    def lookup(
        self, source: RegistryTarget, credentials: Credentials | None
    ) -> ManifestInfo | None:
        key = self._log("lookup", source, credentials)
        digest = key if key in self.manifests else self.tags.get(key)
        return None if digest is None else parse_manifest_info(self.manifests[digest], key)

    def retag(
        self, source: RegistryTarget, dest: RegistryTarget, credentials: Credentials | None
    ) -> None:
        self.tags[self._log("retag", dest, credentials)] = self._log("from", source, credentials)

    def push_layout(
        self, layout: Path, tag: str, dest: RegistryTarget, credentials: Credentials | None
    ) -> CopyReport:
        digest, manifest = find_manifest(layout, tag)
        self.manifests[digest] = blob_path(layout, digest).read_bytes()
        self.tags[self._log("push", dest, credentials)] = digest
        config, layers = manifest_parts(manifest, where=digest)
        uploaded = {b.digest for b in (config, *layers)} - self.blobs
        self.blobs.update(uploaded)
        return CopyReport(digest=digest, uploaded=frozenset(uploaded))
