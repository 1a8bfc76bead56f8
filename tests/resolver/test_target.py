"""The target's tags are bounded: only a supported target can be made, and the tag lists of the
widest one are a few thousand tags, whoever builds the target (the manifest, a lock, a caller)."""

from __future__ import annotations

import re

import pytest
from packaging.utils import canonicalize_name

from core.errors import LockError
from manifest import GLIBC_HIGHEST, PYTHON_VERSIONS, Target
from resolver.lockfile import Lock, LockedPackage, parse_pylock, render_pylock
from resolver.target import TargetTags, platforms


@pytest.mark.parametrize(
    ("python", "arch", "glibc", "message"),
    [
        ((3, 99), "x86_64", (2, 35), "CPython 3.99 is not supported (CPython 3.8 to 3.14)"),
        ((3, 7), "x86_64", (2, 35), "CPython 3.7 is not supported (CPython 3.8 to 3.14)"),
        ((2, 12), "x86_64", (2, 35), "CPython 2.12 is not supported (CPython 3.8 to 3.14)"),
        ((3, 12), "x86_64", (2, 99999999), "glibc 2.99999999 is not supported on x86_64 (glibc 2.5 to 2.99)"),
        ((3, 12), "x86_64", (3, 0), "glibc 3.0 is not supported on x86_64 (glibc 2.5 to 2.99)"),
        ((3, 12), "aarch64", (2, 5), "glibc 2.5 is not supported on aarch64 (glibc 2.17 to 2.99)"),
        ((3, 12), "riscv64", (2, 35), "'riscv64' is not one of x86_64, aarch64"),
    ],
)  # fmt: skip
def test_an_unsupported_target_cannot_be_made(
    python: tuple[int, int], arch: str, glibc: tuple[int, int], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Target(python=python, arch=arch, glibc=glibc)


def test_the_widest_target_has_a_bounded_tag_list() -> None:
    widest = Target(python=PYTHON_VERSIONS[-1], arch="x86_64", glibc=GLIBC_HIGHEST)
    plats = platforms(widest)
    # manylinux_2_99 .. manylinux_2_5, the three legacy aliases, linux_x86_64
    assert len(plats) == (99 - 5 + 1) + 3 + 1
    assert plats[0] == "manylinux_2_99_x86_64"
    assert plats[-1] == "linux_x86_64"
    tags = TargetTags(widest).ordered
    assert len(tags) == len(set(tags)) < 5000


def test_platforms_refuse_a_target_forced_past_the_bounds() -> None:
    target = Target(python=(3, 12), arch="x86_64", glibc=(2, 35))
    object.__setattr__(target, "glibc", (2, 10**8))  # past the frozen dataclass's own check
    with pytest.raises(ValueError, match=r"^glibc 2.100000000 is not supported on x86_64"):
        platforms(target)


def test_a_lock_with_an_unsupported_target_is_refused() -> None:
    target = Target(python=(3, 12), arch="x86_64", glibc=(2, 35))
    package = LockedPackage(
        name=canonicalize_name("filelock"),
        version="3.17.0",
        index="pypi",
        index_url="https://pypi.org/simple/",
        filename="filelock-3.17.0-py3-none-any.whl",
        url="https://files.example/filelock-3.17.0-py3-none-any.whl",
        sha256="ab" * 32,
        size=10,
        kind="pure",
        origin="requirement",
        required_by=("(requirements)",),
    )
    text = render_pylock(
        Lock(stack="t", target=target, lock_inputs_sha256="0" * 64, packages=(package,))
    )
    assert 'glibc = "2.35"' in text
    with pytest.raises(LockError) as info:
        parse_pylock(text.replace('glibc = "2.35"', 'glibc = "2.99999999"'), where="t.lock")
    assert info.value.message == (
        "t.lock: not a valid lock: glibc 2.99999999 is not supported on x86_64 (glibc 2.5 to 2.99)"
    )
