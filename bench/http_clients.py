"""Choosing the resolver's HTTP client: a lock's GETs through urllib3, httpx, niquests, aiohttp.

Run from the repository root with a venv of its own (never the project's: niquests brings
``urllib3-future``, which replaces ``urllib3``)::

    python3 -m venv /tmp/clients-venv
    /tmp/clients-venv/bin/pip install urllib3 'httpx[http2]' aiohttp packaging
    python3 -m venv /tmp/niquests-venv && /tmp/niquests-venv/bin/pip install niquests
    /tmp/clients-venv/bin/python -m bench.http_clients [--repeat 3] [--pypi]

The workload is a lock's: a few hundred PEP 691 project pages of real sizes (the world of
``bench.realindex`` plus ten pages of about 2 MB, numpy's size) asked with
``Accept-Encoding: gzip`` (nginx serves them pre-compressed, ``gzip_static``), and a few hundred
small PEP 658 ``.metadata`` files, all at once with a bounded concurrency (``--concurrency``, 32),
every body read whole and content-decoded, from one host. Each client runs in a process of its
own (``--worker``, a JSON job on stdin, a JSON result on stdout), so its CPU time (user + sys)
and peak RSS are its own; the clients run interleaved, in a rotated order, ``--repeat`` times.
Requests, connections and bytes sent are counted from nginx's access log.

Scenarios (plain ``http://`` for the HTTP/1.1 clients, through ``bench.latency_proxy``):
loopback, 30 and 80 ms per response, and a 20 Mbit/s link at 150 ms with and without gzip.
HTTP/2 needs TLS and ALPN: nginx also listens with ``ssl http2`` (a self-signed certificate
made with the openssl CLI), and every client that speaks TLS is timed there on loopback and
through ``tcp_link`` below, a TCP relay that delays every byte by half a round trip each way
(so connection set-up and TLS handshakes pay their round trips too). ``tc qdisc ... netem``
would be the real thing, but this kernel has no netem qdisc. ``--pypi`` adds a small run
against https://pypi.org/simple/ (40 real pages per client per run; by hand only).

No timing is asserted: this prints tables.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import random
import resource
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench import _common as c
from bench.latency_proxy import TokenBucket

JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"
WORLD_MARK = "http-clients-world-v1"
PYPI_NAMES = (
    "numpy", "torch", "transformers", "tokenizers", "fastapi", "pydantic", "pydantic-core",
    "aiohttp", "requests", "urllib3", "tqdm", "regex", "sentencepiece", "protobuf", "pillow",
    "psutil", "openai", "tiktoken", "xgrammar", "scipy", "pyzmq", "msgspec", "safetensors",
    "huggingface-hub", "jinja2", "sympy", "networkx", "fsspec", "filelock",
    "typing-extensions", "packaging", "pyyaml", "uvicorn", "httpx", "anyio", "starlette",
    "cloudpickle", "einops", "ninja", "opencv-python-headless",
)  # fmt: skip
NIQUESTS_PYTHON = "/tmp/niquests-venv/bin/python"


# ----------------------------------------------------------------------------- the clients
# Each runs in the worker process: it GETs every URL of the job, ``concurrency`` at a time,
# reads every body whole (content-decoded) and returns (responses, decoded bytes).


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
            r = client.get(url, headers=headers)
            if r.status_code != 200:
                raise RuntimeError(f"{url}: {r.status_code}")
            return len(r.content)

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
                    r = await client.get(url, headers=headers)
                    if r.status_code != 200:
                        raise RuntimeError(f"{url}: {r.status_code}")
                    sizes.append(len(r.content))

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
            r = session.get(url, headers=headers, verify=verify)
            if r.status_code != 200:
                raise RuntimeError(f"{url}: {r.status_code}")
            return len(r.content)

        return _threads(job, get)


def _run_niquests_multiplexed(job: Job) -> tuple[int, int]:
    """Lazy responses on one multiplexed session, at most ``concurrency`` in flight."""
    headers = job.headers()
    verify = _niquests_verify(job)
    count = total = 0
    with _niquests_session(job, multiplexed=True) as session:
        pending: deque[Any] = deque()

        def settle(r: Any) -> int:
            if r.status_code != 200:
                raise RuntimeError(f"{r.url}: {r.status_code}")
            return len(r.content)

        for url in job.urls:
            if len(pending) >= job.concurrency:
                r = pending.popleft()
                session.gather(r)
                total += settle(r)
                count += 1
            pending.append(session.get(url, headers=headers, verify=verify))
        session.gather()
        for r in pending:
            total += settle(r)
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


# ----------------------------------------------------------------------------- the world


@dataclass
class World:
    root: Path
    pages: list[str]  # paths under the root, e.g. /public/simple/name/
    metadata: list[str]
    expected: dict[str, int]  # path -> decoded size
    page_bytes: int = 0
    page_gz_bytes: int = 0


def make_world(out: Path, *, pages: int, metadata: int) -> World:
    """The real-sized world of ``bench.realindex`` (cached in ``out``), ten pages of about
    2 MB more, and a ``.gz`` beside every page for nginx's ``gzip_static``."""
    from bench import realindex

    if not (out / WORLD_MARK).is_file():
        shutil.rmtree(out, ignore_errors=True)
        realindex.generate(out)
        for k in range(10):
            _giant_page(out / "public" / "simple" / f"giant-{k}", k)
        for page in (out / "public" / "simple").glob("*/index.json"):
            page.with_suffix(".json.gz").write_bytes(gzip.compress(page.read_bytes(), 6))
        (out / WORLD_MARK).write_text("done\n")
    simple = out / "public" / "simple"
    rng = random.Random(7)  # noqa: S311 (a fixed sample, not a secret)
    names = sorted(p.name for p in simple.iterdir() if p.is_dir())
    giants = [n for n in names if n.startswith("giant-")]
    chosen = [*rng.sample([n for n in names if n not in giants], pages - len(giants)), *giants]
    metas = sorted(p.name for p in (out / "public" / "files").glob("*.metadata"))
    world = World(out, [], [], {})
    for n in chosen:
        path = f"/public/simple/{n}/"
        world.pages.append(path)
        world.expected[path] = (simple / n / "index.json").stat().st_size
        world.page_bytes += world.expected[path]
        world.page_gz_bytes += (simple / n / "index.json.gz").stat().st_size
    for m in rng.sample(metas, metadata):
        path = f"/public/files/{quote(m)}"
        world.metadata.append(path)
        world.expected[path] = (out / "public" / "files" / m).stat().st_size
    return world


def _giant_page(page_dir: Path, k: int) -> None:
    """A page of 150 releases of 30 wheels and an sdist (about 2 MB, numpy's size)."""
    import hashlib

    from bench.realindex import PLATFORMS, PYTHONS

    name = f"giant-{k}"
    files: list[dict[str, object]] = []
    versions = [f"{1 + v // 20}.{v % 20}.{k}" for v in range(150)]
    for v in versions:
        names = [f"giant_{k}-{v}-{p}-{p}-{plat}.whl" for p in PYTHONS for plat in PLATFORMS]
        for fn in [*names, f"giant_{k}-{v}.tar.gz"]:
            digest = hashlib.sha256(fn.encode()).hexdigest()
            files.append({
                "filename": fn,
                "url": "../../files/" + quote(fn),
                "hashes": {"sha256": digest},
                "requires-python": ">=3.9",
                "size": 1_000_000 + len(fn) * 997,
                "upload-time": "2025-06-01T12:00:00.000000Z",
                "yanked": False,
                "core-metadata": {"sha256": digest},
                "data-dist-info-metadata": {"sha256": digest},
            })  # fmt: skip
    doc = {"meta": {"api-version": "1.1"}, "name": name, "versions": versions, "files": files}
    page_dir.mkdir(parents=True)
    (page_dir / "index.json").write_text(json.dumps(doc, separators=(",", ":")))


# ----------------------------------------------------------------------------- servers


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int  # plain http/1.1
    tls_port: int  # https, http/1.1 and h2 by ALPN
    log: Path
    cert: Path

    def offset(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def since(self, offset: int) -> tuple[int, int, int, set[str]]:
        """Requests, connections, bytes sent and protocols logged after ``offset``."""
        with self.log.open("rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines()
        conns: set[str] = set()
        protos: set[str] = set()
        sent = 0
        for line in lines:
            conn, rest = line.split(" ", 1)
            conns.add(conn)
            request, _, tail = rest.rpartition('" ')
            protos.add(request.rsplit(" ", 1)[-1])
            sent += int(tail.split()[1])
        return len(lines), len(conns), sent, protos


def _certificate(workdir: Path) -> tuple[Path, Path]:
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "7", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def nginx(root: Path, workdir: Path) -> Iterator[Server]:
    """nginx from ``tests.support.indexgen.nginx_config``, plus: an access log with the
    connection of each request, ``gzip_static``, and a second server with ``ssl http2``."""
    from tests.support.indexgen import NGINX, nginx_config, stop_nginx

    if not NGINX.is_file():
        raise SystemExit(f"{NGINX} is missing: apt-get install -y nginx")
    shutil.rmtree(workdir, ignore_errors=True)
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (workdir / "tmp" / kind).mkdir(parents=True, exist_ok=True)
    cert, key = _certificate(workdir)
    port, tls_port = c.free_port(), c.free_port()
    log = workdir / "access.log"
    conf = nginx_config(root, port, workdir)
    extra = (
        "log_format clients '$pid-$connection \"$request\" $status $bytes_sent';\n"
        f'    access_log "{log}" clients;\n'
        "    gzip_static on;\n"
        "    http2_max_concurrent_streams 128;"
    )
    if "access_log off;" not in conf:
        raise SystemExit("tests.support.indexgen.nginx_config changed: no 'access_log off;'")
    conf = conf.replace("access_log off;", extra, 1)
    tls_server = f"""
    server {{
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate "{cert}";
        ssl_certificate_key "{key}";
        ssl_protocols TLSv1.2 TLSv1.3;
        root "{root.resolve()}";
        index $pypi_index index.html;
        location / {{
            add_header Vary Accept;
        }}
    }}
"""
    body = conf.rstrip()
    assert body.endswith("}")
    conf = body[:-1] + tls_server + "}\n"
    (workdir / "nginx.conf").write_text(conf)
    err = workdir / "error.log"
    cmd = [str(NGINX), "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-e", str(err)]
    with (workdir / "nginx.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait(proc, port, err)
        _wait(proc, tls_port, err)
        yield Server(proc, port, tls_port, log, cert)
    finally:
        stop_nginx(proc)


def _wait(proc: subprocess.Popen[bytes], port: int, err: Path) -> None:
    import socket

    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"nginx exited: {err.read_text('utf-8', 'replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"nginx did not listen on {port}")
        time.sleep(0.02)


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


# ----------------------------------------------------------------------------- runs


@dataclass
class Row:
    label: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)
    imports: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    conns: list[int] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    protos: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


@dataclass
class Bench:
    args: argparse.Namespace
    pythons: dict[str, str]  # client -> the python its worker runs with
    server: Server | None = None

    def one(
        self, key: str, row: Row, urls: list[str], *, gzip_: bool = True,
        cafile: str | None = None, expected: int | None = None,
    ) -> None:  # fmt: skip
        job = Job(key, urls, self.args.concurrency, gzip_, cafile)
        offset = self.server.offset() if self.server else 0
        proc = subprocess.run(
            [self.pythons[key], "-m", "bench.http_clients", "--worker"],
            input=json.dumps(job.__dict__), capture_output=True, text=True, check=False,
            cwd=c.ROOT,
        )  # fmt: skip
        if proc.returncode != 0:
            row.errors.append(proc.stderr.strip().splitlines()[-1] if proc.stderr else "failed")
            print(f"    {row.label}: FAILED {row.errors[-1]}", flush=True)
            return
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        if out["count"] != len(urls) or (expected is not None and out["bytes"] != expected):
            row.errors.append(f"{out['count']} bodies, {out['bytes']} bytes")
        row.walls.append(out["wall"])
        row.cpus.append(out["cpu"])
        row.rss.append(out["rss_mb"])
        row.imports.append(out["import"])
        if self.server is not None:
            time.sleep(0.05)  # nginx logs a request once its response is sent
            n, conns, sent, protos = self.server.since(offset)
            row.requests.append(n)
            row.conns.append(conns)
            row.sent.append(sent)
            row.protos |= protos

    def scenario(
        self, title: str, plan: list[tuple[str, str, dict[str, Any]]], urls: list[str],
        expected: int | None,
    ) -> dict[str, Row]:  # fmt: skip
        """Time every (row key, client, options) of ``plan`` ``--repeat`` times, interleaved
        in a rotated order; print the table."""
        print(f"\n== {title}", flush=True)
        rows = {key: Row(key) for key, _, _ in plan}
        for i in range(self.args.repeat):
            order = plan[i % len(plan) :] + plan[: i % len(plan)]
            for key, client, opts in order:
                self.one(client, rows[key], urls, expected=expected, **opts)
            done = "  ".join(f"{k} {r.walls[-1]:.2f}" for k, r in rows.items() if r.walls)
            print(f"  run {i + 1}/{self.args.repeat}: {done}", flush=True)
        print_table(title, rows)
        return rows


def print_table(title: str, rows: dict[str, Row]) -> None:
    base = rows.get(BASELINE) or rows.get(f"{BASELINE} tls")
    base_wall = c.median(base.walls) if base and base.walls else None
    table = []
    for key, r in rows.items():
        if not r.walls:
            table.append([key, "failed", "", "", "", "", "", "", "", ""])
            continue
        wall = c.median(r.walls)
        ratio = f"{wall / base_wall:.2f}" if base_wall else "-"
        table.append([
            key,
            f"{wall:.3f} s",
            f"{min(r.walls):.3f}-{max(r.walls):.3f}",
            ratio,
            f"{c.median(r.cpus):.3f} s",
            f"{c.median(r.rss):.0f} MB",
            str(int(c.median(r.requests))) if r.requests else "-",
            str(int(c.median(r.conns))) if r.conns else "-",
            f"{c.median(r.sent) / 1e6:.1f} MB" if r.sent else "-",
            ",".join(sorted(r.protos)) or "-",
        ])  # fmt: skip
        if r.errors:
            table[-1][0] += f" ({len(r.errors)} bad)"
    heads = ["client", "median", "range", "/urllib3", "CPU", "peak RSS", "requests", "conns",
             "sent", "protocol"]  # fmt: skip
    print(f"\n{title} (median of {len(next(iter(rows.values())).walls)})")
    print(c.table(heads, table), flush=True)
    for key, r in rows.items():
        for error in sorted(set(r.errors)):
            print(f"  {key}: {r.errors.count(error)} bad run(s): {error}")


def probe(python: str, module: str) -> bool:
    r = subprocess.run([python, "-c", f"import {module}"], capture_output=True, check=False)
    return r.returncode == 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--pages", type=int, default=300)
    p.add_argument("--metadata", type=int, default=300)
    p.add_argument("--latency-ms", default="30,80", help="latency_proxy delays (plain http)")
    p.add_argument("--link-rtt-ms", default="80", help="tcp_link round trips (TLS rows)")
    p.add_argument("--slow", default="20:150", help="MBIT:MS for the capped link ('' skips)")
    p.add_argument("--skip", default="", help="comma list of: loopback,latency,slow,tls")
    p.add_argument("--pypi", action="store_true", help="also 40 pages x clients x --repeat "
                   "from https://pypi.org/simple/ (by hand only)")  # fmt: skip
    p.add_argument("--niquests-python", default=NIQUESTS_PYTHON,
                   help="a python with niquests (a venv of its own: urllib3-future replaces "
                   "urllib3)")  # fmt: skip
    args = p.parse_args(argv)
    if args.worker:
        return worker()
    skip = set(filter(None, args.skip.split(",")))

    pythons: dict[str, str] = {}
    for key, client in CLIENTS.items():
        python = sys.executable
        if key.startswith("niquests") and not probe(python, "niquests"):
            python = args.niquests_python if Path(args.niquests_python).is_file() else python
        if key == "urllib3" and not probe(python, "urllib3"):
            raise SystemExit("urllib3 (the baseline) is not installed in this python")
        missing = [m for m in client.modules if not probe(python, m)]
        if missing:
            print(f"note: {key} skipped: {', '.join(missing)} not importable by {python}")
        else:
            pythons[key] = python
    versions = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    if "niquests" in pythons:
        versions += subprocess.run(
            [pythons["niquests"], "-m", "pip", "list", "--format=freeze"],
            capture_output=True, text=True, check=False,
        ).stdout.split()  # fmt: skip
    wanted = ("urllib3", "httpx", "httpcore", "h2", "niquests", "urllib3-future", "aiohttp")
    print(f"revision: {c.revision()}; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} cores; concurrency {args.concurrency}")  # fmt: skip
    print("clients: " + ", ".join(v for v in versions if v.split("==")[0].lower() in wanted))

    work = c.scratch() / "http-clients"
    world = make_world(work / "world", pages=args.pages, metadata=args.metadata)
    order = random.Random(3).sample  # noqa: S311 (a fixed interleaving of pages and metadata)
    paths = order(world.pages + world.metadata, len(world.pages) + len(world.metadata))
    expected = sum(world.expected.values())
    print(f"workload: {len(world.pages)} pages ({world.page_bytes / 1e6:.1f} MB, "
          f"{world.page_gz_bytes / 1e6:.1f} MB gzipped, largest "
          f"{max(world.expected[p] for p in world.pages) / 1e6:.2f} MB) + "
          f"{len(world.metadata)} .metadata files, interleaved, {args.concurrency} at a time"
    )  # fmt: skip

    bench = Bench(args, pythons)
    plain = [k for k in pythons if CLIENTS[k].plain and not CLIENTS[k].tls_only]
    tls = [k for k in pythons if k != "niquests"]
    with nginx(work / "world", work / "nginx") as server:
        bench.server = server
        base = f"http://127.0.0.1:{server.port}"
        bench.one(BASELINE, Row("warm-up"), [base + u for u in paths])  # page cache, nginx
        h1_plan: list[tuple[str, str, dict[str, Any]]] = [(k, k, {}) for k in plain]
        if "loopback" not in skip:
            bench.scenario("loopback nginx, http/1.1", h1_plan,
                           [base + u for u in paths], expected)  # fmt: skip
        from bench.latency_proxy import latency_proxy

        for ms in [float(x) for x in args.latency_ms.split(",") if x and "latency" not in skip]:
            with latency_proxy(server.port, delay_ms=ms) as proxy:
                bench.scenario(f"latency_proxy {ms:g} ms per response, http/1.1", h1_plan,
                               [proxy.url(u) for u in paths], expected)  # fmt: skip
        if args.slow and "slow" not in skip:
            mbit, ms = (float(x) for x in args.slow.split(":"))
            plan = [*h1_plan, ("urllib3 no gzip", BASELINE, {"gzip_": False})]
            with latency_proxy(server.port, delay_ms=ms, mbit=mbit) as proxy:
                bench.scenario(f"latency_proxy {mbit:g} Mbit/s, {ms:g} ms, http/1.1", plan,
                               [proxy.url(u) for u in paths], expected)  # fmt: skip
        if "tls" not in skip:
            cafile = str(server.cert)
            tls_plan = [(f"{k} tls" if k == BASELINE else k, k, {"cafile": cafile}) for k in tls]
            tbase = f"https://127.0.0.1:{server.tls_port}"
            bench.scenario("loopback nginx, https (h2 where the client does it)", tls_plan,
                           [tbase + u for u in paths], expected)  # fmt: skip
            for rtt in [float(x) for x in args.link_rtt_ms.split(",") if x]:
                with tcp_link(server.tls_port, rtt_ms=rtt) as link:
                    bench.scenario(f"tcp_link {rtt:g} ms round trip, https", tls_plan,
                                   [f"https://127.0.0.1:{link.port}{u}" for u in paths],
                                   expected)  # fmt: skip
            if args.slow:
                mbit, ms = (float(x) for x in args.slow.split(":"))
                with tcp_link(server.tls_port, rtt_ms=ms, mbit=mbit) as link:
                    bench.scenario(f"tcp_link {mbit:g} Mbit/s, {ms:g} ms round trip, https",
                                   tls_plan,
                                   [f"https://127.0.0.1:{link.port}{u}" for u in paths],
                                   expected)  # fmt: skip
        bench.server = None
    if args.pypi:
        keys = [k for k in ("urllib3", "httpx-h2", "niquests-h2", "aiohttp") if k in pythons]
        urls = [f"https://pypi.org/simple/{n}/" for n in PYPI_NAMES]
        print(f"\nhttps://pypi.org/simple/: {len(urls)} pages x {len(keys)} clients x "
              f"{args.repeat} runs = {len(urls) * len(keys) * args.repeat} requests")  # fmt: skip
        bench.scenario("pypi.org, 40 PEP 691 pages, gzip", [(k, k, {}) for k in keys], urls, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
