"""The apt side of a build, pure: the apt plan the render and `fetch` share, the fetched
index, archive-key fingerprints, the vendor SDK repository (sdk_apt) and mirrors.indexes."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from core.errors import (
    KeyFingerprintError,
    ManifestError,
    OfflineMissingError,
    RenderError,
    UsageError,
)
from core.file_store import FileStore
from images.builder.apt_fetch import check_key, offline_debs, stage_debs
from images.builder.apt_plan import (
    AptSource,
    DebFile,
    apt_plan,
    index_data,
    index_path,
    parse_index,
    parse_print_uris,
    plan_key,
    render_fetch_plan,
)
from images.builder.openpgp import KeyFormatError, primary_fingerprints
from images.builder.plan import InputPlan, plan_inputs
from manifest import Manifest
from resolver.endpoints import effective_endpoints
from tests.support.images import (
    MANIFEST,
    SDK_APT,
    SDK_FPR,
    VLLM_RS_DISTRO,
    components_text,
    deadsnakes_text,
    lock_for,
    manifest,
    render_text,
)

# an ed25519 public key made with gpg --quick-gen-key (fingerprint as gpg prints it)
KEY_ASC = b"""\
-----BEGIN PGP PUBLIC KEY BLOCK-----

mDMEawzNDxYJKwYBBAHaRw8BAQdApdtRm48lHfR8VHBc95Q4kR9Fw6vUShBlMm4+
KjQq9Nu0B3QgPHRAeD6IjgQTFggAOBYhBFG1fECP0ZYnlbR+r+/WI3ozhYbgBQJr
DM0PAhsDBQsJCAcCBhUKCQgLAgQWAgMBAh4BAheAAAoJEO/WI3ozhYbgzrIA8PsP
qXLDEyhzB+NeSc33rFdQMO0ef4ezrdVd73CucgD7B9yim83z9+kqrB9l8YUcqPLM
49zIxutW9+u1NjuGtgM=
=sIWv
-----END PGP PUBLIC KEY BLOCK-----
"""
KEY_FPR = "51B57C408FD1962795B47EAFEFD6237A338586E0"
# a second key (another attacker-made ed25519 key), to append to the pinned one
OTHER_KEY_ASC = b"""\
-----BEGIN PGP PUBLIC KEY BLOCK-----

mDMEawzWXxYJKwYBBAHaRw8BAQdAji3q/BToNwTGCaLZk7qdJCW1Wu4stwUHLqg1
L3UVEBm0B3UgPHVAeD6IkAQTFggAOBYhBDqWNfad82NHiloX3xw9WnIb9sJRBQJr
DNZfAhsDBQsJCAcCBhUKCQgLAgQWAgMBAh4BAheAAAoJEBw9WnIb9sJRVB4A/Rab
PwWovAdfh7K49qqpxnBQntXhxj181lJog7h2whceAQDEBvt/f54JxYbyfkpZmu2A
i5nFii/9RZPHt5eXY9uCAA==
=Z7DP
-----END PGP PUBLIC KEY BLOCK-----
"""
OTHER_FPR = "3A9635F69DF363478A5A17DF1C3D5A721BF6C251"
BASE_ID = "sha256:" + "be" * 32


def _plan(m: Manifest) -> InputPlan:
    return plan_inputs(m, lock_for(m))


def _sources(m: Manifest) -> tuple[AptSource, ...]:
    return _plan(m).apt_sources


def _full(tmp_path: Path) -> str:
    return components_text(VLLM_RS_DISTRO, base=deadsnakes_text() + SDK_APT)


# ------------------------------------------------------------------------------ the plan


def test_the_plan_lists_every_apt_step_with_the_sources_it_sees(tmp_path: Path) -> None:
    plan = apt_plan(manifest(tmp_path, _full(tmp_path)))
    assert [(s.name, s.level, s.packages) for s in plan.steps()] == [
        ("sdk", 1, ("musa-sdk",)),
        ("python-ca", 1, ("ca-certificates",)),
        ("python", 2, ("python3.11",)),
        # the runtime's C and C++ toolchain, as upstream's final image has it
        ("runtime", 2, ("python3.11-dev", "build-essential", "ninja-build")),
        (
            "build",
            2,
            (
                "build-essential",
                "ccache",
                "cmake",
                "git",  # vllm-musa's setup.py applies its series with git apply
                "ninja-build",
                "patchelf",
                "gcc",
                "libc6-dev",
            ),
        ),
        # on the build stage: its sources; protoc for the server crate's build.rs
        ("vllm-rs", 2, ("ca-certificates", "protobuf-compiler", "rustc", "cargo")),
    ]
    plain = apt_plan(manifest(tmp_path / "plain", MANIFEST))
    assert [(s.name, s.level) for s in plain.steps()] == [
        ("python", 1),
        ("runtime", 1),
        ("build", 1),
    ]


def test_runtime_apt_packages_follow_the_fixed_runtime_packages(tmp_path: Path) -> None:
    text = MANIFEST + "runtime:\n  apt_packages: [libnuma1, libomp-dev]\n"
    plan = apt_plan(manifest(tmp_path, text))
    assert plan.runtime.packages == (
        "python3.11-dev",
        "build-essential",
        "ninja-build",
        "libnuma1",
        "libomp-dev",
    )
    assert plan.runtime.what == "the runtime packages (python stage)"


@pytest.mark.parametrize("text", [MANIFEST, "full"])
def test_the_render_installs_exactly_the_plan(tmp_path: Path, text: str) -> None:
    m = manifest(tmp_path, _full(tmp_path) if text == "full" else text)
    online = render_text(m)
    installs = re.findall(r"install -y --no-install-recommends (?:\\\n\s+)?([^\\\n]+)", online)
    # the key stages install gpg for themselves; every other install is a step of the plan
    assert [i.strip() for i in installs if i.strip() != "gpg gpg-agent"] == [
        s.words for s in apt_plan(m).steps()
    ]
    offline = render_text(m, offline=True)
    assert re.findall(r"apt-offline\.sh (\S+)", offline) == [s.name for s in apt_plan(m).steps()]


def test_the_fetch_plan_file(tmp_path: Path) -> None:
    m = manifest(tmp_path, _full(tmp_path))
    assert render_fetch_plan(apt_plan(m), _sources(m)) == (
        "source 1 vendor-musa-sdk.list vendor-musa-sdk.asc https://vendor.example/musa/apt "
        "jammy main\n"
        "source 2 deadsnakes.list deadsnakes.asc http://127.0.0.1:8765/repo - main\n"
        "step sdk 1 musa-sdk\n"
        "step python-ca 1 ca-certificates\n"
        "step python 2 python3.11\n"
        "step runtime 2 python3.11-dev build-essential ninja-build\n"
        "step build 2 build-essential ccache cmake git ninja-build patchelf gcc libc6-dev\n"
        "step vllm-rs 2 ca-certificates protobuf-compiler rustc cargo\n"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [("packages", ("musa-sdk\n", "run", "xx")), ("suite", "jammy\n")],
)
def test_the_fetch_plan_refuses_a_value_that_is_not_one_word(
    tmp_path: Path, field: str, value: Any
) -> None:
    # the plan is read by words and lines in the fetch container: a line break in a value
    # would drop packages from the step or shift the fields of a source. The manifest refuses
    # such values first; the plan refuses them on its own too.
    m = manifest(tmp_path, MANIFEST + SDK_APT)
    assert m.sdk_apt is not None
    m = dataclasses.replace(m, sdk_apt=dataclasses.replace(m.sdk_apt, **{field: value}))
    with pytest.raises(RenderError, match="not one word"):
        render_fetch_plan(apt_plan(m), _sources(m))


def test_the_fetch_key_ignores_mirrors_but_not_what_is_installed(tmp_path: Path) -> None:
    text = _full(tmp_path)
    m = manifest(tmp_path, text)
    key = plan_key(apt_plan(m), _sources(m), BASE_ID)
    mirrored = manifest(
        tmp_path / "b",
        text + 'mirrors:\n  sdk-apt: "http://m.example/apt"\n  deadsnakes: "http://m.example/ds"\n',
    )
    assert _sources(mirrored)[0].url == "http://m.example/apt"
    assert plan_key(apt_plan(mirrored), _sources(mirrored), BASE_ID) == key
    assert plan_key(apt_plan(m), _sources(m), "sha256:" + "00" * 32) != key
    other = manifest(tmp_path / "c", text.replace("[gcc, libc6-dev]", "[gcc, libc6-dev, make]"))
    assert plan_key(apt_plan(other), _sources(other), BASE_ID) != key
    refpr = manifest(tmp_path / "d", text.replace(SDK_FPR, "F" * 40))
    assert plan_key(apt_plan(refpr), _sources(refpr), BASE_ID) != key


def test_print_uris_lines() -> None:
    text = (
        "'http://deb.debian.org/debian-security/pool/updates/main/o/openssl/"
        "libssl3_3.0.22-1%7edeb12u2_amd64.deb' libssl3_3.0.22-1~deb12u2_amd64.deb 2039888 \n"
        f"'http://x.example/pool/a_1_amd64.deb' a_1_amd64.deb 10 SHA256:{'ab' * 32}\n"
        "'http://x.example/pool/b_1_amd64.deb' b_1_amd64.deb 11 MD5Sum:0123456789abcdef\n"
    )
    assert parse_print_uris(text, step="build") == [
        (
            "http://deb.debian.org/debian-security/pool/updates/main/o/openssl/"
            "libssl3_3.0.22-1%7edeb12u2_amd64.deb",
            "libssl3_3.0.22-1~deb12u2_amd64.deb",
            2039888,
            "",
        ),
        ("http://x.example/pool/a_1_amd64.deb", "a_1_amd64.deb", 10, f"sha256:{'ab' * 32}"),
        ("http://x.example/pool/b_1_amd64.deb", "b_1_amd64.deb", 11, ""),  # MD5 is not trusted
    ]
    with pytest.raises(ValueError, match=r"step build: '\.\./x\.deb' is not a \.deb file name"):
        parse_print_uris("'http://x.example/x.deb' ../x.deb 1 \n", step="build")
    with pytest.raises(ValueError, match="unexpected apt-get --print-uris line"):
        parse_print_uris("E: Unable to locate package nope\n", step="build")


# ------------------------------------------------------------------------------ offline side


STACK = "stack/demo.yaml"


def test_offline_names_the_missing_fetch_then_the_missing_file(tmp_path: Path) -> None:
    m = manifest(tmp_path, MANIFEST)
    cache = FileStore(tmp_path / "cache")
    with pytest.raises(OfflineMissingError) as info:
        offline_debs(
            _plan(m),
            cache=cache,
            stack=STACK,
            base_image="debian:x",
            base_image_id=BASE_ID,
        )
    assert info.value.message == (
        "offline build: the .deb files of the apt steps (python, runtime, build) on the base image "
        f"debian:x ({BASE_ID[:19]}) are not fetched"
    )
    assert info.value.hint == (
        "run `build_image.py fetch stack/demo.yaml` with network access first "
        "(with the same --base-image)"
    )
    data = b"a deb"
    sha = hashlib.sha256(data).hexdigest()
    deb = DebFile(file="gcc-12_12.2.0-14_amd64.deb", sha256=sha, uri="http://x/gcc.deb")
    key = plan_key(apt_plan(m), _sources(m), BASE_ID)
    index = index_path(cache.root, key)
    index.parent.mkdir(parents=True)
    index.write_text(json.dumps(index_data("debian:x", BASE_ID, {"python": [], "build": [deb]})))
    with pytest.raises(OfflineMissingError) as info:
        offline_debs(
            _plan(m),
            cache=cache,
            stack=STACK,
            base_image="debian:x",
            base_image_id=BASE_ID,
        )
    assert info.value.message == (
        "offline build: the .deb file gcc-12_12.2.0-14_amd64.deb for the build stage "
        "(apt step build) is not fetched"
    )
    cache.file_path(sha).parent.mkdir(parents=True)
    cache.file_path(sha).write_bytes(data)
    steps = offline_debs(
        _plan(m), cache=cache, stack=STACK, base_image="debian:x", base_image_id=BASE_ID
    )
    stage_debs(steps, cache, tmp_path / "ctx")
    assert (tmp_path / "ctx" / "apt" / "build.sha256").read_text() == f"{sha}  {deb.file}\n"
    assert (tmp_path / "ctx" / "apt" / "python.sha256").read_text() == ""
    assert (tmp_path / "ctx" / "apt" / "debs" / deb.file).read_bytes() == data


@pytest.mark.parametrize(
    "entry",
    [
        {"file": "../../../escape.deb", "sha256": "ab" * 32, "uri": "http://x/a.deb"},
        {"file": "a_1_amd64.deb", "sha256": "../../x", "uri": "http://x/a.deb"},
        {"file": "a_1_amd64.deb", "sha256": None, "uri": "http://x/a.deb"},
        {"file": ["a"], "sha256": "ab" * 32, "uri": "http://x/a.deb"},
    ],
    ids=["file-escapes", "sha-escapes", "sha-null", "file-not-a-string"],
)
def test_a_tampered_apt_index_is_not_fetched(tmp_path: Path, entry: dict[str, object]) -> None:
    # the index names files placed into the build context: a name or hash from it must not
    # reach a path outside apt/debs/ or the cache (nor end in a traceback)
    m = manifest(tmp_path, MANIFEST)
    cache = FileStore(tmp_path / "cache")
    index = index_path(cache.root, plan_key(apt_plan(m), _sources(m), BASE_ID))
    index.parent.mkdir(parents=True)
    data = {"base_image": "debian:x", "base_image_id": BASE_ID}
    index.write_text(json.dumps({**data, "steps": {"python": [], "build": [entry]}}))
    cache.file_path("ab" * 32).parent.mkdir(parents=True)
    cache.file_path("ab" * 32).write_bytes(b"a deb")
    with pytest.raises(OfflineMissingError):
        offline_debs(
            _plan(m),
            cache=cache,
            stack=STACK,
            base_image="debian:x",
            base_image_id=BASE_ID,
        )
    with pytest.raises(ValueError, match="apt index"):
        parse_index(json.loads(index.read_text()))


# ------------------------------------------------------------------------------ keys


def test_primary_fingerprints_of_armored_and_binary_keys() -> None:
    assert primary_fingerprints(KEY_ASC) == [KEY_FPR]
    body = b"".join(line for line in KEY_ASC.splitlines()[2:-2] if not line.startswith(b"="))
    import base64

    assert primary_fingerprints(base64.b64decode(body)) == [KEY_FPR]


def test_fetch_refuses_a_key_without_the_pinned_fingerprint(tmp_path: Path) -> None:
    m = manifest(tmp_path, MANIFEST + SDK_APT.replace(SDK_FPR, KEY_FPR))
    (source,) = _sources(m)
    check_key(KEY_ASC, source)  # the pinned key: accepted
    wrong = manifest(tmp_path / "w", MANIFEST + SDK_APT)
    (source,) = _sources(wrong)
    with pytest.raises(KeyFingerprintError) as info:
        check_key(KEY_ASC, source)
    assert info.value.message == (
        "the key at https://vendor.example/musa/apt/key.asc has fingerprint(s) "
        f"{KEY_FPR} but sdk_apt.key_fingerprint is {SDK_FPR}"
    )
    with pytest.raises(KeyFingerprintError) as info:
        check_key(b"<html>not a key</html>", source)
    assert info.value.message.startswith(
        "the key at https://vendor.example/musa/apt/key.asc cannot be read: "
    )


def test_a_key_file_with_a_second_armored_key_is_refused(tmp_path: Path) -> None:
    # gpg (and so apt, signed-by this file) reads every armored block of a file: a second
    # block after the pinned key would be trusted too, so every block counts
    assert primary_fingerprints(OTHER_KEY_ASC) == [OTHER_FPR]
    assert primary_fingerprints(KEY_ASC + OTHER_KEY_ASC) == [KEY_FPR, OTHER_FPR]
    assert primary_fingerprints(KEY_ASC + b"\n\n" + OTHER_KEY_ASC) == [KEY_FPR, OTHER_FPR]
    m = manifest(tmp_path, MANIFEST + SDK_APT.replace(SDK_FPR, KEY_FPR))
    (source,) = _sources(m)
    with pytest.raises(KeyFingerprintError) as info:
        check_key(KEY_ASC + OTHER_KEY_ASC, source)
    assert info.value.message == (
        "the key at https://vendor.example/musa/apt/key.asc has fingerprint(s) "
        f"{KEY_FPR} {OTHER_FPR} but sdk_apt.key_fingerprint is {KEY_FPR}"
    )


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"trailing text\n", "text outside an armored block"),
        (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDME\n", "no END line"),
    ],
)
def test_text_around_the_armored_key_is_refused(tail: bytes, message: str) -> None:
    with pytest.raises(KeyFormatError, match=message):
        primary_fingerprints(KEY_ASC + tail)


def _binary(asc: bytes) -> bytes:
    import base64

    body = b"".join(line for line in asc.splitlines()[2:-2] if not line.startswith(b"="))
    return base64.b64decode(body)


@pytest.mark.parametrize(
    "data",
    [b"\xc6", b"\xc6\xc0", b"\xc6\xff\x00", b"\x99", b"\x99\x00", b"\x98"],
    ids=["new-no-length", "new-two-byte-length", "new-five-byte-length", "old", "old2", "old1"],
)
def test_a_truncated_key_is_a_format_error_not_a_traceback(data: bytes) -> None:
    with pytest.raises(KeyFormatError):
        primary_fingerprints(data)
    with pytest.raises(KeyFormatError):
        primary_fingerprints(_binary(KEY_ASC) + data)


def test_a_secret_key_packet_is_refused() -> None:
    # gpg imports the public part of a secret key packet: apt would trust a key we never read
    secret = b"\xc5\x03\x04\x00\x00"  # tag 5 (secret key), new format
    with pytest.raises(KeyFormatError, match="packet type 5"):
        primary_fingerprints(_binary(KEY_ASC) + secret)


# ------------------------------------------------------------------------------ sdk_apt


def test_sdk_apt_renders_a_signed_by_source_and_a_key_check(tmp_path: Path) -> None:
    text = render_text(manifest(tmp_path, MANIFEST + SDK_APT))
    assert "FROM base AS sdk-key" in text
    assert "FROM sdk AS python" in text
    assert (
        "echo 'deb [signed-by=/etc/apt/keyrings/vendor-musa-sdk.gpg] "
        "https://vendor.example/musa/apt jammy main'" in text
    )
    assert f"grep -qx {SDK_FPR} /tmp/fpr" in text
    assert "but sdk_apt.key_fingerprint is" in text
    assert "trusted=yes" not in text.replace("never trusted=yes", "")
    assert "FROM base AS python\n" in render_text(manifest(tmp_path / "off", MANIFEST))


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            SDK_APT.replace("  packages: [musa-sdk]\n", ""),
            "sdk_apt: missing required key 'packages'",
        ),
        (
            SDK_APT.replace("[musa-sdk]", "[]"),
            "sdk_apt.packages: needs at least one package",
        ),
        (
            SDK_APT.replace("[musa-sdk]", "[MUSA SDK]"),
            "sdk_apt.packages.0: 'MUSA SDK' is not a Debian package name",
        ),
        (
            SDK_APT.replace(SDK_FPR, "ABCD"),
            "sdk_apt.key_fingerprint: must be a 40-hex-digit OpenPGP fingerprint",
        ),
        (
            SDK_APT.replace('https://vendor.example/musa/apt"', 'https://u:p@vendor.example/"'),
            "sdk_apt.url: 'https://***@vendor.example/' is not an http(s) URL without credentials",
        ),
        (
            SDK_APT + "  trusted: true\n",
            "sdk_apt.trusted: unknown key",
        ),
        (
            SDK_APT.replace("suite: jammy", "suite: 22.04"),
            "sdk_apt.suite: must be a string, got the number 22.04",
        ),
    ],
)
def test_sdk_apt_errors_name_the_key_path(tmp_path: Path, block: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, MANIFEST + block)
    assert info.value.message.split(": ", 1)[1] == message
    assert re.match(rf"{re.escape(str(tmp_path))}/stack/demo\.yaml:\d+: ", info.value.message)


def test_sdk_apt_is_not_a_lock_input(tmp_path: Path) -> None:
    plain = manifest(tmp_path, MANIFEST)
    with_sdk = manifest(tmp_path / "s", MANIFEST + SDK_APT)
    assert plain.lock_inputs_sha256 == with_sdk.lock_inputs_sha256


# ------------------------------------------------------------------------------ mirrors.indexes


def test_index_mirrors_in_the_manifest_and_the_command_line_wins(tmp_path: Path) -> None:
    plain = manifest(tmp_path, MANIFEST)
    mirrored = manifest(
        tmp_path / "m", MANIFEST + 'mirrors:\n  indexes:\n    vendor: "https://mirror.example/s/"\n'
    )
    assert mirrored.lock_inputs_sha256 == plain.lock_inputs_sha256
    assert effective_endpoints(plain, {}, {})["vendor"].url == "http://127.0.0.1:8000/simple/"
    assert effective_endpoints(mirrored, {}, {})["vendor"].url == "https://mirror.example/s/"
    cli = {"vendor": "https://cli.example/simple/"}
    assert effective_endpoints(mirrored, cli, {})["vendor"].url == "https://cli.example/simple/"
    env = {"BUILD_IMAGE_INDEX_VENDOR_AUTH": "u:t"}
    assert effective_endpoints(mirrored, {}, env)["vendor"].auth == ("u", "t")
    with pytest.raises(UsageError):
        effective_endpoints(mirrored, {"nope": "https://x.example/"}, {})


def test_an_unknown_index_mirror_is_a_manifest_error(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, MANIFEST + 'mirrors:\n  indexes:\n    vendr: "https://m.example/s/"\n')
    assert info.value.message.endswith(
        "mirrors.indexes.vendr: 'vendr' is not one of the indexes (vendor)"
    )
    assert info.value.hint == "did you mean 'vendor'?"
    with pytest.raises(ManifestError) as info:
        manifest(
            tmp_path / "b",
            MANIFEST + 'mirrors:\n  indexes:\n    vendor: "https://u:p@m.example/"\n',
        )
    assert info.value.message.endswith(
        "mirrors.indexes.vendor: 'https://***@m.example/' is not an http(s) URL without credentials"
    )
