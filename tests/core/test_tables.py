"""The plain-text tables and sizes of the summaries people read."""

from __future__ import annotations

import pytest

from core.tables import human_size, render_table, signed_size


def test_columns_are_aligned_and_lines_end_without_spaces() -> None:
    assert render_table([("name", "size"), ("numpy", "18.00 MB"), ("x", "-")], right=(1,)) == [
        "  name       size",
        "  numpy  18.00 MB",
        "  x             -",
    ]
    assert render_table([("a", ""), ("bb", "")], indent="") == ["a", "bb"]
    assert render_table([]) == []


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (None, "?"),
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.00 kB"),
        (5_300_000, "5.30 MB"),
        (24_871_536_640, "24.87 GB"),
        (3_000_000_000_000, "3000.00 GB"),
    ],
)
def test_sizes_in_decimal_units(size: int | None, shown: str) -> None:
    assert human_size(size) == shown
    if size:
        assert signed_size(size) == f"+{shown}"
        assert signed_size(-size) == f"-{shown}"


def test_no_change_has_no_sign() -> None:
    assert signed_size(0) == "0 B"
