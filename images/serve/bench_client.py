"""``vllm bench serve`` from the candidate image as the A/B's client (``ab --client vllm-bench``).

Where the candidate has vLLM's own benchmark, each run can be driven by it instead of the
built-in client: the same metric definitions, measured by upstream's code. It runs in a
throwaway container of the candidate on the Docker host's network, with the model mounted
read-only (its random dataset needs the model's tokenizer), against the server of the
lifetime, and saves a detailed result; the per-request arrays (``ttfts``, ``itls``,
``latencies``, ``output_lens``, ``errors``) become the same ``RequestResult`` rows the
built-in client gives, so the pooling, the intervals and the report are the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from images.serve.client import RequestResult
from manifest.serving import ServingProfile

RESULT_DIR = "/tmp/vllm-bench"  # noqa: S108 - inside the client's own container
RESULT_FILE = "run.json"


def bench_serve_command(
    profile: ServingProfile, base_url: str, *, concurrency: int, requests: int
) -> list[str]:
    """The ``vllm bench serve`` command of one run (pure)."""
    ab = profile.ab
    return [
        "vllm", "bench", "serve",
        "--backend", "openai",
        "--endpoint", "/v1/completions",
        "--base-url", base_url,
        "--model", profile.model.mount,
        "--served-model-name", profile.model.name,
        "--dataset-name", "random",
        "--random-input-len", str(ab.input_len),
        "--random-output-len", str(ab.output_len),
        "--num-prompts", str(requests),
        "--max-concurrency", str(concurrency),
        "--ignore-eos",
        "--temperature", "0",
        "--seed", str(ab.seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--save-result", "--save-detailed",
        "--result-dir", RESULT_DIR,
        "--result-filename", RESULT_FILE,
        "--disable-tqdm",
    ]  # fmt: skip


def results_from_bench(doc: Mapping[str, Any]) -> tuple[float, tuple[RequestResult, ...]]:
    """A ``vllm bench serve --save-detailed`` result as the run's duration and requests (pure).

    Raises ``ValueError`` naming the key when the result lacks what the A/B needs."""
    needed = ("duration", "ttfts", "itls", "latencies", "output_lens", "errors")
    missing = [key for key in needed if key not in doc]
    if missing:
        raise ValueError(
            f"the result has no {', '.join(missing)} (was it saved with --save-detailed?)"
        )
    ttfts: Sequence[float] = doc["ttfts"]
    count = len(ttfts)
    for key in needed[2:]:
        if len(doc[key]) != count:
            raise ValueError(f"the result's {key} has {len(doc[key])} entries, ttfts {count}")
    starts: Sequence[float] = doc.get("start_times") or [0.0] * count
    origin = min(starts) if starts else 0.0
    results = []
    for i in range(count):
        error = str(doc["errors"][i] or "")
        results.append(
            RequestResult(
                ok=not error,
                error=error or None,
                started=float(starts[i]) - origin,
                ttft=float(ttfts[i]) if not error else None,
                itl=tuple(float(v) for v in doc["itls"][i]),
                e2e=float(doc["latencies"][i]),
                output_tokens=int(doc["output_lens"][i]) if not error else 0,
                text="",
                finish_reason="length" if not error else None,
            )
        )
    return float(doc["duration"]), tuple(results)
