"""The A/B's numbers (pure): pooled rows per concurrency level, bootstrap intervals, verdict.

Per image and concurrency level, the measured runs of every server lifetime of that image are
pooled (3 runs x 64 requests = 192 requests per image, for the default contract):

- output tok/s: all output tokens over the summed wall time of the runs (``vllm bench
  serve``'s "Output token throughput", pooled);
- p50 and p99 of TTFT, TPOT and E2E latency over the successful requests, by linear
  interpolation between order statistics (``numpy.percentile``'s default, as vLLM's);
- failures: requests that did not succeed.

Each delta is candidate against control, in percent. Its interval is a percentile bootstrap
(``resamples`` draws, seeded, so a report is reproducible): each draw resamples each image's
successful requests with replacement. A throughput draw is the closed-loop estimate
``concurrency x tokens / latency`` of the resampled requests (Little's law for a benchmark
that keeps ``concurrency`` requests in flight); the latency percentiles are recomputed from
the draw. An interval that spans zero is reported as "no resolvable difference".

The thresholds are checked on the point estimates: a candidate is refused when its throughput
delta is below ``thresholds.throughput_delta`` or its p99 E2E delta is above
``thresholds.p99_e2e_delta`` at any level, or when any request failed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from images.serve.client import RequestResult
from manifest.serving import Thresholds


@dataclass(frozen=True, kw_only=True)
class Run:
    """One measured run: ``requests_per_run`` requests at ``concurrency``, in one lifetime."""

    lifetime: str  # A1, B1, A2, B2
    concurrency: int
    index: int  # 0-based among the measured runs of this lifetime and level
    duration: float  # seconds, first request sent to last request done
    results: tuple[RequestResult, ...]


@dataclass(frozen=True, kw_only=True)
class Side:
    """One image at one concurrency level, its runs pooled."""

    requests: int
    failures: int
    output_tokens: int
    duration: float
    throughput: float  # output tok/s
    p50_ttft: float  # milliseconds, here and below
    p99_ttft: float
    p50_tpot: float
    p99_tpot: float
    p50_e2e: float
    p99_e2e: float
    mean_itl: float
    errors: tuple[str, ...]  # the first few failure messages


@dataclass(frozen=True, kw_only=True)
class Delta:
    percent: float
    low: float
    high: float

    @property
    def resolvable(self) -> bool:
        return not self.low <= 0.0 <= self.high


@dataclass(frozen=True, kw_only=True)
class LevelComparison:
    concurrency: int
    control: Side
    candidate: Side
    throughput: Delta
    p99_ttft: Delta
    p99_tpot: Delta
    p99_e2e: Delta


@dataclass(frozen=True, kw_only=True)
class Verdict:
    passed: bool
    reasons: tuple[str, ...]  # one line per refusal, naming the row


def percentile(values: Sequence[float], q: float) -> float:
    """``numpy.percentile(values, q)`` with linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ms(values: Sequence[float]) -> list[float]:
    return [v * 1000.0 for v in values]


def pool(runs: Sequence[Run]) -> Side:
    results = [r for run in runs for r in run.results]
    ok = [r for r in results if r.ok]
    tokens = sum(r.output_tokens for r in ok)
    duration = sum(run.duration for run in runs)
    ttft, tpot, e2e = (_ms(_values(ok, key)) for key in ("ttft", "tpot", "e2e"))
    itl = _ms([v for r in ok for v in r.itl])
    return Side(
        requests=len(results),
        failures=len(results) - len(ok),
        output_tokens=tokens,
        duration=duration,
        throughput=tokens / duration if duration > 0 else 0.0,
        p50_ttft=percentile(ttft, 50),
        p99_ttft=percentile(ttft, 99),
        p50_tpot=percentile(tpot, 50),
        p99_tpot=percentile(tpot, 99),
        p50_e2e=percentile(e2e, 50),
        p99_e2e=percentile(e2e, 99),
        mean_itl=sum(itl) / len(itl) if itl else math.nan,
        errors=tuple(sorted({r.error or "" for r in results if not r.ok}))[:5],
    )


def _pct(candidate: float, control: float) -> float:
    if control == 0 or math.isnan(control) or math.isnan(candidate):
        return math.nan
    return (candidate / control - 1.0) * 100.0


def compare(
    concurrency: int,
    control_runs: Sequence[Run],
    candidate_runs: Sequence[Run],
    *,
    resamples: int,
    confidence: float,
    seed: int,
) -> LevelComparison:
    a, b = pool(control_runs), pool(candidate_runs)
    a_ok = [r for run in control_runs for r in run.results if r.ok]
    b_ok = [r for run in candidate_runs for r in run.results if r.ok]
    rng = random.Random(f"{seed}:{concurrency}")  # noqa: S311 - reproducible, not a secret

    out: dict[str, list[float]] = {"throughput": [], "ttft": [], "tpot": [], "e2e": []}
    if a_ok and b_ok:
        for _ in range(resamples):
            ra = rng.choices(a_ok, k=len(a_ok))
            rb = rng.choices(b_ok, k=len(b_ok))
            out["throughput"].append(
                _pct(_closed_loop(rb, concurrency), _closed_loop(ra, concurrency))
            )
            for key in ("ttft", "tpot", "e2e"):
                p99a, p99b = percentile(_values(ra, key), 99), percentile(_values(rb, key), 99)
                out[key].append(_pct(p99b, p99a))
    alpha = (1.0 - confidence) / 2.0 * 100.0

    def delta(point: float, samples: list[float]) -> Delta:
        finite = [s for s in samples if not math.isnan(s)]
        if not finite or math.isnan(point):
            return Delta(percent=point, low=math.nan, high=math.nan)
        return Delta(
            percent=point,
            low=percentile(finite, alpha),
            high=percentile(finite, 100.0 - alpha),
        )

    return LevelComparison(
        concurrency=concurrency,
        control=a,
        candidate=b,
        throughput=delta(_pct(b.throughput, a.throughput), out["throughput"]),
        p99_ttft=delta(_pct(b.p99_ttft, a.p99_ttft), out["ttft"]),
        p99_tpot=delta(_pct(b.p99_tpot, a.p99_tpot), out["tpot"]),
        p99_e2e=delta(_pct(b.p99_e2e, a.p99_e2e), out["e2e"]),
    )


def _closed_loop(results: Sequence[RequestResult], concurrency: int) -> float:
    latency = sum(r.e2e for r in results)
    return concurrency * sum(r.output_tokens for r in results) / latency if latency > 0 else 0.0


def _values(results: Sequence[RequestResult], key: str) -> list[float]:
    """The ``ttft``, ``tpot`` or ``e2e`` of each result that has one, in seconds."""
    return [v for r in results if (v := getattr(r, key)) is not None]


def verdict(rows: Sequence[LevelComparison], thresholds: Thresholds) -> Verdict:
    reasons: list[str] = []
    for row in rows:
        for name, side in (("control", row.control), ("candidate", row.candidate)):
            if side.failures:
                shown = "; ".join(side.errors)
                reasons.append(
                    f"concurrency {row.concurrency}: {side.failures} of {side.requests} "
                    f"{name} requests failed ({shown})"
                )
        t = row.throughput.percent
        if math.isnan(t) or t < thresholds.throughput_delta:
            reasons.append(
                f"concurrency {row.concurrency}: output tok/s {_signed(t)} "
                f"({row.control.throughput:.2f} -> {row.candidate.throughput:.2f}), below the "
                f"threshold {_signed(thresholds.throughput_delta)}"
            )
        e = row.p99_e2e.percent
        if math.isnan(e) or e > thresholds.p99_e2e_delta:
            reasons.append(
                f"concurrency {row.concurrency}: p99 E2E {_signed(e)} "
                f"({row.control.p99_e2e:.2f} ms -> {row.candidate.p99_e2e:.2f} ms), above the "
                f"threshold {_signed(thresholds.p99_e2e_delta)}"
            )
    return Verdict(passed=not reasons, reasons=tuple(reasons))


def _signed(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.2f}%"


def describe_delta(d: Delta) -> str:
    """``-16.67% [-17.02, -16.31]`` or ``+0.33% [-0.80, +1.41] no resolvable difference``."""
    if math.isnan(d.low):
        return _signed(d.percent)
    text = f"{_signed(d.percent)} [{d.low:+.2f}, {d.high:+.2f}]"
    return text if d.resolvable else f"{text} no resolvable difference"
