"""Hardening found by review: each test reproduces a defect that once existed (credentials
sent to another host, plain http file URLs, rules that checked nothing, a lock directory
replaced whole, invalid metadata, direct-URL dependencies, symlinks out of a path source,
shell syntax in a mirror URL) and now asserts the refusal."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import BuildImageError
from manifest import parse_manifest
from tests.support.index_server import IndexServer
from tests.support.indexgen import Listing
from tests.support.lockcase import NATIVE, Case, open_case

TORCH = "2.11.0.post2+musa5.2.0"
PIN_TORCH = f'  torch: {{version: "{TORCH}", index: mthreads, wheel: native}}'


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    yield from open_case(tmp_path)


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


# ------------------------------------------------------------------------ credentials / http


def test_index_credentials_are_not_sent_to_another_host(
    case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    with IndexServer(tmp_path / "cdn") as cdn:
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


# ------------------------------------------------------------------------ rules fail open


def test_line_map_following_an_unknown_package_is_an_error(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, case.wheel("compressed-tensors", "0.17.0"))
    rules = (
        "  line_map:\n"
        '    compressed-tensors: {follows: torhc, versions: {"2.9": "0.15.0", "2.11": "0.17.0"}}'
    )
    result = case.run("lock", case.stack(PIN_TORCH, rules=rules), "--retries", "0")
    assert result.code == 1, "locked without compressed-tensors: " + result.out
    assert result.err == (
        "error[resolution]: rules.line_map.compressed-tensors: follows torhc, which is not in "
        "the lock\nhint: fix the name in follows, or remove the rule\n"
    )


def test_same_line_naming_an_unknown_package_is_an_error(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(
        case.vendor,
        Listing(path=case.wheel("torch-musa", "2.9.0+musa5.2.0", NATIVE), hash="none"),
    )
    packages = (
        PIN_TORCH + '\n  torch-musa: {version: "2.9.0+musa5.2.0", index: mthreads, wheel: native}'
    )
    rules = "  same_line: [[torch, torch-mus]]"  # typo: the 2.11 / 2.9 clash goes unseen
    result = case.run("lock", case.stack(packages, rules=rules), "--retries", "0")
    assert result.code == 1, "the same_line rule checked nothing"
    assert result.err == (
        "error[resolution]: rules.same_line.0: torch-mus is not in the lock, so the rule would "
        "check nothing\nhint: fix the name, or remove the rule\n"
    )


# ------------------------------------------------------------------------ metadata


def test_invalid_requires_python_in_metadata_is_a_refusal(case: Case) -> None:
    case.publish(case.pypi, case.wheel("oldpkg", "1.0", requires_python=">=3.6.*"))
    result = case.run("lock", case.stack("", ["oldpkg"]), "--retries", "0")
    assert result.code == 1
    assert result.err == (
        "error[metadata]: oldpkg-1.0-py3-none-any.whl on index pypi: METADATA Requires-Python "
        "'>=3.6.*' is not a valid specifier\nhint: an invalid Requires-Python cannot be checked, "
        "so the file is refused\n"
    )


def test_direct_url_dependency_is_refused(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel(
            "app", "1.0", requires_dist=("dep @ https://example.invalid/dep-9.9-py3-none-any.whl",)
        ),
        case.wheel("dep", "1.0"),
    )
    result = case.run("lock", case.stack("", ["app==1.0"]), "--retries", "0")
    assert result.code == 1, "dep was locked from the index in place of the direct URL"
    assert result.err.startswith(
        "error[metadata]: app-1.0-py3-none-any.whl on index pypi: METADATA Requires-Dist "
        "'dep @ https://example.invalid/dep-9.9-py3-none-any.whl' is a direct URL; only packages "
        "from an index are locked\n"
    )


# ------------------------------------------------------------------------ outputs


def test_lock_out_into_an_existing_directory_keeps_its_other_files(
    case: Case, tmp_path: Path
) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("precious\n")
    result = case.run("lock", case.stack(PIN_TORCH), "--out", out)
    assert (out / "notes.txt").read_text() == "precious\n"
    assert result.code == 1
    assert result.err == (
        f"error[lock]: {out} holds files that are not part of a lock (notes.txt); writing the "
        "lock replaces the whole directory\nhint: choose a new or empty --out DIR\n"
    )


# ------------------------------------------------------------------------ image side (report only)


def test_path_source_symlink_out_of_the_repository_is_refused(tmp_path: Path) -> None:
    from images.build.context import stage_path_source
    from manifest import Source

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("host secret\n")
    (repo / "src" / "leak.txt").symlink_to(secret)
    dest = tmp_path / "context" / "src"
    with pytest.raises(BuildImageError) as info:
        stage_path_source(Source(name="src", path="src"), repo, dest)
    assert info.value.message == (
        f"sources.src: src/leak.txt is a symlink to {secret}, outside the repository {repo}"
    )
    assert not (dest / "leak.txt").exists(), "a file outside the repository was staged"


def test_deadsnakes_mirror_with_shell_syntax_is_refused() -> None:
    text = (
        "schema: 1\nname: t\nrelease: '1'\n"
        "target: {python: '3.12', arch: x86_64, glibc: '2.35'}\n"
        "indexes: {pypi: {url: 'https://pypi.org/simple/'}}\ndefault_index: pypi\n"
        "python_install:\n  provider: deadsnakes\n"
        '  mirror: "https://ppa.example/ubuntu$(touch /pwned)"\n'
        "  key_fingerprint: F23C5A6CF475977595C89F51BA6932366A755776\n"
    )
    with pytest.raises(BuildImageError) as info:
        parse_manifest(text, path=Path("stack/t.yaml"))
    assert info.value.message == (
        "stack/t.yaml:9: python_install.mirror: 'https://ppa.example/ubuntu$(touch /pwned)' is not "
        "an http(s) URL without credentials"
    )
