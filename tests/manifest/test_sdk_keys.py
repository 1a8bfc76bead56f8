"""sdk: where the MUSA SDK comes from (the base image, or sdk_apt pinned to one runtime line):
parsed values, and every refusal with its text."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ManifestError
from manifest import Manifest, Sdk, parse_manifest
from tests.manifest.test_manifest import GOOD

SDK_APT = """\
sdk_apt:
  url: "https://vendor.example/musa/apt"
  suite: jammy
  component: main
  key_fingerprint: "0123456789ABCDEF0123456789ABCDEF01234567"
  packages: [musa-toolkit-5-2, musart-5-2, mtml=2.4.1, mccl-s5000=2.4.0]
"""


def parse(text: str) -> Manifest:
    return parse_manifest(text, path=Path("stack/t.yaml"))


def error_of(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse(text)
    return info.value


def test_without_sdk_nothing_is_checked_and_sdk_apt_alone_stays_valid() -> None:
    assert parse(GOOD).sdk is None
    m = parse(GOOD + SDK_APT.replace(", mtml=2.4.1, mccl-s5000=2.4.0", ", musa-sdk"))
    assert m.sdk is None
    assert m.sdk_apt is not None
    assert m.sdk_apt.packages[-1] == "musa-sdk"


def test_from_base_checks_upstreams_compiler_and_runtime_library_by_default() -> None:
    m = parse(GOOD + "sdk: {from: base}\n")
    assert m.sdk == Sdk(origin="base", commands=("mcc",), libraries=("libmusart.so",))


def test_from_base_keeps_the_written_checks() -> None:
    m = parse(GOOD + "sdk: {from: base, commands: [mcc, musaInfo], libraries: []}\n")
    assert m.sdk == Sdk(origin="base", commands=("mcc", "musaInfo"), libraries=())


def test_from_apt_pins_every_package_to_the_runtime_line_or_a_version() -> None:
    m = parse(GOOD + SDK_APT + 'sdk: {from: apt, runtime: "5.2"}\n')
    assert m.sdk == Sdk(origin="apt", runtime="5.2")
    assert m.sdk.package_suffix == "-5-2"
    assert m.sdk_apt is not None
    assert m.sdk_apt.packages == (
        "musa-toolkit-5-2",
        "musart-5-2",
        "mtml=2.4.1",
        "mccl-s5000=2.4.0",
    )


def test_sdk_is_not_a_lock_input() -> None:
    assert parse(GOOD).lock_inputs_sha256 == parse(GOOD + "sdk: {from: base}\n").lock_inputs_sha256


@pytest.mark.parametrize(
    ("block", "message", "hint"),
    [
        (
            "sdk: {}\n",
            "stack/t.yaml:18: sdk: missing required key 'from'",
            None,
        ),
        (
            "sdk: {from: auto}\n",
            "stack/t.yaml:18: sdk.from: 'auto' is not one of base, apt",
            "base: the base image's SDK, checked; apt: sdk_apt's packages",
        ),
        (
            "sdk: {from: base, trusted: true}\n",
            "stack/t.yaml:18: sdk.trusted: unknown key",
            None,
        ),
        (
            "sdk: {from: base, commands: [], libraries: []}\n",
            "stack/t.yaml:18: sdk: from: base with no commands and no libraries checks nothing of "
            "the base image's SDK",
            "keep the defaults (commands: [mcc], libraries: [libmusart.so])",
        ),
        (
            "sdk: {from: base, commands: ['mcc; rm -rf /']}\n",
            "stack/t.yaml:18: sdk.commands.0: 'mcc; rm -rf /' is not a command name",
            None,
        ),
        (
            "sdk: {from: base, libraries: [musart]}\n",
            "stack/t.yaml:18: sdk.libraries.0: 'musart' is not a shared library name like "
            "libmusart.so",
            None,
        ),
        (
            'sdk: {from: base, runtime: "5.2"}\n',
            "stack/t.yaml:18: sdk.runtime: only applies to from: apt (the base image's SDK is "
            "whatever line it has)",
            "remove sdk.runtime, or install the SDK with from: apt",
        ),
        (
            SDK_APT + "sdk: {from: base}\n",
            "stack/t.yaml:18: sdk_apt: sdk.from is base, so the base image's SDK is kept and "
            "sdk_apt would install a second one over it",
            "set sdk.from: apt to install sdk_apt's packages, or remove sdk_apt",
        ),
        (
            'sdk: {from: apt, runtime: "5.2"}\n',
            "stack/t.yaml:18: sdk.from: apt installs the SDK from sdk_apt, which the manifest "
            "does not have",
            "add sdk_apt: (the vendor repository, its key fingerprint, the packages), or use "
            "from: base with a MUSA SDK base image",
        ),
        (
            SDK_APT + "sdk: {from: apt}\n",
            "stack/t.yaml:24: sdk: from: apt needs runtime: the one MUSA runtime line every "
            "sdk_apt package is pinned to",
            'add runtime: "5.2" (package names ending in -5-2, or name=version)',
        ),
        (
            SDK_APT + "sdk: {from: apt, runtime: 5.2}\n",
            "stack/t.yaml:24: sdk.runtime: must be a string, got the number 5.2",
            None,
        ),
        (
            SDK_APT + 'sdk: {from: apt, runtime: "5"}\n',
            "stack/t.yaml:24: sdk.runtime: '5' is not a MUSA runtime line like \"5.2\"",
            None,
        ),
    ],
)
def test_sdk_refusals(block: str, message: str, hint: str | None) -> None:
    err = error_of(GOOD + block)
    assert err.message == message
    if hint is not None:
        assert err.hint == hint


def test_from_apt_refuses_an_unpinned_package_by_name() -> None:
    text = GOOD + SDK_APT.replace("musart-5-2", "musart") + 'sdk: {from: apt, runtime: "5.2"}\n'
    err = error_of(text)
    assert err.message == (
        "stack/t.yaml:23: sdk_apt.packages.1: 'musart' is not pinned to the runtime line 5.2 "
        "of sdk.runtime"
    )
    assert err.hint == "name the line's package (musart-5-2) or pin a version (musart=VERSION)"


def test_from_apt_refuses_a_package_of_another_runtime_line() -> None:
    text = GOOD + SDK_APT + 'sdk: {from: apt, runtime: "5.1"}\n'
    err = error_of(text)
    assert err.message == (
        "stack/t.yaml:23: sdk_apt.packages.0: 'musa-toolkit-5-2' is not pinned to the runtime "
        "line 5.1 of sdk.runtime"
    )


def test_sdk_apt_refuses_a_malformed_version_pin() -> None:
    err = error_of(GOOD + SDK_APT.replace("mtml=2.4.1", "mtml=latest"))
    assert (
        err.message
        == "stack/t.yaml:23: sdk_apt.packages.2: 'mtml=latest' is not a Debian package name"
    )
