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
through ``bench.tcp_link``, a TCP relay that delays every byte by half a round trip each way
(so connection set-up and TLS handshakes pay their round trips too). ``tc qdisc ... netem``
would be the real thing, but this kernel has no netem qdisc. ``--pypi`` adds a small run
against https://pypi.org/simple/ (40 real pages per client per run; by hand only).

No timing is asserted: this prints tables.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import _common as c
from bench.http_client_runs import BASELINE, CLIENTS, Job, worker
from bench.http_world import Server, World, make_world, nginx
from bench.tcp_link import tcp_link

PYPI_NAMES = (
    "numpy", "torch", "transformers", "tokenizers", "fastapi", "pydantic", "pydantic-core",
    "aiohttp", "requests", "urllib3", "tqdm", "regex", "sentencepiece", "protobuf", "pillow",
    "psutil", "openai", "tiktoken", "xgrammar", "scipy", "pyzmq", "msgspec", "safetensors",
    "huggingface-hub", "jinja2", "sympy", "networkx", "fsspec", "filelock",
    "typing-extensions", "packaging", "pyyaml", "uvicorn", "httpx", "anyio", "starlette",
    "cloudpickle", "einops", "ninja", "opencv-python-headless",
)  # fmt: skip
NIQUESTS_PYTHON = "/tmp/niquests-venv/bin/python"


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


Plan = list[tuple[str, str, dict[str, Any]]]  # (row key, client, options of Bench.one)


def _parser() -> argparse.ArgumentParser:
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
    return p


def _client_pythons(niquests_python: str) -> dict[str, str]:
    """Client -> the python its worker runs with (this one, or ``niquests_python`` for the
    niquests clients when this one has no niquests); a client that does not import is
    skipped with a note. The baseline must import here."""
    pythons: dict[str, str] = {}
    for key, client in CLIENTS.items():
        python = sys.executable
        if key.startswith("niquests") and not probe(python, "niquests"):
            python = niquests_python if Path(niquests_python).is_file() else python
        if key == "urllib3" and not probe(python, "urllib3"):
            raise SystemExit("urllib3 (the baseline) is not installed in this python")
        missing = [m for m in client.modules if not probe(python, m)]
        if missing:
            print(f"note: {key} skipped: {', '.join(missing)} not importable by {python}")
        else:
            pythons[key] = python
    return pythons


def _installed(python: str) -> list[str]:
    """``name==version`` of every distribution ``python`` has."""
    return subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip


def _print_setup(pythons: dict[str, str], concurrency: int) -> None:
    """The revision, this python, the cores and the versions of the clients' libraries."""
    versions = _installed(sys.executable)
    if "niquests" in pythons:
        versions += _installed(pythons["niquests"])
    wanted = ("urllib3", "httpx", "httpcore", "h2", "niquests", "urllib3-future", "aiohttp")
    print(f"revision: {c.revision()}; python {sys.version.split()[0]}; "
          f"{os.cpu_count()} cores; concurrency {concurrency}")  # fmt: skip
    print("clients: " + ", ".join(v for v in versions if v.split("==")[0].lower() in wanted))


def _workload(world: World, concurrency: int) -> tuple[list[str], int]:
    """The world's pages and metadata files in a fixed interleaving, and their decoded bytes
    in all; printed."""
    order = random.Random(3).sample  # noqa: S311 (a fixed interleaving of pages and metadata)
    paths = order(world.pages + world.metadata, len(world.pages) + len(world.metadata))
    expected = sum(world.expected.values())
    print(f"workload: {len(world.pages)} pages ({world.page_bytes / 1e6:.1f} MB, "
          f"{world.page_gz_bytes / 1e6:.1f} MB gzipped, largest "
          f"{max(world.expected[p] for p in world.pages) / 1e6:.2f} MB) + "
          f"{len(world.metadata)} .metadata files, interleaved, {concurrency} at a time"
    )  # fmt: skip
    return paths, expected


def _plain_scenarios(
    bench: Bench, server: Server, paths: list[str], expected: int, skip: set[str]
) -> None:
    """The HTTP/1.1 clients over plain http: loopback, through ``latency_proxy`` at each
    ``--latency-ms``, and through the capped link of ``--slow`` (with and without gzip)."""
    args = bench.args
    plain = [k for k in bench.pythons if CLIENTS[k].plain and not CLIENTS[k].tls_only]
    base = f"http://127.0.0.1:{server.port}"
    h1_plan: Plan = [(k, k, {}) for k in plain]
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


def _tls_scenarios(bench: Bench, server: Server, paths: list[str], expected: int) -> None:
    """Every client that speaks TLS over https (HTTP/2 where it does): loopback, through
    ``tcp_link`` at each ``--link-rtt-ms``, and through the capped link of ``--slow``."""
    args = bench.args
    tls = [k for k in bench.pythons if k != "niquests"]
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


def _local_scenarios(
    bench: Bench, work: Path, paths: list[str], expected: int, skip: set[str]
) -> None:
    """nginx over the world in ``work``: one untimed warm-up, then every scenario not in
    ``skip``."""
    with nginx(work / "world", work / "nginx") as server:
        bench.server = server
        base = f"http://127.0.0.1:{server.port}"
        bench.one(BASELINE, Row("warm-up"), [base + u for u in paths])  # page cache, nginx
        _plain_scenarios(bench, server, paths, expected, skip)
        if "tls" not in skip:
            _tls_scenarios(bench, server, paths, expected)
        bench.server = None


def _pypi_scenario(bench: Bench) -> None:
    """``--pypi``: 40 real PEP 691 pages of https://pypi.org/simple/ per client and run."""
    keys = [k for k in ("urllib3", "httpx-h2", "niquests-h2", "aiohttp") if k in bench.pythons]
    urls = [f"https://pypi.org/simple/{n}/" for n in PYPI_NAMES]
    repeat = bench.args.repeat
    print(f"\nhttps://pypi.org/simple/: {len(urls)} pages x {len(keys)} clients x "
          f"{repeat} runs = {len(urls) * len(keys) * repeat} requests")  # fmt: skip
    bench.scenario("pypi.org, 40 PEP 691 pages, gzip", [(k, k, {}) for k in keys], urls, None)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        return worker()
    skip = set(filter(None, args.skip.split(",")))
    pythons = _client_pythons(args.niquests_python)
    _print_setup(pythons, args.concurrency)
    work = c.scratch() / "http-clients"
    world = make_world(work / "world", pages=args.pages, metadata=args.metadata)
    paths, expected = _workload(world, args.concurrency)
    bench = Bench(args, pythons)
    _local_scenarios(bench, work, paths, expected, skip)
    if args.pypi:
        _pypi_scenario(bench)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
