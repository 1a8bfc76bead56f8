"""A loopback reverse proxy that adds latency to every response and can cap the bandwidth.

    with latency_proxy("127.0.0.1", nginx_port, delay_ms=30, mbit=200) as proxy:
        proxy.url("public/simple/")

It listens on 127.0.0.1 and forwards HTTP/1.1 keep-alive requests to one upstream on
127.0.0.1 (nginx), one upstream connection per client connection. Each response waits
``delay_ms`` before its first byte is sent back (a round trip to a distant index, per
request, as a CDN far away adds it); with ``mbit`` set, the bodies of all responses share one
token bucket of that many megabits per second (a slow link shared by parallel downloads).
Bodies are relayed in 64 KB pieces, never held whole. Requests are GETs and HEADs without
bodies; responses carry a Content-Length, or none (304, 204) — nginx serving static files
sends nothing else. Counters: ``requests``, ``bytes``.

Runs an asyncio loop in a daemon thread of the calling process; it stops with the block.
Loopback only, for benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

PIECE = 64 << 10


class TokenBucket:
    """A token bucket of ``rate`` bytes per second, shared by every connection."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = 0.0
        self.stamp = time.monotonic()
        self.lock = asyncio.Lock()

    async def take(self, n: int) -> None:
        async with self.lock:
            now = time.monotonic()
            self.tokens = min(self.tokens + (now - self.stamp) * self.rate, self.rate * 0.05)
            self.stamp = now
            self.tokens -= n
            if self.tokens < 0:
                await asyncio.sleep(-self.tokens / self.rate)


@dataclass
class Proxy:
    port: int
    requests: int = 0
    bytes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None


def _length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == b"content-length":
            return int(value.strip())
    return None


async def _serve(
    proxy: Proxy,
    upstream_port: int,
    *,
    delay: float,
    bucket: TokenBucket | None,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
) -> None:
    up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
    try:
        while True:
            head = await _read_head(reader)
            if head is None:
                return
            proxy.requests += 1
            method = head.split(b" ", 1)[0]
            up_writer.write(head)
            await up_writer.drain()
            started = time.monotonic()
            resp = await _read_head(up_reader)
            if resp is None:
                return
            wait = delay - (time.monotonic() - started)
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(resp)
            status = resp.split(b" ", 2)[1]
            left = _length(resp)
            if method == b"HEAD" or status in (b"304", b"204") or left is None:
                left = 0
            while left > 0:
                piece = await up_reader.read(min(PIECE, left))
                if not piece:
                    return
                left -= len(piece)
                proxy.bytes += len(piece)
                if bucket is not None:
                    await bucket.take(len(piece))
                writer.write(piece)
                await writer.drain()
            await writer.drain()
    except ConnectionError:
        return
    finally:
        up_writer.close()
        writer.close()


@contextlib.contextmanager
def latency_proxy(
    upstream_port: int, *, delay_ms: float, mbit: float | None = None
) -> Iterator[Proxy]:
    """Serve a proxy to ``127.0.0.1:upstream_port`` for the block."""
    ready = threading.Event()
    holder: dict[str, object] = {}
    bucket_rate = mbit * 1_000_000 / 8 if mbit else None

    def main() -> None:
        loop = asyncio.new_event_loop()
        holder["loop"] = loop
        bucket = TokenBucket(bucket_rate) if bucket_rate else None

        async def start() -> asyncio.base_events.Server:
            return await asyncio.start_server(
                lambda r, w: _serve(
                    proxy_ref[0],
                    upstream_port,
                    delay=delay_ms / 1000,
                    bucket=bucket,
                    reader=r,
                    writer=w,
                ),
                "127.0.0.1",
                0,
                backlog=256,
            )

        server = loop.run_until_complete(start())
        port = server.sockets[0].getsockname()[1]
        proxy_ref[0] = Proxy(port)
        holder["server"] = server
        ready.set()
        loop.run_forever()
        server.close()
        loop.run_until_complete(server.wait_closed())
        loop.close()

    proxy_ref: list[Proxy] = [Proxy(0)]
    thread = threading.Thread(target=main, name="latency-proxy", daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield proxy_ref[0]
    finally:
        loop = holder["loop"]
        assert isinstance(loop, asyncio.AbstractEventLoop)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
