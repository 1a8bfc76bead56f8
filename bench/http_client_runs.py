"""The HTTP clients ``bench.http_clients`` compares, and the worker that times one of them.

Each client GETs every URL of a ``Job``, ``concurrency`` at a time, reads every body whole
(content-decoded) and returns (responses, decoded bytes); an answer other than 200 raises.
``worker`` runs one job in a process of its own (a JSON job on stdin, a JSON result on stdout:
the run's wall and CPU time, the client's import time, the peak RSS, the responses and the
bytes), so what it measures is that client's alone. A client's library is imported inside its
run: this module loads with the standard library only, in any venv.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import ssl
import sys
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class Job:
    client: str
    urls: list[str]
    concurrency: int
    gzip: bool
    cafile: str | None  # a CA file for https (None: the system's)

    def headers(self) -> dict[str, str]:
        return {"Accept": JSON_ACCEPT, "Accept-Encoding": "gzip" if self.gzip else "identity"}

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.cafile)


def _threads(job: Job, get: Callable[[str], int]) -> tuple[int, int]:
    with ThreadPoolExecutor(job.concurrency) as pool:
        sizes = list(pool.map(get, job.urls))
    return len(sizes), sum(sizes)


def _size(url: str, r: Any) -> int:
    """The decoded body size of an httpx or niquests response; an answer other than 200
    raises."""
    if r.status_code != 200:
        raise RuntimeError(f"{url}: {r.status_code}")
    return len(r.content)


def _run_urllib3(job: Job) -> tuple[int, int]:
    import urllib3

    pool = urllib3.PoolManager(
        maxsize=job.concurrency, block=True, retries=False, ssl_context=job.ssl_context()
    )
    headers = job.headers()

    def get(url: str) -> int:
        r = pool.request("GET", url, headers=headers, preload_content=True, decode_content=True)
        if r.status != 200:
            raise RuntimeError(f"{url}: {r.status}")
        return len(r.data)

    return _threads(job, get)


def _run_httpx(job: Job, *, http2: bool) -> tuple[int, int]:
    import httpx  # type: ignore[import-not-found]

    limits = httpx.Limits(
        max_connections=job.concurrency, max_keepalive_connections=job.concurrency
    )
    headers = job.headers()
    with httpx.Client(
        http2=http2, limits=limits, verify=job.ssl_context(), timeout=120, trust_env=False
    ) as client:

        def get(url: str) -> int:
            return _size(url, client.get(url, headers=headers))

        return _threads(job, get)


def _run_httpx_async(job: Job) -> tuple[int, int]:
    """httpx's AsyncClient over HTTP/2: ``concurrency`` tasks, one multiplexed connection."""
    import httpx

    headers = job.headers()
    sizes: list[int] = []

    async def main() -> None:
        async with httpx.AsyncClient(
            http2=True, verify=job.ssl_context(), timeout=120, trust_env=False
        ) as client:
            todo = iter(job.urls)

            async def lane() -> None:
                for url in todo:
                    sizes.append(_size(url, await client.get(url, headers=headers)))

            await asyncio.gather(*(lane() for _ in range(job.concurrency)))

    asyncio.run(main())
    return len(sizes), sum(sizes)


def _niquests_session(job: Job, *, multiplexed: bool) -> Any:
    import niquests  # type: ignore[import-not-found]

    return niquests.Session(
        multiplexed=multiplexed,
        disable_http3=True,
        pool_connections=4,
        pool_maxsize=job.concurrency,
        revocation_configuration=None,  # no OCSP requests of its own
        timeout=120,
    )


def _niquests_verify(job: Job) -> str | bool:
    """Given per request: a CA file given to the Session failed to verify (niquests 3.21)."""
    return job.cafile or os.environ.get("SSL_CERT_FILE") or True


def _run_niquests_threads(job: Job) -> tuple[int, int]:
    headers = job.headers()
    verify = _niquests_verify(job)
    with _niquests_session(job, multiplexed=False) as session:

        def get(url: str) -> int:
            return _size(url, session.get(url, headers=headers, verify=verify))

        return _threads(job, get)


def _run_niquests_multiplexed(job: Job) -> tuple[int, int]:
    """Lazy responses on one multiplexed session, at most ``concurrency`` in flight."""
    headers = job.headers()
    verify = _niquests_verify(job)
    count = total = 0
    with _niquests_session(job, multiplexed=True) as session:
        pending: deque[Any] = deque()

        for url in job.urls:
            if len(pending) >= job.concurrency:
                r = pending.popleft()
                session.gather(r)
                total += _size(r.url, r)
                count += 1
            pending.append(session.get(url, headers=headers, verify=verify))
        session.gather()
        for r in pending:
            total += _size(r.url, r)
            count += 1
    return count, total


def _run_aiohttp(job: Job) -> tuple[int, int]:
    import aiohttp  # type: ignore[import-not-found]

    headers = job.headers()
    sizes: list[int] = []

    async def main() -> None:
        connector = aiohttp.TCPConnector(limit=job.concurrency, ssl=job.ssl_context())
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            todo = iter(job.urls)

            async def lane() -> None:
                for url in todo:
                    async with session.get(url, headers=headers) as r:
                        body = await r.read()
                        if r.status != 200:
                            raise RuntimeError(f"{url}: {r.status}")
                        sizes.append(len(body))

            await asyncio.gather(*(lane() for _ in range(job.concurrency)))

    asyncio.run(main())
    return len(sizes), sum(sizes)


@dataclass(frozen=True)
class Client:
    label: str
    modules: tuple[str, ...]  # what the worker imports first (and the probe for "installed")
    run: Callable[[Job], tuple[int, int]]
    tls_only: bool = False  # HTTP/2: needs TLS + ALPN
    plain: bool = True  # also timed over plain http


CLIENTS = {
    "urllib3": Client("urllib3 2 PoolManager + threads", ("urllib3",), _run_urllib3),
    "httpx": Client("httpx Client h1 + threads", ("httpx",), lambda j: _run_httpx(j, http2=False)),
    "httpx-h2": Client(
        "httpx Client h2 + threads",
        ("httpx", "h2"),
        lambda j: _run_httpx(j, http2=True),
        tls_only=True,
    ),
    "httpx-h2-async": Client(
        "httpx AsyncClient h2", ("httpx", "h2"), _run_httpx_async, tls_only=True
    ),
    "niquests": Client("niquests h1 + threads", ("niquests",), _run_niquests_threads),
    "niquests-h2": Client(
        "niquests h2 multiplexed", ("niquests",), _run_niquests_multiplexed, tls_only=True
    ),
    "aiohttp": Client("aiohttp (asyncio, h1)", ("aiohttp",), _run_aiohttp),
}
BASELINE = "urllib3"


def worker() -> int:
    """``--worker``: run one job (JSON on stdin), print the result (JSON on stdout)."""
    job = Job(**json.loads(sys.stdin.read()))
    client = CLIENTS[job.client]
    t0 = time.perf_counter()
    for module in client.modules:
        __import__(module)
    t1 = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    count, total = client.run(job)
    t2 = time.perf_counter()
    r2 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r2.ru_utime - r1.ru_utime) + (r2.ru_stime - r1.ru_stime)
    result = {
        "wall": t2 - t1,
        "cpu": cpu,
        "import": t1 - t0,
        "rss_mb": r2.ru_maxrss / 1024,
        "count": count,
        "bytes": total,
    }
    print(json.dumps(result))
    return 0
