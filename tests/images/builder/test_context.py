"""Build-context tests: stale and missing locks, path sources, git sources at verified revs."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
from pathlib import Path

import pytest

from core.errors import ContextError, LockError, SourceError
from core.file_store import FileStore
from images.builder.context import fill_wheelhouse, load_current_lock, stage_context
from manifest import Source
from resolver.lockfile import LockedPackage, write_lock
from sources.trees import checkout_git_source, stage_path_source
from tests.support.images import MANIFEST, lock_for, manifest, stage_ready


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def git_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A repository with two commits and an annotated tag: (path, first, tag object id)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "setup.py").write_text("# one\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD")
    _git(repo, "tag", "-a", "v1", "-m", "v1")
    tag_object = _git(repo, "rev-parse", "v1")
    (repo / "setup.py").write_text("# two\n")
    _git(repo, "commit", "-q", "-am", "two")
    return repo, first, tag_object


def test_missing_lock_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    with pytest.raises(LockError) as info:
        load_current_lock(m, tmp_path / "nope")
    assert info.value.message == f"{tmp_path / 'nope' / 'pylock.toml'}: no lock"


def test_stale_lock_is_refused(tmp_path: Path) -> None:
    old = manifest(tmp_path)
    lock_dir = tmp_path / "lock"
    write_lock(lock_dir, lock_for(old))
    new = manifest(tmp_path, MANIFEST.replace("[pip, torch, mate]", "[pip, torch, mate, numpy]"))
    with pytest.raises(LockError) as info:
        load_current_lock(new, lock_dir)
    assert info.value.message == (
        f"{lock_dir} is stale: it was locked for inputs {old.lock_inputs_sha256[:12]}, "
        f"but {new.path} now has inputs {new.lock_inputs_sha256[:12]}"
    )
    assert info.value.hint == f"run `build_image.py lock {new.path}` and review the change"


def test_current_lock_is_accepted(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    write_lock(tmp_path / "lock", lock_for(m))
    assert load_current_lock(m, tmp_path / "lock").stack == "demo"


def test_path_source_outside_the_repo_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "demo").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (repo / "demo" / "link").symlink_to(outside)
    source = Source(name="vllm", path="demo/link")
    with pytest.raises(SourceError) as info:
        stage_path_source(source, repo, tmp_path / "out")
    assert info.value.message == (
        f"sources.vllm: path 'demo/link' resolves to {outside}, outside the repository {repo}"
    )


def test_path_source_is_copied_without_build_debris(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    src = repo / "demo" / "pkg"
    (src / "build").mkdir(parents=True)
    (src / "pkg.egg-info").mkdir()
    (src / "setup.py").write_text("")
    stage_path_source(Source(name="pkg", path="demo/pkg"), repo, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["setup.py"]


def test_git_source_at_its_rev(tmp_path: Path, git_repo: tuple[Path, str, str]) -> None:
    repo, first, _ = git_repo
    source = Source(name="vllm", git=str(repo), rev=first)
    dest = tmp_path / "ctx" / "vllm"
    checkout_git_source(source, tmp_path / "git-cache", dest)
    assert (dest / "setup.py").read_text() == "# one\n"
    assert not (dest / ".git").exists()


def test_git_rev_that_does_not_exist(tmp_path: Path, git_repo: tuple[Path, str, str]) -> None:
    repo, _, _ = git_repo
    source = Source(name="vllm", git=str(repo), rev="0" * 40)
    with pytest.raises(SourceError) as info:
        checkout_git_source(source, tmp_path / "git-cache", tmp_path / "out")
    assert info.value.message.startswith(f"sources.vllm: rev {'0' * 40} cannot be fetched from")


def test_git_rev_that_is_not_the_commit_is_refused(
    tmp_path: Path, git_repo: tuple[Path, str, str]
) -> None:
    repo, first, tag_object = git_repo
    source = Source(name="vllm", git=str(repo), rev=tag_object)
    with pytest.raises(SourceError) as info:
        checkout_git_source(source, tmp_path / "git-cache", tmp_path / "out")
    assert info.value.message == (
        f"sources.vllm: after checking out {tag_object}, HEAD is {first}; the rev is not a "
        "commit id (an annotated tag object?)"
    )


def _cached(cache: FileStore, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    path = cache.file_path(sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha


def test_wheelhouse_from_cache_and_fetch_only_missing(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    lock = lock_for(m)
    cache = FileStore(tmp_path / "cache")
    packages = []
    for p in lock.packages:
        data = p.filename.encode()
        sha = _cached(cache, data) if p.name != "mate" else hashlib.sha256(data).hexdigest()
        packages.append(dataclasses.replace(p, sha256=sha))
    lock = dataclasses.replace(lock, packages=tuple(packages))
    asked: list[str] = []

    def fetch(p: LockedPackage) -> Path:
        asked.append(p.name)
        out = tmp_path / "dl" / p.filename
        out.parent.mkdir(exist_ok=True)
        out.write_bytes(p.filename.encode())
        return out

    fetched = fill_wheelhouse(lock.packages, tmp_path / "ctx", cache, fetch)
    assert asked == ["mate"]
    assert fetched == ["mate-0.2.7-py3-none-any.whl"]
    assert sorted(p.name for p in (tmp_path / "ctx" / "wheelhouse" / "build").iterdir()) == [
        "setuptools-66.1.1-py3-none-any.whl",
        "wheel-0.45.1-py3-none-any.whl",
    ]


def test_wheel_missing_without_network_is_an_error(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    with pytest.raises(ContextError) as info:
        fill_wheelhouse(lock_for(m).packages, tmp_path / "ctx", FileStore(tmp_path / "cache"), None)
    assert info.value.message.startswith("mate 0.2.7: mate-0.2.7-py3-none-any.whl (sha256 ")


def test_wheelhouse_refuses_a_filename_that_leaves_it(tmp_path: Path) -> None:
    cache = FileStore(tmp_path / "cache")
    p = lock_for(manifest(tmp_path)).packages[0]
    hostile = dataclasses.replace(
        p, filename="mate-0.2.7-1/../../../../escape-py3-none-any.whl", sha256=_cached(cache, b"x")
    )
    with pytest.raises(ContextError) as info:
        fill_wheelhouse([hostile], tmp_path / "ctx", cache, None)
    assert info.value.message == (
        f"{p.name} {p.version}: refusing to place the locked file in wheelhouse/runtime/ of the "
        "build context: mate-0.2.7-1/../../../../escape-py3-none-any.whl holds '/', a path "
        "separator"
    )
    assert sorted(q.name for q in tmp_path.rglob("*escape*")) == []


def test_wheelhouse_never_writes_through_a_link(tmp_path: Path) -> None:
    cache = FileStore(tmp_path / "cache")
    p = lock_for(manifest(tmp_path)).packages[0]
    p = dataclasses.replace(p, sha256=_cached(cache, b"x"))
    runtime = tmp_path / "ctx" / "wheelhouse" / "runtime"
    runtime.mkdir(parents=True)
    (runtime / p.filename).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ContextError) as info:
        fill_wheelhouse([p], tmp_path / "ctx", cache, None)
    assert info.value.message == (
        f"{p.name} {p.version}: refusing to place the locked file in wheelhouse/runtime/ of the "
        f"build context: {p.filename} would be written outside {runtime} (through a link)"
    )
    assert not (tmp_path / "elsewhere").exists()


def test_stage_context_refuses_a_stale_lock_before_writing(tmp_path: Path) -> None:
    old = manifest(tmp_path)
    write_lock(tmp_path / "lock", lock_for(old))
    new = manifest(tmp_path, MANIFEST.replace("[pip, torch, mate]", "[pip, torch]"))
    out = tmp_path / "ctx"
    with pytest.raises(LockError):
        stage_context(
            new,
            tmp_path / "lock",
            out,
            repo_root=tmp_path,
            cache=FileStore(tmp_path / "cache"),
            git_cache=tmp_path / "git",
            fetch=None,
        )
    assert not out.exists()


def test_stage_never_deletes_a_directory_that_is_not_a_staged_context(tmp_path: Path) -> None:
    m, _lock, lock_dir, cache = stage_ready(tmp_path)
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    common = {"repo_root": tmp_path, "cache": cache, "git_cache": tmp_path / "git", "fetch": None}
    with pytest.raises(ContextError) as info:
        stage_context(m, lock_dir, out, **common)  # type: ignore[arg-type]
    assert info.value.message == (
        f"{out} holds what no staged build context holds (notes.txt): it is not replaced"
    )
    assert (out / "notes.txt").read_text() == "mine\n"
    # a context an earlier stage wrote is replaced
    (out / "notes.txt").unlink()
    stage_context(m, lock_dir, out, **common)  # type: ignore[arg-type]
    stage_context(m, lock_dir, out, **common)  # type: ignore[arg-type]
    assert (out / "Dockerfile").is_file()
