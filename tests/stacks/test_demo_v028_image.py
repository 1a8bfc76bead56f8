"""``make demo-v028`` against a real daemon (marked ``docker``): the real vLLM 0.28.0 sdist,
patched and installed by the stand-in vllm-musa tree, from the committed lock.

The build downloads only the locked files, by hash (the public ones from the real index, the
vendor stand-ins from the generated index); nothing is resolved. Importing vLLM needs a real
torch, which the stand-in is not, so the checks read files and metadata, never ``import vllm``.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

import build_image
from core.file_store import FileStore
from demo import run_demo
from demo.make_index import write_demo_index
from images.builder.gates import PROBE, GateResult, evaluate_gates, probe_args, probe_facts
from manifest import load_manifest
from resolver.lockfile import load_lock
from testbed.index_server import IndexServer
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.prepared_probes import PreparedProbes

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "stack" / "demo-v028.yaml"
FINAL = "vllm-musa-demo-v028:final"
OPENAI = "vllm-musa-demo-v028:vllm-openai"
TREE = "/vllm-workspace/third_party/vllm"
REV = "2cf0a6915ce544dc493a0990f2ea38d81601128a"
FLASHINFER_COMMIT = "5e4b43c411a5280329d8b1fd362b2656d389f3ef"  # PINS of demo/vllm-musa-v028
SITE = "/usr/local/lib/python3.11/dist-packages"
STANDIN = "/vllm-workspace/tools/musa-standin"  # musa.home: the tree's stand-in MUSA_HOME


def _run(image: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKER, "run", "--rm", "--entrypoint", "sh", image, "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both targets built, gated and tagged from the committed lock; returns the cache."""
    cache = ROOT / "build" / "demo" / "cache"  # shared with `make demo-v028`: locked files only
    run_demo.run(STACK, cache_dir=cache)
    return cache


def test_both_targets_pass_every_gate(built: Path) -> None:
    for target in ("final", "vllm-openai"):
        report = json.loads((ROOT / "build" / "reports" / f"demo-v028-{target}.json").read_text())
        assert report["tags"] == [f"vllm-musa-demo-v028:{target}"]
        assert report["gates"] == dict.fromkeys(report["gates"], True)
        assert {"third-party", "markers", "pip-check", "cxx-extension"} <= set(report["gates"])
        assert {"musa-jit", "pytest"} <= set(report["gates"])
        assert report["gates"]["flashinfer-provider"] is True


def test_final_rebuilt_without_the_layer_cache_has_the_same_digest(
    built: Path, tmp_path: Path
) -> None:
    """The compiled extensions, the patched tree and the editable vLLM included."""
    report = json.loads((ROOT / "build" / "reports" / "demo-v028-final.json").read_text())
    again = tmp_path / "again.json"
    err = io.StringIO()
    argv = ["build", str(STACK), "--target", "final", "--no-cache", "--cache-dir", str(built)]
    argv += ["--build-report", str(again), "--progress", "quiet"]
    assert build_image.main(argv, out=io.StringIO(), err=err) == 0, err.getvalue()[-3000:]
    assert json.loads(again.read_text())["digest"] == report["digest"]


def test_vllm_is_0_28_0_and_the_patched_real_tree(built: Path) -> None:
    out = _run(
        FINAL,
        "python3 -c \"import importlib.metadata as m; print(m.version('vllm'))\" && "
        "python3 -c \"import importlib.util as u; print(u.find_spec('vllm').origin)\" && "
        f"test -f {TREE}/vllm/platforms/musa_series.py && echo marker && "
        f"ls {TREE}/vllm/ | grep -c '^_C' && ls /vllm-workspace/vllm_musa/ | grep -c '^_C'",
    )
    assert out.stdout.splitlines() == [
        "0.28.0",
        f"{TREE}/vllm/__init__.py",
        "marker",
        "1",
        "1",
    ], out.stderr
    # the files are the sdist's: compare two the series leaves alone, byte for byte
    m = load_manifest(STACK)
    sdist = next(
        p
        for p in load_lock(m.default_lock_dir()).packages
        if p.group == "source" and p.name == "vllm"
    )
    path = FileStore(built).file_path(sdist.sha256)
    with tarfile.open(path) as tar:
        expected = {
            name: tar.extractfile(f"vllm-0.28.0/{name}").read()  # type: ignore[union-attr]
            for name in ("vllm/config/model.py", "vllm/entrypoints/openai/api_server.py")
        }
    for name, data in expected.items():
        got = subprocess.run(
            [DOCKER, "run", "--rm", "--entrypoint", "cat", FINAL, f"{TREE}/{name}"],
            capture_output=True,
            check=True,
            timeout=120,
        ).stdout
        assert got == data, name


def test_pip_check_is_clean_apart_from_the_declared_override(built: Path) -> None:
    out = _run(FINAL, "python3 -m pip check; echo rc=$?")
    lines = out.stdout.strip().splitlines()
    assert lines[-1] == "rc=1"
    assert [line for line in lines[:-1] if "opencv-python-headless" not in line] == []
    assert lines[:-1] == [
        "vllm 0.28.0 has requirement opencv-python-headless>=4.13.0, but you have "
        "opencv-python-headless 4.11.0.86."
    ]


def test_runtime_environment_and_labels(built: Path) -> None:
    out = _run(
        FINAL,
        'test -f "$(python3 -c "import sysconfig; print(sysconfig.get_path(\'include\'))")'
        '/Python.h" && echo python-h; readlink -f "$(command -v python3)" "$(command -v python)"; '
        "echo $MTHREADS_VISIBLE_DEVICES $PYTHONUNBUFFERED $PYTHONNOUSERSITE $TORCH_MUSA_ARCH_LIST "
        "$MATE_MUSA_ARCH_LIST $MTGPU_TARGET $MUSA_HOME; pwd",
    )
    assert out.stdout.splitlines() == [
        "python-h",
        "/usr/bin/python3.11",
        "/usr/bin/python3.11",
        "all 1 1 31 3.1 mp_31 /vllm-workspace/tools/musa-standin",
        "/vllm-workspace",
    ], out.stderr
    inspect = subprocess.run(
        [DOCKER, "image", "inspect", OPENAI], capture_output=True, text=True, check=True
    )
    config = json.loads(inspect.stdout)[0]["Config"]
    labels = config["Labels"]
    assert labels["io.vllm-musa.vllm.revision"] == REV
    assert labels["io.vllm-musa.vllm.version"] == "0.28.0"
    # upstream's labels: VLLM_TAG of the product tree's third_party/PINS (render states the
    # same), the Mooncake version of components.mooncake, and the release as its tag
    assert labels["com.mthreads.vllm.version"] == "v0.28.0"
    mooncake = load_manifest(STACK).components.mooncake
    assert mooncake is not None
    assert labels["com.mthreads.vllm-musa.mooncake-version"] == mooncake.pin.version_text
    assert labels["org.opencontainers.image.version"] == "v0.28.0"
    assert "org.opencontainers.image.source" not in labels  # a path source: no URL to name
    assert "org.opencontainers.image.revision" not in labels
    assert [v for v in labels.values() if str(ROOT) in v or "file://" in v] == []
    assert config["Entrypoint"] == ["vllm", "serve"]


def test_the_run_time_tools_run_in_the_image(built: Path) -> None:
    # curl (a health probe inside the container) and the locked pytest, as upstream's image
    # has them (its apt_base, and requirements/test.txt)
    out = _run(
        FINAL,
        "curl --version | head -n 1 | cut -d' ' -f1; test -s /etc/ssl/certs/ca-certificates.crt "
        "&& echo ca-certificates; python3 -m pytest --version",
    )
    lock = load_lock(ROOT / "stack" / "demo-v028.lock")
    pytest_version = lock.by_name()[canonicalize_name("pytest")].version
    assert out.stdout.splitlines() == ["curl", "ca-certificates", f"pytest {pytest_version}"], (
        out.stderr
    )


def test_vllm_rs_is_built_from_the_patched_tree_into_the_vllm_package(built: Path) -> None:
    """components.vllm-rs: vLLM's tools/build_rust.py, patched by the series to the stand-in
    workspace, built vllm-rs and the tool parser module; final has them in vLLM's package
    directory (where VLLM_RUST_FRONTEND_PATH=auto looks), and the module loads. Mooncake is
    the locked stand-in wheel, as upstream's image always has it."""
    out = _run(
        FINAL,
        f"{TREE}/vllm/vllm-rs; ls {TREE}/vllm | grep -e '^vllm-rs$' -e '^_rust_'; "
        "python3 -c 'import importlib.machinery as m, importlib.util as u; "
        f'p = "{TREE}/vllm/_rust_tool_parser.abi3.so"; '
        'l = m.ExtensionFileLoader("vllm._rust_tool_parser", p); '
        'mod = u.module_from_spec(u.spec_from_file_location("vllm._rust_tool_parser", p, loader=l)); '
        "l.exec_module(mod); print(mod.__doc__)'; "
        "python3 -c 'from mooncake.engine import TransferEngine; import importlib.metadata as m; "
        'print(m.version("mooncake-transfer-engine-musa"))\'; '
        "command -v vllm-rs cargo rustc protoc || echo no-toolchain",
    )
    assert out.stdout.splitlines() == [
        '{"frontend": "vllm-rs", "version": "0.1.0"}',
        "_rust_tool_parser.abi3.so",
        "vllm-rs",
        "demo stand-in for vLLM's Rust tool parser",
        "0.3.12.post1",
        "no-toolchain",
    ], out.stderr
    report = json.loads((ROOT / "build" / "reports" / "demo-v028-final.json").read_text())
    assert report["components"] == ["vllm-rs", "mooncake"]
    assert report["gates"]["components"] is True


def test_no_build_toolchain_cache_or_wheelhouse_in_final(built: Path) -> None:
    """The build stage's tools (ccache, cmake, git) stay there; the final image has the
    runtime's C/C++ toolchain (c++, ninja) and the stand-in MUSA_HOME's mcc, which the
    vllm-musa JIT uses."""
    out = _run(
        FINAL,
        "! command -v ccache && ! command -v cmake && ! command -v git && "
        f'test "$(command -v mcc)" = {STANDIN}/bin/mcc && '
        f"test -L {STANDIN}/lib/libmusart.so && test -f {STANDIN}/lib/libmusart.so.5 && "
        'test -z "$(find / -xdev -name "*.whl" -size +0 2>/dev/null)" && '
        "! python3 -c 'import setuptools_scm' 2>/dev/null && "
        "test ! -d /vllm-workspace/build && "
        "test -x /usr/bin/c++ && test -x /usr/bin/ninja && echo clean",  # the apt ones
    )
    assert out.stdout.strip().endswith("clean"), out.stdout + out.stderr


def test_the_offline_build_passes_with_the_network_off(built: Path) -> None:
    """No build step reaches the network: after ``fetch``, the whole build runs with
    ``--network none`` (the apt steps install the fetched .deb files, the vLLM sdist and the
    wheels come from the context) and passes every gate. The report names that network.
    vllm-rs is off here: fetch vendors the crates of the tree's rust/Cargo.lock, and the real
    tree's are on crates.io, out of reach (the components stack builds vllm-rs offline)."""
    stack = ROOT / "build" / "test-stacks" / "demo-v028.yaml"
    stack.parent.mkdir(parents=True, exist_ok=True)
    on = "  vllm-rs: {enabled: true, provider: distro}\n"
    text = STACK.read_text()
    assert on in text
    stack.write_text(text.replace(on, "  vllm-rs: {enabled: false}\n"))
    lock = ["--lock", str(STACK.with_name("demo-v028.lock")), "--cache-dir", str(built)]
    index = write_demo_index(run_demo.DEMO_DIR / "index", run_demo.DEMO_DIR / "bootstrap")
    with IndexServer(index) as server:
        fetch = ["fetch", str(stack), *lock, "--index", f"demo={server.simple_url}"]
        assert build_image.main(fetch) == 0
    tag = "vllm-musa-demo-v028:offline"
    argv = ["build", str(stack), *lock, "--index", "demo=http://127.0.0.1:9/simple/"]
    argv += ["--offline", "--target", "final", "--tag", tag]
    assert build_image.main(argv) == 0
    report = json.loads((ROOT / "build" / "reports" / "demo-v028-final.json").read_text())
    assert (report["offline"], report["network"], report["tags"]) == (True, "none", [tag])
    assert report["gates"] == dict.fromkeys(report["gates"], True)
    assert {"third-party", "markers", "pip-check"} <= set(report["gates"])


def test_the_flashinfer_provider_is_overlaid_with_upstreams_rules(built: Path) -> None:
    """The stand-in FlashInfer checkout (third_party/flashinfer, PINS FLASHINFER_COMMIT) is
    overlaid into the installed stand-in flashinfer-python as upstream's setup.py does:
    mamba/ copied with MUSA_PROVIDER_COMMIT, jit/ replaced wholesale (the wheel's own
    wheel_only.py is gone), the absent api_logging.py added, the wheel's sampling.py kept."""
    script = (
        "import importlib.util as u, pathlib as p; "
        "r = p.Path(u.find_spec('flashinfer').submodule_search_locations[0]); "
        "print(r); print(repr((r / 'mamba' / 'MUSA_PROVIDER_COMMIT').read_text())); "
        "print((r / 'mamba' / 'ssd_combined.py').is_file()); "
        "print((r / 'jit' / '__init__.py').read_text().strip()); "
        "print((r / 'jit' / 'wheel_only.py').exists()); "
        "print((r / 'api_logging.py').read_text().strip()); "
        "print((r / 'sampling.py').read_text().strip())"
    )
    out = _run(FINAL, f'python3 -c "{script}"')
    assert out.stdout.splitlines() == [
        f"{SITE}/flashinfer",
        repr(f"{FLASHINFER_COMMIT}\n"),
        "True",
        'SOURCE = "the FlashInfer checkout"',
        "False",
        'SOURCE = "the FlashInfer checkout"',
        'SOURCE = "the flashinfer-python wheel"',
    ], out.stderr


@pytest.mark.parametrize(
    ("prepare", "says"),
    [
        (f"echo 0000000 > {SITE}/flashinfer/mamba/MUSA_PROVIDER_COMMIT", "holds '0000000'"),
        (f"rm {SITE}/flashinfer/mamba/MUSA_PROVIDER_COMMIT", "is not in the image"),
    ],
)
def test_the_flashinfer_provider_gate_fails_on_a_wrong_or_missing_marker(
    built: Path, prepare: str, says: str
) -> None:
    m = load_manifest(STACK)
    script = f'{prepare} && exec python3.11 -c "$0" "$@"'
    argv = [DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "sh", FINAL, "-c", script]
    argv += [PROBE.read_text("utf-8"), *probe_args(m)]
    run = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    results = {r.name: r for r in evaluate_gates(facts, m, load_lock(m.default_lock_dir()))}
    gate = results["flashinfer-provider"]
    assert not gate.ok
    marker = f"{SITE}/flashinfer/mamba/MUSA_PROVIDER_COMMIT"
    assert marker in gate.output, gate.output
    assert says in gate.output, gate.output
    assert f"FLASHINFER_COMMIT={FLASHINFER_COMMIT}" in gate.output, gate.output


# ------------------------------------------------- musa-jit, provider functions and pytest


def _gates_after(prepare: str) -> dict[str, GateResult]:
    m = load_manifest(STACK)
    facts = probe_facts(PreparedProbes(prepare), FINAL, m)
    return {r.name: r for r in evaluate_gates(facts, m, load_lock(m.default_lock_dir()))}


def test_the_musa_jit_gate_builds_a_kernel_with_the_stand_in_sdk(built: Path) -> None:
    """The stand-in mcc ($MUSA_HOME/bin/mcc) compiles the .mu kernel as upstream's JIT runs
    it, through ninja, against the real apache-tvm-ffi's headers; the link takes -lmusart from
    the stand-in MUSA_HOME and a stub libmusa (no driver here); pytest runs as locked."""
    m = load_manifest(STACK)
    locked: dict[str, str] = {p.name: p.version for p in load_lock(m.default_lock_dir()).runtime()}
    tvm = f"{SITE}/tvm_ffi"
    ninja = _run(FINAL, "command -v ninja").stdout.strip()  # the JIT's: first on PATH
    results = _gates_after("true")
    assert (results["musa-jit"].ok, results["musa-jit"].output) == (
        True,
        f"{STANDIN}/bin/mcc ($MUSA_HOME/bin/mcc) compiled vllm_musa_jit_probe.mu for mp_31 and "
        f"ninja ({ninja}) linked it as the vllm-musa JIT does: vllm_musa_jit_probe.so is "
        "a shared object that needs libmusart.so.5\n"
        f"tvm-ffi: apache-tvm-ffi {locked['apache-tvm-ffi']}, -I{tvm}/include -L{tvm}/lib "
        "-ltvm_ffi\n"
        f"-lmusa: no libmusa.so in {STANDIN}/lib or {STANDIN}/lib/stubs (the driver's library, "
        "which the host provides at run time): linked against a stub the gate built (soname "
        "libmusa.so.1)",
    )
    assert results["flashinfer-provider"].ok, results["flashinfer-provider"].output
    assert results["flashinfer-provider"].output.splitlines()[1:] == [
        "flashinfer.mamba.ssd_combined.ssd_combined_fwd_varlen: def in "
        f"{SITE}/flashinfer/mamba/ssd_combined.py",
        "flashinfer.mamba.selective_state_update.selective_state_update: def in "
        f"{SITE}/flashinfer/mamba/selective_state_update.py",
    ]
    pytest_ok = (
        f"python3.11 -m pytest --version: pytest {locked['pytest']}, as locked"
        if "pytest" in locked
        else "pytest is not in the lock: not checked"
    )
    assert (results["pytest"].ok, results["pytest"].output) == (True, pytest_ok)


def test_the_musa_jit_gate_fails_without_libmusart(built: Path) -> None:
    results = _gates_after(f"rm {STANDIN}/lib/libmusart.so {STANDIN}/lib/libmusart.so.5")
    gate = results["musa-jit"]
    assert not gate.ok
    lines = gate.output.splitlines()
    assert lines[0].startswith(
        "link failed: c++ vllm_musa_jit_probe.musa.o -shared "
        f"-L{SITE}/tvm_ffi/lib -ltvm_ffi -L{STANDIN}/lib -Lstubs -lmusa -lmusart "
        "-o vllm_musa_jit_probe.so"
    ), gate.output
    assert any("-lmusart" in line for line in lines[1:]), gate.output
    assert lines[-1] == "  ninja: build stopped: subcommand failed."


def test_the_provider_gate_fails_on_a_missing_function_or_module(built: Path) -> None:
    mamba = f"{SITE}/flashinfer/mamba"
    results = _gates_after(
        f"rm {mamba}/selective_state_update.py && "
        f"sed -i s/ssd_combined_fwd_varlen/renamed/ {mamba}/ssd_combined.py"
    )
    gate = results["flashinfer-provider"]
    assert (gate.ok, gate.output) == (
        False,
        f"{mamba}/ssd_combined.py (flashinfer.mamba.ssd_combined) has no top-level "
        "ssd_combined_fwd_varlen (no def, class, assignment or import binds it); upstream's "
        "image imports it and checks that it is callable\n"
        f"{mamba}/selective_state_update.py: missing; upstream's image imports "
        "selective_state_update from flashinfer.mamba.selective_state_update (the FlashInfer "
        "provider overlaid from /vllm-workspace/third_party/flashinfer lacks it)",
    )
