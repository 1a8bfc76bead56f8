"""The URLs of index files: credentials stay with the index's own host, plain http:// only on
loopback, and credentials written into a file URL never reach the lock."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from testbed.index_server import IndexServer, IndexServerFactory
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case


def _page(server: IndexServer, project: str, hrefs: list[str]) -> None:
    """A hand-written PEP 503 project page (absolute links, userinfo...)."""
    directory = server.root / "simple" / project
    directory.mkdir(parents=True, exist_ok=True)
    anchors = "".join(f'<a href="{h}">{h.rsplit("/", 1)[-1].split("#")[0]}</a>\n' for h in hrefs)
    (directory / "index.html").write_text(f"<html><body>\n{anchors}</body></html>\n")


def _serve_file(server: IndexServer, wheel: Path) -> str:
    """Put ``wheel`` under /files/ of ``server``; return its URL path."""
    files = server.root / "files"
    files.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, files / wheel.name)
    return f"/files/{wheel.name}"


def test_index_credentials_are_not_sent_to_another_host(
    case: Case, make_index_server: IndexServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    cdn = make_index_server("cdn")
    path = _serve_file(cdn, torch)
    sha = hashlib.sha256(torch.read_bytes()).hexdigest()
    # same machine, another origin: "localhost" is not the index's host "127.0.0.1"
    _page(case.vendor, "torch", [f"http://localhost:{cdn.port}{path}#sha256={sha}"])
    monkeypatch.setenv("BUILD_IMAGE_INDEX_MTHREADS_AUTH", "robot:s3cret-token")
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "0")
    assert result.code == 0, result.err
    sent = [r.headers.get("authorization") for r in cdn.requests]
    assert sent, "the file was downloaded from the other host"
    assert all(a is None for a in sent), f"index credentials sent to another host: {sent}"


def test_file_url_on_plain_http_to_a_non_loopback_host_is_refused(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    _page(case.vendor, "torch", [f"http://files.example.invalid/{torch.name}"])
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "0")
    assert result.code == 1
    assert result.err == (
        f"error[index]: index mthreads: http://files.example.invalid/{torch.name} is plain "
        "http:// on a non-loopback host (a file URL or a redirect of the index); refusing to fetch "
        "it\nhint: the index must serve its files over https, or be a mirror on 127.0.0.1\n"
    )


def test_credentials_in_a_file_url_never_reach_the_lock(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    path = _serve_file(case.vendor, torch)
    sha = hashlib.sha256(torch.read_bytes()).hexdigest()
    _page(
        case.vendor,
        "torch",
        [f"http://robot:s3cret-token@127.0.0.1:{case.vendor.port}{path}#sha256={sha}"],
    )
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "0")
    assert "s3cret-token" not in result.err + result.out
    if result.code == 0:
        for f in case.lock_dir().iterdir():
            assert "s3cret-token" not in f.read_text(), f"{f.name} holds the index password"
