"""The A/B plot: output throughput and p99 E2E latency against concurrency, both images.

The one module that imports matplotlib (the ``plot`` extra: ``pip install
'vllm-musa-image[plot]'``). Rendered with the Agg backend and no software metadata, so the same
numbers give the same PNG bytes. Without matplotlib, ``render_png`` returns None and the run
says so; the Markdown and JSON reports carry every number anyway.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from images.serve.stats import LevelComparison


def render_png(rows: Sequence[LevelComparison], title: str) -> bytes | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return None
    levels = [float(r.concurrency) for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    try:
        for axis, key, label in (
            (left, "throughput", "output tok/s"),
            (right, "p99_e2e", "p99 E2E latency (ms)"),
        ):
            control = [getattr(r.control, key) for r in rows]
            candidate = [getattr(r.candidate, key) for r in rows]
            axis.plot(levels, control, marker="o", label="control (A)")
            axis.plot(levels, candidate, marker="s", label="candidate (B)")
            axis.set_xscale("log", base=2)
            axis.set_xticks(levels, [str(int(v)) for v in levels])
            axis.set_xlabel("concurrency")
            axis.set_ylabel(label)
            axis.grid(True, alpha=0.3)
            axis.legend()
        fig.suptitle(title)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", metadata={"Software": None})
    finally:
        plt.close(fig)
    return buffer.getvalue()
