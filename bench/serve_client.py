"""The A/B client's accuracy: measured TTFT and TPOT against the stand-in server's set pace.

    .venv/bin/python -m bench.serve_client [--delay-ms 10] [--ttft-ms 20] [--requests 32]

The demo's stand-in ``vllm serve`` (``demo/vllm/vllm/server.py``) runs on 127.0.0.1 with no
jitter, so every request has the same true pace: the first token after ``ttft + prefill x
input_len``, then one token every ``delay``. The built-in client (``images.serve.client``)
measures it at several concurrency levels, exactly as an A/B does; the table shows the
measured p50/p99 against the set values, and the error in milliseconds. Python's
``time.sleep`` in the server and thread scheduling in both are part of the error: it is an
upper bound of the client's own error.
"""

from __future__ import annotations

import argparse
import sys

from core.transport import Transport
from images.serve.ab import drive, prompts
from images.serve.stats import percentile
from testbed.serving import stand_in_server

PREFILL_US = 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--delay-ms", type=float, default=10.0)
    parser.add_argument("--ttft-ms", type=float, default=20.0)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    env = {
        "VLLM_DEMO_TOKEN_DELAY_MS": str(args.delay_ms),
        "VLLM_DEMO_TTFT_MS": str(args.ttft_ms),
        "VLLM_DEMO_PREFILL_US_PER_TOKEN": str(PREFILL_US),
        "VLLM_DEMO_JITTER": "0",
    }
    true_ttft = args.ttft_ms + PREFILL_US * args.input_len / 1000
    sys.stdout.write(
        f"stand-in pace: TTFT {true_ttft:.2f} ms ({args.ttft_ms:g} + {PREFILL_US:g} us x "
        f"{args.input_len} prompt tokens), TPOT {args.delay_ms:g} ms; {args.requests} requests "
        f"of {args.output_len} tokens per level\n\n"
        "conc  TTFT p50   p99    err p50 | TPOT p50  p99    err p50 | ITL mean  tok/s\n"
    )
    with (
        stand_in_server(env, model="m") as url,
        Transport(timeout=30, connections=max(args.concurrency), min_rate=None) as transport,
    ):
        workload = prompts(args.requests, args.input_len, seed=0)
        for level in args.concurrency:
            drive(
                transport,
                url,
                "m",
                workload[:level],
                concurrency=level,
                output_len=4,
                timeout=30,
            )
            duration, results = drive(
                    transport, url, "m", workload, concurrency=level,
                    output_len=args.output_len, timeout=30,
                )  # fmt: skip
            ok = [r for r in results if r.ok]
            ttft = [r.ttft * 1000 for r in ok if r.ttft is not None]
            tpot = [t * 1000 for r in ok if (t := r.tpot) is not None]
            itl = [v * 1000 for r in ok for v in r.itl]
            tokens = sum(r.output_tokens for r in ok)
            sys.stdout.write(
                f"{level:>4}  {percentile(ttft, 50):7.2f} {percentile(ttft, 99):7.2f} "
                f"{percentile(ttft, 50) - true_ttft:+7.2f} | {percentile(tpot, 50):7.2f} "
                f"{percentile(tpot, 99):7.2f} {percentile(tpot, 50) - args.delay_ms:+7.2f} | "
                f"{sum(itl) / len(itl):7.2f} {tokens / duration:7.1f}"
                + ("" if len(ok) == len(results) else f"  ({len(results) - len(ok)} failed)")
                + "\n"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
