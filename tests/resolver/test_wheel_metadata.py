"""Wheel metadata the resolver refuses: an invalid Requires-Python, a direct-URL dependency, a
METADATA past its bound (read incrementally out of the zip)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from core.errors import MetadataError
from resolver.wheel_metadata import MAX_METADATA_BYTES, metadata_from_zip
from tests.support.lockcase import Case


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


def _wheel(path: Path, metadata: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("bomb-1.0.dist-info/METADATA", metadata)
    return path


def test_a_metadata_is_read_at_most_its_bound(tmp_path: Path) -> None:
    big = b"Name: bomb\nVersion: 1.0\n\n" + bytes(MAX_METADATA_BYTES)
    path = _wheel(tmp_path / "bomb-1.0-py3-none-any.whl", big)
    with zipfile.ZipFile(path) as zf, pytest.raises(MetadataError) as info:
        metadata_from_zip(zf, path.name, label="bomb")
    assert info.value.message == (
        f"bomb: {path.name}: bomb-1.0.dist-info/METADATA has {len(big)} bytes, more than the "
        f"{MAX_METADATA_BYTES} a METADATA may have"
    )


def test_a_metadata_that_inflates_past_the_size_its_zip_claims(tmp_path: Path) -> None:
    small = b"Name: bomb\nVersion: 1.0\n\n"
    path = _wheel(tmp_path / "bomb-1.0-py3-none-any.whl", small + bytes(4 << 20))
    with zipfile.ZipFile(path) as zf:
        claimed = zf.getinfo("bomb-1.0.dist-info/METADATA")
        claimed.file_size = len(small)  # what the zip says; its data inflates to 4 MB
        with pytest.raises(MetadataError) as info:
            metadata_from_zip(zf, path.name, label="bomb")
    assert info.value.message == (
        f"bomb: {path.name}: bomb-1.0.dist-info/METADATA cannot be read: Bad CRC-32 for file "
        "'bomb-1.0.dist-info/METADATA'"
    )
