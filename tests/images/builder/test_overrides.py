"""The command line's changes to a manifest: --mirror NAME=URL and --base-image REF."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import UsageError
from images.builder.overrides import apply_overrides, parse_mirror_overrides
from tests.support.images import manifest


def test_overrides_apply_to_mirrors_and_the_base_image_only(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    assert apply_overrides(m, mirrors={}, base_image=None) is m
    changed = apply_overrides(
        m, mirrors=parse_mirror_overrides(["sdk-apt=http://m.example/apt"]), base_image="x:1"
    )
    assert changed.mirrors.sdk_apt == "http://m.example/apt"
    assert changed.base_image == "x:1"
    assert changed.lock_inputs_sha256 == m.lock_inputs_sha256


def test_mirror_override_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as info:
        parse_mirror_overrides(["pypi=https://x.example/"])
    assert info.value.message == "--mirror pypi=...: no mirror named 'pypi'"
    with pytest.raises(UsageError) as info:
        parse_mirror_overrides(["apt=https://u:p@x.example/"])
    assert info.value.message == (
        "--mirror apt=https://***@x.example/: not an http(s) URL without credentials"
    )
    with pytest.raises(UsageError) as info:
        parse_mirror_overrides(["apt"])
    assert info.value.message == "--mirror 'apt': expected NAME=URL"


@pytest.mark.parametrize(
    "url",
    [
        "https://h/;touch${IFS}/tmp/pwn;#e;",  # GNU sed's e flag in apt-get.sh's s#...#...#
        "https://h;touch${IFS}x/",
        "https://h/&",
        "https://h/a'b",
        "https://h/$(id)",
        "https://h/\n",
    ],
)
def test_a_mirror_on_the_command_line_is_checked_like_the_manifest(url: str) -> None:
    # --mirror values reach apt-get.sh's sed script and the build's shell: the same plain-URL
    # rule as the manifest's mirrors:, no shell or sed metacharacters
    with pytest.raises(UsageError, match="not an http"):
        parse_mirror_overrides([f"apt={url}"])
