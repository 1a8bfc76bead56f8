"""The registry client retries as the index client does (one policy, ``core.transport``):
connection failures, 429 and 5xx, a bounded number of times (``--retries``), after the
answer's ``Retry-After`` or a backoff, inside the network deadline; then one error naming the
registry, the request and the last answer. Against real HTTP servers on 127.0.0.1 that play a
registry; every wait is a ``Retry-After: 0`` or the first backoff (0.5 s)."""

from __future__ import annotations

import hashlib
import http.server
import io
import socket
from typing import ClassVar

import pytest

import build_image
from core.errors import RegistryError
from images.publish.registry import DOCKER_MANIFEST, FetchedManifest, RegistryClient
from testbed.index_server import IndexServer
from tests.support.publishing import serving

BODY = b'{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json"}'
DIGEST = "sha256:" + hashlib.sha256(BODY).hexdigest()


def _registry(server: IndexServer) -> str:
    path = server.root / "v2" / "team" / "app" / "manifests" / "1.0"
    path.parent.mkdir(parents=True)
    path.write_bytes(BODY)
    return f"127.0.0.1:{server.port}"


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_503_then_a_429_then_the_manifest(index_server: IndexServer) -> None:
    registry = _registry(index_server)
    index_server.fail("/v2/", status=503, times=1, retry_after=0)
    index_server.fail("/v2/", status=429, times=1, retry_after=0)
    with RegistryClient(registry) as client:
        info = client.lookup("team/app", "1.0")
    assert info is not None
    assert info.digest == DIGEST
    # HEAD: 503, 429, 200 without Docker-Content-Digest; then the GET of the body
    assert [r.method for r in index_server.requests] == ["HEAD", "HEAD", "HEAD", "GET"]


def test_pin_gets_through_after_the_retries(index_server: IndexServer) -> None:
    registry = _registry(index_server)
    index_server.fail("/v2/", status=503, times=1, retry_after=0)
    index_server.fail("/v2/", status=429, times=1, retry_after=0)
    assert _cli("pin", f"{registry}/team/app:1.0") == (0, f"{registry}/team/app@{DIGEST}\n", "")
    assert len(index_server.requests) == 4


def test_when_the_retries_run_out_the_last_answer_is_named(index_server: IndexServer) -> None:
    registry = _registry(index_server)
    index_server.fail("/v2/", status=503, times=10, retry_after=0)
    code, out, err = _cli("pin", f"{registry}/team/app:1.0", "--retries", "2")
    assert (code, out) == (1, "")
    assert err == (
        f"error[registry-unreachable]: the registry {registry}: HEAD "
        f"http://{registry}/v2/team/app/manifests/1.0 failed after 3 attempts "
        "(HTTP 503 Service Unavailable)\n"
        "hint: it answered 429 (too many requests) or a server error each time; retry later, "
        "or raise --retries (now 2)\n"
    )
    assert [r.method for r in index_server.requests] == ["HEAD"] * 3


def test_no_retries_with_retries_0(index_server: IndexServer) -> None:
    registry = _registry(index_server)
    index_server.fail("/v2/", status=429, times=10, retry_after=0)
    code, _, err = _cli("pin", f"{registry}/team/app:1.0", "--retries", "0")
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[registry-unreachable]: the registry {registry}: HEAD "
        f"http://{registry}/v2/team/app/manifests/1.0 failed after 1 attempt "
        "(HTTP 429 Too Many Requests)"
    )
    assert len(index_server.requests) == 1


def test_a_retry_after_past_the_deadline_ends_the_command_at_once(
    index_server: IndexServer,
) -> None:
    registry = _registry(index_server)
    index_server.fail("/v2/", status=429, times=10, retry_after=30)
    code, _, err = _cli("pin", f"{registry}/team/app:1.0", "--deadline", "5")
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[deadline]: the registry {registry}: HEAD "
        f"http://{registry}/v2/team/app/manifests/1.0 failed, and the network deadline of "
        "this command (--deadline 5) ends before its next attempt"
    )
    assert len(index_server.requests) == 1


def test_a_refused_connection_is_retried_then_named() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{s.getsockname()[1]}"
    code, _, err = _cli("pin", f"{down}/team/app:1.0", "--retries", "1")
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[registry-unreachable]: cannot reach the registry {down} at http://{down} "
        "(connection refused, 2 attempts)"
    )


def test_errors_that_are_not_retried(index_server: IndexServer) -> None:
    registry = _registry(index_server)
    index_server.fail("/v2/", status=501, times=10)  # not in the retried statuses
    with RegistryClient(registry) as client, pytest.raises(RegistryError) as exc:
        client.lookup("team/app", "1.0")
    assert type(exc.value) is RegistryError
    assert exc.value.message == f"HEAD team/app:1.0 on {registry}: HTTP 501 Not Implemented"
    assert len(index_server.requests) == 1


class _FlakyPut(http.server.BaseHTTPRequestHandler):
    """PUT /v2/x/manifests/t: 503 (Retry-After: 0) the first time, then 201."""

    puts: ClassVar[list[bytes]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.puts.append(body)
        if len(self.puts) == 1:
            self.send_response(503)
            self.send_header("Retry-After", "0")
        else:
            self.send_response(201)
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            self.send_header("Docker-Content-Digest", digest)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_manifest_put_is_retried_as_it_is_idempotent() -> None:
    _FlakyPut.puts.clear()
    manifest = FetchedManifest(body=BODY, media_type=DOCKER_MANIFEST, digest=DIGEST)
    with serving(_FlakyPut) as registry, RegistryClient(registry) as client:
        assert client.put("x", "t", manifest) == DIGEST
    assert _FlakyPut.puts == [BODY, BODY]


class _BusyTokens(http.server.BaseHTTPRequestHandler):
    """A Bearer registry whose token service answers 503 (Retry-After: 0) every time."""

    port: ClassVar[int] = 0
    token_requests: ClassVar[int] = 0

    def _answer(self) -> None:
        if self.path.startswith("/token"):
            type(self).token_requests += 1
            self.send_response(503)
            self.send_header("Retry-After", "0")
        else:
            self.send_response(401)
            realm = f"http://127.0.0.1:{self.port}/token"
            self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="busy"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        pass


def test_a_busy_token_service_is_retried_then_named() -> None:
    _BusyTokens.token_requests = 0
    with serving(_BusyTokens) as registry:
        _BusyTokens.port = int(registry.rsplit(":", 1)[1])
        with RegistryClient(registry, retries=1) as client, pytest.raises(RegistryError) as exc:
            client.lookup("team/app", "1.0")
    assert exc.value.message == (
        f"the token service of {registry}: GET http://{registry}/token failed after 2 "
        "attempts (HTTP 503 Service Unavailable)"
    )
    assert _BusyTokens.token_requests == 2
