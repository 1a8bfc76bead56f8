"""HTTPS through the transport against a real TLS server on 127.0.0.1 (a certificate made
with the openssl CLI for the test): certificates are checked against the trust store the
network settings name (``--cert``, ``SSL_CERT_FILE``, ``SSL_CERT_DIR``, else the system's),
host names too, an untrusted one is refused at once with what to set, and every connection
of a transport shares the one TLS context, with the CA certificates loaded once."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from core.errors import EnvironmentFailureError, TransportError
from core.network import CERT_HINT, NetworkConfig, Trust, network_from_env
from core.transport import RetryPolicy, Transport


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    paths: ClassVar[list[str]] = []  # what was asked, by path

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        body = b"fine"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")  # every request a new connection
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate (and its key, in the same file) for IP 127.0.0.1 only."""
    where = tmp_path_factory.mktemp("tls")
    pem = where / "server.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(where / "key.pem"), "-out", str(where / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    pem.write_bytes((where / "cert.pem").read_bytes() + (where / "key.pem").read_bytes())
    return pem


@pytest.fixture(scope="module")
def server(cert: Path) -> Iterator[int]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _trusting(cert: Path) -> NetworkConfig:
    return NetworkConfig(trust=Trust(cafile=cert, source=f"--cert {cert}"))


def test_a_certificate_no_ca_vouches_for_is_refused_at_once_saying_what_to_set(
    server: int,
) -> None:
    _Handler.paths = []
    with Transport(timeout=5) as t, pytest.raises(TransportError) as caught:
        t.request("GET", f"https://127.0.0.1:{server}/", retry=RetryPolicy(attempts=3))
    assert caught.value.kind == "certificate"
    assert caught.value.message == (
        f"GET https://127.0.0.1:{server}/: the certificate of 127.0.0.1 is not trusted "
        "(self-signed certificate); trusted now: the system's CA certificates"
    )
    assert caught.value.hint == CERT_HINT
    assert _Handler.paths == []  # no request got through, and none was tried again


def test_connections_share_one_context_that_checks_certificates_and_names(
    server: int, cert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[ssl.SSLContext] = []
    load_verify_locations = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(self)
        load_verify_locations(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    with Transport(timeout=5, network=_trusting(cert)) as t:
        for _ in range(3):  # three connections: the server closes each after its answer
            with t.request("GET", f"https://127.0.0.1:{server}/") as resp:
                assert (resp.status, resp.content) == (200, b"fine")
        with pytest.raises(TransportError) as caught:  # the certificate names 127.0.0.1 only
            t.request("GET", f"https://localhost:{server}/")
    assert len(loads) == 1
    assert loads[0].verify_mode == ssl.CERT_REQUIRED
    assert loads[0].check_hostname is True
    assert caught.value.kind == "certificate"
    assert caught.value.message == (
        f"GET https://localhost:{server}/: the certificate of localhost is not trusted "
        "(Hostname mismatch, certificate is not valid for 'localhost'.); trusted now: "
        f"--cert {cert}"
    )


def _cert_dir(cert: Path, where: Path) -> Path:
    """An OpenSSL hashed directory holding the certificate of ``cert``."""
    where.mkdir()
    subject_hash = subprocess.run(
        ["openssl", "x509", "-hash", "-noout", "-in", str(cert)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (where / f"{subject_hash}.0").write_bytes(cert.read_bytes())
    return where


@pytest.mark.parametrize("setting", ["SSL_CERT_FILE", "SSL_CERT_DIR", "--cert"])
def test_the_trust_store_is_the_one_pip_and_uv_honour(
    server: int, cert: Path, tmp_path: Path, setting: str
) -> None:
    only_cert = tmp_path / "ca.pem"  # the certificate without its key
    only_cert.write_bytes(cert.read_bytes().split(b"-----BEGIN PRIVATE KEY")[0])
    if setting == "SSL_CERT_FILE":
        network = network_from_env({"SSL_CERT_FILE": str(only_cert)})
    elif setting == "SSL_CERT_DIR":
        network = network_from_env({"SSL_CERT_DIR": str(_cert_dir(only_cert, tmp_path / "d"))})
    else:  # --cert wins over the environment's
        network = network_from_env({"SSL_CERT_FILE": "/nonexistent.pem"}, cert=only_cert)
    with (
        Transport(timeout=5, network=network) as t,
        t.request("GET", f"https://127.0.0.1:{server}/") as resp,
    ):
        assert (resp.status, resp.content) == (200, b"fine")


def test_a_trust_store_that_is_not_there_is_named_before_any_request(tmp_path: Path) -> None:
    with pytest.raises(EnvironmentFailureError) as caught:
        network_from_env({"SSL_CERT_FILE": str(tmp_path / "corp.pem")})
    assert caught.value.message == (
        f"SSL_CERT_FILE {tmp_path / 'corp.pem'}: no readable file of CA certificates is there"
    )
    assert caught.value.hint == CERT_HINT
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    with (
        Transport(timeout=5, network=network_from_env({}, cert=bad)) as t,
        pytest.raises(EnvironmentFailureError) as caught,
    ):
        t.request("GET", "https://127.0.0.1:1/")
    assert caught.value.message.startswith(f"--cert {bad}: the CA certificates cannot be loaded")
