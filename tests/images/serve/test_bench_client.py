"""``vllm bench serve`` as the A/B's client: its command, and its detailed result as rows."""

from __future__ import annotations

import pytest

from images.serve.bench_client import bench_serve_command, results_from_bench
from manifest.serving import AbContract, ModelMount, ServingProfile

PROFILE = ServingProfile(
    model=ModelMount(path="/models/q", mount="/model", name="q"),
    ab=AbContract(input_len=512, output_len=128, seed=3),
)


def test_the_command_asks_for_the_contract_and_a_detailed_result() -> None:
    argv = bench_serve_command(PROFILE, "http://127.0.0.1:32768", concurrency=16, requests=64)
    pairs = {
        flag: value
        for flag, value in zip(argv, [*argv[1:], ""], strict=True)
        if flag.startswith("--") and not value.startswith("--")
    }
    assert argv[:3] == ["vllm", "bench", "serve"]
    assert pairs["--base-url"] == "http://127.0.0.1:32768"
    assert (pairs["--model"], pairs["--served-model-name"]) == ("/model", "q")
    assert (pairs["--random-input-len"], pairs["--random-output-len"]) == ("512", "128")
    assert (pairs["--num-prompts"], pairs["--max-concurrency"], pairs["--seed"]) == (
        "64",
        "16",
        "3",
    )
    assert {"--ignore-eos", "--save-result", "--save-detailed", "--disable-tqdm"} <= set(argv)


def test_a_detailed_result_becomes_the_runs_requests() -> None:
    doc = {
        "duration": 2.5,
        "start_times": [10.0, 10.5],
        "ttfts": [0.05, 0.0],
        "itls": [[0.01, 0.01, 0.01], []],
        "latencies": [0.08, 0.2],
        "output_lens": [4, 0],
        "errors": ["", "Never received a valid chunk to calculate TTFT."],
    }
    duration, (ok, failed) = results_from_bench(doc)
    assert duration == 2.5
    assert (ok.ok, ok.ttft, ok.itl, ok.e2e, ok.output_tokens) == (True, 0.05, (0.01,) * 3, 0.08, 4)
    assert ok.tpot == pytest.approx(0.01)
    assert (failed.ok, failed.error, failed.started) == (
        False,
        "Never received a valid chunk to calculate TTFT.",
        0.5,
    )


def test_a_result_without_the_detail_is_refused_naming_what_is_missing() -> None:
    with pytest.raises(
        ValueError,
        match=r"^the result has no ttfts, itls, errors \(was it saved with --save-detailed\?\)$",
    ):
        results_from_bench({"duration": 1.0, "latencies": [], "output_lens": []})
