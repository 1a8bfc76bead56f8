"""The A/B report as Markdown and JSON (pure renderers), and the files of a run.

``build/ab/<run id>/``: ``report.md`` (the tables, the verdict, the caveats), ``report.json``
(the same, as data), ``report.png`` (throughput and p99 E2E latency against concurrency, both
images), ``requests.jsonl`` (every measured request), and ``<lifetime>.log`` (each server's
log tail). Numbers are rounded for reading; the JSON keeps them to the microsecond.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from core.fsutil import atomic_write_bytes, atomic_write_text
from images.serve.ab import AbImage, AbResult
from images.serve.stats import Delta, LevelComparison, Side, describe_delta


def _n(value: float, digits: int = 2) -> str:
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def _image_line(title: str, image: AbImage) -> str:
    digests = ", ".join(f"`{d}`" for d in image.facts.repo_digests)
    line = f"- {title}: `{image.ref}`, image ID `{image.facts.id}`"
    return f"{line}, digests {digests}" if digests else line


def render_markdown(result: AbResult, confidence: float) -> str:
    level = f"{confidence * 100:g}%"
    out = [
        f"# A/B {result.run_id}: {'PASSED' if result.verdict.passed else 'REFUSED'}",
        "",
        _image_line("control (A)", result.control),
        _image_line("candidate (B)", result.candidate),
        f"- Docker host `{result.docker_host}` ({result.host.get('name', '?')}, "
        f"{result.host.get('cpus', '?')} CPUs, {result.host.get('os', '?')}), server host "
        f"`{result.server_host}`; lifetimes " + " ".join(lt.name for lt in result.lifetimes),
        "",
        f"## Throughput (runs pooled per image; delta with its {level} bootstrap interval)",
        "",
        "| BS | A requests | B requests | A output tok/s | B output tok/s | delta "
        "| A failures | B failures |",
        "|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for row in result.rows:
        out.append(
            f"| {row.concurrency} | {row.control.requests} | {row.candidate.requests} | "
            f"{_n(row.control.throughput)} | {_n(row.candidate.throughput)} | "
            f"{describe_delta(row.throughput)} | {row.control.failures} | "
            f"{row.candidate.failures} |"
        )
    out += [
        "",
        "## Latency (ms)",
        "",
        "| BS | A p50 TTFT | B p50 TTFT | A p99 TTFT | B p99 TTFT | A p50 TPOT | B p50 TPOT "
        "| A p99 TPOT | B p99 TPOT | A p50 E2E | B p50 E2E | A p99 E2E | B p99 E2E |",
        "|---:|" + "---:|" * 12,
    ]
    for row in result.rows:
        a, z = row.control, row.candidate
        cells = [
            a.p50_ttft, z.p50_ttft, a.p99_ttft, z.p99_ttft,
            a.p50_tpot, z.p50_tpot, a.p99_tpot, z.p99_tpot,
            a.p50_e2e, z.p50_e2e, a.p99_e2e, z.p99_e2e,
        ]  # fmt: skip
        out.append(f"| {row.concurrency} | " + " | ".join(_n(v) for v in cells) + " |")
    out += [
        "",
        "## p99 deltas",
        "",
        "| BS | p99 TTFT | p99 TPOT | p99 E2E |",
        "|---:|---|---|---|",
    ]
    for row in result.rows:
        out.append(
            f"| {row.concurrency} | {describe_delta(row.p99_ttft)} | "
            f"{describe_delta(row.p99_tpot)} | {describe_delta(row.p99_e2e)} |"
        )
    out += ["", "## Verdict", ""]
    if result.verdict.passed:
        out.append("No threshold crossed and no request failed.")
    else:
        out += [f"- {reason}" for reason in result.verdict.reasons]
    if result.caveats:
        out += ["", "## Caveats", ""] + [f"- {note}" for note in result.caveats]
    return "\n".join(out) + "\n"


def _side(side: Side) -> dict[str, Any]:
    return {
        "requests": side.requests,
        "failures": side.failures,
        "output_tokens": side.output_tokens,
        "duration_s": round(side.duration, 6),
        "output_tok_s": _round(side.throughput),
        "p50_ttft_ms": _round(side.p50_ttft),
        "p99_ttft_ms": _round(side.p99_ttft),
        "p50_tpot_ms": _round(side.p50_tpot),
        "p99_tpot_ms": _round(side.p99_tpot),
        "p50_e2e_ms": _round(side.p50_e2e),
        "p99_e2e_ms": _round(side.p99_e2e),
        "mean_itl_ms": _round(side.mean_itl),
        "errors": list(side.errors),
    }


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def _delta(d: Delta) -> dict[str, Any]:
    return {
        "percent": _round(d.percent),
        "low": _round(d.low),
        "high": _round(d.high),
        "resolvable": None if math.isnan(d.low) else d.resolvable,
    }


def _row(row: LevelComparison) -> dict[str, Any]:
    return {
        "concurrency": row.concurrency,
        "control": _side(row.control),
        "candidate": _side(row.candidate),
        "delta": {
            "output_tok_s": _delta(row.throughput),
            "p99_ttft": _delta(row.p99_ttft),
            "p99_tpot": _delta(row.p99_tpot),
            "p99_e2e": _delta(row.p99_e2e),
        },
    }


def render_json(result: AbResult) -> dict[str, Any]:
    def image(i: AbImage) -> dict[str, Any]:
        return {"ref": i.ref, "image_id": i.facts.id, "repo_digests": list(i.facts.repo_digests)}

    return {
        "run_id": result.run_id,
        "passed": result.verdict.passed,
        "reasons": list(result.verdict.reasons),
        "caveats": list(result.caveats),
        "control": image(result.control),
        "candidate": image(result.candidate),
        "docker_host": result.docker_host,
        "host": dict(sorted(result.host.items())),
        "server_host": result.server_host,
        "probe_output": result.probe_output,
        "lifetimes": [
            {
                "name": lt.name,
                "image": lt.image,
                "launch": list(lt.launch),
                "ready_after_s": lt.ready_after,
            }
            for lt in result.lifetimes
        ],
        "rows": [_row(row) for row in result.rows],
        "profile": dict(result.profile),
    }


def write_report(
    directory: Path, result: AbResult, confidence: float, png: bytes | None
) -> list[Path]:
    """The run's files in ``directory``; returns them."""
    written: list[Path] = []

    def put(name: str, text: str) -> None:
        path = directory / name
        atomic_write_text(path, text)
        written.append(path)

    put("report.md", render_markdown(result, confidence))
    put("report.json", json.dumps(render_json(result), indent=2, sort_keys=True) + "\n")
    lines = [
        json.dumps(
            {
                "lifetime": run.lifetime,
                "concurrency": run.concurrency,
                "run": run.index,
                **r.to_json(),
            },
            sort_keys=True,
        )
        for run in result.runs
        for r in run.results
    ]
    put("requests.jsonl", "\n".join(lines) + "\n")
    for lifetime in result.lifetimes:
        put(f"{lifetime.name}.log", lifetime.log_tail + "\n")
    if png is not None:
        atomic_write_bytes(directory / "report.png", png)
        written.append(directory / "report.png")
    return written
