"""Docker tests: the demo end to end against a real daemon (marked ``docker``).

They SKIP when no daemon answers and ``CI`` is unset, and FAIL when ``CI=true`` and no daemon
answers (CI must run ``ci/start-docker.sh`` and ``ci/make-base-image.sh`` first). The demo is
built once per session (the ``demo`` fixture of conftest.py); the other tests reuse its lock,
cache and layers. What the demo's final image holds is checked in test_build_docker_image.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

import build_image
from demo import run_demo
from images.engine.docker_build import DockerEngine
from images.oci.layout import find_manifest
from tests.support.demo_build import COMPONENTS_STACK, SECRET, Demo
from tests.support.environment import BASE_IMAGE, unavailable
from tests.support.environment import DOCKER_CLI as DOCKER

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[3]
STACKS = ROOT / "build" / "test-stacks"  # inside the repository: path sources resolve


def _fail_or_skip(reason: str) -> NoReturn:
    unavailable(reason, marker="docker")


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture(scope="module", autouse=True)
def _remove_test_stacks() -> Iterator[None]:
    """The stacks this module writes under build/test-stacks go when it is done."""
    yield
    shutil.rmtree(STACKS, ignore_errors=True)


def _stack(name: str, text: str) -> Path:
    STACKS.mkdir(parents=True, exist_ok=True)
    path = STACKS / name
    path.write_text(text, encoding="utf-8")
    return path


def _build(demo: Demo, stack: Path, *extra: str) -> tuple[int, str]:
    err = io.StringIO()
    argv = ["build", str(stack), "--lock", str(demo.lock_dir), "--cache-dir", str(demo.cache)]
    argv += ["--index", f"demo={demo.index_url}", *extra]
    code = build_image.main(argv, out=io.StringIO(), err=err)
    return code, err.getvalue()


def test_demo_end_to_end(demo: Demo) -> None:
    for target in ("final", "vllm-openai"):
        report = json.loads((ROOT / "build" / "reports" / f"demo-{target}.json").read_text())
        assert report["tags"] == [f"vllm-musa-demo:{target}"]
        assert all(report["gates"].values())
        inspect = json.loads(_docker("image", "inspect", f"vllm-musa-demo:{target}").stdout)[0]
        assert inspect["Id"] == report["image_id"]
        # the image is the normalized one, whose id is its config's digest
        assert report["oci_layout"] == f"build/images/demo-{target}"
        digest, manifest = find_manifest(ROOT / report["oci_layout"], target)
        assert (digest, manifest["config"]["digest"]) == (report["digest"], report["image_id"])
        assert report["size_bytes"] == inspect["Size"]
        stages = ["base_fetch", "base_image", "build", "context", "gates", "load", "normalize"]
        stages += ["save", "tag"]
        assert sorted(report["durations_s"]) == [*stages, "total"]
        # the base's one layer kept as the daemon has it (compressed as it is), the others
        # each written by a step of the demo's Dockerfile, clamped to its stage's time
        layers = report["layers"]
        assert [x["diff_id"] for x in layers] == inspect["RootFS"]["Layers"]
        assert (layers[0]["origin"], layers[0]["clamp"]) == ("base", None)
        assert {x["origin"] for x in layers[1:]} <= {"normalized", "cached"}
        assert all(0 < x["clamp"] <= report["source_date_epoch"] for x in layers[1:])
        assert all(x["step"] for x in layers[1:])
        assert report["compressor"].startswith("gzip/")
        assert sorted(report["cache"]) == [
            "steps_cached", "steps_run", "wheels_cached", "wheels_fetched"
        ]  # fmt: skip
        assert all(isinstance(n, int) and n >= 0 for n in report["cache"].values())
        assert all(isinstance(s, float) for s in report["stages_s"].values())
        assert inspect["Config"]["WorkingDir"] == "/vllm-workspace"
    serve = _docker("run", "--rm", "vllm-musa-demo:vllm-openai", "--dry-run")
    assert serve.returncode == 0, serve.stderr
    assert json.loads(serve.stdout)["platforms"] == {"musa": "vllm_musa.platform.MusaPlatform"}
    shell = _docker(
        "run",
        "--rm",
        "vllm-musa-demo:final",
        "sh",
        "-c",
        "test -f /opt/vllm-musa/lock/pylock.toml && test -f /opt/vllm-musa/sbom.json && "
        "! command -v ccache && ! command -v cmake && ! command -v uv && "
        # BuildKit 0.8 leaves empty mount points; no wheel with content may remain
        'test -z "$(find / -xdev -name "*.whl" -size +0 2>/dev/null)" && '
        'test -z "$(ls -A /root/.cache/ccache 2>/dev/null)" && echo clean',
    )
    assert shell.stdout.strip().endswith("clean"), shell.stdout + shell.stderr


def test_gate_command_alone(demo: Demo) -> None:
    out = io.StringIO()
    code = build_image.main(
        ["gate", "vllm-musa-demo:final", "stack/demo.yaml", "--lock", str(demo.lock_dir)],
        out=out,
        err=io.StringIO(),
    )
    assert code == 0
    assert "ok     installed-equals-lock" in out.getvalue()
    out = io.StringIO()
    argv = ["gate", "vllm-musa-demo:final", "stack/demo.yaml", "--lock", str(demo.lock_dir)]
    assert build_image.main([*argv, "--json"], out=out, err=io.StringIO()) == 0
    results = {r["name"]: r for r in json.loads(out.getvalue())}
    assert [name for name, r in results.items() if not r["ok"]] == []
    assert results["imports"]["output"] == "imported: torch, torch_musa, vllm, vllm_musa"
    assert results["find-spec"]["output"] == "located (not imported): triton, mate"
    assert results["declared-versions"]["output"] == (
        "installed as declared: vllm 0.28.0+demo, vllm-musa 0.1.28+demo"
    )
    assert results["libraries"]["output"] == ("found: libz.so.1 (/lib/x86_64-linux-gnu/libz.so.1)")
    assert results["entry-points"]["output"] == (
        "vllm.platform_plugins: musa = vllm_musa:musa_platform_plugin (vllm-musa)\n"
        "vllm.general_plugins: musa_custom_ops = vllm_musa:register_custom_ops (vllm-musa)"
    )


def test_a_failing_gate_leaves_no_tag(demo: Demo) -> None:
    text = (ROOT / "stack" / "demo.yaml").read_text()
    text = text.replace("imports: [torch,", "imports: [no_such_module, torch,")
    stack = _stack("demo-failgate.yaml", text)
    tag = "vllm-musa-test:failgate"
    _docker("rmi", tag)
    code, err = _build(demo, stack, "--target", "final", "--tag", tag)
    assert code == 1
    assert "failed 1 gate(s); no tag was applied" in err
    assert "gate imports failed:" in err
    assert "import no_such_module failed:" in err
    assert _docker("image", "inspect", tag).returncode != 0


def test_a_missing_base_image_is_one_clear_error(demo: Demo) -> None:
    ref = "127.0.0.1:9/vllm-musa-test/no-such-base:1"
    code, err = _build(demo, ROOT / "stack" / "demo.yaml", "--target", "final", "--base-image", ref)
    assert code == 1
    first = err.strip().splitlines()[0]
    assert first.startswith(
        f"error[docker]: base image {ref} is not present locally and cannot be pulled: "
    )


def test_no_credentials_in_history_labels_or_env(demo: Demo) -> None:
    engine = DockerEngine(env=os.environ)
    try:
        for target in ("final", "vllm-openai"):
            attrs = engine.client().images.get(f"vllm-musa-demo:{target}").attrs
            history = engine.history(f"vllm-musa-demo:{target}")
            blob = json.dumps([attrs["Config"], history])
            assert SECRET not in blob
            assert "ci-user" not in blob
            for env in attrs["Config"]["Env"] or []:
                assert "AUTH" not in env
                assert "TOKEN" not in env
    finally:
        engine.close()


def _deadsnakes_stack(name: str, url: str, fingerprint: str) -> Path:
    text = (ROOT / "stack" / "demo.yaml").read_text()
    block = (
        "python_install:\n"
        "  provider: deadsnakes\n"
        f'  mirror: "{url}"\n'
        f'  key_fingerprint: "{fingerprint}"\n'
        f'  key_url: "{url}/archive-key.asc"\n'
    )
    start = text.index("python_install:")
    end = text.index("sources:")
    return _stack(name, text[:start] + block + text[end:])


def test_deadsnakes_provider_stages_a_signed_mirror(demo: Demo, apt_repo: tuple[str, str]) -> None:
    """The context of python_install.mirror: its source is signed-by the pinned key. The build
    from this signed repository is test_build_docker_mirrors.py's (Python from Deadsnakes, its
    mirror given by mirrors.deadsnakes): the two differ only in where the URL comes from."""
    url, fingerprint = apt_repo
    stack = _deadsnakes_stack("demo-deadsnakes.yaml", url, fingerprint)
    argv = ["stage", str(stack), "--lock", str(demo.lock_dir), "--cache-dir", str(demo.cache)]
    argv += ["--index", f"demo={demo.index_url}", "--target", "final"]
    out, err = io.StringIO(), io.StringIO()
    assert build_image.main(argv, out=out, err=err) == 0, err.getvalue()[-3000:]
    context = ROOT / "build" / "context" / "demo-deadsnakes-final"
    assert (ROOT / out.getvalue().rstrip("\n")).resolve() == context
    dockerfile = (context / "Dockerfile").read_text()
    assert f"if ! grep -qx {fingerprint} /tmp/fpr; then" in dockerfile
    assert (
        f'"deb [signed-by=/etc/apt/keyrings/deadsnakes.gpg] "{url}" ${{VERSION_CODENAME}}'
        in dockerfile
    )


def test_a_wrong_deadsnakes_fingerprint_fails_the_build(
    demo: Demo, apt_repo: tuple[str, str]
) -> None:
    url, fingerprint = apt_repo
    wrong = "0123456789ABCDEF0123456789ABCDEF01234567"
    assert wrong != fingerprint
    stack = _deadsnakes_stack("demo-wrongkey.yaml", url, wrong)
    tag = "vllm-musa-test:wrongkey"
    code, err = _build(demo, stack, "--target", "final", "--network", "host", "--tag", tag)
    assert code == 1
    assert "error[build-failed]: docker build of target final failed" in err
    assert f"has fingerprint(s) {fingerprint} but python_install.key_fingerprint is {wrong}" in err
    assert _docker("image", "inspect", tag).returncode != 0


def test_apt_offline_installs_a_deb_only_with_the_fetched_sha256() -> None:
    """in_image/apt-offline.sh, the only thing between a context file and dpkg in an
    --offline build: a .deb whose bytes differ from the fetched sha256 is never installed."""
    script = r"""
set -eu
mkdir -p /p/DEBIAN /tmp/apt/debs
printf 'Package: vmt-probe\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: p\n' \
    > /p/DEBIAN/control
dpkg-deb -b /p /tmp/apt/debs/vmt-probe_1_all.deb > /dev/null
(cd /tmp/apt/debs && sha256sum vmt-probe_1_all.deb) > /tmp/apt/step.sha256
cp /tmp/apt/debs/vmt-probe_1_all.deb /tmp/fetched.deb
printf 'x' >> /tmp/apt/debs/vmt-probe_1_all.deb
if sh /tmp/tools/apt-offline.sh step 'the probe' vmt-probe 2> /tmp/err; then
    echo "installed a changed file"; exit 1
fi
grep -q '^error\[apt-hash\]: a .deb file for the probe does not have the sha256' /tmp/err \
    || { cat /tmp/err; exit 1; }
if dpkg-query -W vmt-probe 2> /dev/null; then echo "installed"; exit 1; fi
cp /tmp/fetched.deb /tmp/apt/debs/vmt-probe_1_all.deb  # the fetched bytes (a rebuild
sh /tmp/tools/apt-offline.sh step 'the probe' vmt-probe > /dev/null  # stamps another time)
dpkg-query -W -f '${Package} ${Version}\n' vmt-probe
"""
    # The script goes in by `docker cp`, not a bind mount: the daemon may not see this
    # checkout's path (a daemon started in another mount namespace).
    tools = ROOT / "images" / "builder" / "in_image"
    created = _docker("create", "--network", "none", BASE_IMAGE, "sh", "-c", script)
    assert created.returncode == 0, created.stderr
    container = created.stdout.strip()
    try:
        copied = _docker("cp", str(tools), f"{container}:/tmp/tools")
        assert copied.returncode == 0, copied.stderr
        run = _docker("start", "-a", container)
    finally:
        _docker("rm", "-f", container)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == "vmt-probe 1\n"


# ------------------------------------------------------------------ the vendor SDK apt repository
# (apt_repo and sdk_repo, the signed repositories: conftest.py)


def _sdk_stack(name: str, url: str, fingerprint: str) -> Path:
    text = (ROOT / "stack" / "demo.yaml").read_text()
    block = (
        "sdk_apt:\n"
        '  url: "http://127.0.0.1:9/no-such-vendor-repo"   # replaced by mirrors.sdk-apt\n'
        "  suite: bookworm\n"
        "  component: main\n"
        f'  key_fingerprint: "{fingerprint}"\n'
        f'  key_url: "{url}/archive-key.asc"\n'
        "  packages: [hello]\n"
        "mirrors:\n"
        f'  sdk-apt: "{url}"\n'
    )
    return _stack(name, text + block)


def test_sdk_apt_installs_from_the_signed_vendor_repository(
    demo: Demo, sdk_repo: tuple[str, str]
) -> None:
    url, fingerprint = sdk_repo
    stack = _sdk_stack("demo-sdk.yaml", url, fingerprint)
    tag = "vllm-musa-test:sdk"
    code, err = _build(demo, stack, "--target", "final", "--network", "host", "--tag", tag)
    assert code == 0, err[-3000:]
    dockerfile = (ROOT / "build" / "context" / "demo-sdk-final" / "Dockerfile").read_text()
    assert f"[signed-by=/etc/apt/keyrings/vendor-musa-sdk.gpg] {url} bookworm main" in dockerfile
    assert "trusted=yes" not in dockerfile.replace("never trusted=yes", "")
    run = _docker("run", "--rm", tag, "sh", "-c", "hello; cat /etc/apt/sources.list.d/*.list")
    assert run.stdout.splitlines() == [
        "Hello, world!",
        f"deb [signed-by=/etc/apt/keyrings/vendor-musa-sdk.gpg] {url} bookworm main",
    ]


def test_a_wrong_sdk_apt_fingerprint_fails_the_build_and_the_fetch(
    demo: Demo, sdk_repo: tuple[str, str]
) -> None:
    url, fingerprint = sdk_repo
    wrong = "89ABCDEF0123456789ABCDEF0123456789ABCDEF"
    stack = _sdk_stack("demo-sdk-wrongkey.yaml", url, wrong)
    tag = "vllm-musa-test:sdk-wrongkey"
    code, err = _build(demo, stack, "--target", "final", "--network", "host", "--tag", tag)
    assert code == 1
    assert "error[build-failed]: docker build of target final failed" in err
    assert f"has fingerprint(s) {fingerprint} but sdk_apt.key_fingerprint is {wrong}" in err
    assert _docker("image", "inspect", tag).returncode != 0
    # fetch checks the key on the host before apt may trust it
    argv = ["fetch", str(stack), "--lock", str(demo.lock_dir), "--cache-dir", str(demo.cache)]
    argv += ["--index", f"demo={demo.index_url}", "--network", "host"]
    err_io = io.StringIO()
    assert build_image.main(argv, out=io.StringIO(), err=err_io) == 1
    assert err_io.getvalue().splitlines()[0] == (
        f"error[key-fingerprint]: the key at {url}/archive-key.asc has fingerprint(s) "
        f"{fingerprint} but sdk_apt.key_fingerprint is {wrong}"
    )


def test_sdk_apt_offline_after_fetch(demo: Demo, sdk_repo: tuple[str, str], tmp_path: Path) -> None:
    url, fingerprint = sdk_repo
    stack = _sdk_stack("demo-sdk-offline.yaml", url, fingerprint)
    cache = tmp_path / "cache"
    shutil.copytree(demo.cache, cache, copy_function=os.link)
    common = ["--lock", str(demo.lock_dir), "--cache-dir", str(cache)]
    common += ["--index", f"demo={demo.index_url}"]
    out = io.StringIO()
    code = build_image.main(
        ["fetch", str(stack), *common, "--network", "host"], out=out, err=io.StringIO()
    )
    assert code == 0
    index = json.loads(next((cache / "apt").glob("*.json")).read_text())
    assert [f["file"].split("_")[0] for f in index["steps"]["sdk"]] == ["hello"]
    # the fake vendor repository repackages nothing: it holds Debian's own hello, so apt may
    # take the identical file from either source; the fetch's `apt-get update --error-on=any`
    # verified the vendor source against the pinned key either way
    tag = "vllm-musa-test:sdk-offline"
    code, err = _build_in(cache, demo, stack, "--target", "final", "--offline", "--tag", tag)
    assert code == 0, err[-3000:]
    assert _docker("run", "--rm", tag, "hello").stdout == "Hello, world!\n"


def _build_in(cache: Path, demo: Demo, stack: Path, *extra: str) -> tuple[int, str]:
    return _build(dataclasses.replace(demo, cache=cache), stack, *extra)


# ------------------------------------------------------------------ vllm-rs crates, vendored

CRATE_LOCK = """\
# This file is automatically @generated by Cargo.
# It is not intended for manual editing.
version = 3

[[package]]
name = "demo-dep"
version = "0.1.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "{cksum}"

[[package]]
name = "vllm-cmd"
version = "0.1.0"
dependencies = [
 "demo-dep",
]

[[package]]
name = "vllm-tool-parser-py"
version = "0.1.0"
"""


def _crate(name: str, version: str, files: dict[str, str]) -> bytes:
    import gzip
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)


@pytest.fixture
def sparse_registry(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A real cargo sparse registry on 127.0.0.1 holding one crate, demo-dep 0.1.0 (crates.io
    is not reachable here): (url, the .crate's sha256)."""
    import http.server
    import threading

    crate = _crate(
        "demo-dep",
        "0.1.0",
        {
            "Cargo.toml": '[package]\nname = "demo-dep"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": 'pub const NAME: &str = "demo-dep 0.1.0";\n',
        },
    )
    cksum = hashlib.sha256(crate).hexdigest()
    root = tmp_path / "registry"
    (root / "de" / "mo").mkdir(parents=True)
    (root / "dl").mkdir()
    (root / "dl" / "demo-dep-0.1.0.crate").write_bytes(crate)
    entry: dict[str, object] = {"name": "demo-dep", "vers": "0.1.0", "deps": [], "cksum": cksum}
    entry |= {"features": {}, "yanked": False}
    (root / "de" / "mo" / "demo-dep").write_text(json.dumps(entry) + "\n")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kw: object) -> None:
            super().__init__(*args, directory=str(root), **kw)  # type: ignore[arg-type]

        def log_message(self, *_args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{httpd.server_address[1]}/"
    (root / "config.json").write_text(json.dumps({"dl": url + "dl/{crate}-{version}.crate"}))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield url, cksum
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_vllm_rs_crates_vendored_by_fetch_build_offline(
    components: Demo, fetched: Path, sparse_registry: tuple[str, str], tmp_path: Path
) -> None:
    if shutil.which("cargo") is None:
        _fail_or_skip("no cargo on this machine: fetch runs `cargo vendor` on the host")
    url, cksum = sparse_registry
    # demo/vllm (vLLM's stand-in tree) with a frontend crate that needs a registry crate
    tree = ROOT / "build" / "test-crates" / "vllm-dep"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(ROOT / "demo" / "vllm", tree)
    cmd = tree / "rust" / "src" / "cmd"
    manifest_text = (cmd / "Cargo.toml").read_text()
    (cmd / "Cargo.toml").write_text(manifest_text + '\n[dependencies]\ndemo-dep = "0.1"\n')
    (tree / "rust" / "Cargo.lock").write_text(CRATE_LOCK.format(cksum=cksum))
    (cmd / "src" / "main.rs").write_text(
        'fn main() {\n    println!("{{\\"frontend\\": \\"vllm-rs\\", \\"dep\\": \\"{}\\"}}", '
        "demo_dep::NAME);\n}\n"
    )
    text = COMPONENTS_STACK.read_text().replace(
        "  vllm: {path: demo/vllm,", "  vllm: {path: build/test-crates/vllm-dep,"
    )
    stack = _stack("demo-components-crates.yaml", text + f'mirrors:\n  cargo: "{url}"\n')
    cache = _copy_cache(fetched, tmp_path)
    common = ["--lock", str(components.lock_dir), "--cache-dir", str(cache)]
    common += ["--index", "demo=http://127.0.0.1:9/simple/"]
    err = io.StringIO()
    code = build_image.main(["fetch", str(stack), *common], out=io.StringIO(), err=err)
    assert code == 0, err.getvalue()[-3000:]
    assert "fetched the crates of components.vllm-rs (cargo vendor)" in err.getvalue()
    # the build runs with --network none: the registry is out of reach, only vendor/ is read
    tag = "vllm-musa-test:crates-offline"
    argv = ["build", str(stack), *common, "--offline", "--target", "final", "--tag", tag]
    err = io.StringIO()
    code = build_image.main(argv, out=io.StringIO(), err=err)
    assert code == 0, err.getvalue()[-3000:]
    crates = ROOT / "build" / "context" / "demo-components-crates-final" / "crates"
    assert (crates / "config.toml").read_text().count('directory = "/tmp/crates/vendor"') == 1
    assert (
        json.loads((crates / "vendor" / "demo-dep" / ".cargo-checksum.json").read_text())["package"]
        == cksum
    )
    run = _docker("run", "--rm", "--entrypoint", f"{SITE}/vllm/vllm-rs", tag)
    assert json.loads(run.stdout) == {"frontend": "vllm-rs", "dep": "demo-dep 0.1.0"}
    # without the vendored crates, the offline build names them
    for record in (cache / "cargo").glob("*.json"):
        record.unlink()
    err = io.StringIO()
    code = build_image.main(argv, out=io.StringIO(), err=err)
    assert code == 1
    lock_sha = hashlib.sha256((tree / "rust" / "Cargo.lock").read_bytes()).hexdigest()
    assert err.getvalue().splitlines()[0] == (
        "error[offline-missing]: offline build: the crates of components.vllm-rs (Cargo.lock "
        f"sha256 {lock_sha[:16]}...) are not vendored"
    )


# ------------------------------------------------------------------ components and offline
# (the components build, `components`, is conftest.py's: test_build_docker_linkage.py reads it too)

SITE = "/usr/local/lib/python3.11/dist-packages"  # where pip installs on Debian's python3.11


def test_components_on_build_vllm_rs_and_mooncake(components: Demo) -> None:
    """vllm-rs built from vLLM's tree (demo/vllm) by its tools/build_rust.py, installed into
    the installed vllm package; mooncake installed from its pin; no Rust toolchain in final."""
    report = json.loads((ROOT / "build" / "reports" / "demo-components-final.json").read_text())
    assert report["components"] == ["vllm-rs", "mooncake"]
    assert report["gates"]["components"] is True
    ref = "vllm-musa-test-components:final"
    run = _docker("run", "--rm", "--entrypoint", f"{SITE}/vllm/vllm-rs", ref)
    assert json.loads(run.stdout) == {"frontend": "vllm-rs", "version": "0.1.0"}
    probe = _docker(
        "run",
        "--rm",
        ref,
        "sh",
        "-c",
        "cat /opt/vllm-musa/components.json; python3.11 -c 'import mooncake; "
        "print(mooncake.__version__)'; python3.11 -c 'import vllm._rust_tool_parser as m; "
        "print(m.__doc__)'; command -v vllm-rs cargo rustc || echo no-toolchain",
    )
    assert probe.stdout.splitlines() == [
        '{"mooncake":{"built":true,"package":"mooncake-transfer-engine-musa",'
        '"version":"0.3.12.post1"},"vllm-rs":{"binary":"vllm-rs","built":true,'
        '"package":"vllm","tree":"vllm"}}',
        "0.3.12.post1",
        "demo stand-in for vLLM's Rust tool parser",
        "no-toolchain",
    ]


@pytest.fixture(scope="session")
def fetched(components: Demo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`build_image.py fetch` of the components stack into a fresh cache."""
    from demo.make_index import write_demo_index
    from testbed.index_server import IndexServer

    cache = tmp_path_factory.mktemp("fetched-cache")
    index = write_demo_index(run_demo.DEMO_DIR / "index", run_demo.DEMO_DIR / "bootstrap")
    out = io.StringIO()
    with IndexServer(index) as server:
        argv = ["fetch", str(COMPONENTS_STACK), "--lock", str(components.lock_dir)]
        argv += ["--cache-dir", str(cache), "--index", f"demo={server.simple_url}"]
        code = build_image.main(
            argv,
            out=out,
            err=io.StringIO(),
        )
    assert code == 0
    assert out.getvalue() == f"fetched 15 input(s) of {COMPONENTS_STACK} into {cache}\n"
    return cache


def _offline_build(lock_dir: Path, cache: Path, base: str, tag: str) -> tuple[int, str]:
    err = io.StringIO()
    argv = ["build", str(COMPONENTS_STACK), "--lock", str(lock_dir), "--cache-dir", str(cache)]
    argv += ["--index", "demo=http://127.0.0.1:9/simple/", "--offline", "--base-image", base]
    argv += ["--target", "final", "--tag", tag]
    code = build_image.main(argv, out=io.StringIO(), err=err)
    return code, err.getvalue()


def test_offline_build_after_fetch_from_the_plain_base(components: Demo, fetched: Path) -> None:
    """Every apt step installs the .deb files fetch downloaded: plain debian:bookworm-slim."""
    code, err = _offline_build(components.lock_dir, fetched, BASE_IMAGE, "vllm-musa-test:offline")
    assert code == 0, err[-3000:]
    report = json.loads((ROOT / "build" / "reports" / "demo-components-final.json").read_text())
    assert report["offline"] is True
    assert report["network"] == "none"
    assert all(report["gates"].values())
    context = ROOT / "build" / "context" / "demo-components-final"
    dockerfile = context / "Dockerfile"
    assert "apt-get.sh" not in dockerfile.read_text()
    for step in ("python", "runtime", "build", "vllm-rs"):
        listed = (context / "apt" / f"{step}.sha256").read_text().splitlines()
        assert listed, step
        for line in listed:
            sha, name = line.split("  ")
            assert hashlib.sha256((context / "apt" / "debs" / name).read_bytes()).hexdigest() == sha
    run = _docker("run", "--rm", "--entrypoint", f"{SITE}/vllm/vllm-rs", "vllm-musa-test:offline")
    assert json.loads(run.stdout)["frontend"] == "vllm-rs"


def _copy_cache(fetched: Path, tmp_path: Path) -> Path:
    cache = tmp_path / "cache"
    shutil.copytree(fetched, cache, copy_function=os.link)
    return cache


def test_offline_build_with_one_wheel_missing_names_it(
    components: Demo, fetched: Path, tmp_path: Path
) -> None:
    from core.file_store import FileStore
    from resolver.lockfile import load_lock

    cache = _copy_cache(fetched, tmp_path)
    torch = next(p for p in load_lock(components.lock_dir).packages if p.name == "torch")
    FileStore(cache).file_path(torch.sha256).unlink()
    tag = "vllm-musa-test:offline-missing"
    _docker("rmi", tag)
    code, err = _offline_build(components.lock_dir, cache, BASE_IMAGE, tag)
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[offline-missing]: offline build: wheel torch {torch.version} "
        f"({torch.filename}) is not fetched"
    )
    assert err.splitlines()[1] == (
        f"hint: run `build_image.py fetch {COMPONENTS_STACK}` with network access first"
    )
    assert _docker("image", "inspect", tag).returncode != 0


def test_offline_build_with_one_deb_missing_names_it(
    components: Demo, fetched: Path, tmp_path: Path
) -> None:
    from core.file_store import FileStore

    cache = _copy_cache(fetched, tmp_path)
    (index,) = (cache / "apt").glob("*.json")
    steps = json.loads(index.read_text())["steps"]
    others = {f["file"] for name, files in steps.items() if name != "build" for f in files}
    first = next(f for f in steps["build"] if f["file"] not in others)
    FileStore(cache).file_path(first["sha256"]).unlink()
    code, err = _offline_build(components.lock_dir, cache, BASE_IMAGE, "vllm-musa-test:x")
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[offline-missing]: offline build: the .deb file {first['file']} for the build "
        "stage (apt step build) is not fetched"
    )
    assert err.splitlines()[1] == (
        f"hint: run `build_image.py fetch {COMPONENTS_STACK}` with network access first "
        "(with the same --base-image)"
    )


def test_offline_build_on_a_base_that_was_not_fetched_for_names_it(
    components: Demo, fetched: Path, tmp_path: Path
) -> None:
    other = "vllm-musa-test/other-base:1"
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nLABEL vllm-musa-test=other\n")
    made = subprocess.run(
        [DOCKER, "build", "-q", "-t", other, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )
    assert made.returncode == 0, made.stderr
    image_id = json.loads(_docker("image", "inspect", other).stdout)[0]["Id"]
    code, err = _offline_build(components.lock_dir, fetched, other, "vllm-musa-test:x")
    assert code == 1
    assert err.splitlines()[0] == (
        "error[offline-missing]: offline build: the .deb files of the apt steps (python, runtime, "
        f"build, vllm-rs) on the base image {other} ({image_id[:19]}) are not fetched"
    )
