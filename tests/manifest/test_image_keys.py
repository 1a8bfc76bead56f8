"""image.require_signature and image.public_key: whether a release must be signed and the public
key its signatures are verified with. Parsed values, and every refusal with its text."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ExitCode, ManifestError
from manifest import ImageSettings, Manifest, parse_manifest
from tests.manifest.test_manifest import GOOD

IMAGE = "image:\n  repository: registry.example/vllm\n"  # line 18 of GOOD + IMAGE


def parse(text: str) -> Manifest:
    return parse_manifest(text, path=Path("stack/t.yaml"))


def image_of(text: str) -> ImageSettings:
    image = parse(text).image
    assert image is not None
    return image


def error_of(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse(text)
    assert info.value.exit_code == ExitCode.USAGE
    return info.value


def test_a_release_need_not_be_signed_by_default() -> None:
    image = image_of(GOOD + IMAGE)
    assert (image.require_signature, image.public_key) == (False, None)


def test_the_signing_keys_land_on_the_image_settings() -> None:
    text = GOOD + IMAGE + "  require_signature: true\n  public_key: keys/cosign.pub\n"
    image = image_of(text)
    assert (image.require_signature, image.public_key) == (True, "keys/cosign.pub")


@pytest.mark.parametrize("path", ["cosign.pub", "keys/cosign.pub", "./keys/release-2026.pub"])
def test_a_public_key_without_require_signature_is_read_as_written(path: str) -> None:
    image = image_of(GOOD + IMAGE + f"  require_signature: false\n  public_key: {path}\n")
    assert (image.require_signature, image.public_key) == (False, path)


def test_the_signing_keys_are_no_lock_input() -> None:
    plain = parse(GOOD + IMAGE)
    signed = parse(GOOD + IMAGE + "  require_signature: true\n  public_key: keys/cosign.pub\n")
    assert signed.lock_inputs_sha256 == plain.lock_inputs_sha256


@pytest.mark.parametrize(
    ("value", "got"),
    [
        ("'true'", "the string 'true'"),
        ("yes please", "the string 'yes please'"),
        ("1", "the number 1"),
        ("null", "nothing (null)"),
        ("[true]", "a list"),
    ],
)
def test_a_require_signature_that_is_no_boolean_is_refused(value: str, got: str) -> None:
    err = error_of(GOOD + IMAGE + f"  require_signature: {value}\n  public_key: k.pub\n")
    assert (
        err.message == f"stack/t.yaml:20: image.require_signature: must be true or false, got {got}"
    )
    assert err.hint is None


@pytest.mark.parametrize(
    "path", ["/etc/cosign.pub", "../cosign.pub", "keys/../../cosign.pub", ".."]
)
def test_a_public_key_outside_the_repository_is_refused(path: str) -> None:
    err = error_of(GOOD + IMAGE + f"  public_key: {path}\n")
    assert err.message == f"stack/t.yaml:20: image.public_key: {path!r} is outside the repository"
    assert err.hint == "the public key is a file inside the repository, e.g. keys/cosign.pub"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('""', "must not be empty"),
        ("'  '", "must not be empty"),
        ("true", "must be a string, got the boolean true"),
        ("{path: k.pub}", "must be a string, got a mapping"),
    ],
)
def test_a_public_key_that_is_no_path_is_refused(value: str, message: str) -> None:
    err = error_of(GOOD + IMAGE + f"  public_key: {value}\n")
    assert err.message == f"stack/t.yaml:20: image.public_key: {message}"


def test_require_signature_without_a_public_key_is_refused_naming_both_keys() -> None:
    err = error_of(GOOD + IMAGE + "  require_signature: true\n")
    assert err.message == (
        "stack/t.yaml:18: image: require_signature: true needs public_key: the key a release's "
        "signatures are verified with"
    )
    assert err.hint == "add image.public_key: the path of the public key that verifies the releases"


def test_a_path_source_outside_the_repository_keeps_its_own_hint() -> None:
    err = error_of(GOOD + "sources:\n  vllm-musa: {path: /src/vllm-musa}\n")
    assert (
        err.message
        == "stack/t.yaml:19: sources.vllm-musa.path: '/src/vllm-musa' is outside the repository"
    )
    assert err.hint == "a path source is a relative directory inside the repository"
