"""Shared builders for the publishing tests: digests, a stack manifest written to disk, a
release record, and local HTTP servers on 127.0.0.1 that play a registry."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from images.publish.registry import DOCKER_MANIFEST, OCI_INDEX
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


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threading HTTP server with ``handler`` on 127.0.0.1; yields ``127.0.0.1:PORT``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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
GOOD = base64.b64encode(b"bot:right").decode()


class _Answering(http.server.BaseHTTPRequestHandler):
    """A handler that answers with a status, a body (none to a HEAD) and headers."""

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class BearerRegistry(_Answering):
    """/v2/x/manifests/{t,multi} behind Bearer tokens from /token (Basic bot:right)."""

    port: ClassVar[int] = 0
    log: ClassVar[list[tuple[str, str, str, str]]] = []

    def _handle(self) -> None:
        auth = self.headers.get("Authorization", "")
        self.log.append((self.command, self.path, auth, self.headers.get("Accept", "")))
        if self.path.startswith("/token"):
            if auth != f"Basic {GOOD}":
                self._send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}')
                return
            self._send(200, json.dumps({"token": "tok-123"}).encode())
            return
        if auth != "Bearer tok-123":
            realm = f"http://127.0.0.1:{self.port}/token"
            challenge = f'Bearer realm="{realm}",service="fake",scope="repository:x:pull"'
            self._send(401, b"", {"WWW-Authenticate": challenge})
            return
        if self.path == "/v2/x/manifests/t":  # no Docker-Content-Digest: the client must GET
            self._send(200, MANIFEST, {"Content-Type": DOCKER_MANIFEST})
        elif self.path == "/v2/x/manifests/multi":
            self._send(
                200, INDEX, {"Content-Type": OCI_INDEX, "Docker-Content-Digest": INDEX_DIGEST}
            )
        else:
            self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')

    do_GET = do_HEAD = _handle

    def log_message(self, *args: object) -> None:
        pass


class TagRegistry(_Answering):
    """An open registry of manifests: ``tags`` (tag -> digest) and ``blobs`` (digest -> the
    manifest's bytes) are what it serves; a PUT stores a manifest and points the tag at it."""

    tags: ClassVar[dict[str, str]] = {}
    blobs: ClassVar[dict[str, bytes]] = {}

    @classmethod
    def reset(cls, tags: dict[str, str]) -> None:
        """Serve each tag's digest, with a distinct manifest behind each digest."""
        cls.tags, cls.blobs = {}, {}
        for tag, digest in tags.items():
            cls.tags[tag] = cls.add(digest.encode())

    @classmethod
    def add(cls, seed: bytes) -> str:
        """A manifest made from ``seed``, stored; returns its digest."""
        body = json.dumps(
            {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "layers": [], "seed": seed.hex()}
        ).encode()
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        cls.blobs[digest] = body
        return digest

    def _reference(self) -> str | None:
        _, sep, reference = self.path.partition("/manifests/")
        return reference if sep else None

    def _serve(self) -> None:
        reference = self._reference()
        digest = reference if reference in self.blobs else self.tags.get(reference or "")
        if digest is None:
            self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            return
        headers = {"Content-Type": DOCKER_MANIFEST, "Docker-Content-Digest": digest}
        self._send(200, self.blobs[digest], headers)

    def do_PUT(self) -> None:
        reference = self._reference()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        self.blobs[digest] = body
        self.tags[reference or ""] = digest
        self._send(201, b"", {"Docker-Content-Digest": digest})

    do_GET = do_HEAD = _serve

    def log_message(self, *args: object) -> None:
        pass
