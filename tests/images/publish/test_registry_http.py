"""The registry client against local HTTP servers on 127.0.0.1 that play a registry: the Bearer
token flow, the GET fallback when no Docker-Content-Digest is sent, a multi-arch index, and a
token service that refuses the password. No Docker needed."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from core.errors import RegistryAuthError
from images.build.tags import parse_reference
from images.publish.publish import render_pin
from images.publish.registry import DOCKER_MANIFEST, OCI_INDEX, Credentials, RegistryClient

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


class FakeRegistry(http.server.BaseHTTPRequestHandler):
    """/v2/x/manifests/{t,multi} behind Bearer tokens from /token (Basic bot:right)."""

    port: ClassVar[int] = 0
    log: ClassVar[list[tuple[str, str, str, str]]] = []

    def _send(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

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


@pytest.fixture
def fake() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeRegistry)
    FakeRegistry.port = server.server_address[1]
    FakeRegistry.log.clear()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"127.0.0.1:{FakeRegistry.port}"
    finally:
        server.shutdown()
        server.server_close()


def test_bearer_flow_and_get_fallback(fake: str) -> None:
    creds = Credentials(username="bot", password="right", source="test")
    with RegistryClient(fake, credentials=creds) as client:
        info = client.lookup("x", "t")
        assert info is not None
        assert info.digest == DIGEST
        assert info.media_type == DOCKER_MANIFEST
        assert client.lookup("x", "missing") is None
    methods = [(m, p, a) for m, p, a, _ in FakeRegistry.log]
    assert methods[:4] == [
        ("HEAD", "/v2/x/manifests/t", ""),
        ("GET", "/token?scope=repository%3Ax%3Apull&service=fake", f"Basic {GOOD}"),
        ("HEAD", "/v2/x/manifests/t", "Bearer tok-123"),
        ("GET", "/v2/x/manifests/t", "Bearer tok-123"),
    ]
    accept = FakeRegistry.log[0][3]
    assert accept == (
        "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
        "application/vnd.docker.distribution.manifest.list.v2+json, "
        "application/vnd.docker.distribution.manifest.v2+json"
    )
    assert sum(1 for _, p, _, _ in FakeRegistry.log if p.startswith("/token")) == 1  # cached


def test_multi_arch_index_pin(fake: str) -> None:
    creds = Credentials(username="bot", password="right", source="test")
    ref = parse_reference(f"{fake}/x:multi")
    with RegistryClient(fake, credentials=creds) as client:
        info = client.require(ref)
    assert info.is_index
    assert render_pin(ref, info) == [
        f"{fake}/x@{INDEX_DIGEST}",
        f"{fake}/x:multi is a multi-arch index ({OCI_INDEX}) of 2 manifests; the digest above "
        "pins the index. Per platform:",
        f"  linux/amd64      {fake}/x@{AMD}",
        f"  linux/arm64/v8   {fake}/x@{ARM}",
    ]


def test_token_service_refuses_the_password(fake: str) -> None:
    creds = Credentials(username="bot", password="wrong-secret", source="the environment")
    with RegistryClient(fake, credentials=creds) as client, pytest.raises(RegistryAuthError) as exc:
        client.lookup("x", "t")
    assert exc.value.message == (
        f"the registry {fake} refused the credentials of user 'bot' (from the environment): "
        "HTTP 401"
    )
    assert "wrong-secret" not in str(exc.value) + str(exc.value.hint)


def test_anonymous_bearer_is_refused_with_a_login_hint(fake: str) -> None:
    with RegistryClient(fake) as client, pytest.raises(RegistryAuthError) as exc:
        client.lookup("x", "t")
    assert exc.value.message == (
        f"the registry {fake} requires a login and no credentials were found for it (HTTP 401)"
    )
