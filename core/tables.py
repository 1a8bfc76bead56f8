"""Plain-text tables for the summaries people read (``lock``, ``diff``): left-aligned columns
two spaces apart, each line indented, no trailing spaces. Pure."""

from __future__ import annotations

from collections.abc import Sequence


def render_table(
    rows: Sequence[Sequence[str]], *, indent: str = "  ", right: Sequence[int] = ()
) -> list[str]:
    """One line per row; the columns numbered in ``right`` are right-aligned (sizes)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def human_size(size: int | None) -> str:
    """``1.23 GB`` (decimal units, as ``docker images`` shows them); ``?`` when unknown."""
    if size is None:
        return "?"
    value = float(size)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(value) < 1000 or unit == "GB":
            return f"{size} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def signed_size(delta: int) -> str:
    """``+1.00 kB``, ``-2.50 MB``, ``0 B``: a difference of two sizes."""
    if delta == 0:
        return "0 B"
    return ("+" if delta > 0 else "-") + human_size(abs(delta))
