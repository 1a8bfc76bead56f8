"""HTTPS through the transport against a real TLS server on 127.0.0.1 (a certificate made
with the openssl CLI for the test): certificates are checked, host names too, and every
connection of a transport shares the one TLS context, with the CA certificates loaded once."""

from __future__ import annotations

import http.server
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from core.errors import TransportError
from core.transport import Conditional, NotModified, Transport, _Burst


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ports: ClassVar[set[int]] = set()  # the client ports of the conditional requests

    def do_GET(self) -> None:
        if self.headers.get("If-None-Match") == '"v1"':
            type(self).ports.add(self.client_address[1])
            if self.path.startswith("/far"):
                time.sleep(0.4)  # a distant index: each answer a long round trip away
            self.send_response(304)
            self.end_headers()  # kept alive
            return
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


class _Server(http.server.ThreadingHTTPServer):
    request_queue_size = 128  # a burst's connections arrive together


@pytest.fixture(scope="module")
def server(cert: Path) -> Iterator[int]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_a_certificate_no_ca_vouches_for_is_refused(server: int) -> None:
    with Transport(timeout=5) as t, pytest.raises(TransportError) as caught:
        t.request("GET", f"https://127.0.0.1:{server}/")
    assert caught.value.kind == "connect"
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message


def test_connections_share_one_context_that_checks_certificates_and_names(
    server: int, cert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the CA certificates the context loads
    loads: list[ssl.SSLContext] = []
    load_default_certs = ssl.SSLContext.load_default_certs

    def counted(self: ssl.SSLContext, *args: Any) -> None:
        loads.append(self)
        load_default_certs(self, *args)

    monkeypatch.setattr(ssl.SSLContext, "load_default_certs", counted)
    with Transport(timeout=5) as t:
        for _ in range(3):  # three connections: the server closes each after its answer
            with t.request("GET", f"https://127.0.0.1:{server}/") as resp:
                assert (resp.status, resp.content) == (200, b"fine")
        with pytest.raises(TransportError) as caught:  # the certificate names 127.0.0.1 only
            t.request("GET", f"https://localhost:{server}/")
    assert len(loads) == 1
    assert loads[0].verify_mode == ssl.CERT_REQUIRED
    assert loads[0].check_hostname is True
    assert caught.value.kind == "connect"
    assert "Hostname mismatch, certificate is not valid for 'localhost'" in caught.value.message


def test_a_burst_over_https_checks_the_certificate_as_request_does(
    server: int, cert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = [
        Conditional(f"https://127.0.0.1:{server}/p{i}", {"If-None-Match": '"v1"'}) for i in range(3)
    ]
    with Transport(timeout=5) as t:  # the test's certificate is not trusted: nothing is read
        assert t.revalidate(asked, connections=2) == [None, None, None]
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with Transport(timeout=5) as t:
        assert t.revalidate(asked, connections=2) == [NotModified(None)] * 3
        named = [Conditional(f"https://localhost:{server}/p", {"If-None-Match": '"v1"'})]
        assert t.revalidate(named, connections=1) == [None]  # the name is not 127.0.0.1


def test_a_near_https_host_keeps_few_connections_and_a_far_one_gets_more(
    server: int, cert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    # this server shares the test's interpreter: even its near answers can take a few tens of
    # milliseconds, so "far" is set to what only the far path takes
    monkeypatch.setattr(_Burst, "FAR", 0.3)
    for path, fewest, most in (("/near", 1, 16), ("/far", 17, 40)):
        _Handler.ports = set()
        asked = [
            Conditional(f"https://127.0.0.1:{server}{path}{i}", {"If-None-Match": '"v1"'})
            for i in range(40)
        ]
        with Transport(timeout=5) as t:
            assert t.revalidate(asked, connections=40) == [NotModified(None)] * 40
        assert fewest <= len(_Handler.ports) <= most, path


def test_the_fetch_loop_checks_the_certificate_and_the_name_as_urllib3_does(
    server: int, cert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Transport(timeout=5, fetch_loop=True) as t, pytest.raises(TransportError) as caught:
        t.request("GET", f"https://127.0.0.1:{server}/")  # not trusted: urllib3 says why
    assert caught.value.kind == "connect"
    assert "CERTIFICATE_VERIFY_FAILED" in caught.value.message
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with Transport(timeout=5, fetch_loop=True) as t:
        for _ in range(2):
            with t.request("GET", f"https://127.0.0.1:{server}/") as resp:
                assert (resp.status, resp.content) == (200, b"fine")
        assert t.looped == 2
        with pytest.raises(TransportError) as caught:  # the certificate names 127.0.0.1 only
            t.request("GET", f"https://localhost:{server}/")
        assert t.looped == 2
    assert caught.value.kind == "connect"
    assert "Hostname mismatch, certificate is not valid for 'localhost'" in caught.value.message
