"""The demo stand-in's ``vllm serve``: a small OpenAI-compatible streaming server (stdlib only).

It answers like vLLM's server on the paths the serving stage uses: ``/health``, ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions``, with Server-Sent Events when ``stream`` is
true (chunked, one event per token, ``stream_options.include_usage`` honoured, ``[DONE]``
last). There is no model: the "tokens" are words, produced at a fixed pace, so two images
that differ only in that pace serve measurably differently.

The pace and the faults come from the environment (set with ``docker run -e``, or as ``ENV``
in an image built on this one):

    VLLM_DEMO_TOKEN_DELAY_MS       time between two tokens (default 10)
    VLLM_DEMO_TTFT_MS              time before the first token (default 20), plus
    VLLM_DEMO_PREFILL_US_PER_TOKEN per prompt token (default 20)
    VLLM_DEMO_JITTER               each delay varies by up to this fraction (default 0.5),
                                   by a hash of the prompt: the same prompt is paced the same
                                   on every image, different prompts differently, like a
                                   real model's varying cost per request
    VLLM_DEMO_FAIL_EVERY           every Nth generation request fails with HTTP 500 (default 0)
    VLLM_DEMO_STARTUP_S            seconds before /health answers 200 (default 0)
    VLLM_DEMO_NEVER_HEALTHY        1: /health answers 503 forever
    VLLM_ATTENTION_BACKEND         the backend its start-up log names (default FLASH_ATTN)

A request for ``max_tokens`` tokens gets them all with ``ignore_eos`` (finish ``length``);
otherwise a canned answer ends it early (finish ``stop``). The canned answers: a question about
the capital of China is answered "The capital of China is Beijing."
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Pace:
    token_delay: float
    jitter: float
    ttft: float
    prefill_per_token: float
    fail_every: int
    startup: float
    never_healthy: bool
    backend: str

    @classmethod
    def from_env(cls, env: dict[str, str]) -> Pace:
        return cls(
            token_delay=float(env.get("VLLM_DEMO_TOKEN_DELAY_MS", "10")) / 1000,
            jitter=min(max(float(env.get("VLLM_DEMO_JITTER", "0.5")), 0.0), 1.0),
            ttft=float(env.get("VLLM_DEMO_TTFT_MS", "20")) / 1000,
            prefill_per_token=float(env.get("VLLM_DEMO_PREFILL_US_PER_TOKEN", "20")) / 1e6,
            fail_every=int(env.get("VLLM_DEMO_FAIL_EVERY", "0")),
            startup=float(env.get("VLLM_DEMO_STARTUP_S", "0")),
            never_healthy=env.get("VLLM_DEMO_NEVER_HEALTHY", "0") == "1",
            backend=env.get("VLLM_ATTENTION_BACKEND", "FLASH_ATTN"),
        )


def factors(key: bytes, count: int, jitter: float) -> list[float]:
    """``count`` pace factors in ``[1 - jitter, 1 + jitter]``, from a hash of ``key``."""
    out = []
    for i in range(count):
        digest = hashlib.blake2b(key + i.to_bytes(4, "big"), digest_size=8).digest()
        u = int.from_bytes(digest, "big") / 2**64
        out.append(1.0 - jitter + 2.0 * jitter * u)
    return out


CANNED = {"capital of china": "The capital of China is Beijing."}


def answer_words(text: str) -> list[str] | None:
    lowered = text.lower()
    for question, answer in CANNED.items():
        if question in lowered:
            return answer.split(" ")
    return None


def prompt_text_and_length(prompt: Any) -> tuple[str, int]:
    """A completion prompt: a string (a token per word) or a list of token ids."""
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return "", len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt, max(1, len(prompt.split()))
    raise ValueError("prompt must be a string or a list of token ids")


def read_request(body: Any, *, chat: bool) -> tuple[str, int, int]:
    """A generation request's prompt text, its length in tokens and the tokens it asks for
    (``max_tokens``, else ``max_completion_tokens``, else 16). A malformed request raises
    TypeError, ValueError or AttributeError."""
    if chat:
        messages = body.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in messages)
        prompt_len = max(1, len(text.split()))
    else:
        text, prompt_len = prompt_text_and_length(body.get("prompt", ""))
    max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    return text, prompt_len, max_tokens


def reply_tokens(text: str, max_tokens: int, *, ignore_eos: bool) -> tuple[list[str], str]:
    """The tokens that answer ``text`` and the finish reason: the canned answer cut at
    ``max_tokens`` (``stop`` when it fits), or with ``ignore_eos`` or no canned answer exactly
    ``max_tokens`` tokens, the canned answer (if any) then filler (``length``)."""
    words = answer_words(text) or []
    canned = [(" " if i else "") + w for i, w in enumerate(words)]
    if words and not ignore_eos:
        tokens = canned[:max_tokens]
        finish = "stop" if len(canned) <= max_tokens else "length"
    else:  # exactly max_tokens tokens: the canned answer (if any), then filler
        filler = [f" tok{i}" for i in range(max_tokens - len(canned))]
        tokens = (canned + filler)[:max_tokens]
        finish = "length"
    return tokens, finish


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], model: str, pace: Pace) -> None:
        super().__init__(address, Handler)
        self.model = model
        self.pace = pace
        self.started = time.monotonic()
        self.counter = itertools.count(1)
        self.counter_lock = threading.Lock()

    def next_request(self) -> int:
        with self.counter_lock:
            return next(self.counter)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def setup(self) -> None:
        super().setup()
        # one small write per token: without TCP_NODELAY, Nagle's algorithm holds a token
        # back until the client's delayed ACK (40 ms), as uvicorn avoids by setting it too
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        return

    def _json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        pace = self.server.pace
        if self.path == "/health":
            ready = time.monotonic() - self.server.started >= pace.startup
            status = 503 if pace.never_healthy or not ready else 200
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            model = {"id": self.server.model, "object": "model", "owned_by": "vllm-demo"}
            self._json(200, {"object": "list", "data": [model]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._json(400, {"error": {"message": "the body is not JSON"}})
            return
        if self.path == "/v1/completions":
            chat = False
        elif self.path == "/v1/chat/completions":
            chat = True
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        number = self.server.next_request()
        pace = self.server.pace
        if pace.fail_every and number % pace.fail_every == 0:
            self._json(500, {"error": {"message": f"stand-in failure of request {number}"}})
            return
        try:
            text, prompt_len, max_tokens = read_request(body, chat=chat)
        except (TypeError, ValueError, AttributeError) as exc:
            self._json(400, {"error": {"message": str(exc)}})
            return
        tokens, finish = reply_tokens(text, max_tokens, ignore_eos=bool(body.get("ignore_eos")))
        self._reply(body, chat, tokens, finish, prompt_len)

    def _reply(
        self, body: dict[str, Any], chat: bool, tokens: list[str], finish: str, prompt_len: int
    ) -> None:
        """Wait out the prompt's pace, then send ``tokens``: streamed one event per token, or
        whole once every token's delay has passed."""
        pace = self.server.pace
        key = json.dumps(body.get("messages") if chat else body.get("prompt")).encode()
        pacing = factors(key, len(tokens) + 1, pace.jitter)
        time.sleep((pace.ttft + pace.prefill_per_token * prompt_len) * pacing[0])
        usage = {
            "prompt_tokens": prompt_len,
            "completion_tokens": len(tokens),
            "total_tokens": prompt_len + len(tokens),
        }
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._stream(chat, tokens, finish, usage if include_usage else None, pacing[1:])
        else:
            for factor in pacing[2:]:
                time.sleep(pace.token_delay * factor)
            self._json(200, self._whole(chat, "".join(tokens), finish, usage))

    def _whole(self, chat: bool, text: str, finish: str, usage: dict[str, int]) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.server.model,
            "choices": [choice],
            "usage": usage,
        }

    def _events(
        self, chat: bool, tokens: list[str], finish: str, usage: dict[str, int] | None
    ) -> Iterator[dict[str, Any]]:
        ident = f"cmpl-{uuid.uuid4().hex}"
        base = {
            "id": ident,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.server.model,
        }
        for i, token in enumerate(tokens):
            last = i == len(tokens) - 1
            choice: dict[str, Any] = {"index": 0, "finish_reason": finish if last else None}
            if chat:
                choice["delta"] = (
                    {"role": "assistant", "content": token} if i == 0 else {"content": token}
                )
            else:
                choice["text"] = token
            yield {**base, "choices": [choice]}
        if usage is not None:
            yield {**base, "choices": [], "usage": usage}

    def _stream(
        self,
        chat: bool,
        tokens: list[str],
        finish: str,
        usage: dict[str, int] | None,
        pacing: list[float],
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        delay = self.server.pace.token_delay
        for i, event in enumerate(self._events(chat, tokens, finish, usage)):
            if 0 < i < len(tokens):
                time.sleep(delay * pacing[i])
            self._chunk(f"data: {json.dumps(event)}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


def serve(model: str, host: str, port: int, served_name: str | None, extra: list[str]) -> int:
    pace = Pace.from_env(dict(os.environ))
    name = served_name or model
    log = sys.stderr
    log.write(f"INFO vllm-demo: serving {model} as {name} on {host}:{port} (args: {extra})\n")
    log.write(f"INFO vllm-demo: Using {pace.backend} attention backend (stand-in)\n")
    log.write("INFO vllm-demo: compilation mode FULL_AND_PIECEWISE, cudagraph capture (stand-in)\n")
    log.write(
        f"INFO vllm-demo: pace: first token {pace.ttft * 1000:g} ms, then one token every "
        f"{pace.token_delay * 1000:g} ms\n"
    )
    log.flush()
    server = Server((host, port), name, pace)

    def stop(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # docker stop: PID 1 has no default SIGTERM action

    signal.signal(signal.SIGTERM, stop)
    log.write("INFO:     Application startup complete.\n")
    log.flush()
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
