"""Docker tests: the demo end to end against a real daemon (marked ``docker``).

They SKIP when no daemon answers and ``CI`` is unset, and FAIL when ``CI=true`` and no daemon
answers (CI must run ``ci/start-docker.sh`` and ``ci/make-base-image.sh`` first). The demo is
built once per session (``demo`` fixture); the other tests reuse its lock, cache and layers.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import build_image
from demo import run_demo
from images.engine import Engine

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
BASE_IMAGE = "debian:bookworm-slim"
SECRET = "s3cr3t-token-do-not-leak"
STACKS = ROOT / "build" / "test-stacks"  # inside the repository: path sources resolve


def _fail_or_skip(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture(scope="session")
def docker_ready() -> None:
    try:
        answered = _docker("info").returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        answered = False
    if not answered:
        _fail_or_skip("no Docker daemon answers (run ci/start-docker.sh)")
    if _docker("image", "inspect", BASE_IMAGE).returncode != 0:
        _fail_or_skip(f"base image {BASE_IMAGE} is missing (run ci/make-base-image.sh)")


@dataclass(frozen=True)
class Demo:
    lock_dir: Path
    cache: Path
    index_url: str


@pytest.fixture(scope="session")
def demo(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """``make demo`` once: both targets built, gated and tagged (an index credential set)."""
    cache = tmp_path_factory.mktemp("image-cache")
    os.environ["BUILD_IMAGE_INDEX_DEMO_AUTH"] = f"ci-user:{SECRET}"
    try:
        run_demo.run(ROOT / "stack" / "demo.yaml", cache_dir=cache)
    finally:
        del os.environ["BUILD_IMAGE_INDEX_DEMO_AUTH"]
    return Demo(
        lock_dir=run_demo.lock_dir_for(Path("demo.yaml")),
        cache=cache,
        index_url="http://127.0.0.1:9/simple/",  # every wheel is in the cache by now
    )


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
        assert inspect["Config"]["WorkingDir"] == "/vllm-workspace"
    serve = _docker("run", "--rm", "vllm-musa-demo:vllm-openai")
    assert serve.returncode == 0, serve.stderr
    assert json.loads(serve.stdout)["platforms"] == {"musa": "vllm_musa.platform.MusaPlatform"}
    shell = _docker(
        "run",
        "--rm",
        "vllm-musa-demo:final",
        "sh",
        "-c",
        "test -f /opt/vllm-musa/lock/pylock.toml && test -f /opt/vllm-musa/sbom.json && "
        "! command -v gcc && ! command -v ccache && ! command -v uv && "
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
    engine = Engine(env=os.environ)
    try:
        for target in ("final", "vllm-openai"):
            attrs = engine.inspect(f"vllm-musa-demo:{target}")
            history = engine.history(f"vllm-musa-demo:{target}")
            blob = json.dumps([attrs["Config"], history])
            assert SECRET not in blob
            assert "ci-user" not in blob
            for env in attrs["Config"]["Env"] or []:
                assert "AUTH" not in env
                assert "TOKEN" not in env
    finally:
        engine.close()


@pytest.fixture(scope="session")
def apt_repo(
    docker_ready: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """The signed local apt repository of ci/make-apt-repo.sh, served: (url, fingerprint)."""
    script = ROOT / "ci" / "make-apt-repo.sh"
    if not script.exists():
        _fail_or_skip("ci/make-apt-repo.sh is missing")
    work = tmp_path_factory.mktemp("apt")
    made = subprocess.run(
        ["bash", str(script), str(work / "repo"), str(work / "gnupg")],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if made.returncode != 0:
        _fail_or_skip(f"ci/make-apt-repo.sh failed: {made.stderr[-2000:]}")
    fingerprint = made.stdout.strip().splitlines()[-1]
    port = "18642"
    served = subprocess.run(
        ["bash", str(ROOT / "ci" / "serve-dir.sh"), str(work / "repo"), port],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    if served.returncode != 0:
        _fail_or_skip(f"ci/serve-dir.sh failed: {served.stderr[-2000:]}")
    try:
        yield f"http://127.0.0.1:{port}", fingerprint
    finally:
        subprocess.run(
            ["bash", str(ROOT / "ci" / "serve-dir.sh"), "--stop", port], check=False, timeout=60
        )


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


def test_deadsnakes_provider_builds_from_a_signed_mirror(
    demo: Demo, apt_repo: tuple[str, str]
) -> None:
    url, fingerprint = apt_repo
    stack = _deadsnakes_stack("demo-deadsnakes.yaml", url, fingerprint)
    code, err = _build(demo, stack, "--target", "final", "--network", "host")
    assert code == 0, err[-3000:]
    assert (
        "[signed-by=/etc/apt/keyrings/deadsnakes.gpg]"
        in (ROOT / "build" / "context" / "demo-deadsnakes-final" / "Dockerfile").read_text()
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


def test_cleanup_test_stacks() -> None:
    shutil.rmtree(STACKS, ignore_errors=True)


# ------------------------------------------------------------------ components and offline
# (issue 6; here so that they share the session's demo build, its cache and its layers)

COMPONENTS_STACK = ROOT / "stack" / "demo-components.yaml"
OFFLINE_BASE = "vllm-musa-test/offline-base:1"
# the apt packages the demo's stages install, preinstalled: an --offline build runs no apt
OFFLINE_BASE_PACKAGES = "python3.11 python3.11-dev ccache gcc libc6-dev ca-certificates rustc cargo"


def _labels(ref: str) -> dict[str, str]:
    inspect = json.loads(_docker("image", "inspect", ref).stdout)[0]
    labels: dict[str, str] = inspect["Config"]["Labels"]
    return labels


def test_demo_labels_base_and_source_and_marker(demo: Demo) -> None:
    labels = _labels("vllm-musa-demo:final")
    assert labels["org.opencontainers.image.base.name"] == BASE_IMAGE
    assert "org.opencontainers.image.base.digest" not in labels  # docker import: no digest
    assert labels["org.opencontainers.image.source"]
    report = json.loads((ROOT / "build" / "reports" / "demo-final.json").read_text())
    dockerfile = (ROOT / "build" / "context" / "demo-final" / "Dockerfile").read_bytes()
    assert report["dockerfile_sha256"] == hashlib.sha256(dockerfile).hexdigest()
    marker = _docker(
        "run",
        "--rm",
        "vllm-musa-demo:final",
        "sh",
        "-c",
        "cat /opt/vllm-musa/components.json; command -v vllm-rs cargo rustc || true",
    )
    assert marker.stdout.strip() == '{"mooncake":{"built":false},"vllm-rs":{"built":false}}'


@pytest.fixture(scope="session")
def components(demo: Demo) -> Demo:
    """stack/demo-components.yaml (vllm-rs with Debian's rustc/cargo, mooncake) built once."""
    run_demo.run(
        COMPONENTS_STACK,
        targets=("final",),
        cache_dir=demo.cache,
        repository="vllm-musa-test-components",
    )
    return Demo(
        lock_dir=run_demo.lock_dir_for(COMPONENTS_STACK),
        cache=demo.cache,
        index_url=demo.index_url,
    )


def test_components_on_build_vllm_rs_and_mooncake(components: Demo) -> None:
    report = json.loads((ROOT / "build" / "reports" / "demo-components-final.json").read_text())
    assert report["components"] == ["vllm-rs", "mooncake"]
    assert report["gates"]["components"] is True
    ref = "vllm-musa-test-components:final"
    run = _docker("run", "--rm", "--entrypoint", "vllm-rs", ref)
    assert json.loads(run.stdout) == {"frontend": "vllm-rs", "version": "0.1.0"}
    probe = _docker(
        "run",
        "--rm",
        ref,
        "sh",
        "-c",
        "cat /opt/vllm-musa/components.json; python3.11 -c 'import mooncake; "
        "print(mooncake.__version__)'; command -v cargo rustc || echo no-toolchain",
    )
    assert probe.stdout.splitlines() == [
        '{"mooncake":{"built":true,"package":"mooncake-transfer-engine",'
        '"version":"0.3.7.post2"},"vllm-rs":{"binaries":["vllm-rs"],"built":true}}',
        "0.3.7.post2",
        "no-toolchain",
    ]


@pytest.fixture(scope="session")
def offline_base(docker_ready: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A base image with the demo's apt packages preinstalled (built once, kept)."""
    if _docker("image", "inspect", OFFLINE_BASE).returncode == 0:
        return OFFLINE_BASE
    work = tmp_path_factory.mktemp("offline-base")
    (work / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        f"--no-install-recommends {OFFLINE_BASE_PACKAGES} && rm -rf /var/lib/apt/lists/*\n"
    )
    made = subprocess.run(
        [DOCKER, "build", "-q", "-t", OFFLINE_BASE, str(work)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
    )
    if made.returncode != 0:
        _fail_or_skip(f"cannot build {OFFLINE_BASE}: {made.stderr[-2000:]}")
    return OFFLINE_BASE


@pytest.fixture(scope="session")
def fetched(components: Demo, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`build_image.py fetch` of the components stack into a fresh cache."""
    from demo.make_index import write_demo_index
    from tools.index_server import IndexServer

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
    assert out.getvalue() == f"fetched 9 input(s) of {COMPONENTS_STACK} into {cache}\n"
    return cache


def _offline_build(lock_dir: Path, cache: Path, base: str, tag: str) -> tuple[int, str]:
    err = io.StringIO()
    argv = ["build", str(COMPONENTS_STACK), "--lock", str(lock_dir), "--cache-dir", str(cache)]
    argv += ["--index", "demo=http://127.0.0.1:9/simple/", "--offline", "--base-image", base]
    argv += ["--target", "final", "--tag", tag]
    code = build_image.main(argv, out=io.StringIO(), err=err)
    return code, err.getvalue()


def test_offline_build_after_fetch(components: Demo, fetched: Path, offline_base: str) -> None:
    code, err = _offline_build(components.lock_dir, fetched, offline_base, "vllm-musa-test:offline")
    assert code == 0, err[-3000:]
    report = json.loads((ROOT / "build" / "reports" / "demo-components-final.json").read_text())
    assert report["offline"] is True
    assert report["network"] == "none"
    assert all(report["gates"].values())
    assert "apt-get" not in (
        ROOT / "build" / "context" / "demo-components-final" / "Dockerfile"
    ).read_text().replace("runs no apt", "")


def test_offline_build_with_one_input_missing_names_it(
    components: Demo, fetched: Path, offline_base: str, tmp_path: Path
) -> None:
    from resolver.cache import Cache
    from resolver.lockfile import load_lock

    cache = tmp_path / "cache"
    shutil.copytree(fetched, cache)
    torch = next(p for p in load_lock(components.lock_dir).packages if p.name == "torch")
    Cache(cache).file_path(torch.sha256).unlink()
    tag = "vllm-musa-test:offline-missing"
    _docker("rmi", tag)
    code, err = _offline_build(components.lock_dir, cache, offline_base, tag)
    assert code == 1
    assert err.splitlines()[0] == (
        f"error[offline-missing]: offline build: wheel torch {torch.version} "
        f"({torch.filename}) is not fetched"
    )
    assert err.splitlines()[1] == (
        f"hint: run `build_image.py fetch {COMPONENTS_STACK}` with network access first"
    )
    assert _docker("image", "inspect", tag).returncode != 0


def test_offline_build_on_a_base_without_the_apt_packages_fails_naming_them(
    components: Demo, fetched: Path
) -> None:
    code, err = _offline_build(components.lock_dir, fetched, BASE_IMAGE, "vllm-musa-test:x")
    assert code == 1
    assert (
        "error[offline-missing]: apt package(s) python3.11 for the python stage are not in the "
        "base image; an --offline build runs no apt: use a base image that has them" in err
    )
