"""Every mirror and the proxy, in the render of every shipped stack (no network, no Docker).

docs/manifest.md ("A host that reaches the internet only through mirrors") sets every mirror,
as a ``mirrors:`` block and as the flags of one build: both make the same manifest. With them,
each mirror stands where its upstream stood in every stack that uses it, and every ``RUN``
step that reaches the network has the proxy in scope, and no other (a step without the
network has it off: pip with ``--no-index``, the driving source's setup.py with
``PIP_NO_INDEX=1``). An index mirror that keeps its files under a path of its own serves the
locked files from there.
"""

from __future__ import annotations

import hashlib
import http.server
import re
import shlex
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from build_image import build_parser
from core.errors import SourceError
from core.network import DIRECT, NetworkConfig, NetworkOptions, Proxy, Trust, network_from_env
from images.builder.cargo_vendor import cargo_environment
from images.builder.commands import effective_manifest
from images.builder.overrides import apply_overrides
from images.builder.pipeline import FetchRequest, wheel_fetch
from images.builder.render import build_render_context, render_dockerfile
from images.builder.workspace import Workspace
from manifest import Manifest, Mirrors, Source, load_manifest, parse_manifest
from resolver.endpoints import parse_index_overrides
from resolver.lockfile import LockedPackage, load_lock
from sources.trees import checkout_git_source
from testbed.index_server import IndexServer
from testbed.simple_index import write_simple_index
from tests.support.forward_proxy import ForwardProxy
from tests.support.gitrepo import git
from tests.support.images import MANIFEST, RENDER_LOCK_SHA, manifest, render_text

ROOT = Path(__file__).resolve().parents[3]
SECTION = "### A host that reaches the internet only through mirrors"
STACKS = sorted(p.name for p in (ROOT / "stack").glob("*.yaml"))
PROXY = "http://proxy.corp.example:3128"
SDK_APT = "http://sdk-apt.mirror.example/musa/"  # no shipped stack has sdk_apt: unused
UNSET = "env -u http_proxy -u https_proxy -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u all_proxy"
# what runs a download, as a command (apt-get runs only through apt-get.sh, checked apart)
DOWNLOADERS = re.compile(r"(?m)(?:^|[\s;&|(])(curl|wget|git\s+(?:clone|fetch)|pip\s+download)\s")
PIP = re.compile(r"-m pip (?:install|wheel)|/pip install")


def _section() -> str:
    text = (ROOT / "docs" / "manifest.md").read_text(encoding="utf-8")
    return text.split(f"\n{SECTION}\n", 1)[1].split("\n## ", 1)[0]


def _documented_block() -> str:
    block = re.search(r"```yaml\n(.*?)```", _section(), re.DOTALL)
    assert block is not None
    return block.group(1)


def _documented_command() -> list[str]:
    lines = re.search(r"(?m)^    build_image\.py build .*?[^\\]\n", _section(), re.DOTALL)
    assert lines is not None
    return shlex.split(lines.group(0).replace("\\\n", " "))[1:]


def _with_mirrors(name: str, block: str, tmp: Path) -> Manifest:
    """The shipped stack ``name`` with its ``mirrors:`` line replaced by ``block``."""
    text = (ROOT / "stack" / name).read_text(encoding="utf-8")
    text, found = re.subn(r"(?m)^mirrors: \{\}.*\n(?:\s+#.*\n)?", block, text)
    assert found == 1
    return parse_manifest(text, path=tmp / "stack" / name)


DOCUMENTED = Mirrors(
    apt="http://mirrors.aliyun.com/ubuntu/",
    deadsnakes="https://launchpad.proxy.ustclug.org/deadsnakes/ppa/ubuntu",
    rustup="https://rsproxy.cn",
    rustup_update_root="https://rsproxy.cn/rustup",
    cargo="https://rsproxy.cn/index/",
    proxy=PROXY,
    indexes={"pypi": "https://mirrors.tuna.tsinghua.edu.cn/pypi/web/simple/"},
)


def test_the_documented_block_and_flags_set_every_mirror_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = _with_mirrors("vllm-musa-0.28.0-py312.yaml", _documented_block(), tmp_path)
    assert m.mirrors == DOCUMENTED
    monkeypatch.chdir(ROOT)
    args = build_parser().parse_args(_documented_command())
    assert (args.command, str(args.stack), args.target) == (
        "build",
        "stack/vllm-musa-0.28.0-py312.yaml",
        "vllm-openai",
    )
    flags = effective_manifest(args).mirrors
    index = parse_index_overrides(args.index)
    assert (flags.__dict__ | {"indexes": {"pypi": index["pypi"]}}) == DOCUMENTED.__dict__
    assert sorted(index) == ["mthreads", "pypi"]


# ------------------------------------------------------------------ the render of every stack


def _every_mirror() -> dict[str, str]:
    names = ("apt", "deadsnakes", "rustup", "rustup_update_root", "cargo", "proxy")
    out = {name.replace("_", "-"): getattr(DOCUMENTED, name) for name in names}
    return out | {"sdk-apt": SDK_APT}


def _render(name: str, mirrors: Mapping[str, str]) -> tuple[Manifest, str]:
    """The stack's Dockerfile (comments dropped) with ``mirrors`` applied: from its committed
    lock when it has one, else from the tests' in-memory lock."""
    m = apply_overrides(load_manifest(ROOT / "stack" / name), mirrors=mirrors, base_image=None)
    lock_dir = m.default_lock_dir()
    if (lock_dir / "pylock.toml").is_file():
        ctx = build_render_context(m, load_lock(lock_dir), lock_sha256=RENDER_LOCK_SHA)
        text = render_dockerfile(ctx)
    else:
        text = render_text(m)
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return m, code


def _runs(code: str) -> list[str]:
    """Each RUN instruction, its continuation lines joined."""
    out: list[str] = []
    current: list[str] | None = None
    for line in code.splitlines():
        if current is None and not line.startswith("RUN "):
            continue
        current = [*(current or []), line]
        if not line.endswith("\\"):
            out.append("\n".join(current))
            current = None
    return out


@pytest.mark.parametrize("name", STACKS)
def test_every_mirror_stands_where_its_upstream_stood(name: str) -> None:
    m, plain = _render(name, {})
    _, code = _render(name, _every_mirror())
    apt_calls = code.count("sh /tmp/tools/apt-get.sh ")
    assert apt_calls > 0
    assert code.count(f"sh /tmp/tools/apt-get.sh 3 {DOCUMENTED.apt} {PROXY} ") == apt_calls
    deb = '"deb [signed-by=/etc/apt/keyrings/deadsnakes.gpg] "{}" ${{VERSION_CODENAME}} main"'
    if m.python_install.provider == "deadsnakes":
        assert m.python_install.mirror is not None
        assert deb.format(m.python_install.mirror) in plain
        assert deb.format(m.python_install.mirror) not in code
        assert code.count(deb.format(DOCUMENTED.deadsnakes)) == 1
        assert "ppa.launchpadcontent.net" not in code
    else:
        assert "deadsnakes" not in code
    rs = m.components.vllm_rs
    rustup = rs is not None and rs.provider == "rustup"
    # rustup-init and the Rust build (build_rust.sh installs the tree's toolchain) each
    assert code.count(f" RUSTUP_DIST_SERVER={DOCUMENTED.rustup} ") == (2 if rustup else 0)
    assert code.count(f" RUSTUP_UPDATE_ROOT={DOCUMENTED.rustup_update_root} ") == (
        2 if rustup else 0
    )
    assert "RUSTUP_DIST_SERVER" not in plain
    assert "RUSTUP_UPDATE_ROOT" not in plain
    cargo = f'registry = "sparse+%s"\\n\' {DOCUMENTED.cargo}'
    assert code.count(cargo) == (1 if rs is not None else 0)
    assert "crates.io-index" not in code
    # no shipped stack installs from a vendor apt repository: its mirror is ignored
    assert m.sdk_apt is None
    assert SDK_APT not in code


def _assignments(words: list[str]) -> int:
    """How many of ``words`` are the leading NAME=VALUE settings of an ``env`` command."""
    n = 0
    while n < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[n]):
        n += 1
    return n


@pytest.mark.parametrize("proxy", [PROXY, None], ids=["proxy", "no-proxy"])
@pytest.mark.parametrize("name", STACKS)
def test_every_step_that_reaches_the_network_has_the_proxy(name: str, proxy: str | None) -> None:
    mirrors = {} if proxy is None else {"proxy": proxy}
    _, code = _render(name, mirrors)
    given = shlex.quote(proxy or "")
    reached: list[str] = []
    for run in _runs(code):
        first = run.splitlines()[-1].strip()
        # apt, only through apt-get.sh, which is told the one proxy (or DIRECT)
        if "apt-get" in run:
            calls = re.findall(r"sh /tmp/tools/apt-get\.sh 3 '' (\S+) ", run)
            assert run.count("apt-get") == len(calls), run
            assert calls == [given] * len(calls), run
            reached.append("apt")
        # rustup and cargo: inherited proxies unset, the one proxy set
        if re.search(r"rustup-init\.x -y|build_rust", run):
            assert run.count(UNSET) == 1, run
            words = run.split(UNSET, 1)[1].replace("\\\n", " ").split()
            env = dict(w.split("=", 1) for w in words[: _assignments(words)])
            proxies = {k: v for k, v in env.items() if k.lower().endswith("_proxy")}
            want = {} if proxy is None else {"http_proxy": proxy, "https_proxy": proxy}
            assert proxies == want, run
            reached.append("rust")
        # pip: never an index (the build's own requirements are the lock's wheels)
        for pip in PIP.finditer(run):
            call = run[pip.start() :].split("\n &&", 1)[0]
            assert "--no-index" in call or "PIP_NO_INDEX=1" in run, (first, call)
        assert DOWNLOADERS.search(re.sub(r"sh /tmp/tools/apt-get\.sh .*", "", run)) is None, run
    assert "apt" in reached


# ------------------------------------------------------------------ an index mirror's own paths


def test_a_locked_file_comes_from_where_the_index_mirror_lists_it(tmp_path: Path) -> None:
    # the lock names the file at the index's host (/packages/...); the mirror keeps it under
    # /pypi/web/packages/, as https://mirrors.tuna.tsinghua.edu.cn/pypi/web/simple/ does
    wheel = tmp_path / "demo_pkg-1.0-py3-none-any.whl"
    wheel.write_bytes(b"the locked bytes")
    sha = hashlib.sha256(b"the locked bytes").hexdigest()
    root = tmp_path / "mirror"
    write_simple_index(root, [wheel], files_url="../../pypi/web/packages/")
    (root / "pypi" / "web" / "packages").mkdir(parents=True)
    (root / "pypi" / "web" / "packages" / wheel.name).write_bytes(wheel.read_bytes())
    m = manifest(tmp_path, MANIFEST)
    locked = LockedPackage(
        name=canonicalize_name("demo-pkg"),
        version="1.0",
        index="vendor",
        index_url=m.indexes["vendor"].url,
        filename=wheel.name,
        url=f"http://127.0.0.1:8000/packages/ab/cd/{wheel.name}",
        sha256=sha,
        size=16,
        kind="pure",
        origin="requirement",
        required_by=(),
    )
    with IndexServer(root) as server:
        request = FetchRequest(
            manifest=m,
            workspace=Workspace(tmp_path),
            env={},
            cache_dir=tmp_path / "cache",
            index_overrides=(f"vendor={server.simple_url}",),
        )
        with wheel_fetch(request) as fetch:
            path = fetch(locked)
        got = [r.path for r in server.requests]
    assert path.read_bytes() == b"the locked bytes"
    assert got == ["/simple/demo-pkg/", f"/pypi/web/packages/{wheel.name}"]


# ------------------------------------------------------------------ the host's requests


def test_the_hosts_requests_of_a_build_take_mirrors_proxy_when_the_command_names_none(
    tmp_path: Path,
) -> None:
    m = manifest(tmp_path, MANIFEST + f'mirrors:\n  proxy: "{PROXY}"\n')
    built = Proxy(url=PROXY, source="mirrors.proxy")
    request = FetchRequest(manifest=m, workspace=Workspace(tmp_path), env={})
    host = request.host_options().network
    assert host.proxies == {"http": built, "https": built}
    own = network_from_env({}, proxy="http://own:3128")
    mine = replace(request, options=NetworkOptions(network=own, timeout=5.0))
    assert mine.host_options() == NetworkOptions(network=own, timeout=5.0)


def test_cargo_vendor_goes_through_the_builds_host_proxy_and_trust_store() -> None:
    network = NetworkConfig(
        proxies=dict.fromkeys(("http", "https"), Proxy(url=PROXY, credentials=("bot", "p@ss"))),
        no_proxy=("mirror.corp.example",),
        trust=Trust(cafile=Path("/etc/corp-ca.pem")),
    )
    env = {"PATH": "/usr/bin", "HTTPS_PROXY": "http://stale:1", "CARGO_HOME": "/home/u/.cargo"}
    env |= {"CARGO_HTTP_PROXY": "http://stale:2"}
    with_credentials = "http://bot:p%40ss@proxy.corp.example:3128"
    assert cargo_environment(env, network) == {
        "PATH": "/usr/bin",
        "http_proxy": with_credentials,
        "HTTP_PROXY": with_credentials,
        "https_proxy": with_credentials,
        "HTTPS_PROXY": with_credentials,
        "no_proxy": "mirror.corp.example",
        "NO_PROXY": "mirror.corp.example",
        "SSL_CERT_FILE": "/etc/corp-ca.pem",
        "CARGO_HTTP_CAINFO": "/etc/corp-ca.pem",
    }
    assert cargo_environment(env, NetworkConfig()) == {"PATH": "/usr/bin"}


@pytest.fixture
def git_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A git repository served over plain (dumb) HTTP on 127.0.0.1: (its URL path, its
    commit)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "setup.py").write_text("# one\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "one")
    commit = git(work, "rev-parse", "HEAD")
    served = tmp_path / "served"
    served.mkdir()
    git(served, "clone", "-q", "--bare", str(work), "repo.git")
    git(served / "repo.git", "update-server-info")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kw: Any) -> None:
            super().__init__(*args, directory=str(served), **kw)

        def log_message(self, *_args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}", commit
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_git_source_is_fetched_through_the_builds_proxy_and_no_other(
    tmp_path: Path, git_server: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # git.corp.test resolves nowhere (RFC 6761): only the proxy reaches it
    address, commit = git_server
    host, port = address.split(":")
    url = f"http://git.corp.test:{port}/repo.git"
    source = Source(name="vllm", git=url, rev=commit)
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # the environment's, never used
    with ForwardProxy(hosts={"git.corp.test": (host, int(port))}) as proxy:
        network = NetworkConfig(proxies={"http": Proxy(url=proxy.url, source="mirrors.proxy")})
        dest = tmp_path / "out"
        checkout_git_source(source, tmp_path / "git-cache", dest, network=network)
        seen = {(r.method, r.target.split("?", 1)[0]) for r in proxy.requests}
    assert (dest / "setup.py").read_text() == "# one\n"
    assert ("GET", f"{url}/info/refs") in seen
    # without the build's proxy the source is out of reach, and the refusal says how
    with pytest.raises(SourceError) as info:
        checkout_git_source(source, tmp_path / "other-cache", tmp_path / "other", network=DIRECT)
    assert info.value.message.startswith(f"sources.vllm: cannot clone {url}: ")
    assert info.value.hint == (
        "check the URL and that this machine can reach it (directly, or through --proxy URL, "
        "HTTPS_PROXY or mirrors.proxy)"
    )
