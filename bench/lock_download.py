"""`lock` (verifying: download + sha256) against `pip download`.

    .venv/bin/python -m bench.lock_download [--scale 0.1] [--repeat 3] [--workdir DIR]

Builds an index shaped like the vendor's (multi-hundred-MB ``linux_x86_64`` cp312 wheels made
with ``payload_bytes``, no hash fragments, PEP 503 HTML), serves it with Debian's nginx on
127.0.0.1 (access log on), and times in the same run:

- cold: ``build_image.py lock`` with an empty ``--cache-dir`` vs ``pip download --no-deps
  --only-binary :all: --no-cache-dir`` of the same files for the same target;
- warm: our re-lock with the cache warm vs ``pip download`` with its http cache warm; the
  nginx access log says how many wheels each one downloaded again (ours must be 0);
- the disk's raw hashing speed: hashlib.sha256 over the wheel files and ``sha256sum``.

The ``peak RSS`` column is the largest resident set of the tool's process in those runs
(``ru_maxrss`` from ``os.wait4``): a lock's must not grow with the size of the wheels.

Every timing is the median of ``--repeat`` runs (cold runs use a fresh cache each time). Each
tool runs as a subprocess, so interpreter start and imports are included on both sides.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import _common as c

MB = 1_000_000
TARGET = ["--python-version", "3.12", "--platform", "linux_x86_64"]
TARGET += ["--implementation", "cp", "--abi", "cp312"]


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    tags: str
    kind: str
    mb: float  # payload size at scale 1


PINS = (
    Pin("torch", "2.11.0.post2+musa5.2.0", "cp312-cp312-linux_x86_64", "native", 600),
    Pin("torch-musa", "2.11.0.post2+musa5.2.0", "cp312-cp312-linux_x86_64", "native", 300),
    Pin("triton", "3.2.0", "cp312-cp312-linux_x86_64", "native", 200),
    Pin("tilelang-musa", "0.1.12+musa.2", "cp38-abi3-linux_x86_64", "abi3", 20),
    Pin("deep-gemm", "2.1.0+musa", "cp312-cp312-linux_x86_64", "native", 5),
    Pin("mate", "0.2.7", "py3-none-any", "pure", 0.2),
)


def build_world(work: Path, scale: float) -> tuple[Path, list[Path]]:
    """The index tree under ``work/world`` (reused when the same scale was built before)."""
    from testbed.distributions import WheelSpec, build_wheel
    from testbed.simple_index import Listing, write_simple_index

    world = work / f"world-{scale:g}"
    wheels: list[Path] = []
    for pin in PINS:
        spec = WheelSpec(
            name=pin.name,
            version=pin.version,
            tags=pin.tags,
            payload_bytes=int(pin.mb * MB * scale),
        )
        path = world / "wheels" / spec.filename
        if not path.exists():
            build_wheel(spec, path.parent)
        wheels.append(path)
    write_simple_index(world / "vendor", [Listing(path=w, hash="none") for w in wheels])
    write_simple_index(world / "public", [])
    return world, wheels


def manifest(base: str) -> str:
    packages = "".join(
        f'  {p.name}: {{version: "{p.version}", index: mthreads, wheel: {p.kind}}}\n' for p in PINS
    )
    return (
        'schema: 1\nname: bench-download\nrelease: "0.0.0"\n'
        'target: {python: "3.12", arch: x86_64, glibc: "2.35"}\n'
        f'indexes:\n  mthreads: {{url: "{base}vendor/simple/"}}\n'
        f'  pypi: {{url: "{base}public/simple/"}}\n'
        f"default_index: pypi\npackages:\n{packages}requirements: []\n"
    )


def hash_speed(wheels: list[Path]) -> tuple[float, float, float]:
    """(MB, seconds for hashlib, seconds for sha256sum) over the wheel files."""
    total = sum(w.stat().st_size for w in wheels) / MB
    t = time.perf_counter()
    for w in wheels:
        h = hashlib.sha256()
        with w.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
    py = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run(["sha256sum", *map(str, wheels)], check=True, capture_output=True)
    return total, py, time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--scale", type=float, default=1.0, help="wheel sizes x SCALE (0.1 = quick)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing; the median is shown")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the wheels here (reused)")
    ap.add_argument(
        "--mbit",
        type=float,
        default=None,
        help="serve through bench.latency_proxy with this bandwidth cap (Mbit/s, shared by "
        "all downloads); prints the lock's time against the link's",
    )
    ap.add_argument("--delay-ms", type=float, default=0.0, help="with --mbit: per response")
    args = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="bench-dl-"))
    work = args.workdir or tmp
    work.mkdir(parents=True, exist_ok=True)
    try:
        return _bench(args, work, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(args: argparse.Namespace, work: Path, tmp: Path) -> int:
    t = time.perf_counter()
    world, wheels = build_world(work, args.scale)
    total_mb = sum(w.stat().st_size for w in wheels) / MB
    c.compile_tool()
    print(f"revision: {c.revision()}; python {sys.version.split()[0]}")
    print(
        f"index: {len(wheels)} wheels, {total_mb:.0f} MB, built in {time.perf_counter() - t:.1f} s"
    )
    env = c.clean_env()
    # --trusted-host: over plain http pip mounts its caching adapter only for trusted hosts
    pip = [c.PYTHON, "-m", "pip", "download", "--isolated", "--trusted-host", "127.0.0.1"]
    pip += ["--no-deps", "--only-binary", ":all:"]
    pip += [*TARGET, "--progress-bar", "off", "--quiet"]
    reqs = [f"{p.name}=={p.version}" for p in PINS]

    mb, py_s, sum_s = hash_speed(wheels)
    rows: list[list[str]] = []
    res: dict[str, float] = {}
    with contextlib.ExitStack() as links:
        srv = links.enter_context(c.nginx(world, tmp / "nginx", cached_prefix="cached"))
        base = srv.url("/")
        if args.mbit:
            from bench.latency_proxy import latency_proxy

            proxy = links.enter_context(
                latency_proxy(srv.port, delay_ms=args.delay_ms, mbit=args.mbit)
            )
            base = proxy.url("/")
            link_s = total_mb * MB * 8 / (args.mbit * 1_000_000)
            print(
                f"through the latency proxy: {args.mbit:g} Mbit/s shared, {args.delay_ms:g} ms "
                f"per response; the {total_mb:.0f} MB need {link_s:.2f} s on that link"
            )
        stack = tmp / "stack" / "bench.yaml"
        stack.parent.mkdir(parents=True)
        stack.write_text(manifest(base))
        index_url = f"{base}vendor/simple/"
        n = 0

        def ours(cache: Path) -> tuple[float, int, int]:
            nonlocal n
            n += 1
            off = srv.log_offset()
            argv = [c.PYTHON, c.CLI, "lock", str(stack), "--out", str(tmp / f"out{n}")]
            seconds, rss = _run_rss([*argv, "--cache-dir", str(cache)], env=env, what="lock")
            return seconds, _whl_200(srv, off), rss

        def pips(cache: Path | None, url: str = index_url) -> tuple[float, int, int]:
            nonlocal n
            n += 1
            off = srv.log_offset()
            dest = tmp / f"pip{n}"
            cache_args = ["--no-cache-dir"] if cache is None else ["--cache-dir", str(cache)]
            argv = [*pip, *cache_args, "-d", str(dest), "--index-url", url, *reqs]
            seconds, rss = _run_rss(argv, env=env, what="pip download")
            got = sorted(p.name for p in dest.iterdir())
            if got != sorted(w.name for w in wheels):
                raise SystemExit(f"pip downloaded other files: {got}")
            shutil.rmtree(dest)
            return seconds, _whl_200(srv, off), rss

        cached_url = f"{base}cached/vendor/simple/"
        keys = ("ours cold", "pip cold", "ours warm", "pip warm", "pip warm max-age")
        samples: dict[str, list[tuple[float, int, int]]] = {k: [] for k in keys}
        for i in range(args.repeat):
            cache, pcache = tmp / f"cache{i}", tmp / f"pipcache{i}"
            samples["ours cold"].append(ours(cache))
            samples["pip cold"].append(pips(None))
            samples["ours warm"].append(ours(cache))
            pips(pcache)  # fill pip's http cache (nginx as is: ETag and Last-Modified only)
            samples["pip warm"].append(pips(pcache))
            etag_only = _du(pcache)
            pips(pcache, cached_url)  # fill it again from the max-age location
            samples["pip warm max-age"].append(pips(pcache, cached_url))
            print(
                f"  run {i + 1}: pip http cache holds {etag_only / MB:.1f} MB after the ETag-only "
                f"runs, {_du(pcache) / MB:.1f} MB after the max-age runs"
            )
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(pcache, ignore_errors=True)
        for key, vals in samples.items():
            secs = c.median([s for s, _, _ in vals])
            res[key] = secs
            got = sorted({d for _, d, _ in vals})
            peak = max(r for _, _, r in vals) / MB
            rows.append(
                [
                    key,
                    f"{secs:.3f} s",
                    f"{total_mb / secs:.0f} MB/s",
                    "/".join(map(str, got)),
                    f"{peak:.0f} MB",
                ]
            )
        ours_lock = (tmp / "out1" / "requirements.txt").read_text()
        for w in wheels:
            if hashlib.sha256(w.read_bytes()).hexdigest() not in ours_lock:
                raise SystemExit(f"the lock's hash of {w.name} is not the file's sha256")

    rows.append(["sha256 hashlib (disk)", f"{py_s:.3f} s", f"{mb / py_s:.0f} MB/s", "-", "-"])
    rows.append(["sha256sum (disk)", f"{sum_s:.3f} s", f"{mb / sum_s:.0f} MB/s", "-", "-"])
    print(
        f"\nlock vs pip download, {len(wheels)} files, {total_mb:.0f} MB, median of "
        f"{args.repeat} (nginx on 127.0.0.1; files in the page cache)"
    )
    print(c.table(["run", "time", "throughput", ".whl 200s", "peak RSS"], rows))
    print("\nratios (ours/pip, < 1 = ours faster):")
    print(f"  cold: {res['ours cold'] / res['pip cold']:.2f}")
    if args.mbit:
        link_s = total_mb * MB * 8 / (args.mbit * 1_000_000)
        ratio = res["ours cold"] / link_s
        print(
            f"  ours cold / the link's time for the bytes ({link_s:.2f} s): {ratio:.2f}   "
            f"goal <= 1.1  {'met' if ratio <= 1.1 else 'NOT met'}"
        )
    print(
        f"  warm: {res['ours warm'] / res['pip warm']:.2f} "
        "(nginx as is: ETag/Last-Modified, no max-age)"
    )
    print(f"  warm vs pip with a max-age index: {res['ours warm'] / res['pip warm max-age']:.2f}")
    net = res["ours cold"] - res["ours warm"]
    print(
        f"download + hash part of our cold lock (cold - warm): {net:.3f} s = "
        f"{total_mb / net:.0f} MB/s; hashlib reads+hashes from disk at {mb / py_s:.0f} MB/s, "
        f"sha256sum at {mb / sum_s:.0f} MB/s"
    )
    warm_dl = max(d for _, d, _ in samples["ours warm"])
    print(f"warm re-lock downloaded {warm_dl} wheels: {'ok' if warm_dl == 0 else 'FAIL'}")
    return 0 if warm_dl == 0 else 1


def _run_rss(argv: list[str], *, env: dict[str, str], what: str) -> tuple[float, int]:
    """Run ``argv`` (exit 0 or stop the bench): its wall time and peak RSS in bytes, from
    ``os.wait4`` of that one child (``RUSAGE_CHILDREN`` is the maximum over all of them)."""
    os.sync()  # as c.run: writeback of the previous run's files stays out of this timing
    with tempfile.TemporaryFile() as log:
        t = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            log.seek(0)
            out = log.read().decode("utf-8", "replace")
            sys.stderr.write(f"{what} failed with exit {proc.returncode}:\n{out[-3000:]}\n")
            raise SystemExit(1)
    return seconds, usage.ru_maxrss * 1024  # kilobytes on Linux


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _whl_200(srv: c.Nginx, offset: int) -> int:
    time.sleep(0.05)  # nginx writes the log line when the response ends
    return sum(
        1 for path, status in srv.requests_since(offset) if path.endswith(".whl") and status == 200
    )


if __name__ == "__main__":
    sys.exit(main())
