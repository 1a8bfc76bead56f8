"""The render of optional components and mirrors, and the manifest keys of components.

Every combination of components is rendered: a component that is off leaves no stage, no
ARG and no layer; one that is on has every download pinned by hash.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from core.errors import ManifestError, RenderError
from images.builder.commands import effective_manifest
from images.builder.render import declared_args
from tests.support.images import (
    MANIFEST,
    MOONCAKE,
    RUSTUP_SHA,
    SDK_APT,
    VLLM_RS_DISTRO,
    VLLM_RS_RUSTUP,
    components_text,
    deadsnakes_text,
    manifest,
    render_text,
)


def _code(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def _stages(text: str) -> list[str]:
    return re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)


def _instructions(text: str) -> list[str]:
    return re.findall(r"^(FROM|RUN|COPY|ENV|ARG|LABEL|WORKDIR|ENTRYPOINT)\b", _code(text), re.M)


COMBINATIONS = list(
    itertools.product(
        ("off", "rustup", "distro", "listed-but-off"), ("off", "on", "listed-but-off")
    )
)


@pytest.mark.parametrize(("rs", "mc"), COMBINATIONS)
def test_every_combination_of_components(tmp_path: Path, rs: str, mc: str) -> None:
    blocks = []
    if rs == "rustup":
        blocks.append(VLLM_RS_RUSTUP)
    elif rs == "distro":
        blocks.append(VLLM_RS_DISTRO)
    elif rs == "listed-but-off":
        blocks.append(VLLM_RS_RUSTUP.replace("enabled: true", "enabled: false"))
    if mc == "on":
        blocks.append(MOONCAKE)
    elif mc == "listed-but-off":
        blocks.append(MOONCAKE.replace("enabled: true", "enabled: false"))
    m = manifest(tmp_path, components_text(*blocks))
    baseline = manifest(tmp_path / "baseline", MANIFEST)
    text, base_text = render_text(m), render_text(baseline)
    code = _code(text)

    # mooncake is a lock matter: one more exact pin in packages; in the Dockerfile, upstream's
    # label of its version only (MooreThreads/vllm_musa@e43a01bfbbcd27ed165b862325ec6b015dab3a9c
    # docker/musa.Dockerfile: com.mthreads.vllm-musa.mooncake-version="${MOONCAKE_VERSION}")
    assert ("mooncake-transfer-engine-musa" in m.packages) == (mc == "on")
    label = '      com.mthreads.vllm-musa.mooncake-version="0.3.12.post1" \\\n'
    assert text.count(label) == (1 if mc == "on" else 0)
    assert (m.lock_inputs_sha256 == baseline.lock_inputs_sha256) == (mc != "on")
    marker = json.loads(m_marker(text))
    assert marker["mooncake"]["built"] == (mc == "on")
    assert marker["vllm-rs"]["built"] == (rs in ("rustup", "distro"))

    # the Dockerfile's ARGs never depend on the components
    assert declared_args(text) == declared_args(base_text)
    if rs in ("off", "listed-but-off"):
        # off: no stage, no ARG, no layer; nothing of Rust at all
        assert _stages(text) == _stages(base_text)
        assert _instructions(text) == _instructions(base_text)
        assert not re.search(r"(?i)rust|cargo", code)
        same = (
            text.replace(m_marker(text), "")
            .replace(label, "")
            .replace(m.lock_inputs_sha256, baseline.lock_inputs_sha256)
        )
        assert same == base_text.replace(m_marker(base_text), "")
    else:
        stages = _stages(text)
        assert stages == ["base", "python", "deps", "build", "vllm-rs", "final", "vllm-openai"]
        # built in vLLM's tree (sources.vllm, a plain source: bind-mounted as staged) by the
        # tree's own entry, then installed into the installed vllm package's directory
        stage = code.split("FROM build AS vllm-rs\n", 1)[1].split("\nFROM ", 1)[0]
        assert "--mount=type=bind,source=sources/vllm,target=/src/vllm,rw" in stage
        entry = (
            "bash build_rust.sh" if rs == "rustup" else "python3.11 tools/build_rust.py --release"
        )
        assert f"CARGO_TARGET_DIR=/build/cargo-target \\\n      {entry} \\\n" in stage
        assert "install -m 755 vllm/vllm-rs /out/vllm-rs" in stage
        assert "install -m 644 vllm/_rust_*.so /out/" in stage
        final = code.split("FROM deps AS final\n", 1)[1]
        assert "--mount=type=bind,from=vllm-rs,source=/out,target=/tmp/vllm-rs" in final
        assert 'install -m 755 /tmp/vllm-rs/vllm-rs "$package/vllm-rs"' in final
        assert "/usr/local/bin" not in final
    # every download is pinned: nothing is fetched by URL inside the build but rustup-init,
    # which comes from the context and runs only after its sha256 checks
    assert not re.search(r"\b(curl|wget)\b", code)
    if rs == "rustup":
        stage = code.split("FROM build AS vllm-rs\n", 1)[1]
        check = stage.index(f'echo "{RUSTUP_SHA}  /tmp/rustup-init" | sha256sum -c --quiet -')
        assert check < stage.index("/tmp/rustup-init.x -y")
        assert "--mount=type=bind,source=inputs/rustup-init,target=/tmp/rustup-init" in stage
        # the toolchain is the tree's rust-toolchain.toml, which build_rust.sh installs
        assert "--default-toolchain none" in stage
        assert "ca-certificates protobuf-compiler\n" in stage
        assert "rustc cargo" not in stage
    if rs == "distro":
        stage = code.split("FROM build AS vllm-rs\n", 1)[1]
        assert "ca-certificates protobuf-compiler rustc cargo" in stage
        assert "grep -Eq '^rustc 1[.]63([.]| )'" in stage
        assert "rustup" not in stage


def m_marker(text: str) -> str:
    found = re.search(r"printf '%s\\n' '(\{.*\})' > /opt/vllm-musa/components.json", text)
    assert found, "no components marker in the render"
    return found.group(1)


def test_a_cargo_lock_the_build_changes_fails_it(tmp_path: Path) -> None:
    """setuptools-rust passes no --locked: the stage compares the workspace's Cargo.lock files
    before and after the build, and fails naming the tree."""
    code = _code(render_text(manifest(tmp_path, components_text(VLLM_RS_DISTRO))))
    stage = code.split("FROM build AS vllm-rs\n", 1)[1].split("\nFROM ", 1)[0]
    before = "find rust -name Cargo.lock -exec sha256sum {} + | sort > /tmp/cargo-locks"
    after = "find rust -name Cargo.lock -exec sha256sum {} + | sort | cmp -s - /tmp/cargo-locks"
    assert stage.index(before) < stage.index("tools/build_rust.py") < stage.index(after)
    assert (
        'echo "error[cargo-lock]: the Rust build of sources.vllm changed or added a" \\\n'
        '             "Cargo.lock under rust/: its crates are not the locked ones" >&2;'
    ) in stage


def test_a_driven_tree_is_built_where_the_build_left_it(tmp_path: Path) -> None:
    """vLLM staged at vllm-musa's third_party/vllm: built in the workspace, no bind mount."""
    text = (
        components_text(VLLM_RS_DISTRO)
        .replace(
            "  vllm-musa: {path: demo/vllm-musa}\n",
            "  vllm-musa:\n    path: demo/vllm-musa\n    third_party: {vllm: {source: vllm, pin: VLLM_COMMIT}}\n",
        )
        .replace(
            "  vllm: {path: demo/vllm,",
            '  vllm: {git: "https://g.example/vllm.git", rev: "' + "a" * 40 + '",',
        )
    )
    code = _code(render_text(manifest(tmp_path, text)))
    stage = code.split("FROM build AS vllm-rs\n", 1)[1].split("\nFROM ", 1)[0]
    assert "    cd /vllm-workspace/third_party/vllm \\\n" in stage
    assert "source=sources/vllm," not in stage


def test_vllm_rs_needs_setuptools_rust_in_the_build_lock(tmp_path: Path) -> None:
    from tests.support.images import lock_for

    m = manifest(tmp_path, components_text(VLLM_RS_DISTRO))
    lock = lock_for(m)
    lock = dataclasses.replace(
        lock, packages=tuple(p for p in lock.packages if p.name != "setuptools-rust")
    )
    from images.builder.render import build_render_context

    with pytest.raises(RenderError) as info:
        build_render_context(m, lock, lock_sha256="cd" * 32)
    assert info.value.message == (
        f"{m.path}: components.vllm-rs: the lock's build requirements have no setuptools-rust, "
        "which vLLM's tools/build_rust.py builds with"
    )


def test_offline_render_installs_the_fetched_debs_of_each_step(tmp_path: Path) -> None:
    text = _code(render_text(manifest(tmp_path, components_text(VLLM_RS_DISTRO)), offline=True))
    assert "apt-get" not in text
    mount = "--mount=type=bind,source=apt,target=/tmp/apt"
    for line in (
        "sh /tmp/tools/apt-offline.sh python 'the python stage' python3.11",
        "sh /tmp/tools/apt-offline.sh build 'the build stage' build-essential ccache cmake "
        "git ninja-build patchelf gcc libc6-dev",
        "sh /tmp/tools/apt-offline.sh vllm-rs components.vllm-rs ca-certificates "
        "protobuf-compiler rustc cargo",
    ):
        assert (
            f"{mount} \\\n    --mount=type=bind,source=tools,target=/tmp/tools \\\n    {line}"
            in text
        )
    assert (
        "    sh /tmp/tools/apt-offline.sh python 'the python stage' python3.11 \\\n"
        " && sh /tmp/tools/apt-offline.sh runtime 'the runtime packages (python stage)' "
        "python3.11-dev build-essential ninja-build\n"
    ) in text
    # cargo reads the crates fetch vendored (the context's crates/), offline
    assert "--mount=type=bind,source=crates,target=/tmp/crates" in text
    assert 'cp /tmp/crates/config.toml "${CARGO_HOME:-/root/.cargo}/config.toml"' in text
    assert "CARGO_TARGET_DIR=/build/cargo-target CARGO_NET_OFFLINE=true" in text


def test_offline_deadsnakes_has_no_key_stage(tmp_path: Path) -> None:
    text = render_text(manifest(tmp_path, deadsnakes_text()), offline=True)
    assert "python-key" not in text


def test_offline_with_rustup_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path, components_text(VLLM_RS_RUSTUP))
    with pytest.raises(RenderError) as info:
        render_text(m, offline=True)
    assert info.value.message == (
        f"{m.path}: components.vllm-rs: the rustup provider downloads the toolchain during the "
        "build, which an --offline build cannot do"
    )


# ------------------------------------------------------------------------------ mirrors

MIRRORS = {
    "apt": "http://apt-mirror.example/debian",
    "deadsnakes": "http://ds-mirror.example/ppa",
    "rustup": "https://rustup-mirror.example/dist",
    "rustup-update-root": "https://rustup-mirror.example/rustup",
    "cargo": "https://cargo-mirror.example/index/",
    "sdk-apt": "http://sdk-mirror.example/musa/apt",
    "proxy": "http://proxy.example:3128",
}


def _args(stack: Path, *mirrors: str) -> argparse.Namespace:
    return argparse.Namespace(stack=stack, mirror=list(mirrors), base_image=None)


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_a_mirror_override_appears_in_the_render_and_nowhere_else(
    tmp_path: Path, name: str
) -> None:
    text = components_text(VLLM_RS_RUSTUP, base=deadsnakes_text() + SDK_APT)
    m0 = manifest(tmp_path, text)
    url = MIRRORS[name]
    m1 = effective_manifest(_args(m0.path, f"{name}={url}"))
    before, after = render_text(m0), render_text(m1)
    assert url not in before
    assert url in after
    # nowhere else: not in the lock inputs, the marker or the labels
    assert m1.lock_inputs_sha256 == m0.lock_inputs_sha256
    assert url not in m_marker(after)
    assert url not in after.split("ARG TOOLING_REVISION=unknown", 1)[1]
    # and every change is a hunk that carries it (the cargo mirror adds its own RUN)
    old, new = before.splitlines(), after.splitlines()
    hunks = [
        "\n".join(new[j1:j2])
        for tag, _, _, j1, j2 in difflib.SequenceMatcher(a=old, b=new).get_opcodes()
        if tag != "equal"
    ]
    assert hunks
    assert all(url in hunk for hunk in hunks), hunks


def test_mirrors_in_the_manifest_are_used_and_proxies_are_explicit(tmp_path: Path) -> None:
    block = "".join(f'  {k}: "{v}"\n' for k, v in MIRRORS.items())
    text = _code(render_text(manifest(tmp_path, components_text(VLLM_RS_RUSTUP, mirrors=block))))
    apt = "sh /tmp/tools/apt-get.sh 3 http://apt-mirror.example/debian http://proxy.example:3128"
    assert f"{apt} update" in text
    assert "RUSTUP_DIST_SERVER=https://rustup-mirror.example/dist" in text
    assert "RUSTUP_UPDATE_ROOT=https://rustup-mirror.example/rustup" in text
    assert 'registry = "sparse+%s"\\n\' https://cargo-mirror.example/index/' in text
    assert "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY" in text


def test_without_a_proxy_apt_goes_direct(tmp_path: Path) -> None:
    text = _code(render_text(manifest(tmp_path)))
    assert "sh /tmp/tools/apt-get.sh 3 '' '' update" in text
    script = (
        Path(__file__).parents[3] / "images" / "builder" / "in_image" / "apt-get.sh"
    ).read_text()
    assert "Acquire::http::Proxy=DIRECT" in script


def test_apt_get_sh_refuses_a_mirror_that_is_not_a_plain_url(tmp_path: Path) -> None:
    # the script itself refuses it too, before any sed or apt-get runs
    import subprocess

    script = Path(__file__).parents[3] / "images" / "builder" / "in_image" / "apt-get.sh"
    marker = tmp_path / "pwn"
    res = subprocess.run(
        ["sh", str(script), "1", f"https://h/;touch${{IFS}}{marker};#e;", "", "update"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert res.returncode == 1
    assert res.stderr.startswith("error[apt-mirror]: ")
    assert not marker.exists()


# ------------------------------------------------------------------------------ manifest errors


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "components:\n  vllm_rs: {enabled: true}\n",
            "components.vllm_rs: unknown key",
        ),
        (
            "components:\n  vllm-rs: {enabled: true}\n",
            "components.vllm-rs: the rustup provider needs rustup_init: {url, sha256}",
        ),
        (
            "components:\n  vllm-rs: {enabled: true, "
            'rustup_init: {url: "https://x.example/r", sha256: "abc"}}\n',
            "components.vllm-rs.rustup_init.sha256: must be 64 lowercase hex digits",
        ),
        (
            "components:\n  vllm-rs: {enabled: true, provider: distro, toolchain: 1.63}\n",
            "components.vllm-rs.toolchain: must be a string, got the number 1.63",
        ),
        (
            "components:\n  vllm-rs: {enabled: true, provider: distro, tree: vlm}\n",
            "components.vllm-rs.tree: vllm-rs is built from vLLM's tree, the source 'vlm', but "
            "sources has no 'vlm' (vllm, vllm-musa)",
        ),
        (
            "components:\n  vllm-rs: {enabled: true, provider: distro, source: {path: x}}\n",
            "components.vllm-rs.source: unknown key",
        ),
        (
            "components:\n  vllm-rs: {enabled: yes-please}\n",
            "components.vllm-rs.enabled: must be true or false, got the string 'yes-please'",
        ),
        (
            'components:\n  mooncake: {enabled: true, version: "0.3.7", index: pypi}\n',
            "components.mooncake.index: 'pypi' is not one of the indexes (vendor)",
        ),
        (
            'mirrors:\n  apt: "ftp://mirror.example/debian"\n',
            "mirrors.apt: 'ftp://mirror.example/debian' is not an http(s) URL without credentials",
        ),
        (
            'mirrors:\n  rustup_dist_server: "https://x.example/"\n',
            "mirrors.rustup_dist_server: unknown key",
        ),
    ],
)
def test_manifest_errors_name_the_key_path(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, MANIFEST + extra)
    assert info.value.message.split(": ", 1)[1] == message
    assert re.match(rf"{re.escape(str(tmp_path))}/stack/demo\.yaml:\d+: ", info.value.message)


def test_unknown_component_gets_a_did_you_mean(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, MANIFEST + "components:\n  vllm_rs: {enabled: true}\n")
    assert info.value.hint == "did you mean 'vllm-rs'?"


def test_mooncake_pinned_twice_is_an_error(tmp_path: Path) -> None:
    text = MANIFEST.replace(
        "requirements: [pip, torch, mate]",
        "requirements: [pip, torch, mate, mooncake-transfer-engine-musa]",
    )
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, text + "components:\n" + MOONCAKE)
    assert info.value.message.endswith(
        "components.mooncake.package: mooncake-transfer-engine-musa is also listed under "
        "requirements"
    )


def test_the_real_stacks_build_upstreams_components() -> None:
    """vllm-rs in both (upstream's BUILD_VLLM_RS=1); mooncake where a wheel exists (cp310)."""
    from manifest import load_manifest

    root = Path(__file__).parents[3]
    enabled = {
        name: load_manifest(root / "stack" / f"vllm-musa-0.28.0-{name}.yaml").components.enabled()
        for name in ("py310", "py312")
    }
    assert enabled == {"py310": ("vllm-rs", "mooncake"), "py312": ("vllm-rs",)}


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "packages: [musa-sdk]",
            'packages: ["musa-sdk\\n", "run", "touch", "pwned"]',
            "sdk_apt.packages.0: a value holds the character U+000A",
        ),
        ("suite: jammy", 'suite: "jammy\\n"', "sdk_apt.suite: a value holds the character U+000A"),
        (
            'url: "https://vendor.example/musa/apt"',
            'url: "https://vendor.example/a\\n"',
            "sdk_apt.url: a value holds the character U+000A",
        ),
    ],
)
def test_the_manifest_refuses_a_value_with_a_newline(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, MANIFEST + SDK_APT.replace(old, new))
    assert info.value.message.endswith(message)


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("packages", ("musa-sdk\n", "run", "touch", "pwned"), "apt.sdk"),
        ("suite", "jammy\n", "sdk_apt.suite"),
        ("url", "https://vendor.example/a\n", "sdk_apt"),
        (
            "key_fingerprint",
            "0123456789ABCDEF0123456789ABCDEF01234567\n",
            "sdk_apt.key_fingerprint",
        ),
    ],
)
def test_a_value_with_a_newline_cannot_add_an_instruction(
    tmp_path: Path, field: str, value: Any, where: str
) -> None:
    # a Dockerfile instruction ends at a newline whatever the shell quoting says. The manifest
    # refuses such values (above); the render refuses them on its own too (defence in depth)
    m = manifest(tmp_path, MANIFEST + SDK_APT)
    assert m.sdk_apt is not None
    m = dataclasses.replace(m, sdk_apt=dataclasses.replace(m.sdk_apt, **{field: value}))
    with pytest.raises(RenderError) as info:
        render_text(m)
    assert info.value.message.startswith(f"{m.path}: {where}")
    assert "line break or control character" in info.value.message
