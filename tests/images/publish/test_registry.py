"""The registry client: credentials from the Docker config and the environment, challenges,
loopback-only plain http; and against local HTTP servers on 127.0.0.1 that play a registry:
the Bearer token flow, the GET fallback when no Docker-Content-Digest is sent, a token service
that refuses the password, on plain http, or unreachable. No Docker needed."""

from __future__ import annotations

import base64
import http.server
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import RegistryAuthError, RegistryCredentialsError, RegistryError
from core.network import is_loopback
from images.publish.registry import (
    DOCKER_MANIFEST,
    Credentials,
    RegistryClient,
    find_credentials,
    parse_challenge,
    redact,
)
from tests.support.publishing import DIGEST, GOOD, BearerRegistry, serving


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
    path = _config(tmp_path, {"r": {"auth": "%%%"}})
    with pytest.raises(RegistryCredentialsError) as exc:
        find_credentials("r", env={}, docker_config=path)
    assert exc.value.message == (
        f"{path}: auths.r is not an object whose auth is base64 of USER:PASSWORD"
    )
    assert exc.value.hint == "run `docker login r` again, or fix the file"


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


# ------------------------------------------------------------------------------ the client against local servers


def test_bearer_flow_and_get_fallback(fake: str) -> None:
    creds = Credentials(username="bot", password="right", source="test")
    with RegistryClient(fake, credentials=creds) as client:
        info = client.lookup("x", "t")
        assert info is not None
        assert info.digest == DIGEST
        assert info.media_type == DOCKER_MANIFEST
        assert client.lookup("x", "missing") is None
    methods = [(m, p, a) for m, p, a, _ in BearerRegistry.log]
    assert methods[:4] == [
        ("HEAD", "/v2/x/manifests/t", ""),
        ("GET", "/token?scope=repository%3Ax%3Apull&service=fake", f"Basic {GOOD}"),
        ("HEAD", "/v2/x/manifests/t", "Bearer tok-123"),
        ("GET", "/v2/x/manifests/t", "Bearer tok-123"),
    ]
    accept = BearerRegistry.log[0][3]
    assert accept == (
        "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
        "application/vnd.docker.distribution.manifest.list.v2+json, "
        "application/vnd.docker.distribution.manifest.v2+json"
    )
    assert sum(1 for _, p, _, _ in BearerRegistry.log if p.startswith("/token")) == 1  # cached


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


class _HttpRealm(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self._answer()

    def do_GET(self) -> None:
        self._answer()

    def _answer(self) -> None:
        self.send_response(401)
        self.send_header(
            "WWW-Authenticate",
            'Bearer realm="http://token.example.invalid/token",service="registry"',
        )
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_realm_registry() -> Iterator[str]:
    with serving(_HttpRealm) as address:
        yield address


def test_credentials_never_go_to_a_plain_http_token_service(http_realm_registry: str) -> None:
    creds = Credentials(username="robot", password="s3cret", source="test")
    with (
        RegistryClient(http_realm_registry, credentials=creds, timeout=5) as client,
        pytest.raises(RegistryError) as exc,
    ):
        client.lookup("mcconline/vllm", "nightly")
    assert type(exc.value) is RegistryError  # refused, not "unreachable": nothing was sent
    assert "http://token.example.invalid/token" in exc.value.message
    assert "s3cret" not in exc.value.message


class _UnreachableRealm(_HttpRealm):
    def _answer(self) -> None:
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Bearer realm="https://127.0.0.1:9/token"')
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_an_unreachable_token_service_is_named_not_the_registry() -> None:
    with (
        serving(_UnreachableRealm) as registry,
        RegistryClient(registry, timeout=5, retries=0) as client,
        pytest.raises(RegistryError) as exc,
    ):
        client.lookup("mcconline/vllm", "nightly")
    assert exc.value.message == (
        f"cannot reach the token service https://127.0.0.1:9/token of the registry {registry}"
    )
