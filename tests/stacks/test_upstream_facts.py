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
from pathlib import Path
from typing import Any

import pytest

from images.builder.gates import GATE_NAMES
from manifest import load_manifest
from testbed.simple_index import Listing
from tests.stacks.test_shipped_stacks import lock_shipped, publish_public, vendor_wheels
from tests.support.lockcase import Case

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


@pytest.fixture(params=["3.10", "3.12"], ids=["py310", "py312"])
def stack(request: pytest.FixtureRequest, case: Case) -> tuple[str, str, dict[str, Any]]:
    python: str = request.param
    text, packages = _rendered(case, python)
    return python, text, packages


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
    # the final image does not keep it
    assert " git " not in _stage(text, "final")


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


def test_mooncake_is_a_hash_locked_wheel_where_upstreams_exists(
    stack: tuple[str, str, Any],
) -> None:
    # 194301ec : docker/musa.Dockerfile, stage mooncake: pip install --only-binary=:all:
    # "mooncake-transfer-engine-musa==${MOONCAKE_VERSION}" (0.3.12.post1 in build_image.sh), and
    # final is FROM mooncake (no switch). 582b7cc131855566dea2a3b03998278b26f6fd3f has 0.3.13.
    # PyPI has cp310 wheels only, so the py312 stack has it off, saying so
    python, _, packages = stack
    entry = packages.get("mooncake-transfer-engine-musa")
    if python == "3.10":
        assert entry is not None
        assert entry["version"] == "0.3.12.post1"
        assert re.fullmatch(r"[0-9a-f]{64}", entry["wheels"][0]["hashes"]["sha256"])
    else:
        assert entry is None
        text = (REPO / "stack" / "vllm-musa-0.28.0-py312.yaml").read_text()
        assert "publishes cp310 wheels only" in text


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


def test_upstreams_vllm_label(stack: tuple[str, str, Any]) -> None:
    # 194301ec : docker/musa.Dockerfile LABEL com.mthreads.vllm.version="${VLLM_TAG}", VLLM_TAG
    # from third_party/PINS (build_image.sh); a render without the staged PINS states the
    # vLLM version, a build the PINS' v0.28.0
    _, text, _ = stack
    assert '      com.mthreads.vllm.version="0.28.0" \\\n' in text


def test_a_stack_without_its_first_lock_stops_the_nightly_in_one_line() -> None:
    # the first lock of a real stack needs the vendor index: a release engineer's step
    workflow = (REPO / ".github" / "workflows" / "nightly-image.yml").read_text()
    step = workflow.split("- name: The stack has its committed lock and render", 1)[1]
    step = step.split("- name:", 1)[0]
    (error,) = [line for line in step.splitlines() if "::error" in line]
    assert "build_image.py lock $STACK --index mthreads=URL" in error


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
