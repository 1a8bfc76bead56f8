"""Signing keys: cosign's encrypted key format both ways (and cosign's own test keys), PKCS#8,
the algorithms cosign signs with and the ones it does not, where the passphrase comes from,
and refusals that name the file and the fix but never the passphrase."""

from __future__ import annotations

import base64
import hashlib
import json
import traceback
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec

from core.errors import ExitCode, SigningKeyError
from images.attest.keys import (
    KeyKind,
    generate_cosign_key_pair,
    generate_pkcs8_key_pair,
    load_public_key,
    load_signing_key,
    signing_passphrase,
)

FIXTURES = Path(__file__).parent / "fixtures" / "cosign"
COSIGN_TEST_PASSWORD = b"hello"  # pkg/cosign/keys_test.go: pass("hello")
PASSPHRASE = b"tr0ub4dor&3-unique-passphrase"
WRONG = b"wr0ng-unique-passphrase"
GIVE = "give the passphrase the key was made with (COSIGN_PASSWORD or --sign-key-passphrase-file)"
ALGORITHMS = "ECDSA P-256 or P-384, Ed25519 or RSA of 2048 to 4096 bits"
DAMAGED = "the file is damaged: make a new pair with `cosign generate-key-pair`"


@pytest.fixture(scope="module")
def cosign_pair() -> tuple[bytes, bytes]:
    return generate_cosign_key_pair(PASSPHRASE)


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def pem_body(pem: bytes) -> bytes:
    return base64.b64decode(b"".join(pem.splitlines()[1:-1]))


def cosign_pem(body: bytes, pem_type: str = "ENCRYPTED SIGSTORE PRIVATE KEY") -> bytes:
    text = base64.b64encode(body).decode()
    lines = "\n".join(text[i : i + 64] for i in range(0, len(text), 64))
    return f"-----BEGIN {pem_type}-----\n{lines}\n-----END {pem_type}-----\n".encode()


def refusal(path: Path, passphrase: bytes | None) -> str:
    with pytest.raises(SigningKeyError) as info:
        load_signing_key(path, passphrase)
    assert info.value.exit_code == ExitCode.USAGE
    return str(info.value)


def test_cosign_key_pair_round_trips_in_cosigns_exact_format(
    tmp_path: Path, cosign_pair: tuple[bytes, bytes]
) -> None:
    private_pem, public_pem = cosign_pair
    key = load_signing_key(write(tmp_path, "cosign.key", private_pem), PASSPHRASE)
    assert key.public_key().pem() == public_pem
    assert key.public_key() == load_public_key(write(tmp_path, "cosign.pub", public_pem))
    assert key.public_key().algorithm == "ecdsa-p256-sha256"
    lines = private_pem.decode().splitlines()
    assert lines[0] == "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"
    assert lines[-1] == "-----END ENCRYPTED SIGSTORE PRIVATE KEY-----"
    assert all(len(line) == 64 for line in lines[1:-2])
    assert 0 < len(lines[-2]) <= 64
    ours = pem_body(private_pem)
    doc = json.loads(ours)
    assert doc["kdf"]["params"] == {"N": 32768, "r": 8, "p": 1}
    assert len(base64.b64decode(doc["kdf"]["salt"])) == 32
    assert len(base64.b64decode(doc["cipher"]["nonce"])) == 24
    # The same JSON shape, field order and compact spelling as a key cosign made.
    theirs = pem_body((FIXTURES / "keys_test.pemsigstorekey.key").read_bytes())
    for body in (ours, theirs):
        assert json.dumps(json.loads(body), separators=(",", ":")).encode() == body
    their_doc = json.loads(theirs)
    assert [list(d) for d in (doc, doc["kdf"], doc["cipher"])] == [
        list(d) for d in (their_doc, their_doc["kdf"], their_doc["cipher"])
    ]
    assert doc["kdf"]["params"] == their_doc["kdf"]["params"]


@pytest.mark.parametrize("name", ["keys_test.pemsigstorekey.key", "keys_test.pemcosignkey.key"])
def test_cosigns_own_encrypted_keys_load_with_their_test_password(name: str) -> None:
    key = load_signing_key(FIXTURES / name, COSIGN_TEST_PASSWORD)
    assert key.public_key().algorithm == "ecdsa-p256-sha256"
    assert key.public_key().verify(key.sign(b"payload"), b"payload")


def test_cosigns_sec1_key_in_a_cosign_box_is_refused_as_cosign_refuses_it() -> None:
    path = FIXTURES / "keys_test.pemcosigneckey.key"  # scrypt N=65536: the Standard set
    assert refusal(path, COSIGN_TEST_PASSWORD) == (
        f"{path}: cosign key file: the decrypted key is not PKCS#8 (cosign itself cannot sign"
        " with this file); import the key again with `cosign import-key-pair`"
    )


def test_wrong_passphrase_is_refused_with_what_to_give(
    tmp_path: Path, cosign_pair: tuple[bytes, bytes]
) -> None:
    path = write(tmp_path, "cosign.key", cosign_pair[0])
    assert refusal(path, WRONG) == (
        f"{path}: cosign key file: wrong passphrase, or the file is damaged (nacl/secretbox"
        f" refused the ciphertext); {GIVE}"
    )


def test_missing_passphrase_is_refused(tmp_path: Path, cosign_pair: tuple[bytes, bytes]) -> None:
    path = write(tmp_path, "cosign.key", cosign_pair[0])
    assert refusal(path, None) == (
        f"{path}: cosign key file: the key is encrypted and no passphrase was given; give the"
        " passphrase the key was made with (COSIGN_PASSWORD or --sign-key-passphrase-file);"
        " COSIGN_PASSWORD= (empty) for a key made without one"
    )


def test_damaged_cosign_key_files_are_refused(
    tmp_path: Path, cosign_pair: tuple[bytes, bytes]
) -> None:
    doc = json.loads(pem_body(cosign_pair[0]))
    cases = {
        b"{not json": "the PEM body is not JSON",
        b"[" * 40000: "the PEM body is not JSON",  # nested deeper than Python's recursion limit
        b"[]": "the JSON has no kdf and cipher objects",
        json.dumps({**doc, "cipher": {**doc["cipher"], "name": "aes-gcm"}}).encode(): (
            "kdf 'scrypt' with cipher 'aes-gcm', not scrypt with nacl/secretbox, the only ones"
            " cosign writes"
        ),
        json.dumps({**doc, "ciphertext": "not base64!"}).encode(): (
            "ciphertext is not a base64 string"
        ),
        json.dumps({**doc, "cipher": {**doc["cipher"], "nonce": "AAAA"}}).encode(): (
            "cipher.nonce is not 24 bytes"
        ),
        json.dumps(
            {**doc, "kdf": {**doc["kdf"], "params": {"N": True, "r": 8, "p": 1}}}
        ).encode(): ("kdf.params needs integers N, r and p"),
    }
    for i, (body, reason) in enumerate(cases.items()):
        path = write(tmp_path, f"{i}.key", cosign_pem(body))
        assert refusal(path, PASSPHRASE) == f"{path}: cosign key file: {reason}; {DAMAGED}"
    path = write(
        tmp_path,
        "b64.key",
        b"-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n%%%\n"
        b"-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
    )
    assert refusal(path, PASSPHRASE) == (
        f"{path}: cosign key file: the PEM body is not base64; {DAMAGED}"
    )


@pytest.mark.parametrize(("n", "r", "p"), [(1 << 30, 8, 1), (32768, 1 << 20, 1), (32768, 8, 64)])
def test_hostile_scrypt_parameters_are_refused_before_scrypt_runs(
    tmp_path: Path, cosign_pair: tuple[bytes, bytes], n: int, r: int, p: int
) -> None:
    doc = json.loads(pem_body(cosign_pair[0]))
    doc["kdf"]["params"] = {"N": n, "r": r, "p": p}
    path = write(tmp_path, "hostile.key", cosign_pem(json.dumps(doc).encode()))
    assert refusal(path, PASSPHRASE) == (
        f"{path}: cosign key file: scrypt parameters N={n}, r={r}, p={p} are not ones cosign"
        " writes (N=32768, 65536 or 131072 with r=8, p=1); refused rather than spend the memory"
        " and time they ask for: make a new pair with `cosign generate-key-pair`"
    )


def test_go_securesystemslib_vectors_decrypt_and_its_refused_parameters_are_refused(
    tmp_path: Path,
) -> None:
    vectors = json.loads((FIXTURES / "go-securesystemslib.encrypted_test.json").read_bytes())
    secret = vectors["passphrase"].encode()
    for name in ("kdfVectors.OWASP", "TestDecrypt"):  # N=131072 and N=32768
        path = write(tmp_path, f"{name}.key", cosign_pem(json.dumps(vectors[name]).encode()))
        # The box opens (a wrong passphrase says so instead); "reallyimportant" is no key.
        assert "the decrypted key is not PKCS#8" in refusal(path, secret)
    assert "wrong passphrase" in refusal(path, WRONG)  # TestDecrypt's
    path = write(
        tmp_path,
        "refused.key",
        cosign_pem(json.dumps(vectors["TestUnsupportedKDFParameters"]).encode()),
    )
    assert "scrypt parameters N=99, r=99, p=99 are not ones cosign writes" in refusal(path, secret)


KINDS: list[KeyKind] = ["ecdsa-p256", "ecdsa-p384", "ed25519", "rsa-2048"]
ALGORITHM_OF = {
    "ecdsa-p256": "ecdsa-p256-sha256",
    "ecdsa-p384": "ecdsa-p384-sha384",
    "ed25519": "ed25519",
    "rsa-2048": "rsa-2048-pkcs1v15-sha256",
}


@pytest.mark.parametrize("kind", KINDS)
def test_pkcs8_keys_plain_and_encrypted_round_trip(tmp_path: Path, kind: KeyKind) -> None:
    plain, public = generate_pkcs8_key_pair(kind)
    assert plain.startswith(b"-----BEGIN PRIVATE KEY-----\n")
    key = load_signing_key(write(tmp_path, "plain.pem", plain), PASSPHRASE)  # passphrase unused
    assert key.public_key().pem() == public
    assert key.public_key().algorithm == ALGORITHM_OF[kind]
    assert key.public_key().verify(key.sign(b"payload"), b"payload")
    assert not key.public_key().verify(key.sign(b"payload"), b"payload!")
    assert not key.public_key().verify(b"\x30\x00garbage", b"payload")
    encrypted, public = generate_pkcs8_key_pair(kind, PASSPHRASE)
    assert encrypted.startswith(b"-----BEGIN ENCRYPTED PRIVATE KEY-----\n")
    path = write(tmp_path, "encrypted.pem", encrypted)
    assert load_signing_key(path, PASSPHRASE).public_key().pem() == public


def test_encrypted_pkcs8_refusals(tmp_path: Path) -> None:
    path = write(tmp_path, "k.pem", generate_pkcs8_key_pair("ecdsa-p256", PASSPHRASE)[0])
    assert refusal(path, WRONG) == (
        f"{path}: PKCS#8 key file: wrong passphrase, or the file is damaged (the key did not"
        f" decrypt); {GIVE}"
    )
    assert refusal(path, None) == (
        f"{path}: PKCS#8 key file: the key is encrypted and no passphrase was given; {GIVE}"
    )


def test_cosigns_traditional_test_keys_load(tmp_path: Path) -> None:
    p384 = load_signing_key(FIXTURES / "keys_test.validecp384.key", None)
    assert p384.public_key().algorithm == "ecdsa-p384-sha384"
    ed = load_signing_key(FIXTURES / "keys_test.ed25519key.key", None)
    assert ed.public_key().algorithm == "ed25519"


def test_unsupported_algorithms_are_refused(tmp_path: Path) -> None:
    def pkcs8(key: dsa.DSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    fix = f"cosign signs with {ALGORITHMS}: make a key with `cosign generate-key-pair`"
    cases = [
        (FIXTURES / "keys_test.invalidecunsupported.key", "SEC1", "an ECDSA key on secp256k1"),
        (FIXTURES / "keys_test.invalidrsasmallkey.key", "PKCS#1", "a 1024-bit RSA key"),
        (write(tmp_path, "dsa.pem", pkcs8(dsa.generate_private_key(2048))), "PKCS#8", "a DSA key"),
        (
            write(tmp_path, "k1.pem", pkcs8(ec.generate_private_key(ec.SECP256K1()))),
            "PKCS#8",
            "an ECDSA key on secp256k1",
        ),
    ]
    for path, kind, what in cases:
        assert refusal(path, None) == f"{path}: {kind} key file: {what}; {fix}"


def test_files_without_a_private_key_are_refused(tmp_path: Path) -> None:
    public = write(tmp_path, "cosign.pub", generate_pkcs8_key_pair("ed25519")[1])
    fix = "give the key `cosign generate-key-pair` made (cosign.key) or a PKCS#8 PEM (PRIVATE KEY)"
    assert refusal(public, None) == (
        f"{public}: no private key in the file (found: PUBLIC KEY); {fix}"
    )
    empty = write(tmp_path, "empty.key", b"")
    assert (
        refusal(empty, None) == f"{empty}: no private key in the file (found no PEM block); {fix}"
    )
    big = write(tmp_path, "big.key", b"A" * (64 * 1024 + 1))
    assert refusal(big, None) == (
        f"{big}: the signing key file is larger than 64 KiB, more than such a file holds;"
        " is this the right file?"
    )
    missing = tmp_path / "missing.key"
    assert refusal(missing, None) == (
        f"{missing}: cannot read the signing key file: No such file or directory;"
        " check the path and its permissions"
    )


def test_public_keys_load_and_refuse(tmp_path: Path) -> None:
    key = load_public_key(FIXTURES / "verify_blob_attestation_test.pub")
    der = base64.b64decode(
        b"".join((FIXTURES / "verify_blob_attestation_test.pub").read_bytes().splitlines()[1:-1])
    )
    assert key.fingerprint() == "sha256:" + hashlib.sha256(der).hexdigest()
    assert repr(key) == f"PublicKey(ecdsa-p256-sha256, {key.fingerprint()})"
    private = FIXTURES / "keys_test.pemsigstorekey.key"
    with pytest.raises(SigningKeyError) as info:
        load_public_key(private)
    assert str(info.value) == (
        f"{private}: no PUBLIC KEY block in the file (found: ENCRYPTED SIGSTORE PRIVATE KEY);"
        " give the public key `cosign generate-key-pair` wrote (cosign.pub)"
    )
    damaged = write(
        tmp_path, "bad.pub", b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"
    )
    with pytest.raises(SigningKeyError) as info:
        load_public_key(damaged)
    assert str(info.value) == (
        f"{damaged}: public key file: the PUBLIC KEY block cannot be parsed; the file is damaged:"
        " copy cosign.pub again"
    )
    k1 = ec.generate_private_key(ec.SECP256K1()).public_key()
    k1_pem = k1.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = write(tmp_path, "k1.pub", k1_pem)
    with pytest.raises(SigningKeyError) as info:
        load_public_key(path)
    assert str(info.value) == (
        f"{path}: public key file: an ECDSA key on secp256k1; cosign verifies {ALGORITHMS}"
    )


@pytest.mark.parametrize("kind", ["ecdsa-p256", "ecdsa-p384"])
def test_ecdsa_signatures_are_deterministic(kind: KeyKind, tmp_path: Path) -> None:
    key = load_signing_key(write(tmp_path, "k.pem", generate_pkcs8_key_pair(kind)[0]), None)
    assert key.sign(b"payload") == key.sign(b"payload")
    assert key.sign(b"payload") != key.sign(b"payload2")
    assert repr(key) == f"SigningKey({ALGORITHM_OF[kind]}, {key.public_key().fingerprint()})"


def test_passphrase_comes_from_the_file_else_cosign_password(tmp_path: Path) -> None:
    env = {"COSIGN_PASSWORD": "from-env"}
    file = write(tmp_path, "pass", b"from-file\r\nsecond line\n")
    assert signing_passphrase(file, env) == b"from-file"  # the file wins
    assert signing_passphrase(write(tmp_path, "p2", b"x y \n"), {}) == b"x y "
    assert signing_passphrase(write(tmp_path, "p3", b""), {}) == b""
    assert signing_passphrase(None, env) == b"from-env"
    assert signing_passphrase(None, {"COSIGN_PASSWORD": ""}) == b""  # set but empty
    assert signing_passphrase(None, {}) is None
    big = write(tmp_path, "big", b"x" * 5000)
    with pytest.raises(SigningKeyError) as info:
        signing_passphrase(big, env)
    assert str(info.value) == (
        f"{big}: the passphrase file is larger than 4 KiB, more than such a file holds;"
        " is this the right file?"
    )


def test_no_refusal_holds_the_passphrase(tmp_path: Path, cosign_pair: tuple[bytes, bytes]) -> None:
    cosign_key = write(tmp_path, "cosign.key", cosign_pair[0])
    pkcs8 = write(tmp_path, "k.pem", generate_pkcs8_key_pair("ed25519", PASSPHRASE)[0])
    errors: list[SigningKeyError] = []
    for path, passphrase in [
        (cosign_key, WRONG),
        (pkcs8, WRONG),
        (FIXTURES / "keys_test.pemcosigneckey.key", WRONG),
    ]:
        with pytest.raises(SigningKeyError) as info:
            load_signing_key(path, passphrase)
        errors.append(info.value)
    with pytest.raises(SigningKeyError) as info:
        signing_passphrase(write(tmp_path, "big", PASSPHRASE * 1000), {})
    errors.append(info.value)
    for error in errors:
        text = "".join(traceback.format_exception(error)) + repr(error) + str(error.hint)
        for secret in (PASSPHRASE, WRONG):
            assert secret.decode() not in text
        assert error.__cause__ is None
        assert error.__context__ is None or error.__suppress_context__
