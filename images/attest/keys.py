"""The keys that sign a published image, read and written in cosign's formats.

A signing key is read from one of two kinds of PEM file:

- **cosign's encrypted private key** (``cosign generate-key-pair`` writes it as ``cosign.key``),
  PEM type ``ENCRYPTED SIGSTORE PRIVATE KEY`` (older cosign: ``ENCRYPTED COSIGN PRIVATE KEY``).
  Its body is the JSON of go-securesystemslib's ``encrypted`` package::

      {"kdf":{"name":"scrypt","params":{"N":32768,"r":8,"p":1},"salt":"<base64>"},
       "cipher":{"name":"nacl/secretbox","nonce":"<base64>"},"ciphertext":"<base64>"}

  scrypt(passphrase, salt, N, r, p) gives a 32-byte key that opens the NaCl secretbox
  (XSalsa20-Poly1305, 24-byte nonce); inside is the PKCS#8 DER private key. Only the scrypt
  parameters go-securesystemslib itself accepts are read (N = 32768, 65536 or 131072 with r = 8,
  p = 1): any other set is refused before scrypt runs, so a hostile file cannot make the tool
  spend memory or time. Sources: sigstore/cosign ``pkg/cosign/keys.go`` (``LoadPrivateKey``,
  ``marshalKeyPair``); secure-systems-lab/go-securesystemslib ``encrypted/encrypted.go`` (first
  written in theupdateframework/go-tuf ``encrypted/encrypted.go``).
- **a PKCS#8 PEM** (``PRIVATE KEY``, or ``ENCRYPTED PRIVATE KEY`` with the passphrase), and the
  unencrypted traditional forms ``cosign import-key-pair`` also takes (``EC PRIVATE KEY``,
  ``RSA PRIVATE KEY``).

The algorithms are those cosign signs with: ECDSA P-256 (SHA-256) or P-384 (SHA-384), Ed25519,
RSA 2048 to 4096 bits (PKCS#1 v1.5, SHA-256); anything else is refused. ECDSA signatures are
deterministic (RFC 6979), so that one key and one payload always give one signature. Ed25519
signs pure Ed25519, which cosign's ``--key`` verifier checks; the Ed25519ph signatures recent
cosign makes with Ed25519 keys do not verify here.

A public key is the SubjectPublicKeyInfo PEM (``PUBLIC KEY``) cosign writes as ``cosign.pub``.

Every refusal is a ``SigningKeyError`` naming the file, the reason and what would fix it; no
message ever holds key bytes or a passphrase. The passphrase comes from a file or from
cosign's own ``COSIGN_PASSWORD`` (``signing_passphrase``), never from a command-line value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, TypeAlias

import nacl.exceptions
import nacl.secret
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from core.errors import SigningKeyError

MAX_KEY_FILE_BYTES = 64 << 10  # a key file is a few hundred bytes; an RSA-4096 PEM about 3 KiB
MAX_PASSPHRASE_FILE_BYTES = 4 << 10
COSIGN_PEM_TYPES = ("ENCRYPTED SIGSTORE PRIVATE KEY", "ENCRYPTED COSIGN PRIVATE KEY")
#: The other private-key PEM types read, and how refusals name the file.
PRIVATE_PEM_TYPES = {
    "PRIVATE KEY": "PKCS#8 key file",
    "ENCRYPTED PRIVATE KEY": "PKCS#8 key file",
    "EC PRIVATE KEY": "SEC1 key file",
    "RSA PRIVATE KEY": "PKCS#1 key file",
}
#: (N, r, p) go-securesystemslib accepts: its Legacy (what cosign writes), Standard and OWASP.
SCRYPT_PARAMETERS = ((32768, 8, 1), (65536, 8, 1), (131072, 8, 1))
_SALT_BYTES = 32
_SCRYPT_KEY_BYTES = 32

KeyKind: TypeAlias = Literal["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa-2048", "rsa-3072"]
_PrivateKey: TypeAlias = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
_PublicKey: TypeAlias = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | rsa.RSAPublicKey

_HOW_TO_GIVE_IT = "(COSIGN_PASSWORD or --sign-key-passphrase-file)"
_ALGORITHMS = "ECDSA P-256 or P-384, Ed25519 or RSA of 2048 to 4096 bits"
_PEM_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----\r?\n(.*?)-----END \1-----", re.DOTALL)
_CURVE_HASH = {"secp256r1": hashes.SHA256, "secp384r1": hashes.SHA384}


class PublicKey:
    """A public key cosign verifies with; equal when their SubjectPublicKeyInfo is."""

    __slots__ = ("_der", "_key")

    def __init__(self, key: _PublicKey) -> None:
        self._key = key
        self._der = key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def algorithm(self) -> str:
        """The scheme, e.g. ``ecdsa-p256-sha256``, ``ed25519``, ``rsa-2048-pkcs1v15-sha256``."""
        key = self._key
        if isinstance(key, ec.EllipticCurvePublicKey):
            return "ecdsa-p256-sha256" if key.curve.name == "secp256r1" else "ecdsa-p384-sha384"
        if isinstance(key, ed25519.Ed25519PublicKey):
            return "ed25519"
        return f"rsa-{key.key_size}-pkcs1v15-sha256"

    def verify(self, signature: bytes, data: bytes) -> bool:
        """Whether ``signature`` is this key's signature of ``data`` (as cosign checks it)."""
        key = self._key
        try:
            if isinstance(key, ec.EllipticCurvePublicKey):
                key.verify(signature, data, ec.ECDSA(_CURVE_HASH[key.curve.name]()))
            elif isinstance(key, ed25519.Ed25519PublicKey):
                key.verify(signature, data)
            else:
                key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return False
        return True

    def pem(self) -> bytes:
        """The SubjectPublicKeyInfo PEM, as ``cosign.pub`` holds it."""
        return self._key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the DER SubjectPublicKeyInfo: names the key in messages."""
        return "sha256:" + hashlib.sha256(self._der).hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other._der == self._der

    def __hash__(self) -> int:
        return hash(self._der)

    def __repr__(self) -> str:
        return f"PublicKey({self.algorithm}, {self.fingerprint()})"


class SigningKey:
    """A private key that signs as cosign does; its repr shows only the public fingerprint."""

    __slots__ = ("_key", "_public")

    def __init__(self, key: _PrivateKey) -> None:
        self._key = key
        self._public = PublicKey(key.public_key())

    def sign(self, data: bytes) -> bytes:
        """The raw signature of ``data``: DER ECDSA (deterministic, RFC 6979) over SHA-256 for
        P-256 or SHA-384 for P-384; pure Ed25519; RSA PKCS#1 v1.5 over SHA-256."""
        key = self._key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            algorithm = ec.ECDSA(_CURVE_HASH[key.curve.name](), deterministic_signing=True)
            return key.sign(data, algorithm)
        if isinstance(key, ed25519.Ed25519PrivateKey):
            return key.sign(data)
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256())

    def public_key(self) -> PublicKey:
        return self._public

    def __repr__(self) -> str:
        return f"SigningKey({self._public.algorithm}, {self._public.fingerprint()})"


def signing_passphrase(passphrase_file: Path | None, environ: Mapping[str, str]) -> bytes | None:
    """The passphrase of the signing key: the first line of ``passphrase_file`` (its line end
    stripped) when one is given, else ``COSIGN_PASSWORD`` when set (even empty: a key made
    without a passphrase), else None."""
    if passphrase_file is not None:
        data = _read_bounded(passphrase_file, MAX_PASSPHRASE_FILE_BYTES, "passphrase file")
        line = data.split(b"\n", 1)[0]
        return line[:-1] if line.endswith(b"\r") else line
    value = environ.get("COSIGN_PASSWORD")
    return None if value is None else value.encode("utf-8")


def load_signing_key(path: Path, passphrase: bytes | None) -> SigningKey:
    """The signing key in ``path``: cosign's encrypted key or a PKCS#8 PEM (see the module)."""
    data = _read_bounded(path, MAX_KEY_FILE_BYTES, "signing key file")
    blocks = _pem_blocks(data)
    for pem_type, block in blocks:
        if pem_type in COSIGN_PEM_TYPES:
            der = _open_cosign_key(path, _pem_body(path, block), passphrase)
            return _signing_key(path, "cosign key file", _load_der_private(path, der))
        if pem_type in PRIVATE_PEM_TYPES:
            kind = PRIVATE_PEM_TYPES[pem_type]
            return _signing_key(path, kind, _load_pem_private(path, kind, block, passphrase))
    raise SigningKeyError(
        f"{path}: no private key in the file ({_found(blocks)}); give the key"
        " `cosign generate-key-pair` made (cosign.key) or a PKCS#8 PEM (PRIVATE KEY)"
    )


def load_public_key(path: Path) -> PublicKey:
    """The public key in ``path``: the SubjectPublicKeyInfo PEM cosign writes as cosign.pub."""
    return public_key_from_pem(_read_bounded(path, MAX_KEY_FILE_BYTES, "public key file"), path)


def public_key_from_pem(data: bytes, source: str | Path) -> PublicKey:
    """The first ``PUBLIC KEY`` block of ``data``; ``source`` names it in refusals."""
    blocks = _pem_blocks(data)
    block = next((b for t, b in blocks if t == "PUBLIC KEY"), None)
    if block is None:
        raise SigningKeyError(
            f"{source}: no PUBLIC KEY block in the file ({_found(blocks)}); give the public key"
            " `cosign generate-key-pair` wrote (cosign.pub)"
        )
    try:
        key = serialization.load_pem_public_key(block)
    except (ValueError, UnsupportedAlgorithm):
        raise SigningKeyError(
            f"{source}: public key file: the PUBLIC KEY block cannot be parsed; the file is"
            " damaged: copy cosign.pub again"
        ) from None
    unsupported = _unsupported(key)
    if unsupported is not None:
        raise SigningKeyError(
            f"{source}: public key file: {unsupported}; cosign verifies {_ALGORITHMS}"
        )
    assert isinstance(key, (ec.EllipticCurvePublicKey, ed25519.Ed25519PublicKey, rsa.RSAPublicKey))
    return PublicKey(key)


def generate_cosign_key_pair(passphrase: bytes) -> tuple[bytes, bytes]:
    """A new ECDSA P-256 pair as ``cosign generate-key-pair`` writes it: (the encrypted private
    key PEM, ``ENCRYPTED SIGSTORE PRIVATE KEY``, scrypt N=32768 r=8 p=1, a random 32-byte salt
    and 24-byte nonce; the public key PEM)."""
    private = ec.generate_private_key(ec.SECP256R1())
    pkcs8, plain = serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    der = private.private_bytes(serialization.Encoding.DER, pkcs8, plain)
    salt = os.urandom(_SALT_BYTES)
    nonce = os.urandom(nacl.secret.SecretBox.NONCE_SIZE)
    n, r, p = SCRYPT_PARAMETERS[0]
    box = nacl.secret.SecretBox(_scrypt(passphrase, salt, n, r, p))
    ciphertext = box.encrypt(der, nonce).ciphertext
    document = {  # the field order and names Go's json.Marshal writes (go-securesystemslib)
        "kdf": {"name": "scrypt", "params": {"N": n, "r": r, "p": p}, "salt": _b64(salt)},
        "cipher": {"name": "nacl/secretbox", "nonce": _b64(nonce)},
        "ciphertext": _b64(ciphertext),
    }
    body = json.dumps(document, separators=(",", ":")).encode("ascii")
    return _pem_encode(COSIGN_PEM_TYPES[0], body), PublicKey(private.public_key()).pem()


def generate_pkcs8_key_pair(kind: KeyKind, passphrase: bytes | None = None) -> tuple[bytes, bytes]:
    """A new pair of ``kind`` as PEM: (PKCS#8 ``PRIVATE KEY``, or ``ENCRYPTED PRIVATE KEY``
    when a passphrase is given; the public key)."""
    private: _PrivateKey
    if kind == "ecdsa-p256":
        private = ec.generate_private_key(ec.SECP256R1())
    elif kind == "ecdsa-p384":
        private = ec.generate_private_key(ec.SECP384R1())
    elif kind == "ed25519":
        private = ed25519.Ed25519PrivateKey.generate()
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=int(kind[4:]))
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if passphrase is None
        else serialization.BestAvailableEncryption(passphrase)
    )
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )
    return pem, PublicKey(private.public_key()).pem()


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise SigningKeyError(
            f"{path}: cannot read the {what}: {exc.strerror or type(exc).__name__};"
            " check the path and its permissions"
        ) from None
    if len(data) > limit:
        raise SigningKeyError(
            f"{path}: the {what} is larger than {limit >> 10} KiB, more than such a file holds;"
            " is this the right file?"
        )
    return data


def _pem_blocks(data: bytes) -> list[tuple[str, bytes]]:
    return [(m.group(1).decode("ascii"), m.group(0)) for m in _PEM_BLOCK.finditer(data)]


def _found(blocks: list[tuple[str, bytes]]) -> str:
    if not blocks:
        return "found no PEM block"
    return "found: " + ", ".join(dict.fromkeys(t for t, _ in blocks))


def _pem_body(path: Path, block: bytes) -> bytes:
    lines = block.splitlines()[1:-1]
    try:
        return base64.b64decode(b"".join(line.strip() for line in lines), validate=True)
    except binascii.Error:
        raise SigningKeyError(
            f"{path}: cosign key file: the PEM body is not base64; the file is damaged: make a"
            " new pair with `cosign generate-key-pair`"
        ) from None


def _open_cosign_key(path: Path, body: bytes, passphrase: bytes | None) -> bytes:
    """The PKCS#8 DER inside cosign's encrypted key (go-securesystemslib ``encrypted.Decrypt``)."""
    where = f"{path}: cosign key file"
    n, r, p, salt, nonce, ciphertext = _cosign_fields(where, body)
    if (n, r, p) not in SCRYPT_PARAMETERS:
        raise SigningKeyError(
            f"{where}: scrypt parameters N={n}, r={r}, p={p} are not ones cosign writes"
            " (N=32768, 65536 or 131072 with r=8, p=1); refused rather than spend the memory and"
            " time they ask for: make a new pair with `cosign generate-key-pair`"
        )
    if passphrase is None:
        raise SigningKeyError(
            f"{where}: the key is encrypted and no passphrase was given; give the passphrase the"
            f" key was made with {_HOW_TO_GIVE_IT}; COSIGN_PASSWORD= (empty) for a key made"
            " without one"
        )
    box = nacl.secret.SecretBox(_scrypt(passphrase, salt, n, r, p))
    try:
        der = box.decrypt(ciphertext, nonce)
    except nacl.exceptions.CryptoError:
        raise SigningKeyError(
            f"{where}: wrong passphrase, or the file is damaged (nacl/secretbox refused the"
            f" ciphertext); give the passphrase the key was made with {_HOW_TO_GIVE_IT}"
        ) from None
    if not _is_pkcs8(der):
        raise SigningKeyError(
            f"{where}: the decrypted key is not PKCS#8 (cosign itself cannot sign with this"
            " file); import the key again with `cosign import-key-pair`"
        )
    return der


def _cosign_fields(where: str, body: bytes) -> tuple[int, int, int, bytes, bytes, bytes]:
    damaged = "the file is damaged: make a new pair with `cosign generate-key-pair`"
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError; deep nesting
        raise SigningKeyError(f"{where}: the PEM body is not JSON; {damaged}") from None
    kdf = doc.get("kdf") if isinstance(doc, dict) else None
    cipher = doc.get("cipher") if isinstance(doc, dict) else None
    if not isinstance(kdf, dict) or not isinstance(cipher, dict):
        raise SigningKeyError(f"{where}: the JSON has no kdf and cipher objects; {damaged}")
    if kdf.get("name") != "scrypt" or cipher.get("name") != "nacl/secretbox":
        raise SigningKeyError(
            f"{where}: kdf {kdf.get('name')!r} with cipher {cipher.get('name')!r}, not scrypt with"
            f" nacl/secretbox, the only ones cosign writes; {damaged}"
        )
    params = kdf.get("params")
    values = [params.get(k) if isinstance(params, dict) else None for k in ("N", "r", "p")]
    n, r, p = (v if type(v) is int else -1 for v in values)  # bool is not a parameter
    if min(n, r, p) < 0:
        raise SigningKeyError(f"{where}: kdf.params needs integers N, r and p; {damaged}")
    salt = _b64_field(where, "kdf.salt", kdf.get("salt"), damaged)
    nonce = _b64_field(where, "cipher.nonce", cipher.get("nonce"), damaged)
    if len(nonce) != nacl.secret.SecretBox.NONCE_SIZE:
        raise SigningKeyError(f"{where}: cipher.nonce is not 24 bytes; {damaged}")
    return n, r, p, salt, nonce, _b64_field(where, "ciphertext", doc.get("ciphertext"), damaged)


def _b64_field(where: str, name: str, value: object, damaged: str) -> bytes:
    try:
        return base64.b64decode(value if isinstance(value, str) else "?", validate=True)
    except binascii.Error:
        raise SigningKeyError(f"{where}: {name} is not a base64 string; {damaged}") from None


def _scrypt(passphrase: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    maxmem = 128 * r * (n + p + 2) + (1 << 20)  # OpenSSL's B and V buffers, and some room
    return hashlib.scrypt(
        passphrase, salt=salt, n=n, r=r, p=p, maxmem=maxmem, dklen=_SCRYPT_KEY_BYTES
    )


def _is_pkcs8(der: bytes) -> bool:
    """Whether ``der`` starts as a PKCS#8 PrivateKeyInfo (RFC 5208/5958: SEQUENCE { version 0
    or 1, AlgorithmIdentifier SEQUENCE, ... }), not a SEC1 or PKCS#1 key, which Go's
    ``x509.ParsePKCS8PrivateKey`` (and so cosign) refuses."""
    if len(der) < 2 or der[0] != 0x30:
        return False
    start = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7F)
    return der[start : start + 3] in (b"\x02\x01\x00", b"\x02\x01\x01") and (
        der[start + 3 : start + 4] == b"\x30"
    )


def _load_der_private(path: Path, der: bytes) -> PrivateKeyTypes:
    try:
        return serialization.load_der_private_key(der, password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise SigningKeyError(
            f"{path}: cosign key file: the decrypted PKCS#8 key cannot be parsed; import the key"
            " again with `cosign import-key-pair`"
        ) from None


def _load_pem_private(
    path: Path, kind: str, block: bytes, passphrase: bytes | None
) -> PrivateKeyTypes:
    where = f"{path}: {kind}"
    encrypted = block.startswith(b"-----BEGIN ENCRYPTED") or b"Proc-Type: 4,ENCRYPTED" in block
    if encrypted and passphrase is None:
        raise SigningKeyError(
            f"{where}: the key is encrypted and no passphrase was given; give the passphrase the"
            f" key was made with {_HOW_TO_GIVE_IT}"
        )
    try:
        return serialization.load_pem_private_key(block, password=passphrase if encrypted else None)
    except (ValueError, TypeError):
        if encrypted:
            raise SigningKeyError(
                f"{where}: wrong passphrase, or the file is damaged (the key did not decrypt);"
                f" give the passphrase the key was made with {_HOW_TO_GIVE_IT}"
            ) from None
        raise SigningKeyError(
            f"{where}: the private key block cannot be parsed; the file is damaged or not a key"
        ) from None
    except UnsupportedAlgorithm:
        raise SigningKeyError(
            f"{where}: the key uses an algorithm this tool cannot read; cosign signs with"
            f" {_ALGORITHMS}: make a key with `cosign generate-key-pair`"
        ) from None


def _signing_key(path: Path, kind: str, private: PrivateKeyTypes) -> SigningKey:
    unsupported = _unsupported(private.public_key())
    if unsupported is not None:
        raise SigningKeyError(
            f"{path}: {kind}: {unsupported}; cosign signs with {_ALGORITHMS}:"
            " make a key with `cosign generate-key-pair`"
        )
    assert isinstance(
        private, (ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey, rsa.RSAPrivateKey)
    )
    return SigningKey(private)


def _unsupported(key: PublicKeyTypes) -> str | None:
    """Why cosign does not sign with ``key``, or None when it does."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        return None if key.curve.name in _CURVE_HASH else f"an ECDSA key on {key.curve.name}"
    if isinstance(key, ed25519.Ed25519PublicKey):
        return None
    if isinstance(key, rsa.RSAPublicKey):
        return None if 2048 <= key.key_size <= 4096 else f"a {key.key_size}-bit RSA key"
    if isinstance(key, dsa.DSAPublicKey):
        return "a DSA key"
    if isinstance(key, ed448.Ed448PublicKey):
        return "an Ed448 key"
    return f"a key of type {type(key).__name__}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _pem_encode(pem_type: str, body: bytes) -> bytes:
    """PEM as Go's ``pem.EncodeToMemory`` writes it: 64-column base64 lines."""
    text = base64.b64encode(body).decode("ascii")
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return (
        f"-----BEGIN {pem_type}-----\n" + "\n".join(lines) + f"\n-----END {pem_type}-----\n"
    ).encode("ascii")
