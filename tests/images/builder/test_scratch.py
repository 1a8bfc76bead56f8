"""Normalizing checks its scratch space up front: a full disk is one clear error before the
image is saved, not a failure half-way through a layer."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from core.errors import EnvironmentFailureError
from images.builder.reproducible import check_scratch, scratch_needed

Usage = namedtuple("Usage", "total used free")
GIB = 1 << 30


def test_the_need_is_the_saved_image_and_its_own_layers() -> None:
    assert scratch_needed(30 * GIB, 20 * GIB) == 40 * GIB  # the base's blobs are linked
    assert scratch_needed(30 * GIB, 0) == 60 * GIB
    assert scratch_needed(1 * GIB, 2 * GIB) == 1 * GIB


def test_too_little_space_is_refused_naming_the_directory_and_the_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(100 * GIB, 0, 3 * GIB))
    with pytest.raises(EnvironmentFailureError) as info:
        check_scratch(tmp_path / "images", 40 * GIB, what="normalizing image sha256:0123456789ab")
    assert info.value.message == (
        f"{tmp_path / 'images'}: 3.22 GB free, but normalizing image sha256:0123456789ab needs "
        f"about 42.95 GB ({40 * GIB} bytes)"
    )
    assert (info.value.hint or "").startswith("free space on that filesystem")
    assert info.value.code == "environment"


def test_enough_space_passes(tmp_path: Path) -> None:
    check_scratch(tmp_path, 1, what="x")
    assert shutil.disk_usage(tmp_path).free >= 1
