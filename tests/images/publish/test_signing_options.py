"""The signing options of ``publish`` and ``verify``, refused before any registry or image is
touched: a release of a stack that requires signing without a key, a key with --no-attach, a
passphrase file without a key, a wrong passphrase (never shown), ``verify`` without a key."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import build_image
from images.attest.keys import generate_cosign_key_pair

ROOT = Path(__file__).resolve().parents[3]
PASSPHRASE = "correct horse battery staple"


def _cli(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main([str(a) for a in argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def signed_stack(tmp_path: Path) -> Path:
    """stack/demo.yaml, requiring signed releases."""
    text = (ROOT / "stack" / "demo.yaml").read_text(encoding="utf-8")
    text = text.replace(
        '  repository: "127.0.0.1:5000/vllm-musa-demo"\n',
        '  repository: "127.0.0.1:5000/vllm-musa-demo"\n'
        "  require_signature: true\n"
        "  public_key: keys/cosign.pub\n",
    )
    stack = tmp_path / "stack" / "demo.yaml"
    stack.parent.mkdir()
    stack.write_text(text, encoding="utf-8")
    return stack


@pytest.fixture
def cosign_key(tmp_path: Path) -> Path:
    private, _ = generate_cosign_key_pair(PASSPHRASE.encode())
    key = tmp_path / "cosign.key"
    key.write_bytes(private)
    return key


def test_a_release_that_must_be_signed_is_refused_without_a_key(signed_stack: Path) -> None:
    code, out, err = _cli(
        "publish", signed_stack, "--target", "final", "--release",
        "--build-report", signed_stack.parent / "absent.json",
    )  # fmt: skip
    assert (code, out) == (1, "")
    assert err.splitlines() == [
        f"error[publish]: {signed_stack}: image.require_signature is true, so a release is "
        "signed, and no --sign-key was given; nothing was pushed",
        "hint: publish --release with --sign-key FILE (cosign.key, or a PKCS#8 PEM key; its "
        "passphrase in COSIGN_PASSWORD or --sign-key-passphrase-file)",
    ]


def test_a_release_that_must_be_signed_is_refused_with_no_attach(signed_stack: Path) -> None:
    code, _, err = _cli("publish", signed_stack, "--target", "final", "--release", "--no-attach")
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[publish]: {signed_stack}: image.require_signature is true, so a release is "
        "signed, and --no-attach was given; nothing was pushed"
    )


def test_a_key_cannot_sign_what_is_not_attached(signed_stack: Path, cosign_key: Path) -> None:
    code, _, err = _cli(
        "publish", signed_stack, "--target", "final", "--no-attach", "--sign-key", cosign_key
    )
    assert code == 2
    assert err.splitlines()[0] == (
        "error[usage]: --sign-key signs what publish attaches: it cannot go with --no-attach"
    )


def test_a_passphrase_file_needs_a_key(signed_stack: Path, tmp_path: Path) -> None:
    secret = tmp_path / "passphrase"
    secret.write_text(PASSPHRASE + "\n", encoding="utf-8")
    code, _, err = _cli(
        "publish", signed_stack, "--target", "final", "--sign-key-passphrase-file", secret
    )
    assert code == 2
    assert err.splitlines()[0] == (
        "error[usage]: --sign-key-passphrase-file is for a --sign-key: give both"
    )


def test_a_wrong_passphrase_is_refused_and_never_shown(
    signed_stack: Path, cosign_key: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSIGN_PASSWORD", "not the passphrase")
    code, out, err = _cli("publish", signed_stack, "--target", "final", "--sign-key", cosign_key)
    assert code == 2
    assert err.startswith(f"error[signing-key]: {cosign_key}: ")
    assert "not the passphrase" not in out + err
    assert PASSPHRASE not in out + err
    secret = tmp_path / "passphrase"  # the file wins over the environment
    secret.write_text("also wrong\n", encoding="utf-8")
    code, out, err = _cli(
        "publish", signed_stack, "--target", "final", "--sign-key", cosign_key,
        "--sign-key-passphrase-file", secret,
    )  # fmt: skip
    assert code == 2
    assert "also wrong" not in out + err


def test_verify_needs_a_public_key() -> None:
    code, _, err = _cli("verify", "127.0.0.1:9/app@sha256:" + "a" * 64)
    assert code == 2
    assert err.splitlines() == [
        "error[usage]: verify checks the signatures with a public key, and none was given",
        "hint: give --public-key FILE (cosign.pub), or --stack STACK whose image.public_key "
        "names it",
    ]
