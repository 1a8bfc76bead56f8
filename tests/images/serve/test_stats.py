"""The A/B's numbers: percentiles as numpy computes them, pooled rows, intervals, verdicts."""

from __future__ import annotations

import math

import pytest

from images.serve.client import RequestResult
from images.serve.stats import Delta, Run, compare, describe_delta, percentile, pool, verdict
from manifest.serving import Thresholds


def _result(e2e: float, *, ttft: float = 0.02, tokens: int = 9, ok: bool = True) -> RequestResult:
    return RequestResult(
        ok=ok,
        error=None if ok else "HTTP 500: stand-in failure",
        started=0.0,
        ttft=ttft if ok else None,
        itl=(),
        e2e=e2e,
        output_tokens=tokens,
        text="",
        finish_reason="length",
    )


def _runs(
    lifetime: str, e2es: list[float], *, concurrency: int = 1, scale: float = 1.0
) -> list[Run]:
    results = tuple(_result(e * scale, ttft=0.02 * scale) for e in e2es)
    return [
        Run(
            lifetime=lifetime,
            concurrency=concurrency,
            index=0,
            duration=sum(r.e2e for r in results) / concurrency,
            results=results,
        )
    ]


E2ES = [0.10 + 0.01 * ((i * 7) % 11) for i in range(40)]  # a spread, the same for both sides


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),  # numpy.percentile([1, 2, 3, 4], 50)
        ([1.0, 2.0, 3.0, 4.0], 99, 3.97),
        ([5.0], 99, 5.0),
        ([3.0, 1.0, 2.0], 0, 1.0),
    ],
)
def test_percentile_interpolates_linearly_as_numpy(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([], 99))


def test_pool_follows_vllm_bench_serve() -> None:
    results = (
        _result(0.50, ttft=0.10, tokens=5),  # TPOT (0.50 - 0.10) / 4 = 0.1
        _result(0.30, ttft=0.10, tokens=3),  # TPOT 0.1
        _result(0.20, ok=False),
    )
    side = pool([Run(lifetime="A1", concurrency=2, index=0, duration=0.4, results=results)])
    assert (side.requests, side.failures, side.output_tokens) == (3, 1, 8)
    assert side.throughput == pytest.approx(8 / 0.4)  # failed requests add no tokens
    assert side.p50_tpot == pytest.approx(100.0)
    assert side.p50_e2e == pytest.approx(400.0)  # ms, successful requests only
    assert side.errors == ("HTTP 500: stand-in failure",)


def test_equal_sides_have_no_resolvable_difference() -> None:
    row = compare(1, _runs("A1", E2ES), _runs("B1", E2ES), resamples=500, confidence=0.95, seed=0)
    assert row.throughput.percent == pytest.approx(0.0)
    assert not row.throughput.resolvable
    assert row.throughput.low < 0 < row.throughput.high
    assert describe_delta(row.throughput).endswith("no resolvable difference")
    assert verdict([row], Thresholds()).passed


def test_a_candidate_20_percent_slower_is_resolved_and_refused_naming_the_row() -> None:
    rows = [
        compare(
            level,
            _runs("A1", E2ES, concurrency=level),
            _runs("B1", E2ES, concurrency=level, scale=1.2),
            resamples=500,
            confidence=0.95,
            seed=0,
        )
        for level in (1, 4)
    ]
    for row in rows:
        assert row.throughput.percent == pytest.approx(100 / 1.2 - 100)
        assert row.throughput.resolvable
        assert row.throughput.high < 0
        assert row.p99_e2e.percent == pytest.approx(20.0)
    result = verdict(rows, Thresholds(throughput_delta=-2.0, p99_e2e_delta=5.0))
    assert not result.passed
    assert [r.split(":", 1)[0] for r in result.reasons] == [
        "concurrency 1",
        "concurrency 1",
        "concurrency 4",
        "concurrency 4",
    ]
    a = rows[0].control
    assert result.reasons[0] == (
        f"concurrency 1: output tok/s -16.67% ({a.throughput:.2f} -> "
        f"{rows[0].candidate.throughput:.2f}), below the threshold -2.00%"
    )
    assert result.reasons[1].startswith("concurrency 1: p99 E2E +20.00% (")
    assert result.reasons[1].endswith("ms), above the threshold +5.00%")


def test_a_failed_request_refuses_the_candidate_with_the_count() -> None:
    control = _runs("A1", E2ES)
    broken = list(_runs("B1", E2ES)[0].results)
    broken[3] = _result(0.1, ok=False)
    candidate = [Run(lifetime="B1", concurrency=1, index=0, duration=4.0, results=tuple(broken))]
    row = compare(1, control, candidate, resamples=200, confidence=0.95, seed=0)
    reasons = verdict([row], Thresholds(throughput_delta=-50, p99_e2e_delta=50)).reasons
    assert reasons == (
        "concurrency 1: 1 of 40 candidate requests failed (HTTP 500: stand-in failure)",
    )


def test_the_bootstrap_is_reproducible() -> None:
    one = compare(
        4, _runs("A1", E2ES), _runs("B1", E2ES, scale=1.01), resamples=300, confidence=0.9, seed=7
    )
    two = compare(
        4, _runs("A1", E2ES), _runs("B1", E2ES, scale=1.01), resamples=300, confidence=0.9, seed=7
    )
    assert repr(one) == repr(two)  # a side without ITLs has a NaN mean, and NaN != NaN


def test_describe_delta() -> None:
    assert (
        describe_delta(Delta(percent=-16.666, low=-18.2, high=-15.1)) == "-16.67% [-18.20, -15.10]"
    )
    assert describe_delta(Delta(percent=0.3, low=-1.0, high=1.5)) == (
        "+0.30% [-1.00, +1.50] no resolvable difference"
    )
    assert describe_delta(Delta(percent=math.nan, low=math.nan, high=math.nan)) == "n/a"
