"""A private certificate authority, made with the ``openssl`` command line, for the HTTPS
indexes and proxies of the test bed.

A corporate index is served over HTTPS with a certificate its own CA signed; a client trusts
that CA through ``SSL_CERT_FILE`` (a PEM file), ``SSL_CERT_DIR`` (a hashed directory) or an
option of its own (pip's ``--cert``)::

    authority = make_authority(tmp_path / "ca")
    cert = authority.issue("index", ["index.corp.test", "127.0.0.1"])
    with IndexServer(root, tls=cert, host="index.corp.test") as server:
        context = client_context(authority.ca_file)             # what a client trusts
        ...
    monkeypatch.setenv("SSL_CERT_FILE", str(authority.ca_file))
    monkeypatch.setenv("SSL_CERT_DIR", str(authority.hashed_dir()))  # <subject hash>.0

Keys are EC P-256; certificates are valid for 2 days from now. The CA has basicConstraints
``CA:TRUE`` (critical), keyUsage ``keyCertSign, cRLSign`` (critical) and key identifiers; a
server certificate has ``CA:FALSE``, keyUsage ``digitalSignature``, extendedKeyUsage
``serverAuth``, its hosts in subjectAltName (DNS names and IP addresses) and an authority key
identifier: what ``ssl.VERIFY_X509_STRICT`` (on by default since Python 3.13) demands.
"""

from __future__ import annotations

import ipaddress
import secrets
import shutil
import ssl
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Authority",
    "ServerCert",
    "client_context",
    "make_authority",
    "server_context",
    "subject_hash",
    "write_hashed_dir",
]

DAYS = 2
_KEY_ARGS = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes")

_CA_EXTENSIONS = """\
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
"""

_SERVER_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
subjectAltName = {alt_names}
"""


@dataclass(frozen=True)
class ServerCert:
    """A server certificate the authority signed, with its key."""

    name: str
    hosts: tuple[str, ...]  # as given: DNS names and IP addresses, in subjectAltName
    cert_file: Path  # the certificate, PEM
    key_file: Path  # its private key, PEM (unencrypted)
    chain: Path  # certificate + key in one PEM file (for SSLContext.load_cert_chain)
    ca_file: Path  # the authority's certificate, PEM (what a client trusts)


@dataclass(frozen=True)
class Authority:
    """A self-signed root CA in ``directory`` (``ca.pem``, ``ca.key``)."""

    name: str
    directory: Path
    ca_file: Path  # the CA certificate, PEM (what a client trusts: SSL_CERT_FILE / --cert)
    key_file: Path

    def issue(self, name: str, hosts: Sequence[str]) -> ServerCert:
        """A server certificate for ``hosts`` (DNS names and IP addresses, at least one),
        signed by this CA; its files are ``directory/<name>.pem``, ``.key`` and ``.chain.pem``.
        The subject's CN is the first host."""
        if not hosts:
            raise ValueError("a server certificate needs at least one host")
        _check_name(name)
        config = self.directory / f"{name}.cnf"
        config.write_text(
            _req_config(hosts[0], "ext")
            + _SERVER_EXTENSIONS.format(alt_names=", ".join(map(_alt_name, hosts)))
        )
        key, csr = self.directory / f"{name}.key", self.directory / f"{name}.csr"
        cert, chain = self.directory / f"{name}.pem", self.directory / f"{name}.chain.pem"
        _openssl("req", "-new", *_KEY_ARGS, "-keyout", key, "-out", csr, "-config", config)
        _openssl(
            "x509", "-req", "-in", csr,
            "-CA", self.ca_file, "-CAkey", self.key_file,
            "-set_serial", _serial(), "-days", str(DAYS), "-sha256",
            "-extfile", config, "-extensions", "ext",
            "-out", cert,
        )  # fmt: skip
        chain.write_bytes(cert.read_bytes() + key.read_bytes())
        return ServerCert(
            name, tuple(hosts), cert_file=cert, key_file=key, chain=chain, ca_file=self.ca_file
        )

    def hashed_dir(self, directory: Path | None = None) -> Path:
        """A CA directory for ``SSL_CERT_DIR`` / ``capath`` holding this CA (default
        ``directory/certs``); see ``write_hashed_dir``."""
        return write_hashed_dir(directory or self.directory / "certs", [self.ca_file])


def make_authority(directory: Path, name: str = "Test Corp Root CA") -> Authority:
    """A new root CA named ``name`` (its subject CN) in ``directory``."""
    _check_name(name)
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "ca.cnf"
    config.write_text(_req_config(name, "ext") + _CA_EXTENSIONS)
    ca_file, key_file = directory / "ca.pem", directory / "ca.key"
    _openssl(
        "req", "-x509", "-new", *_KEY_ARGS, "-keyout", key_file, "-out", ca_file,
        "-days", str(DAYS), "-sha256", "-set_serial", _serial(), "-config", config,
    )  # fmt: skip
    return Authority(name=name, directory=directory, ca_file=ca_file, key_file=key_file)


def server_context(cert: ServerCert) -> ssl.SSLContext:
    """A server-side context (``PROTOCOL_TLS_SERVER``, TLS 1.2 or later) presenting ``cert``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert.chain)
    return context


def client_context(
    cafile: Path | None = None, *, capath: Path | None = None, strict: bool = True
) -> ssl.SSLContext:
    """A verifying client context trusting ``cafile`` / ``capath`` (neither: the system
    store), with ``VERIFY_X509_STRICT`` as Python 3.13 sets it by default."""
    if cafile is None and capath is None:
        context = ssl.create_default_context()
    else:
        context = ssl.create_default_context(
            cafile=None if cafile is None else str(cafile),
            capath=None if capath is None else str(capath),
        )
    if strict:
        context.verify_flags |= ssl.VERIFY_X509_STRICT
    return context


def subject_hash(cert_file: Path) -> str:
    """OpenSSL's subject name hash of a PEM certificate (``openssl x509 -hash``): 8 hex digits."""
    return _openssl("x509", "-hash", "-noout", "-in", cert_file).strip()


def write_hashed_dir(directory: Path, ca_files: Iterable[Path]) -> Path:
    """Copy ``ca_files`` into ``directory`` in OpenSSL's hashed layout (``<subject hash>.N``,
    N counting up from 0 past other certificates with the same hash), as ``openssl rehash``
    does: what ``SSL_CERT_DIR`` and ``capath`` point at. Returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for ca_file in ca_files:
        digest = subject_hash(ca_file)
        data = ca_file.read_bytes()
        for n in range(100):
            target = directory / f"{digest}.{n}"
            if not target.exists():
                shutil.copyfile(ca_file, target)
                break
            if target.read_bytes() == data:
                break
        else:
            raise RuntimeError(f"too many certificates with subject hash {digest} in {directory}")
    return directory


# ----------------------------------------------------------------------------- internals


def _openssl(*args: str | Path) -> str:
    argv = ["openssl", *map(str, args)]
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False
        )
    except FileNotFoundError as exc:
        raise RuntimeError(
            "the openssl command is not installed (apt-get install openssl)"
        ) from exc
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _req_config(common_name: str, extensions: str) -> str:
    """An ``openssl req`` configuration (no system openssl.cnf) with subject CN ``common_name``
    and the extension section ``[extensions]``, which the caller appends."""
    return (
        "[req]\n"
        "distinguished_name = dn\n"
        "prompt = no\n"
        "utf8 = yes\n"
        "string_mask = utf8only\n"
        f"x509_extensions = {extensions}\n"
        "[dn]\n"
        f"CN = {_config_value(common_name)}\n"
        f"[{extensions}]\n"
    )


def _config_value(text: str) -> str:
    """``text`` as an OpenSSL configuration value: ``$`` would start a variable."""
    return text.replace("$", "\\$")


def _alt_name(host: str) -> str:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return f"DNS:{host}"
    return f"IP:{host}"


def _serial() -> str:
    return "0x" + secrets.token_hex(16)


def _check_name(name: str) -> None:
    if not name or any(c in name for c in "\n\r/\\") or name.startswith("."):
        raise ValueError(f"not a usable name: {name!r}")
