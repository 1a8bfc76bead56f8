"""The full closure against uv and pip-compile, over nginx.

    .venv/bin/python -m bench.closure [--repeat 3] [--projects 600 --roots 36] [--profile]

Generates a two-index world with ``testbed.closuregen`` (a public index of many projects with
several versions each and PEP 658 metadata files; the vendor stack with local labels and no
hashes on a second index), serves both with Debian's nginx (one server, ``/public/simple/``
and ``/vendor/simple/``, HTML pages, ETags and ranges on), and times in the same run:

- ``lock --no-verify``, empty cache   vs  ``uv pip compile --generate-hashes --no-cache``
- ``lock --no-verify``, warm cache    vs  ``uv pip compile --generate-hashes`` with a warm
                                          ``--cache-dir`` (filled by one untimed run)
- ``lock`` (verifying), empty cache   vs  ``pip-compile --generate-hashes`` (pip-tools) with an
                                          empty cache; it cannot bind a name to one index, so
                                          it gets ``--index-url public --extra-index-url vendor``
- ``lock --no-verify`` on the warm cache with its search records removed, into a new lock
  directory: the floor of a cold lock (nothing asked, the search run whole)

Each timing is the median of ``--repeat`` runs; every tool runs as a subprocess (interpreter
start and imports count), with its cache and temporary files under ``--scratch`` (uv's
``--no-cache`` directory by ``TMPDIR``); what creating a file costs there is printed first.
The world's pages are dated ``--page-age`` seconds back (a day). The closure of ours is
compared with uv's, name for name and version for version ("closure equal: yes/no").

``--profile`` also runs our cold ``lock --no-verify`` in-process under cProfile with a
per-thread CPU clock (the main thread and the pool's worker threads, merged separately),
prints the top 25 cumulative and own-time entries of each, wall vs CPU time, the client's
request counts, and ``-X importtime`` of the CLI (``build_image.py --help``) and of the
modules the lock command imports.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import os
import pstats
import re
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import _common as c

UV_TARGET = ["--python-version", "3.12", "--python-platform", "x86_64-manylinux_2_35"]
UV_TARGET += ["--only-binary", ":all:"]
SETTLED_AGE = 24 * 3600.0  # seconds: how old the world's pages are (--page-age), as a mirror's
# pip-compile resolves for the interpreter it runs on (pip-tools builds pip's finder without
# a target Python; pip's --python-version/--platform in --pip-args are ignored), so its leg
# runs against a world generated for the host's Python (same shape, same seed)


@dataclass
class Setup:
    tmp: Path
    world: object  # testbed.closuregen.World
    stack: Path
    uv_project: Path
    requirements_in: Path
    vendor_url: str
    public_url: str
    python: str


def pins_of(text: str) -> dict[str, str]:
    """name -> version of every ``name==version`` line (requirements/constraints/uv output)."""
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if "==" in line and not line.startswith(("#", "--")):
            name, _, rest = line.partition("==")
            out[re.sub(r"[-_.]+", "-", name.strip().split("[")[0]).lower()] = (
                rest.split()[0].rstrip("\\").split(";")[0]
            )
    return out


def generate_world(
    work: Path, projects: int, roots: int, seed: int, python: str = "3.12"
) -> object:
    from testbed.closuregen import generate

    shutil.rmtree(work, ignore_errors=True)  # generate() merges into an existing tree
    return generate(
        work, projects=projects, roots=roots, seed=seed, python=python, upper_bounds=False
    )


def host_python() -> str:
    r = c.run([c.PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
    return r.out.strip()


def prepare(tmp: Path, world: object, base: str, python: str = "3.12") -> Setup:
    from testbed.closuregen import World

    assert isinstance(world, World)
    tmp.mkdir(parents=True, exist_ok=True)
    vendor_url, public_url = f"{base}vendor/simple/", f"{base}public/simple/"
    stack = tmp / "stack" / "generated.yaml"
    stack.parent.mkdir(parents=True, exist_ok=True)
    stack.write_text(world.manifest(vendor_url, public_url, python=python))
    project = tmp / "uvproject"
    project.mkdir(exist_ok=True)
    (project / "pyproject.toml").write_text(world.uv_pyproject(vendor_url, public_url))
    req_in = tmp / "pipcompile" / "requirements.in"
    req_in.parent.mkdir(exist_ok=True)
    pins = [f"{n}=={v}" for n, v in sorted(world.pins.items())]
    req_in.write_text("".join(f"{line}\n" for line in [*pins, *world.roots]))
    return Setup(tmp, world, stack, project, req_in, vendor_url, public_url, python)


class Runner:
    def __init__(self, s: Setup, srv: c.Nginx) -> None:
        self.s, self.srv, self.n = s, srv, 0
        # every tool's temporary files (uv --no-cache keeps its cache there) beside our cache
        self.env = c.clean_env(XDG_CONFIG_HOME=str(s.tmp / "xdg"), TMPDIR=str(s.tmp))
        self.uv = c.tool("uv")
        self.pip_compile = c.tool("pip-compile")

    def _fresh(self, stem: str) -> Path:
        self.n += 1
        return self.s.tmp / f"{stem}{self.n}"

    def ours(self, cache: Path, *, verify: bool, out: Path | None = None) -> tuple[c.Run, Path]:
        """One lock into a new directory, or re-locked in place in ``out`` (as a release
        engineer re-locks: the previous lock is there, and its names are read ahead)."""
        out = out or self._fresh("lock")
        argv = [c.PYTHON, c.CLI, "lock", str(self.s.stack), "--out", str(out)]
        argv += ["--cache-dir", str(cache), *([] if verify else ["--no-verify"])]
        return c.must(c.run(argv, env=self.env), "build_image.py lock"), out / "constraints.txt"

    def uv_compile(self, cache: Path | None) -> tuple[c.Run, Path]:
        out = self._fresh("uv").with_suffix(".txt")
        argv = [self.uv, "pip", "compile", "pyproject.toml", *UV_TARGET, "--generate-hashes"]
        argv += ["--no-cache"] if cache is None else ["--cache-dir", str(cache)]
        argv += ["--no-header", "--no-annotate", "--quiet", "-o", str(out)]
        return c.must(c.run(argv, env=self.env, cwd=self.s.uv_project), "uv pip compile"), out

    def pip_compile_run(self) -> tuple[c.Run, Path]:
        out = self._fresh("pipc").with_suffix(".txt")
        cache = self._fresh("pipc-cache")
        pip_args = "--only-binary :all: --trusted-host 127.0.0.1 --no-cache-dir"
        argv = [self.pip_compile, "--generate-hashes", "--no-header", "--no-annotate", "--quiet"]
        argv += ["--index-url", self.s.public_url, "--extra-index-url", self.s.vendor_url]
        argv += ["--cache-dir", str(cache), "--pip-args", pip_args, "--no-strip-extras"]
        argv += ["-o", str(out), str(self.s.requirements_in)]
        r = c.run(argv, env=self.env, cwd=self.s.requirements_in.parent)
        return r, out


# the timed legs, in the table's order -> the key of its HTTP request count
LEGS = {
    "ours --no-verify cold": "ours cold",
    "uv --no-cache": "uv cold",
    "ours --no-verify warm": "ours warm",
    "uv warm cache": "uv warm",
    "ours, search from the cache": "ours floor",
    "ours verify cold": "ours verify",
    "ours verify cold, host world": "ours verify host",
    "pip-compile, host world": "pip-compile",
}


@dataclass
class Tally:
    """What the runs of ``bench`` measured: per leg, each run's wall, CPU and peak RSS and the
    HTTP requests of its last run; the closures of the last run (name -> version)."""

    times: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in LEGS})
    cpu: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in LEGS})
    rss: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in LEGS})
    requests: dict[str, int] = field(default_factory=dict)
    ours_pins: dict[str, str] = field(default_factory=dict)
    uv_pins: dict[str, str] = field(default_factory=dict)
    host_pins: dict[str, str] = field(default_factory=dict)  # ours, on the host world
    pipc_pins: dict[str, str] = field(default_factory=dict)
    pipc_note: str = ""  # why pip-compile has no closure

    def add(self, leg: str, run: c.Run, srv: c.Nginx, offset: int) -> None:
        """One run of ``leg``; its requests are those nginx logged after ``offset``."""
        self.times[leg].append(run.seconds)
        self.cpu[leg].append(run.cpu)
        self.rss[leg].append(run.rss_mb)
        self.requests[LEGS[leg]] = len(srv.requests_since(offset))


def bench(
    args: argparse.Namespace,
    s: Setup,
    hs: Setup,
    srv: c.Nginx,
    *,
    network: str = "",
    real: bool = False,
) -> int:
    """``s``: the 3.12 world; ``hs``: the host-Python world for the pip-compile leg.

    ``real``: a world of real-sized pages (``bench.realindex``), whose wheels are listed but
    not served: the verifying lock is left out, and the pip-compile leg is set beside our
    ``--no-verify`` lock of the host world."""
    r = Runner(s, srv)
    hr = Runner(hs, srv)
    tally = Tally()
    for i in range(args.repeat):
        _round(i, r, srv, tally, real=real)
        if not args.skip_pip_compile:
            _pip_compile_round(hr, s.tmp / f"hcache{i}", srv, tally, real=real)
        for stem in ("cache", "uvcache", "vcache", "hcache"):
            shutil.rmtree(s.tmp / f"{stem}{i}", ignore_errors=True)
        print(
            f"  run {i + 1}/{args.repeat}: "
            + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in tally.times.items() if v),
            flush=True,
        )
    return _report(args, s, hs, tally, network=network, real=real)


def _round(i: int, r: Runner, srv: c.Nginx, tally: Tally, *, real: bool) -> None:
    """Run ``i`` of ours and uv on the 3.12 world (its caches ``cache{i}``, ``uvcache{i}`` and
    ``vcache{i}`` in its directory): cold, warm, and (not ``real``) verifying."""
    tmp = r.s.tmp
    cache = tmp / f"cache{i}"
    uv_cache = tmp / f"uvcache{i}"
    off = srv.log_offset()
    run, constraints = r.ours(cache, verify=False)
    tally.add("ours --no-verify cold", run, srv, off)
    tally.ours_pins = pins_of(constraints.read_text())

    off = srv.log_offset()
    run, out = r.uv_compile(None)
    tally.add("uv --no-cache", run, srv, off)
    tally.uv_pins = pins_of(out.read_text())

    off = srv.log_offset()
    run, _ = r.ours(cache, verify=False, out=constraints.parent)  # a re-lock in place
    tally.add("ours --no-verify warm", run, srv, off)

    # the floor of a cold lock: no page or METADATA asked for (the cache holds them, fresh,
    # and the pages' parses, which one untimed run keeps), no search record and no previous
    # lock, so the search runs whole in one process
    for _ in range(2):  # the first keeps the parses; the second is timed
        shutil.rmtree(cache / "searches", ignore_errors=True)
        off = srv.log_offset()
        run, _ = r.ours(cache, verify=False)
    tally.add("ours, search from the cache", run, srv, off)

    r.uv_compile(uv_cache)  # fill uv's cache
    off = srv.log_offset()
    run, _ = r.uv_compile(uv_cache)
    tally.add("uv warm cache", run, srv, off)

    if not real:
        off = srv.log_offset()
        run, _ = r.ours(tmp / f"vcache{i}", verify=True)
        tally.add("ours verify cold", run, srv, off)


def _pip_compile_round(hr: Runner, cache: Path, srv: c.Nginx, tally: Tally, *, real: bool) -> None:
    """One run of the pip-compile leg on the host world: our lock into ``cache`` (verifying
    unless ``real``), then pip-compile's."""
    off = srv.log_offset()
    run, constraints = hr.ours(cache, verify=not real)
    tally.add("ours verify cold, host world", run, srv, off)
    tally.host_pins = pins_of(constraints.read_text())
    off = srv.log_offset()
    run, out = hr.pip_compile_run()
    tally.add("pip-compile, host world", run, srv, off)
    if run.code != 0:
        tally.pipc_note = f"pip-compile FAILED (exit {run.code}): " + _last_lines(run.err, 8)
    else:
        tally.pipc_pins = pins_of(out.read_text())


def _report(
    args: argparse.Namespace, s: Setup, hs: Setup, tally: Tally, *, network: str, real: bool
) -> int:
    """Print the world, the table of the legs, the closure comparison and the ratios against
    their goals; 0 when our closure equals uv's, else 1."""
    from testbed.closuregen import World

    w = s.world
    assert isinstance(w, World)
    med = {k: c.median(v) for k, v in tally.times.items() if v}
    print(
        f"\nclosure world: {w.projects} projects, {w.files} files on the indexes; "
        f"closure of {len(tally.ours_pins)} distributions (ours), {len(tally.uv_pins)} (uv); "
        f"median of {args.repeat}; nginx on 127.0.0.1, 2 indexes{network}"
    )
    rows = []
    for k, v in tally.times.items():
        if v:
            cpu_s = c.median(tally.cpu[k])
            req = str(tally.requests.get(LEGS[k], "-"))
            rss_mb = max(tally.rss[k])
            rows.append(
                [k, f"{med[k]:.3f} s", f"{min(v):.3f} s", f"{cpu_s:.3f} s", f"{rss_mb:.0f} MB", req]
            )
    print(c.table(["run", "median", "min", "CPU (median)", "peak RSS", "HTTP requests"], rows))
    equal = c.print_closure_equal(tally.ours_pins, tally.uv_pins)
    print("\nratios (ours/theirs, < 1 = ours faster) and goals:")
    cold = med["ours --no-verify cold"] / med["uv --no-cache"]
    warm = med["ours --no-verify warm"] / med["uv warm cache"]
    # a LAN mirror (0 ms) is CPU-bound: cold within 1.2x; any latency: cold at most uv's
    cgoal, wgoal = (1.0, 1.2) if network else (1.2, 1.0)
    print(f"  ours/uv cold:  {cold:.2f}   goal <= {cgoal}  {'met' if cold <= cgoal else 'NOT met'}")
    print(f"  ours/uv warm:  {warm:.2f}   goal <= {wgoal}  {'met' if warm <= wgoal else 'NOT met'}")
    floor = med["ours, search from the cache"] / med["uv --no-cache"]
    print(f"  ours with nothing asked / uv cold: {floor:.2f}   (no cold lock of ours is faster)")
    if "pip-compile, host world" in med:
        _report_pip_compile(med, hs, tally, real=real)
    return 0 if equal else 1


def _report_pip_compile(med: dict[str, float], hs: Setup, tally: Tally, *, real: bool) -> None:
    """The pip-compile leg: its ratio, its caveats, and whether its closure equals ours."""
    pc = med["ours verify cold, host world"] / med["pip-compile, host world"]
    what = "ours --no-verify" if real else "ours verify"
    print(f"  {what}/pip-compile (host world): {pc:.2f}   goal: far ahead (<< 1)")
    print(
        "  caveats: pip-compile cannot bind a name to one index; it got --index-url public "
        "--extra-index-url vendor and the same requirements. It resolves for the Python it "
        "runs on, so this leg (and our lock next to it) uses a world generated for the "
        f"host's CPython {hs.python} (same shape and seed)"
    )
    if tally.pipc_note:
        print("  " + tally.pipc_note)
    elif tally.pipc_pins:
        same = tally.pipc_pins == tally.host_pins
        print(f"  pip-compile's closure equals ours (host world): {'yes' if same else 'no'}")
        if not same:
            diff = sorted(set(tally.pipc_pins.items()) ^ set(tally.host_pins.items()))
            print(f"    differences (first 10): {diff[:10]}")


def _last_lines(text: str, n: int) -> str:
    return " | ".join(text.strip().splitlines()[-n:])


# ----------------------------------------------------------------------------- profile


@contextlib.contextmanager
def _profile_threads() -> Iterator[list[cProfile.Profile]]:
    """Profile every thread started inside the block (the lock's pool workers)."""
    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        prof = cProfile.Profile(time.thread_time)
        with lock:
            profiles.append(prof)
        prof.enable()
        try:
            original(self)
        finally:
            prof.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    try:
        yield profiles
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]


def _top(stats: pstats.Stats, n: int) -> str:
    buf = io.StringIO()
    stats.stream = buf  # type: ignore[attr-defined]
    stats.sort_stats("cumulative").print_stats(n)
    text = buf.getvalue()
    start = text.find("   ncalls")
    return text[start:].rstrip() if start >= 0 else text.rstrip()


def profile(s: Setup, top: int, *, warm: bool = False) -> None:
    cache = s.tmp / ("profile-cache-warm" if warm else "profile-cache")
    argv = ["lock", str(s.stack), "--out", str(s.tmp / "profile-lock"), "--no-verify"]
    argv += ["--cache-dir", str(cache)]
    import build_image

    if warm:  # one run unprofiled fills the cache; the profiled one revalidates every page
        build_image.main(argv, out=io.StringIO(), err=io.StringIO())

    captured: dict[str, object] = {}
    original_close = None
    try:  # read the client's request counters when the command closes it
        from resolver.index_client import IndexClient

        original_close = IndexClient.close

        def close(self: IndexClient) -> None:
            captured["stats"] = dict(self.stats)
            assert original_close is not None
            original_close(self)

        IndexClient.close = close  # type: ignore[method-assign]
    except ImportError:
        pass
    main_prof = cProfile.Profile(time.thread_time)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    with _profile_threads() as workers:
        main_prof.enable()
        code = build_image.main(argv, out=io.StringIO(), err=io.StringIO())
        main_prof.disable()
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    if original_close is not None:
        IndexClient.close = original_close  # type: ignore[method-assign]
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    print(f"\nprofile: {'warm' if warm else 'cold'} `lock --no-verify` in-process, exit {code}")
    print(
        f"  wall {wall:.3f} s, process CPU {cpu:.3f} s (user {ru1.ru_utime - ru0.ru_utime:.3f}, "
        f"sys {ru1.ru_stime - ru0.ru_stime:.3f}); {len(workers)} worker threads; "
        "cProfile overhead inflates both"
    )
    print(
        "  the tables below are per-thread CPU time (time.thread_time): waiting for the GIL, a "
        "lock, a socket or a future does not count; see wall vs CPU above for the waiting"
    )
    if "stats" in captured:
        print(f"  client requests: {captured['stats']}")
    print(f"\nmain thread, top {top} by cumulative time:")
    print(_top(pstats.Stats(main_prof), top))
    if workers:
        merged = pstats.Stats(workers[0])
        for p in workers[1:]:
            merged.add(p)
        print(f"\nworker threads merged ({len(workers)}), top {top} by cumulative time:")
        print(_top(merged, top))
        print(f"\nworker threads merged, top {top} by own (tottime) time:")
        buf = io.StringIO()
        merged.stream = buf  # type: ignore[attr-defined]
        merged.sort_stats("tottime").print_stats(top)
        text = buf.getvalue()
        print(text[text.find("   ncalls") :].rstrip())
    print(f"\nmain thread, top {top} by own (tottime) time:")
    buf = io.StringIO()
    mstats = pstats.Stats(main_prof, stream=buf)
    mstats.sort_stats("tottime").print_stats(top)
    text = buf.getvalue()
    print(text[text.find("   ncalls") :].rstrip())


def importtime(env: dict[str, str]) -> None:
    cases = {
        "build_image.py --help": [c.PYTHON, "-X", "importtime", c.CLI, "--help"],
        "lock path (build_image + resolver.lock/index_client/manifest/lockfile)": [
            c.PYTHON, "-X", "importtime", "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import build_image, resolver.lock, "
            "resolver.index_client, manifest, resolver.lockfile",
            str(c.ROOT),
        ],
    }  # fmt: skip
    for title, argv in cases.items():
        for _ in range(2):  # the first run may write .pyc files
            r = c.run(argv, env=env, cwd=c.ROOT)
        rows = []
        total = 0
        for line in r.err.splitlines():
            m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
            if m:
                own, cum, indent, mod = int(m[1]), int(m[2]), len(m[3]), m[4]
                total += own
                rows.append((cum, own, indent, mod))
        plain = c.run(argv[:1] + argv[3:], env=env, cwd=c.ROOT)
        print(
            f"\nimport time, {title}: {total / 1000:.1f} ms of imports "
            f"(whole process {plain.seconds * 1000:.0f} ms wall without -X importtime)"
        )
        top_level = sorted((r for r in rows if r[2] == 0), reverse=True)[:10]
        cells = [[m, f"{cu / 1000:.1f} ms", f"{ow / 1000:.1f} ms"] for cu, ow, _, m in top_level]
        print(c.table(["top-level import", "cumulative", "self"], cells))
        leaves = sorted(rows, key=lambda r: r[1], reverse=True)[:10]
        cells = [
            [m.strip(), f"{ow / 1000:.1f} ms", f"{cu / 1000:.1f} ms"] for cu, ow, _, m in leaves
        ]
        print(c.table(["heaviest modules by self time", "self", "cumulative"], cells))
        pkgs: dict[str, int] = {}
        for _, own, _, mod in rows:
            top = mod.strip().split(".")[0]
            pkgs[top] = pkgs.get(top, 0) + own
        cells = [[p, f"{t / 1000:.1f} ms"] for p, t in sorted(pkgs.items(), key=lambda x: -x[1])]
        print(c.table(["by top-level package (sum of self)", "time"], cells[:10]))


# ----------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing; the median is shown")
    ap.add_argument("--projects", type=int, default=None,
                    help="projects on the public index (600 small, 500 real)")  # fmt: skip
    ap.add_argument("--roots", type=int, default=None, help="requirement roots (36 small, 64 real)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--world", choices=("small", "real"), default="small",
                    help="small: testbed.closuregen; real: real-sized pages "
                    "(bench.realindex)")  # fmt: skip
    ap.add_argument("--page-age", type=float, default=SETTLED_AGE, metavar="SECONDS",
                    help="date the pages this far back (default a day, as a mirror's; 0: "
                    "as generated, seconds old)")  # fmt: skip
    ap.add_argument("--latency-ms", default="0",
                    help="comma-separated delays per response through bench.latency_proxy "
                    "(0: nginx directly), e.g. 0,30,80")  # fmt: skip
    ap.add_argument(
        "--mbit",
        type=float,
        default=None,
        help="cap the proxy's bandwidth (megabits per second, all responses)",
    )
    ap.add_argument("--public-index", default=None, metavar="URL",
                    help="by hand only: lock the vLLM 0.28.0 closure shape against this real "
                    "index (vendor pins from a loopback index), ours vs uv")  # fmt: skip
    ap.add_argument("--workdir", type=Path, default=None, help="keep the generated world here")
    ap.add_argument("--scratch", type=Path, default=None, metavar="DIR",
                    help="where every tool's cache and temporary files go (default "
                    "build/bench; a tmpfs, /dev/shm/bench, takes the disk out of the "
                    "timings)")  # fmt: skip
    ap.add_argument("--profile", action="store_true", help="profile our cold lock; import time")
    ap.add_argument("--profile-only", action="store_true", help="--profile without the timings")
    ap.add_argument("--profile-warm", action="store_true",
                    help="with --profile/--profile-only: profile a warm lock too")  # fmt: skip
    ap.add_argument("--skip-pip-compile", action="store_true")
    ap.add_argument("--top", type=int, default=25, help="profile entries to print")
    return ap


@dataclass(frozen=True)
class Worlds:
    """The generated world(s), each in ``work/py<python>-<shape>``: the 3.12 one, and the
    host Python's for the pip-compile leg (the 3.12 one again when that leg does not run)."""

    real: bool  # real-sized pages (bench.realindex)
    shape: str  # "<world>-p<projects>-r<roots>-s<seed>"
    world: object
    host: str  # the host's Python, "3.11"
    host_world: object
    need_host: bool  # host_world is a world of its own


def generate_worlds(args: argparse.Namespace, work: Path) -> Worlds:
    """Generate the world(s) of ``args`` under ``work``; print how long it took."""
    real = args.world == "real"
    projects = args.projects or (500 if real else 600)
    roots = args.roots or (64 if real else 36)
    shape = f"{args.world}-p{projects}-r{roots}-s{args.seed}"
    t = time.perf_counter()
    world = make_world(real, work / f"py3.12-{shape}", projects, roots, args.seed,
                       age=args.page_age)  # fmt: skip
    host = host_python()
    need_host = not args.profile_only and not args.skip_pip_compile and host != "3.12"
    hworld = world
    if need_host:
        hworld = make_world(real, work / f"py{host}-{shape}", projects, roots, args.seed,
                            python=host, age=args.page_age)  # fmt: skip
    print(f"generated the world(s) in {time.perf_counter() - t:.1f} s", flush=True)
    return Worlds(real, shape, world, host, hworld, need_host)


def bench_at(
    args: argparse.Namespace, srv: c.Nginx, delay: float, tmp: Path, worlds: Worlds
) -> int:
    """The timings (and the profile) of ``args`` with ``delay`` ms per response (0: nginx
    directly, else through ``bench.latency_proxy``); 0 when every closure was equal."""
    code = 0
    with contextlib.ExitStack() as stack:
        base, network = srv.url(""), ""
        if delay or args.mbit:
            from bench.latency_proxy import latency_proxy

            proxy = stack.enter_context(latency_proxy(srv.port, delay_ms=delay, mbit=args.mbit))
            base = proxy.url("")
            network = f"; through the latency proxy, {delay:g} ms per response" + (
                f", {args.mbit:g} Mbit/s" if args.mbit else ""
            )
        tag = f"d{delay:g}"
        shape = worlds.shape
        s = prepare(tmp / f"w312-{tag}", worlds.world, f"{base}py3.12-{shape}/")
        hs = s
        if worlds.need_host:
            hs = prepare(tmp / f"whost-{tag}", worlds.host_world,
                         f"{base}py{worlds.host}-{shape}/", python=worlds.host)  # fmt: skip
        if not args.profile_only:
            print(f"\n== {args.world} world{network or ', nginx directly'}", flush=True)
            code |= bench(args, s, hs, srv, network=network, real=worlds.real)
        if args.profile or args.profile_only:
            profile(s, args.top)
            if args.profile_warm:
                profile(s, args.top, warm=True)
    return code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.public_index:
        from bench.closure_public import run as run_public

        return run_public(args)
    delays = [float(d) for d in args.latency_ms.split(",") if d.strip()]

    tmp = Path(tempfile.mkdtemp(prefix="bench-closure-", dir=c.scratch(args.scratch)))
    try:
        work = args.workdir or tmp / "gen"
        c.compile_tool()
        print(f"revision: {c.revision()}; python {sys.version.split()[0]}")
        print(scratch_line(tmp))
        worlds = generate_worlds(args, work)
        code = 0
        with c.nginx(work, tmp / "nginx") as srv:
            for delay in delays:
                code |= bench_at(args, srv, delay, tmp, worlds)
        if args.profile or args.profile_only:
            importtime(c.clean_env())
        return code
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def scratch_line(tmp: Path) -> str:
    """Where the caches of every tool are (uv's ``--no-cache`` directory too, by ``TMPDIR``),
    and what creating a file there costs: a cold lock writes hundreds."""
    return (
        f"caches and temporary files under {tmp.parent}; creating a file there takes "
        f"{c.file_create_us(tmp):.0f} us"
    )


def make_world(
    real: bool,
    work: Path,
    projects: int,
    roots: int,
    seed: int,
    *,
    python: str = "3.12",
    age: float = SETTLED_AGE,
) -> object:
    if not real:
        world = generate_world(work, projects, roots, seed, python=python)
    else:
        from bench.realindex import generate

        world = generate(work, projects=projects, roots=roots, seed=seed, python=python)
    if age:
        settle(work, age)
    return world


def settle(work: Path, age: float) -> None:
    """Date the world's pages ``age`` seconds back: an index whose pages have not changed
    since. nginx serves the mtime as ``Last-Modified``; this tool takes a page unchanged for
    an hour as fresh for a while (``resolver/freshness.py``), uv any page without cache
    headers."""
    when = time.time() - age
    for page in work.rglob("index.*"):
        os.utime(page, (when, when))


if __name__ == "__main__":
    sys.exit(main())
