"""Files of a source at its pinned revision: a path of the repository, a git commit, an sdist;
and a source's requirements files read through them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from core.errors import SourceError
from manifest import Source
from sources.read import (
    git_reader,
    path_reader,
    read_source_requirements,
    repo_root,
    sdist_reader,
)
from sources.sdist import SdistArchive
from tests.sources.sdistgen import write_sdist
from tests.support.gitrepo import git


def commit_tree(repo: Path, files: dict[str, str], links: dict[str, str] | None = None) -> str:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    for rel, target in (links or {}).items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).symlink_to(target)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tree")
    return git(repo, "rev-parse", "HEAD")


def test_repo_root_is_the_git_top_level_else_two_levels_up(tmp_path: Path) -> None:
    plain = tmp_path / "plain" / "stack" / "t.yaml"
    plain.parent.mkdir(parents=True)
    assert repo_root(plain) == (tmp_path / "plain").resolve()
    commit_tree(tmp_path / "repo", {"deep/stack/t.yaml": "schema: 1\n"})
    assert repo_root(tmp_path / "repo" / "deep" / "stack" / "t.yaml") == (
        (tmp_path / "repo").resolve()
    )


def test_path_source_reads_inside_its_directory_only(tmp_path: Path) -> None:
    tree = tmp_path / "demo" / "vllm-musa"
    (tree / "requirements").mkdir(parents=True)
    (tree / "requirements" / "musa.txt").write_text("-r ../../secret.txt\nnumpy\n")
    (tmp_path / "demo" / "secret.txt").write_text("outside\n")
    (tree / "requirements" / "link.txt").symlink_to(tmp_path / "demo" / "secret.txt")
    source = Source(name="vllm-musa", path="demo/vllm-musa")
    read = path_reader(source, tmp_path, where="sources.vllm-musa")
    assert read("requirements/musa.txt") == b"-r ../../secret.txt\nnumpy\n"
    assert read("requirements/none.txt") is None
    with pytest.raises(SourceError) as info:
        read("requirements/link.txt")
    assert info.value.message == (
        f"sources.vllm-musa: requirements/link.txt resolves to {tmp_path}/demo/secret.txt, "
        f"outside the source {tmp_path}/demo/vllm-musa"
    )


def test_path_source_that_is_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(SourceError) as info:
        path_reader(Source(name="p", path="demo/none"), tmp_path, where="sources.p")
    assert info.value.message == (
        f"sources.p: path 'demo/none' is not a directory in {tmp_path.resolve()}"
    )


def test_git_source_reads_the_pinned_commit_not_the_work_tree(tmp_path: Path) -> None:
    upstream = tmp_path / "upstream"
    rev = commit_tree(
        upstream,
        {"requirements/common.txt": "numpy\n", "real.txt": "six\n"},
        links={"requirements/link.txt": "../real.txt"},
    )
    (upstream / "requirements" / "common.txt").write_text("changed after the commit\n")
    git(upstream, "commit", "-qam", "later")
    source = Source(name="vllm", git=f"file://{upstream}", rev=rev)
    read = git_reader(source, tmp_path / "git-cache", where="sources.vllm")
    assert read("requirements/common.txt") == b"numpy\n"
    assert read("requirements/none.txt") is None
    with pytest.raises(SourceError) as info:
        read("requirements/link.txt")
    assert info.value.message == (
        f"sources.vllm: requirements/link.txt at {rev} is a symlink, not a regular file"
    )
    with pytest.raises(SourceError) as info:
        read("requirements")
    assert info.value.message == (
        f"sources.vllm: requirements at {rev} is a tree, not a regular file"
    )


def test_requirements_of_an_sdist_source(tmp_path: Path) -> None:
    path = write_sdist(
        tmp_path,
        "vllm-0.28.0.tar.gz",
        {
            "requirements/common.txt": "numpy\nopencv-python-headless >= 4.13.0\n",
            "requirements/build/cuda.txt": "-r ../common.txt\ntorch==2.13.0\ncmake>=3.26.1\n",
        },
    )
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    sdist = SdistArchive(path, filename=path.name, sha256=sha, where="sources.vllm.sdist")
    source = Source(
        name="vllm",
        requirements_files=("requirements/common.txt",),
        build_requirements_files=("requirements/build/cuda.txt",),
    )
    got = read_source_requirements(source, sdist_reader(sdist), prime=sdist)
    assert got.where == "sources.vllm"
    assert [(r.location, str(r.requirement)) for r in got.runtime.requirements] == [
        ("requirements/common.txt:1", "numpy"),
        ("requirements/common.txt:2", "opencv-python-headless>=4.13.0"),
    ]
    assert [(r.location, str(r.requirement)) for r in got.build.requirements] == [
        ("requirements/common.txt:1", "numpy"),
        ("requirements/common.txt:2", "opencv-python-headless>=4.13.0"),
        ("requirements/build/cuda.txt:3", "cmake>=3.26.1"),
    ]
    assert [str(r.requirement) for r in got.build.dropped] == ["torch==2.13.0"]
