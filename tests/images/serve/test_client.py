"""The streaming client against the demo's stand-in server (a real HTTP server on 127.0.0.1),
and its Server-Sent Events reader. No timing is asserted: only what was counted."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.transport import Transport
from images.serve.client import chat_body, completion_body, sse_events, stream_request
from testbed.serving import stand_in_server

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stand_in(request: pytest.FixtureRequest) -> Iterator[str]:
    """The demo's stand-in ``vllm serve`` on 127.0.0.1; ``env`` from the test's marker."""
    marker = request.node.get_closest_marker("stand_in_env")
    extra = dict(marker.args[0]) if marker else {}
    with stand_in_server(
        {"VLLM_DEMO_TOKEN_DELAY_MS": "1", "VLLM_DEMO_TTFT_MS": "1", **extra}
    ) as url:
        yield url


def test_a_streamed_completion_counts_what_vllm_bench_serve_counts(stand_in: str) -> None:
    body = completion_body("demo-model", [11, 12, 13, 14], 7, ignore_eos=True)
    with Transport(timeout=10, min_rate=None) as transport:
        result = stream_request(
            transport, f"{stand_in}/v1/completions", body, timeout=10, origin=time.perf_counter()
        )
    assert result.ok, result.error
    assert result.output_tokens == 7  # the server's usage.completion_tokens
    assert len(result.itl) == 6  # one per event after the first
    assert result.text == " tok0 tok1 tok2 tok3 tok4 tok5 tok6"
    assert result.finish_reason == "length"
    assert result.ttft is not None
    assert result.tpot == pytest.approx((result.e2e - result.ttft) / 6)
    assert result.e2e >= result.ttft + sum(result.itl) * 0.999


def test_a_chat_request_is_answered_from_the_stand_in_table(stand_in: str) -> None:
    body = chat_body("demo-model", "What is the capital of China?", 32)
    with Transport(timeout=10, min_rate=None) as transport:
        result = stream_request(
            transport, f"{stand_in}/v1/chat/completions", body, timeout=10, origin=0.0
        )
    assert (result.ok, result.text, result.finish_reason) == (
        True,
        "The capital of China is Beijing.",
        "stop",
    )


@pytest.mark.stand_in_env({"VLLM_DEMO_FAIL_EVERY": "2"})
def test_a_failed_request_is_a_result_not_an_exception(stand_in: str) -> None:
    body = completion_body("demo-model", "hello", 3, ignore_eos=True)
    with Transport(timeout=10, min_rate=None) as transport:
        first, second = (
            stream_request(transport, f"{stand_in}/v1/completions", body, timeout=10, origin=0.0)
            for _ in range(2)
        )
    assert first.ok
    assert not second.ok
    assert second.error == ('HTTP 500: {"error": {"message": "stand-in failure of request 2"}}')
    assert (second.ttft, second.output_tokens) == (None, 0)


def test_a_refused_connection_is_a_failed_request() -> None:
    with Transport(timeout=2, min_rate=None) as transport:
        result = stream_request(
            transport,
            f"http://127.0.0.1:{_free_port()}/v1/completions",
            completion_body("m", "x", 2, ignore_eos=True),
            timeout=2,
            origin=0.0,
        )
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("NewConnectionError: ")


def test_sse_events_are_found_across_chunk_boundaries() -> None:
    stream = [b'data: {"a"', b": 1}\n", b"\n: a comment\n\nda", b"ta: [DONE]\n\n", b"data: tail"]
    assert list(sse_events(iter(stream))) == [b'{"a": 1}', b"[DONE]", b"tail"]
