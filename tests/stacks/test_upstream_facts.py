"""Each real stack, locked against vendor-shaped indexes and rendered, has what upstream's
released image has. Every check cites the upstream file it was read from, as repository @
commit : path. ``194301ec`` is MooreThreads/vllm-musa@194301ec65c36a945b3d40613849ad47df1a499f,
the stored commit whose docker/README.md describes the v0.28.0 release image (the stack's own
vllm-musa commit, 070c0ea, is not stored where it could be read).

The locks come from the same vendor-shaped indexes as tests/stacks/test_shipped_stacks.py; the
stacks are the shipped files with their two git sources made local (that module says why).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from images.builder.gates import GATE_NAMES
from images.builder.labels import image_labels
from images.builder.third_party import provider_overlay
from images.builder.upstream_gates import PROVIDER_FUNCTIONS, upstream_probe_args
from manifest import load_manifest
from testbed.simple_index import Listing
from tests.stacks.test_shipped_stacks import lock_shipped, publish_public, vendor_wheels
from tests.support.lockcase import Case, open_case

REPO = Path(__file__).resolve().parents[2]
WS = "/vllm-workspace"


def _rendered(case: Case, python: str) -> tuple[str, dict[str, dict[str, Any]]]:
    """The shipped stack for ``python`` (3.10 or 3.12), locked and rendered: the Dockerfile's
    instructions (comments dropped) and the lock's packages by name."""
    cp = python.replace(".", "")
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in vendor_wheels(case, python)))
    publish_public(case, python)
    code, err, packages = lock_shipped(case, python, case.pypi.simple_url)
    assert code == 0, err
    out = case.tmp / "Dockerfile"
    stack = case.tmp / "stack" / f"vllm-musa-0.28.0-py{cp}.yaml"
    result = case.run("render", stack, "--lock", case.tmp / "lock", "--out", out)
    assert result.code == 0, result.err
    lines = out.read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#")), packages


@pytest.fixture(scope="module", params=["3.10", "3.12"], ids=["py310", "py312"])
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """Each real stack locked and rendered once for the module: the checks only read it."""
    python: str = request.param
    for case in open_case(tmp_path_factory.mktemp(f"py{python.replace('.', '')}")):
        text, packages = _rendered(case, python)
        yield python, text, packages


def _stage(text: str, name: str) -> str:
    """The instructions of one stage (up to the next FROM)."""
    return text.split(f" AS {name}\n", 1)[1].split("\nFROM ", 1)[0]


def test_git_applies_the_series_in_the_build_stage(stack: tuple[str, str, Any]) -> None:
    # MooreThreads/vllm_musa@b78203f400eb222bb098a09320b01e1d2d613e15 :
    # vllm_musa/patches/build_apply.py runs ["git", "-C", str(repo), "apply", "--recount",
    # "-p", "1", ...]; setup.py@04aa296d calls it with strict=True
    _, text, _ = stack
    build = _stage(text, "build")
    (line,) = re.findall(r"install -y --no-install-recommends (build-essential [^\n]+)", build)
    assert "git" in line.split()


def test_the_final_image_has_upstreams_cxx_toolchain(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile, apt_base installs build-essential, g++-12, gcc-12,
    # libstdc++-12-dev and ninja-build, and every later stage (final too) descends from it.
    # MooreThreads/vllm-musa@69f6fa0792ecb56dc567f8d8b8764c50b6175fd0 :
    # vllm_musa/jit_kernel/csrc/jit.py compiles and links with `cxx = $CXX or c++` through ninja
    python, text, _ = stack
    runtime = re.search(rf"install -y --no-install-recommends (python{python}-dev [^\n]+)", text)
    assert runtime is not None
    words = runtime.group(1).split()
    assert {"build-essential", "ninja-build", "gcc-12", "g++-12", "libstdc++-12-dev"} <= set(words)
    # and the image proves it: a gate compiles, links and imports a C++ extension
    assert "cxx-extension" in GATE_NAMES


def test_flashinfer_provider_is_overlaid_with_the_pinned_commit(
    stack: tuple[str, str, Any],
) -> None:
    # 194301ec : docker/build_image.sh SKIP_THIRD_PARTY="${SKIP_THIRD_PARTY:-0}": the released
    # image has the overlay. MooreThreads/vllm-musa@04aa296d4af4dcf15450cdc3c6bfc1076d4919bc :
    # setup.py _install_flashinfer_mamba copies flashinfer/mamba into the installed flashinfer
    # and writes mamba/MUSA_PROVIDER_COMMIT = FLASHINFER_COMMIT (third_party/PINS@0227a5c7:
    # 5e4b43c411a5280329d8b1fd362b2656d389f3ef, the stack's flashinfer rev)
    _, text, _ = stack
    final = _stage(text, "final")
    assert (
        f"flashinfer_overlay.py {WS}/third_party/flashinfer "
        "5e4b43c411a5280329d8b1fd362b2656d389f3ef"
    ) in final
    assert "flashinfer-provider" in GATE_NAMES


def test_departures_from_upstreams_requirement_pins_are_declared(
    stack: tuple[str, str, Any],
) -> None:
    # MooreThreads/vllm-musa@1df06c8aa819004c6d4e7da7d926507eaa10201c : requirements/common.txt
    # pins numpy==1.26 (PEP 440: 1.26.0 only) and torchada==0.1.81; the stack's 1.26.4 and
    # 0.1.90 are overrides, each recorded in the lock with the line it departs from
    _, _, packages = stack
    assert packages["numpy"]["version"] == "1.26.4"
    assert packages["numpy"]["tool"]["vllm-musa-image"]["override"]["ignores"] == [
        "sources.vllm-musa:requirements/common.txt requires numpy==1.26"
    ]
    assert packages["torchada"]["tool"]["vllm-musa-image"]["override"]["ignores"] == [
        "sources.vllm-musa:requirements/common.txt requires torchada==0.1.81"
    ]


def test_vllm_rs_is_built_from_the_patched_tree_into_the_vllm_package(
    stack: tuple[str, str, Any],
) -> None:
    # 194301ec : docker/build_image.sh BUILD_VLLM_RS="${BUILD_VLLM_RS:-1}"; docker/musa.Dockerfile
    # vllm_rs_build: `cd /vllm-workspace/third_party/vllm && bash build_rust.sh`, then final:
    # `install -Dm755 ... /vllm-workspace/third_party/vllm/vllm/vllm-rs` and
    # `.../vllm/_rust_tool_parser.abi3.so`. vLLM 0.28.0 (its sdist on PyPI, sha256 ac96dd0e...) :
    # build_rust.sh reads rust-toolchain.toml and runs tools/build_rust.py, which builds both
    # into vllm/; vllm/envs.py _resolve_rust_cli_path looks in the package directory only
    python, text, _ = stack
    rs = _stage(text, "vllm-rs")
    assert text.count("FROM build AS vllm-rs\n") == 1  # the tree as the build left it: patched
    assert f"    cd {WS}/third_party/vllm \\\n" in rs
    assert "      bash build_rust.sh \\\n" in rs
    # rustup-init 1.28.2, checked before it runs; the toolchain is the tree's
    assert (
        'echo "20a06e644b0d9bd2fbdbfd52d42540bdde820ea7df86e92e533c073da0cdd43c  '
        '/tmp/rustup-init" | sha256sum -c --quiet -'
    ) in rs
    assert "--default-toolchain none" in rs
    final = _stage(text, "final")
    assert (
        f"python{python} -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec(\"vllm\").origin))'"
        in final
    )
    assert 'install -m 755 /tmp/vllm-rs/vllm-rs "$package/vllm-rs"' in final
    assert "/usr/local/bin" not in final


def test_mooncake_follows_the_torch_line_and_is_labelled(stack: tuple[str, str, Any]) -> None:
    # MooreThreads/vllm_musa@e43a01bfbbcd27ed165b862325ec6b015dab3a9c : docker/musa.Dockerfile
    # ARG MOONCAKE_VERSION=0.3.13, LABEL com.mthreads.vllm-musa.mooncake-version=
    # "${MOONCAKE_VERSION}"; tests/test_inplace_porting_contract.py@078be0e7 pairs torch
    # 2.11.0.post2 with it. 194301ec still has 0.3.12.post1. PyPI has cp310 wheels only, so the
    # py312 stack has it off, saying so
    python, text, packages = stack
    entry = packages.get("mooncake-transfer-engine-musa")
    if python == "3.10":
        assert entry is not None
        assert entry["version"] == "0.3.13"
        assert re.fullmatch(r"[0-9a-f]{64}", entry["wheels"][0]["hashes"]["sha256"])
        assert '      com.mthreads.vllm-musa.mooncake-version="0.3.13" \\\n' in text
    else:
        assert entry is None
        assert "mooncake-version" not in text
        shipped = (REPO / "stack" / "vllm-musa-0.28.0-py312.yaml").read_text()
        assert "publishes cp310 wheels only" in shipped


def test_the_sdk_libraries_upstream_installs_are_checked(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile installs musa-musart, libmublaslt, libmudnn3, mccl-s5000
    # and libmthreads-mtml in one transaction (no mtshmem package); setup.py@04aa296d links
    # musart and mublasLt
    _, text, _ = stack
    assert (
        " && for lib in libmusart.so libmublasLt.so libmudnn.so libmccl.so libmtml.so; do \\\n"
    ) in text
    # the base image's own Python distributions are recorded before anything is installed
    assert "/tmp/installed.py base /opt/vllm-musa/base-distributions.json" in text


def test_upstreams_labels(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile LABEL org.opencontainers.image.source=
    # "https://github.com/MooreThreads/vllm-musa" and com.mthreads.vllm.version="${VLLM_TAG}"
    # (build_image.sh reads third_party/PINS; PINS@0227a5c7: VLLM_TAG=v0.28.0); render reads it
    # too, so the committed render and the built Dockerfile are one
    python, text, _ = stack
    assert '      com.mthreads.vllm.version="v0.28.0" \\\n' in text
    assert '      org.opencontainers.image.version="v0.28.0" \\\n' in text
    m = load_manifest(REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml")
    assert image_labels(m).source == "https://github.com/MooreThreads/vllm-musa"


def test_a_stack_without_its_first_lock_stops_the_nightly_in_one_line() -> None:
    # the first lock of a real stack needs the vendor index: a release engineer's step
    workflow = (REPO / ".github" / "workflows" / "nightly-image.yml").read_text()
    step = workflow.split("- name: The stack has its committed lock and render", 1)[1]
    step = step.split("- name:", 1)[0]
    (error,) = [line for line in step.splitlines() if "::error" in line]
    assert "build_image.py lock $STACK --index mthreads=URL" in error
    assert "build_image.py pin-base $STACK" in error  # the base, pinned by digest


@pytest.mark.parametrize("python", ["3.10", "3.12"])
def test_python_of_each_line(python: str) -> None:
    # 194301ec : docker/musa.Dockerfile ARG PYTHON_VERSION=3.10, python${PYTHON_VERSION} and
    # python-is-python3 from Ubuntu's apt (the mainline, the control of an A/B);
    # c18d31217328511bbea98b744e9bd214d966d1a4 : the 3.12 line from the Deadsnakes PPA
    m = load_manifest(REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml")
    assert m.target.python_str == python
    assert m.python_install.provider == ("distro" if python == "3.10" else "deadsnakes")


def test_the_lock_pins_setuptools_rust_for_the_rust_build(stack: tuple[str, str, Any]) -> None:
    # vLLM 0.28.0 : requirements/build/cuda.txt has setuptools-rust>=1.9.0, which
    # tools/build_rust.py imports
    _, _, packages = stack
    assert packages["setuptools-rust"]["version"] == "1.13.0"


@pytest.mark.parametrize("python", ["3.10", "3.12"])
def test_the_base_is_the_vendors_sdk_image_pinned_by_its_first_lock(python: str) -> None:
    # 194301ec : docker/build_image.sh BASE_IMAGE="${BASE_IMAGE:-ubuntu:22.04}" and
    # MUSA_APT_SOURCE; docker/musa.Dockerfile writes it `deb [trusted=true] ...` (unsigned,
    # which sdk_apt refuses) and, with INSTALL_MUSA_STACK=auto, keeps a BASE_IMAGE's SDK when
    # mcc is on PATH. The stacks take that route with the vendor's SDK devel image (mcc
    # included), and name why in their comments; `pin-base` writes its digest into the line.
    path = REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml"
    m = load_manifest(path)
    assert m.base_image == "registry.mthreads.com/mcconline/musa_sdk:5.2.0-devel-ubuntu22.04-s5000"
    assert m.sdk is not None
    assert m.sdk.origin == "base"
    assert "mcc" in m.sdk.commands
    text = path.read_text()
    assert "`deb [trusted=true]`: unsigned, which this tool refuses" in text
    assert "`build_image.py pin-base STACK` writes its digest here" in text


def test_the_final_image_keeps_upstreams_run_time_tools(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile apt_base installs curl, ca-certificates, git, git-lfs,
    # openssh-client (multi-node mpirun), lsof, zip, unzip, xz-utils and libcurl4-openssl-dev
    # (Mooncake's engine.so needs libcurl.so.4); final descends from it. The stack names each
    # apt_base package it leaves out, with the reason (tests/stacks/test_shipped_stacks.py)
    python, text, _ = stack
    runtime = re.search(rf"install -y --no-install-recommends (python{python}-dev [^\n]+)", text)
    assert runtime is not None
    tools = {"ca-certificates", "curl", "libcurl4-openssl-dev", "git", "git-lfs",
             "openssh-client", "lsof", "zip", "unzip", "xz-utils"}  # fmt: skip
    assert tools <= set(runtime.group(1).split())


def test_pytest_of_the_test_requirements_is_locked_and_gated(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile deps stage: -r requirements/test.txt, and the install
    # check lists ("pytest", "pytest", ""); requirements/test.txt@5b445098: pytest,
    # pytest-asyncio; tests/test_inplace_porting_contract.py@078be0e7 asserts "pytest" in it.
    # The gate runs `python3.X -m pytest --version` and wants the locked version
    _, _, packages = stack
    for name in ("pytest", "pytest-asyncio"):
        assert packages[name]["tool"]["vllm-musa-image"]["required-by"] == [
            "(sources.vllm-musa:requirements/test.txt)"
        ]
    assert "pytest" in GATE_NAMES


def test_the_final_image_runs_upstreams_jit_build(stack: tuple[str, str, Any]) -> None:
    # MooreThreads/vllm-musa@69f6fa0792ecb56dc567f8d8b8764c50b6175fd0 :
    # vllm_musa/jit_kernel/csrc/jit.py: mcc = $VLLM_MUSA_MCC or $MUSA_HOME/bin/mcc, run by ninja
    # as `$mcc -MD -MF $out.d $musa_cflags -c $in -o $out` with --offload-arch from
    # MATE_MUSA_ARCH_LIST ("3.1" -> mp_31), linked `$cxx $in ... -lmusa -lmusart -o $out`
    python, text, _ = stack
    m = load_manifest(REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml")
    assert "MUSA_HOME=/usr/local/musa" in _stage(text, "python")
    assert "MATE_MUSA_ARCH_LIST=3.1" in _stage(text, "python")
    assert m.sdk is not None
    assert "mcc" in m.sdk.commands
    assert upstream_probe_args(m, overlay=False) == ["--musa-arch=mp_31"]
    assert "musa-jit" in GATE_NAMES


def test_the_provider_functions_upstream_imports_are_gated(stack: tuple[str, str, Any]) -> None:
    # MooreThreads/vllm_musa@e43a01bfbbcd27ed165b862325ec6b015dab3a9c : docker/musa.Dockerfile,
    # after `pip install -e .`: `from flashinfer.mamba.ssd_combined import
    # ssd_combined_fwd_varlen; from flashinfer.mamba.selective_state_update import
    # selective_state_update; assert callable(...)`: located and read, never imported
    python, _, _ = stack
    m = load_manifest(REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml")
    assert provider_overlay(m) is not None
    assert PROVIDER_FUNCTIONS == (
        ("flashinfer.mamba.ssd_combined", "ssd_combined_fwd_varlen"),
        ("flashinfer.mamba.selective_state_update", "selective_state_update"),
    )
    assert "flashinfer-provider" in GATE_NAMES


def test_mirrors_are_the_hosts_choice_not_the_stacks(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile seds archive.ubuntu.com to mirrors.aliyun.com and
    # copies docker/cargo-config.toml to /root/.cargo/config.toml; docker/build_image.sh
    # defaults PYPI_INDEX_URL to https://mirrors.tuna.tsinghua.edu.cn/pypi/web/simple. Here a
    # mirror is a host's choice (mirrors: or --mirror, docs/manifest.md): the shipped render
    # names none, and its apt and Rust steps get no proxy but one asked for
    _, text, _ = stack
    calls = text.count("sh /tmp/tools/apt-get.sh ")
    assert calls > 0
    assert text.count("sh /tmp/tools/apt-get.sh 3 '' '' ") == calls
    upstreams = ("mirrors.aliyun.com", "mirrors.tuna.tsinghua.edu.cn", "RUSTUP_DIST_SERVER")
    for upstream in (*upstreams, "replace-with"):
        assert upstream not in text
    unset = (
        "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u all_proxy"
    )
    assert _stage(text, "vllm-rs").count(unset) == 2


@pytest.mark.parametrize("python", ["3.10", "3.12"])
def test_libmusa_is_the_hosts_and_the_linkage_gate_checks_every_other_need(python: str) -> None:
    # 194301ec : docker/musa.Dockerfile apt_base installs libcurl4-openssl-dev: the libcurl.so.4
    # that mooncake/engine.so (mooncake-transfer-engine-musa 0.3.12.post1) needs and its wheel
    # does not bundle; the driver's libmusa.so.1 is the host's (the mthreads container runtime)
    m = load_manifest(REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml")
    assert list(m.runtime.host_libraries) == ["libmusa.so.1"]
    assert "libcurl4-openssl-dev" in m.runtime.apt_packages
    assert GATE_NAMES.index("linkage") == GATE_NAMES.index("libraries") + 1
