"""Wheel selection is pure: every refusal has a reason and a sentence; ties are errors."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

from manifest import Target
from resolver.simple_page import IndexFile
from resolver.target import TargetTags, platforms
from resolver.wheel_select import Reason, TieError, Verdict, best, evaluate

CP312 = TargetTags(Target(python=(3, 12), arch="x86_64", glibc=(2, 35)))
TORCH = canonicalize_name("torch")
PIN = Version("2.11.0.post2+musa5.2.0")


def judge(
    filename: str, *, version: Version | None = PIN, kind: str | None = "native", **kw: Any
) -> Verdict | None:
    f = IndexFile(filename=filename, url=f"https://x/{filename}", **kw)
    name = canonicalize_name(filename.split("-", maxsplit=1)[0])
    return evaluate(f, project=name, target_tags=CP312, version=version, kind=kind)  # type: ignore[arg-type]


def test_platforms_cover_manylinux_up_to_glibc_and_linux() -> None:
    plats = platforms(Target(python=(3, 12), arch="x86_64", glibc=(2, 35)))
    assert plats[0] == "manylinux_2_35_x86_64"
    assert "manylinux2014_x86_64" in plats
    assert "manylinux_2_36_x86_64" not in plats
    assert plats[-1] == "linux_x86_64"
    assert not any("musllinux" in p for p in plats)


def test_native_wheel_accepted() -> None:
    v = judge("torch-2.11.0.post2+musa5.2.0-cp312-cp312-linux_x86_64.whl")
    assert v is not None
    assert v.accepted
    assert v.kind == "native"


@pytest.mark.parametrize(
    ("filename", "reason", "detail"),
    [
        (
            "torch-2.11.0.post2+musa5.2.0-cp310-cp310-linux_x86_64.whl",
            Reason.WRONG_PYTHON_TAG,
            "built for CPython 3.10 (cp310-cp310); the target is CPython 3.12 (cp312)",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0-cp312-cp312-linux_aarch64.whl",
            Reason.WRONG_PLATFORM,
            "platform linux_aarch64 does not run on linux x86_64 with glibc 2.35 "
            "(tags cp312-cp312-linux_aarch64)",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0-cp312-cp312-manylinux_2_39_x86_64.whl",
            Reason.WRONG_PLATFORM,
            "platform manylinux_2_39_x86_64 does not run on linux x86_64 with glibc 2.35 "
            "(tags cp312-cp312-manylinux_2_39_x86_64)",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0-cp312-cp312d-linux_x86_64.whl",
            Reason.WRONG_ABI,
            "ABI cp312d is not cp312, abi3 or none (tags cp312-cp312d-linux_x86_64)",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0s5000-cp312-cp312-linux_x86_64.whl",
            Reason.OTHER_LOCAL_LABEL,
            "local label +musa5.2.0s5000 is not the pinned +musa5.2.0 (2.11.0.post2+musa5.2.0)",
        ),
        (
            "torch-2.11.0.post2-cp312-cp312-linux_x86_64.whl",
            Reason.OTHER_LOCAL_LABEL,
            "local label (none) is not the pinned +musa5.2.0 (2.11.0.post2+musa5.2.0)",
        ),
        (
            "torch-2.9.1+musa5.2.0-cp312-cp312-linux_x86_64.whl",
            Reason.OTHER_VERSION,
            "version 2.9.1+musa5.2.0 is not the pinned 2.11.0.post2+musa5.2.0",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0-cp38-abi3-linux_x86_64.whl",
            Reason.WRONG_KIND,
            "a abi3 wheel (cp38-abi3-linux_x86_64); the manifest requires native (cp312-cp312)",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0.tar.gz",
            Reason.SDIST,
            "a source distribution; only wheels are locked",
        ),
        (
            "torch-2.11.0.post2+musa5.2.0.egg",
            Reason.NOT_A_WHEEL,
            "a .egg file; only wheels are locked",
        ),
    ],
)
def test_refusals(filename: str, reason: Reason, detail: str) -> None:
    v = judge(filename)
    assert v is not None
    assert v.reason is reason
    assert v.detail == detail


def test_yanked_and_requires_python() -> None:
    name = "torch-2.11.0.post2+musa5.2.0-cp312-cp312-linux_x86_64.whl"
    y = judge(name, yanked=True, yanked_reason="broken build")
    assert y is not None
    assert (y.reason, y.detail) == (Reason.YANKED, "yanked from the index: broken build")
    rp = judge(name, requires_python=">=3.13")
    assert rp is not None
    assert (rp.reason, rp.detail) == (
        Reason.REQUIRES_PYTHON,
        "Requires-Python >=3.13 excludes 3.12",
    )
    bad = judge(name, requires_python=">=3.x")
    assert bad is not None
    assert (bad.reason, bad.detail) == (Reason.REQUIRES_PYTHON, "invalid Requires-Python '>=3.x'")


def test_abi3_newer_than_target_is_wrong_python_tag() -> None:
    v = judge(
        "tilelang_musa-0.1.12+musa.2-cp313-abi3-linux_x86_64.whl",
        version=Version("0.1.12+musa.2"),
        kind="abi3",
    )
    assert v is not None
    assert v.reason is Reason.WRONG_PYTHON_TAG
    assert v.detail == "cp313-abi3 needs a newer CPython than the target 3.12 (cp312)"


def test_other_project_on_a_flat_page_is_ignored() -> None:
    f = IndexFile(filename="numpy-1.26.4-cp312-cp312-linux_x86_64.whl", url="https://x/n.whl")
    assert evaluate(f, project=TORCH, target_tags=CP312) is None


def test_best_prefers_higher_ranked_tags() -> None:
    specific = judge("numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.whl", version=None, kind=None)
    generic = judge("numpy-1.26.4-py3-none-any.whl", version=None, kind=None)
    assert specific is not None
    assert generic is not None
    assert best([generic, specific]) is specific


def test_tie_between_two_files_is_an_error() -> None:
    a = judge("torch-2.11.0.post2+musa5.2.0-1-cp312-cp312-linux_x86_64.whl")
    b = judge("torch-2.11.0.post2+musa5.2.0-2-cp312-cp312-linux_x86_64.whl")
    assert a is not None
    assert b is not None
    with pytest.raises(TieError) as info:
        best([a, b])
    assert [v.file.filename for v in info.value.files] == [a.file.filename, b.file.filename]


def test_same_file_listed_twice_with_same_hash_is_not_a_tie() -> None:
    name = "torch-2.11.0.post2+musa5.2.0-cp312-cp312-linux_x86_64.whl"
    a = judge(name, hashes={"sha256": "ab" * 32})
    b = judge(name, hashes={"sha256": "ab" * 32})
    assert a is not None
    assert b is not None
    assert best([a, b]) is a
