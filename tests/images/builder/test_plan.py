"""The input plan of a build: every input, enumerated once, with its resolved URL."""

from __future__ import annotations

from pathlib import Path

from images.builder.apt_plan import AptSource, ArchiveKey, apt_plan
from images.builder.plan import (
    CratesInput,
    PathSourceInput,
    PinnedInput,
    plan_inputs,
)
from manifest import Mirrors, PinnedFile
from tests.support.images import (
    DEADSNAKES_FPR,
    MANIFEST,
    RUSTUP_SHA,
    RUSTUP_URL,
    SDK_APT,
    SDK_FPR,
    VLLM_RS_RUSTUP,
    components_text,
    deadsnakes_text,
    lock_for,
    manifest,
)

KEYSERVER = "https://keyserver.ubuntu.com/pks/lookup?op=get&options=mr&search=0x"


def test_the_plan_of_the_small_manifest(tmp_path: Path) -> None:
    m = manifest(tmp_path, MANIFEST)
    lock = lock_for(m)
    plan = plan_inputs(m, lock)
    assert plan.wheels == lock.packages
    assert plan.sources == (
        PathSourceInput(where="sources.vllm", source=m.sources[0], dest="vllm"),
        PathSourceInput(where="sources.vllm-musa", source=m.sources[1], dest="vllm-musa"),
    )
    assert plan.git_sources == ()
    assert plan.sdk_apt is None
    assert plan.deadsnakes is None
    assert plan.apt_sources == ()
    assert plan.archive_keys == ()
    assert plan.pinned_files == ()
    assert plan.crates is None
    assert plan.apt == apt_plan(m)
    assert plan.mirrors == Mirrors()


def _full(tmp_path: Path, mirrors: str = "") -> str:
    return components_text(VLLM_RS_RUSTUP, base=deadsnakes_text() + SDK_APT, mirrors=mirrors)


def test_every_input_of_a_full_manifest(tmp_path: Path) -> None:
    m = manifest(tmp_path, _full(tmp_path))
    plan = plan_inputs(m, lock_for(m))
    # vllm-rs is built from vLLM's tree (sources.vllm): no source of its own
    assert [s.where for s in plan.sources] == ["sources.vllm", "sources.vllm-musa"]
    assert plan.git_sources == ()
    assert plan.pinned_files == (
        PinnedInput(
            name="rustup-init",
            label="components.vllm-rs.rustup_init",
            pinned=PinnedFile(url=RUSTUP_URL, sha256=RUSTUP_SHA),
            file="rustup-init",
        ),
    )
    assert plan.crates == CratesInput(tree=plan.sources[0], workspace="rust")
    sdk_key = ArchiveKey(
        label="the key of sdk_apt",
        keypath="sdk_apt.key_fingerprint",
        url="https://vendor.example/musa/apt/key.asc",
        fingerprint=SDK_FPR,
        file="sdk-apt-key.asc",
    )
    deadsnakes_key = ArchiveKey(
        label="the Deadsnakes key",
        keypath="python_install.key_fingerprint",
        url="http://127.0.0.1:8765/key.asc",
        fingerprint=DEADSNAKES_FPR,
        file="deadsnakes-key.asc",
    )
    assert plan.apt_sources == (
        AptSource(
            level=1,
            list_name="vendor-musa-sdk.list",
            url="https://vendor.example/musa/apt",
            suite="jammy",
            component="main",
            key=sdk_key,
        ),
        AptSource(
            level=2,
            list_name="deadsnakes.list",
            url="http://127.0.0.1:8765/repo",
            suite="",
            component="main",
            key=deadsnakes_key,
        ),
    )
    assert plan.archive_keys == (deadsnakes_key, sdk_key)


def test_mirrors_move_the_apt_sources_not_the_keys(tmp_path: Path) -> None:
    mirrors = '  sdk-apt: "http://m.example/apt"\n  deadsnakes: "http://m.example/ds"\n'
    m = manifest(tmp_path, _full(tmp_path, mirrors=mirrors))
    plan = plan_inputs(m, lock_for(m))
    assert [s.url for s in plan.apt_sources] == ["http://m.example/apt", "http://m.example/ds"]
    assert [k.url for k in plan.archive_keys] == [
        "http://127.0.0.1:8765/key.asc",
        "https://vendor.example/musa/apt/key.asc",
    ]
    assert plan.mirrors.sdk_apt == "http://m.example/apt"


def test_key_urls_default_to_the_keyserver_by_fingerprint(tmp_path: Path) -> None:
    text = _full(tmp_path).replace('  key_url: "http://127.0.0.1:8765/key.asc"\n', "")
    text = text.replace('  key_url: "https://vendor.example/musa/apt/key.asc"\n', "")
    for mirrors in ("", '  sdk-apt: "http://m.example/apt"\n  deadsnakes: "http://m.example/ds"\n'):
        m = manifest(
            tmp_path / str(len(mirrors)), text + ("mirrors:\n" + mirrors if mirrors else "")
        )
        plan = plan_inputs(m, lock_for(m))
        assert [k.url for k in plan.archive_keys] == [
            KEYSERVER + DEADSNAKES_FPR,
            KEYSERVER + SDK_FPR,
        ]
