"""The private CA (``testbed.tls``) and ``IndexServer`` over HTTPS: a strict client
(``VERIFY_X509_STRICT``, as Python 3.13 verifies) trusts the server for the names its
certificate carries and no other, through a CA file, a hashed CA directory or the
environment's ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``; the system trust store does not."""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.index_server import IndexServer
from testbed.tls import (
    Authority,
    ServerCert,
    client_context,
    make_authority,
    server_context,
    subject_hash,
    write_hashed_dir,
)

HOSTS = ["index.corp.test", "127.0.0.1"]
PAGE = b"<!DOCTYPE html><html><body>corp</body></html>\n"


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def cert(authority: Authority) -> ServerCert:
    return authority.issue("index", HOSTS)


@pytest.fixture
def server(tmp_path: Path, cert: ServerCert) -> Iterator[IndexServer]:
    root = tmp_path / "index"
    (root / "simple").mkdir(parents=True)
    (root / "simple" / "index.html").write_bytes(PAGE)
    with IndexServer(root, tls=cert, host="index.corp.test") as server:
        yield server


def _handshake(port: int, context: ssl.SSLContext, name: str) -> dict[str, object]:
    """The verified peer certificate of a TLS handshake with 127.0.0.1:port as ``name``."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=name) as tls,
    ):
        peer = tls.getpeercert()
        assert peer is not None
        return dict(peer)


def _extensions(cert_file: Path, names: str) -> list[str]:
    done = subprocess.run(
        ["openssl", "x509", "-in", str(cert_file), "-noout", "-ext", names],
        capture_output=True,
        text=True,
        check=True,
    )
    return [line.strip() for line in done.stdout.splitlines()]


def test_certificates_carry_what_a_strict_verifier_demands(
    authority: Authority, cert: ServerCert
) -> None:
    assert _extensions(authority.ca_file, "basicConstraints,keyUsage") == [
        "X509v3 Basic Constraints: critical",
        "CA:TRUE",
        "X509v3 Key Usage: critical",
        "Certificate Sign, CRL Sign",
    ]
    assert _extensions(cert.cert_file, "basicConstraints,extendedKeyUsage,subjectAltName") == [
        "X509v3 Basic Constraints: critical",
        "CA:FALSE",
        "X509v3 Extended Key Usage:",
        "TLS Web Server Authentication",
        "X509v3 Subject Alternative Name:",
        "DNS:index.corp.test, IP Address:127.0.0.1",
    ]
    verified = subprocess.run(
        [
            *("openssl", "verify", "-x509_strict", "-purpose", "sslserver"),
            *("-CAfile", str(authority.ca_file), str(cert.cert_file)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (verified.returncode, verified.stdout) == (0, f"{cert.cert_file}: OK\n")
    assert cert.chain.read_bytes() == cert.cert_file.read_bytes() + cert.key_file.read_bytes()
    assert (cert.ca_file, cert.hosts) == (authority.ca_file, tuple(HOSTS))
    assert server_context(cert).protocol == ssl.PROTOCOL_TLS_SERVER


def test_a_strict_client_trusts_the_server_for_its_names_only(
    server: IndexServer, authority: Authority
) -> None:
    assert server.url == f"https://index.corp.test:{server.port}"
    assert server.simple_url == f"https://index.corp.test:{server.port}/simple/"
    context = client_context(authority.ca_file)
    assert context.verify_flags & ssl.VERIFY_X509_STRICT
    peer = _handshake(server.port, context, "index.corp.test")
    assert peer["subject"] == ((("commonName", "index.corp.test"),),)
    assert peer["issuer"] == ((("commonName", "Test Corp Root CA"),),)
    assert peer["subjectAltName"] == (("DNS", "index.corp.test"), ("IP Address", "127.0.0.1"))
    lifetime = ssl.cert_time_to_seconds(str(peer["notAfter"])) - ssl.cert_time_to_seconds(
        str(peer["notBefore"])
    )
    assert lifetime == 2 * 24 * 3600

    with pytest.raises(ssl.SSLCertVerificationError) as mismatch:
        _handshake(server.port, context, "other.corp.test")
    assert mismatch.value.verify_message == (
        "Hostname mismatch, certificate is not valid for 'other.corp.test'."
    )
    with pytest.raises(ssl.SSLCertVerificationError) as untrusted:
        _handshake(server.port, client_context(), "index.corp.test")
    assert (untrusted.value.verify_code, untrusted.value.verify_message) == (
        20,
        "unable to get local issuer certificate",
    )

    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)
    try:  # by its IP address, which the certificate names too
        conn.request("GET", "/simple/")
        resp = conn.getresponse()
        assert (resp.status, resp.read()) == (200, PAGE)
    finally:
        conn.close()
    assert server.paths() == ["/simple/"]


def test_the_environment_points_a_default_context_at_the_ca(
    server: IndexServer, authority: Authority, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What OpenSSL reads when a context loads the default paths: clients that take no
    option of their own (Python's urllib, uv with --native-tls) trust the CA so."""
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    peer = _handshake(server.port, ssl.create_default_context(), "index.corp.test")
    assert peer["subject"] == ((("commonName", "index.corp.test"),),)

    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.setenv("SSL_CERT_DIR", str(authority.hashed_dir(tmp_path / "certs")))
    peer = _handshake(server.port, ssl.create_default_context(), "index.corp.test")
    assert peer["subject"] == ((("commonName", "index.corp.test"),),)

    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path / "empty"))
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server.port, ssl.create_default_context(), "index.corp.test")


def test_the_hashed_directory_layout(authority: Authority, tmp_path: Path) -> None:
    digest = subject_hash(authority.ca_file)
    assert len(digest) == 8
    assert int(digest, 16) >= 0
    directory = authority.hashed_dir(tmp_path / "certs")
    assert sorted(p.name for p in directory.iterdir()) == [f"{digest}.0"]
    assert (directory / f"{digest}.0").read_bytes() == authority.ca_file.read_bytes()

    twin = make_authority(tmp_path / "twin")  # the same subject, another key
    assert subject_hash(twin.ca_file) == digest
    write_hashed_dir(directory, [authority.ca_file, twin.ca_file])  # the first one again: kept
    assert sorted(p.name for p in directory.iterdir()) == [f"{digest}.0", f"{digest}.1"]
    assert (directory / f"{digest}.1").read_bytes() == twin.ca_file.read_bytes()


def test_a_client_that_never_shakes_hands_holds_up_no_other(
    server: IndexServer, authority: Authority
) -> None:
    context = client_context(authority.ca_file)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5):  # and silent
        peer = _handshake(server.port, context, "index.corp.test")
        assert peer["subject"] == ((("commonName", "index.corp.test"),),)

    plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:  # plain HTTP to the HTTPS port: a failed handshake, hung up on quietly
        plain.request("GET", "/simple/")
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            plain.getresponse()
    finally:
        plain.close()
    assert _handshake(server.port, context, "index.corp.test")["issuer"] == (
        (("commonName", "Test Corp Root CA"),),
    )
    assert server.requests == []  # no request got past a handshake but the HTTPS one's
