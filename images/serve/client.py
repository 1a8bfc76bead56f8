"""The streaming OpenAI-compatible client of the serving stage, with ``vllm bench serve``'s
metric definitions, so its numbers compare with upstream's.

Per request (``RequestResult``), as vLLM's benchmark client measures them:

- the clock starts just before the request is sent;
- TTFT is the time to the first Server-Sent Event that carries a choice;
- each later event with a choice appends one inter-token latency (the time since the
  previous one): an event may carry more than one token, as vLLM's may;
- E2E latency is the time of the last event with a choice (not of ``[DONE]``);
- output tokens are the server's count (``usage.completion_tokens``, asked for with
  ``stream_options.include_usage``), else the number of events with a choice;
- a request succeeds when the answer is HTTP 200 and at least one choice arrived.

HTTP goes through ``core.transport`` (no retries: a failed request is counted, not hidden).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import TransportError
from core.transport import Transport

CHUNK = 64 * 1024


@dataclass(frozen=True, kw_only=True)
class RequestResult:
    ok: bool
    error: str | None
    started: float  # seconds since the run began
    ttft: float | None  # seconds
    itl: tuple[float, ...]  # seconds between events after the first
    e2e: float  # seconds to the last event with a choice (or to the failure)
    output_tokens: int
    text: str
    finish_reason: str | None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: ``(e2e - ttft) / (tokens - 1)``."""
        if self.ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "error": self.error,
            "started": round(self.started, 6),
            "ttft": None if self.ttft is None else round(self.ttft, 6),
            "itl": [round(v, 6) for v in self.itl],
            "e2e": round(self.e2e, 6),
            "output_tokens": self.output_tokens,
            "finish_reason": self.finish_reason,
        }


def completion_body(
    model: str, prompt: str | Sequence[int], max_tokens: int, *, ignore_eos: bool
) -> dict[str, Any]:
    """A streaming ``/v1/completions`` body, as vLLM's benchmark sends it (greedy)."""
    prompt = prompt if isinstance(prompt, str) else list(prompt)
    return _streaming(model, max_tokens, prompt=prompt, ignore_eos=ignore_eos)


def chat_body(model: str, message: str, max_tokens: int) -> dict[str, Any]:
    return _streaming(model, max_tokens, messages=[{"role": "user", "content": message}])


def _streaming(model: str, max_tokens: int, **fields: Any) -> dict[str, Any]:
    """A greedy streaming body that asks for the usage (the server's token count)."""
    return {
        "model": model,
        **fields,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def sse_events(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The ``data:`` payloads of a Server-Sent Events stream, as they complete (comments
    and other fields are skipped)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while (cut := buffer.find(b"\n\n")) >= 0:
            event, buffer = buffer[:cut], buffer[cut + 2 :]
            yield from _data_lines(event)
    yield from _data_lines(buffer)


def _data_lines(event: bytes) -> Iterator[bytes]:
    for raw in event.splitlines():
        line = raw.strip()
        if line.startswith(b"data:"):
            yield line[5:].strip()


def _choice_text(choice: Mapping[str, Any]) -> str:
    if "text" in choice:
        return str(choice.get("text") or "")
    delta = choice.get("delta") or choice.get("message") or {}
    return str(delta.get("content") or "") if isinstance(delta, Mapping) else ""


def stream_request(
    transport: Transport,
    url: str,
    body: Mapping[str, Any],
    *,
    timeout: float,
    origin: float,
    clock: Callable[[], float] = time.perf_counter,
) -> RequestResult:
    """POST ``body`` to ``url`` and read the stream; ``origin`` is the run's start on
    ``clock``. Never raises for a failed request: the result says what failed."""
    started = clock()
    ttft: float | None = None
    last = started
    itl: list[float] = []
    text: list[str] = []
    events = 0
    usage_tokens: int | None = None
    finish: str | None = None

    def result(error: str | None, *, end: float) -> RequestResult:
        """The result of what was read so far: failed with ``error``, or succeeded (None);
        ``end`` is when the request ended, on ``clock``."""
        return RequestResult(
            ok=error is None,
            error=error,
            started=started - origin,
            ttft=ttft,
            itl=tuple(itl),
            e2e=end - started,
            output_tokens=usage_tokens if usage_tokens is not None else events,
            text="".join(text),
            finish_reason=finish,
        )

    def failed(error: str) -> RequestResult:
        return result(error, end=clock())

    try:
        resp = transport.request(
            "POST",
            url,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
            body=json.dumps(body).encode(),
            stream=True,
            timeout=timeout,
        )
    except TransportError as exc:
        return failed(f"{exc.name}: {exc.detail}")
    with resp:
        if resp.status != 200:
            detail = resp.content[:300].decode("utf-8", "replace").strip()
            return failed(f"HTTP {resp.status}: {detail}")
        try:
            for payload in sse_events(resp.iter_bytes(CHUNK, eager=True)):
                if payload == b"[DONE]":
                    break
                try:
                    data = json.loads(payload)
                except ValueError:
                    return failed(f"an event is not JSON: {payload[:100]!r}")
                choices = data.get("choices") if isinstance(data, dict) else None
                if choices:
                    now = clock()
                    if ttft is None:
                        ttft = now - started
                    else:
                        itl.append(now - last)
                    last = now
                    events += 1
                    text.append(_choice_text(choices[0]))
                    finish = choices[0].get("finish_reason") or finish
                elif isinstance(data, dict) and isinstance(data.get("usage"), dict):
                    tokens = data["usage"].get("completion_tokens")
                    if isinstance(tokens, int):
                        usage_tokens = tokens
        except TransportError as exc:
            return failed(f"the stream broke off: {exc.name}: {exc.detail}")
    if ttft is None:
        return failed("no event with a choice arrived")
    return result(None, end=last)


def get_json(transport: Transport, url: str, *, timeout: float) -> tuple[int, Any]:
    """GET ``url``: the status and the JSON body (None when it is not JSON)."""
    with transport.request("GET", url, timeout=timeout) as resp:
        try:
            return resp.status, resp.json()
        except ValueError:
            return resp.status, None
