"""Inputs of the image refused before anything is staged: a path source's symlink that leaves
the repository, and a Deadsnakes mirror URL with shell syntax in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import BuildImageError
from manifest import Source, parse_manifest
from sources.trees import stage_path_source


def test_path_source_symlink_out_of_the_repository_is_refused(tmp_path: Path) -> None:
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
