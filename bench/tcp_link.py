"""``tcp_link``: a TCP relay on 127.0.0.1 that delays every byte by half a round trip in each
direction, whatever the protocol on top (TLS, HTTP/2), so connection set-up and TLS handshakes
pay their round trips too; with a bandwidth, the bytes back share one token bucket
(``bench.latency_proxy.TokenBucket``). It stands in for ``tc qdisc ... netem`` where the kernel
has no netem qdisc, and counts the connections it relays.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from bench.latency_proxy import TokenBucket


@dataclass
class Link:
    port: int
    connections: int = 0
    _loop: list[asyncio.AbstractEventLoop] = field(default_factory=list)


@contextlib.contextmanager
def tcp_link(upstream_port: int, *, rtt_ms: float, mbit: float | None = None) -> Iterator[Link]:
    """A TCP relay on 127.0.0.1 to ``upstream_port`` that delays every byte by half of
    ``rtt_ms`` in each direction (the first bytes of a connection by one more round trip,
    its TCP handshake), whatever the protocol (TLS, HTTP/2); with ``mbit``, the bytes back
    share one token bucket. Unlike a real link it has no congestion window: the delay is
    the only limit besides the bucket. Runs in a daemon thread of this process."""
    half = rtt_ms / 2000
    ready = threading.Event()
    link = Link(0)

    async def pipe(
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        bucket: TokenBucket | None,
        extra: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if dst.can_write_eof():
                        dst.write_eof()
                    return
                if bucket is not None:
                    await bucket.take(len(data))
                dst.write(data)
                await dst.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await src.read(64 << 10)
                queue.put_nowait((loop.time() + half + extra, data))
                extra = 0.0
                if not data:
                    break
        except OSError:
            queue.put_nowait((0.0, b""))
        with contextlib.suppress(OSError):
            await sender

    async def serve(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bucket: TokenBucket | None
    ) -> None:
        link.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        try:
            await asyncio.gather(
                pipe(reader, up_writer, None, 2 * half), pipe(up_reader, writer, bucket, 0.0)
            )
        except asyncio.CancelledError:
            return  # the link is stopping
        finally:
            up_writer.close()
            writer.close()

    def main() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        link._loop.append(loop)
        bucket = TokenBucket(mbit * 1_000_000 / 8) if mbit else None

        async def start() -> asyncio.Server:
            return await asyncio.start_server(
                lambda r, w: serve(r, w, bucket), "127.0.0.1", 0, backlog=256
            )

        server = loop.run_until_complete(start())
        link.port = server.sockets[0].getsockname()[1]
        ready.set()
        loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=main, name="tcp-link", daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield link
    finally:
        link._loop[0].call_soon_threadsafe(link._loop[0].stop)
        thread.join(10)
