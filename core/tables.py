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
