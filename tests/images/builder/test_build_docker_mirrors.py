"""Docker test: the demo built from mirrors only, through one proxy (marked ``docker``).

Every mirror of the manifest is set to a server on 127.0.0.1, and ``mirrors.proxy`` to a
forward proxy (``tests.support.forward_proxy``) that reaches those servers and, by name, the
hosts of the base image's apt sources (its security archive keeps its URL, as upstream's
rewrite keeps it). The apt mirror is a relay of the base's own Debian archive; the Deadsnakes
and vendor SDK mirrors are the signed repositories of conftest.py, whose manifest URLs lead
nowhere. The build passes, every mirror was read through the proxy (the archive keys too,
fetched on the host: its environment names no proxy), and nothing asked the base's own
archive. The demo has no Rust component: ``rustup``, ``rustup-update-root`` and ``cargo`` are
set and unused (tests/images/builder/test_mirrors.py checks where each lands in a render).
"""

from __future__ import annotations

import http.server
import io
import os
import shutil
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import build_image
from tests.support.demo_build import Demo
from tests.support.environment import BASE_IMAGE
from tests.support.environment import DOCKER_CLI as DOCKER
from tests.support.forward_proxy import ForwardProxy

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[3]
STACKS = ROOT / "build" / "test-stacks-mirrors"  # inside the repository: path sources resolve
NOWHERE = "http://127.0.0.1:9"  # the discard port: a URL that is never to be asked
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


def _base_archives() -> list[str]:
    """The URIs of the base image's apt sources (one-line and deb822 files)."""
    run = subprocess.run(
        [DOCKER, "run", "--rm", "--network", "none", BASE_IMAGE, "sh", "-c",
         "cat /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    uris: list[str] = []
    for line in run.stdout.splitlines():
        words = line.split()
        if words[:1] == ["deb"]:
            uris.append(next(w for w in words[1:] if not w.startswith("[")))
        elif words[:1] == ["URIs:"]:
            uris += words[1:]
    assert uris, run.stdout + run.stderr
    return list(dict.fromkeys(u.rstrip("/") for u in uris))


class _Relay:
    """A Debian mirror on 127.0.0.1: ``/debian/PATH`` is ``UPSTREAM/PATH``, read through the
    host's own network (an opener made before the test clears the proxy variables)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.paths: list[str] = []
        opener = urllib.request.build_opener()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                relay.paths.append(self.path)
                if not self.path.startswith("/debian/"):
                    self.send_error(404)
                    return
                url = relay.upstream + self.path.removeprefix("/debian")
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("range",)}
                try:
                    with opener.open(
                        urllib.request.Request(url, headers=headers), timeout=120
                    ) as r:
                        status, body, ctype = r.status, r.read(), r.headers.get("Content-Type")
                except urllib.error.HTTPError as exc:
                    status, body, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", ctype or "application/octet-stream")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/debian"

    def __enter__(self) -> _Relay:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _address(uri: str) -> tuple[str, tuple[str, int]]:
    """(host, its IPv4 address and port) of an apt source URI, resolved on this host."""
    parts = urlsplit(uri)
    assert parts.hostname is not None
    port = parts.port or 80
    found = socket.getaddrinfo(parts.hostname, port, socket.AF_INET, socket.SOCK_STREAM)
    return parts.hostname, (str(found[0][4][0]), port)


@pytest.fixture
def mirrored_stack(
    apt_repo: tuple[str, str], sdk_repo: tuple[str, str], tmp_path: Path
) -> Iterator[tuple[Path, dict[str, str]]]:
    """stack/demo.yaml with Python from Deadsnakes, the vendor SDK repository, and every
    mirror set: (the stack, the mirrors)."""
    ds_url, ds_fingerprint = apt_repo
    sdk_url, sdk_fingerprint = sdk_repo
    text = (ROOT / "stack" / "demo.yaml").read_text()
    start, end = text.index("python_install:"), text.index("sources:")
    text = (
        text[:start]
        + "python_install:\n  provider: deadsnakes\n"
        + f'  mirror: "{NOWHERE}/deadsnakes"\n'
        + f'  key_fingerprint: "{ds_fingerprint}"\n  key_url: "{ds_url}/archive-key.asc"\n'
        + text[end:]
        + f'sdk_apt:\n  url: "{NOWHERE}/vendor-sdk"\n  suite: bookworm\n  component: main\n'
        + f'  key_fingerprint: "{sdk_fingerprint}"\n  key_url: "{sdk_url}/archive-key.asc"\n'
        + "  packages: [hello]\n"
    )
    mirrors = {
        "deadsnakes": ds_url,
        "sdk-apt": sdk_url,
        "rustup": f"{NOWHERE}/rustup",
        "rustup-update-root": f"{NOWHERE}/rustup-update-root",
        "cargo": f"{NOWHERE}/cargo/",
    }
    STACKS.mkdir(parents=True, exist_ok=True)
    stack = STACKS / "demo-mirrors.yaml"
    stack.write_text(text, encoding="utf-8")
    try:
        yield stack, mirrors
    finally:
        shutil.rmtree(STACKS, ignore_errors=True)


def test_the_demo_builds_from_mirrors_only_through_one_proxy(
    demo: Demo,
    mirrored_stack: tuple[Path, dict[str, str]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack, mirrors = mirrored_stack
    archives = _base_archives()
    main = next(u for u in archives if "security" not in u)
    hosts = dict(_address(u) for u in archives)  # the security archive, reached by name
    # the archive keys are fetched again, on the host, through the build's proxy
    cache = tmp_path / "cache"
    shutil.copytree(demo.cache, cache, copy_function=os.link)
    shutil.rmtree(cache / "inputs", ignore_errors=True)
    with _Relay(main) as relay:
        for name in PROXY_VARIABLES:  # the host names no proxy: mirrors.proxy serves it too
            monkeypatch.delenv(name, raising=False)
            monkeypatch.delenv(name.upper(), raising=False)
        with ForwardProxy(hosts=hosts, allow_loopback=True, timeout=120) as proxy:
            flags = [f"--mirror={k}={v}" for k, v in (mirrors | {"apt": relay.url}).items()]
            argv = ["build", str(stack), "--lock", str(demo.lock_dir), "--cache-dir", str(cache)]
            argv += ["--index", f"demo={demo.index_url}", "--target", "final"]
            argv += ["--network", "host", "--tag", "vllm-musa-test:mirrors"]
            proxy_url = proxy.url
            argv += [*flags, f"--mirror=proxy={proxy_url}"]
            err = io.StringIO()
            code = build_image.main(argv, out=io.StringIO(), err=err)
            seen = [r.target for r in proxy.requests]
    assert code == 0, err.getvalue()[-3000:]

    def asked(prefix: str) -> list[str]:
        return [t for t in seen if t.startswith(prefix)]

    # each mirror the demo uses, read through the proxy (its packages may come from the
    # build's apt cache, shared with the other builds: its signed index is always read)
    assert asked(f"{relay.url}/dists/bookworm/")
    assert asked(f"{mirrors['deadsnakes']}/dists/bookworm/")
    assert asked(f"{mirrors['sdk-apt']}/dists/bookworm/")
    assert f"{mirrors['deadsnakes']}/archive-key.asc" in seen
    assert f"{mirrors['sdk-apt']}/archive-key.asc" in seen
    # nothing asked the base's own archive, or an upstream the mirrors replace
    assert asked(f"{main}/") == []
    assert asked(NOWHERE) == []
    # and the relay was asked by the proxy only: no RUN step went around it
    assert len(relay.paths) == len(asked(f"{relay.url}/"))
    dockerfile = (ROOT / "build" / "context" / "demo-mirrors-final" / "Dockerfile").read_text()
    assert f"sh /tmp/tools/apt-get.sh 3 {relay.url} {proxy_url} update" in dockerfile
    # Python from the signed Deadsnakes repository (test_build_docker.py stages the same
    # source from python_install.mirror)
    deadsnakes = mirrors["deadsnakes"]
    assert (
        f'"deb [signed-by=/etc/apt/keyrings/deadsnakes.gpg] "{deadsnakes}" ${{VERSION_CODENAME}}'
        in dockerfile
    )
