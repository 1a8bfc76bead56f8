"""Normalizing checks its scratch space up front: a full disk is one clear error before the
image is saved, not a failure half-way through a layer. The need is the image's own layers
twice (spooled as they stream, then normalized) and one base layer at a time, never the whole
saved image."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from core.errors import EnvironmentFailureError
from images.builder.reproducible import check_scratch, scratch_needed

Usage = namedtuple("Usage", "total used free")
GIB = 1 << 30


def test_the_need_is_the_own_layers_twice_and_one_base_layer() -> None:
    # 10 GiB of own layers spooled and written again, the largest layer (8 GiB) spooled once
    assert scratch_needed(30 * GIB, 20 * GIB, 8 * GIB) == 28 * GIB
    # no layer's size known: the whole base, as an upper bound of its largest layer
    assert scratch_needed(30 * GIB, 20 * GIB) == 40 * GIB
    # the largest layer is an own one, larger than the whole base: the base bounds it
    assert scratch_needed(30 * GIB, 20 * GIB, 25 * GIB) == 40 * GIB
    # no base: every layer is the image's own, and no base layer is spooled
    assert scratch_needed(30 * GIB, 0, 8 * GIB) == 60 * GIB
    assert scratch_needed(1 * GIB, 2 * GIB, 1 * GIB) == 1 * GIB


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
