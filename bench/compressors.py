"""Layer compressors on a layer-like tar: throughput with 1 and 2 workers, and size.

    .venv/bin/python -m bench.compressors [--repeat 3] [--site-mb 200] [--so-mb 100]
        [--packed-mb 100] [--workdir DIR] [--no-verify]

Builds one tar (in a temporary directory, or in ``--workdir`` where it is kept and reused)
of what a layer of ours holds: ``.venv``'s site-packages (``--site-mb``), shared objects from
``/usr/lib/x86_64-linux-gnu`` (``--so-mb``) and already-compressed files found on the machine
(wheels, zips, tarballs, ``--packed-mb``), each part taken in sorted path order up to its
size. Then it compresses the tar, read in 1 MiB chunks from the page cache, into a sink that
only counts (the writers hash what they write), with:

- ``gzip.GzipFile`` level 6 into a hashing sink: today's ``LayerTarWriter`` (one core);
- ``images.oci.compress.GzipBlockWriter`` on a pool of 1 and of 2 threads, with each
  backend installed: zlib levels 6 and 1, isal levels 1-3, zlib-ng levels 6 and 1
  (``.venv/bin/pip install isal``; a missing one is skipped).

Each throughput is MB (10**6 bytes) of tar per second of wall time, the median of
``--repeat`` runs taken round-robin over every candidate (a burst of other work on the
machine lands on all of them alike). CPU s is the process's CPU seconds in the 2-worker run
(median), and MB/CPU s the tar's MB over it: the one column other work on the machine hardly
moves. The CPU seconds other processes used meanwhile are printed at the end. The 1- and
2-worker outputs of a candidate must be the same bytes, and (unless ``--no-verify``) one more
run decompresses the output and compares it with the tar.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench import _common as c
from core.errors import ImageLayoutError
from images.oci.compress import Compressor, GzipBlockWriter

CHUNK = 1024 * 1024
MB = 10**6
PACKED_SUFFIXES = (".whl", ".zip", ".gz", ".tgz", ".xz", ".bz2", ".jar", ".zst")
PACKED_ROOTS = (Path.home() / ".cache" / "pip", Path("/root/.pyenv"), Path("/usr/share"))
CANDIDATES: tuple[tuple[str, int], ...] = (("zlib", 6), ("zlib", 1), ("isal", 1), ("isal", 2))
CANDIDATES += (("isal", 3), ("zlib-ng", 6), ("zlib-ng", 1))


class Sink:
    """Counts what it is given; hashes it with ``hashing`` (as ``LayerTarWriter``'s sink
    does: ``GzipBlockWriter`` hashes on its own); with ``check``, also decompresses it and
    hashes what comes out (``plain``)."""

    def __init__(self, *, hashing: bool = False, check: bool = False) -> None:
        self.hash = hashlib.sha256() if hashing else None
        self.size = 0
        self._inflate = zlib.decompressobj(31) if check else None
        self.plain = hashlib.sha256()

    def write(self, data: bytes) -> int:
        if self.hash is not None:
            self.hash.update(data)
        self.size += len(data)
        if self._inflate is not None:
            self.plain.update(self._inflate.decompress(data))
        return len(data)

    def flush(self) -> None:
        return None


@dataclass
class Row:
    name: str
    ident: str
    speed: dict[int, float]  # workers -> MB/s (median)
    cpu: float  # CPU seconds of the median 2-worker run (1-worker for the baseline)
    size: int
    same: str  # 1 and 2 workers wrote the same bytes
    verified: str


def files_under(root: Path, keep: Callable[[Path], bool]) -> Iterator[Path]:
    """Regular files under ``root`` for which ``keep`` holds, in sorted path order."""
    if not root.is_dir():
        return
    for path in sorted(p for p in root.rglob("*") if not p.is_symlink()):
        if path.is_file() and keep(path):
            yield path


def add_part(
    tar: tarfile.TarFile, paths: Iterator[Path], budget: int, seen: set[tuple[int, int]]
) -> int:
    """Add files from ``paths`` until ``budget`` bytes; the bytes added. A file seen before
    (the same inode: uv hard-links its cache into site-packages) is skipped, since tarfile
    would store it as a hard link without data."""
    added = 0
    for path in paths:
        st = path.stat()
        size, inode = st.st_size, (st.st_dev, st.st_ino)
        if inode in seen or added + size > budget:
            continue
        seen.add(inode)
        tar.add(path, arcname=str(path).lstrip("/"), recursive=False)
        added += size
        if added >= budget * 0.98:
            break
    return added


def build_tar(out: Path, args: argparse.Namespace) -> None:
    site = sorted((c.ROOT / ".venv" / "lib").glob("python*/site-packages"))
    seen: set[tuple[int, int]] = set()
    parts = []
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for root in site:
            n = add_part(tar, files_under(root, lambda _p: True), args.site_mb * MB, seen)
            parts.append(f"site-packages {n / MB:.0f} MB")
        so = files_under(Path("/usr/lib/x86_64-linux-gnu"), lambda p: ".so" in p.name)
        n = add_part(tar, so, args.so_mb * MB, seen)
        parts.append(f"shared objects {n / MB:.0f} MB")
        total = 0
        for root in PACKED_ROOTS:
            packed = files_under(root, lambda p: p.name.endswith(PACKED_SUFFIXES))
            total += add_part(tar, packed, args.packed_mb * MB - total, seen)
        parts.append(f"compressed files {total / MB:.0f} MB")
    print(f"tar: {out.stat().st_size / MB:.0f} MB ({', '.join(parts)})")


def machine_busy() -> float:
    """CPU seconds the machine has spent busy since boot (``/proc/stat``; 0 without it)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


def run_baseline(tar: Path) -> tuple[str, int]:
    sink = Sink(hashing=True)
    with gzip.GzipFile(filename="", mode="wb", fileobj=sink, mtime=0, compresslevel=6) as gz:
        for chunk in chunks(tar):
            gz.write(chunk)
    assert sink.hash is not None
    return "sha256:" + sink.hash.hexdigest(), sink.size


def run_blocks(
    tar: Path, *, compressor: Compressor, workers: int, sink: Sink | None = None
) -> tuple[str, int]:
    sink = sink or Sink()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        writer = GzipBlockWriter(sink, compressor, executor=pool, max_in_flight=2 * workers + 2)
        for chunk in chunks(tar):
            writer.write(chunk)
        return writer.close()


@dataclass
class Leg:
    """One timed configuration: its runs' wall and CPU seconds and what they wrote."""

    run: Callable[[], tuple[str, int]]
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    outputs: set[tuple[str, int]] = field(default_factory=set)

    def once(self) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        self.outputs.add(self.run())
        self.walls.append(time.perf_counter() - wall)
        self.cpus.append(time.process_time() - cpu)
        assert len(self.outputs) == 1, "one compressor wrote different bytes in two runs"

    def speed(self, mb: float) -> float:
        return mb / statistics.median(self.walls)


def measure(tar: Path, args: argparse.Namespace, plain: str) -> list[Row]:
    """Time every leg ``--repeat`` times, round-robin (a burst of other work on the machine
    then lands on every candidate alike, not on one), and verify each candidate once."""
    mb = tar.stat().st_size / MB
    baseline = Leg(partial(run_baseline, tar))
    legs: dict[str, tuple[Compressor, dict[int, Leg]]] = {}
    for backend, level in CANDIDATES:
        try:
            comp = Compressor(backend=backend, level=level)
        except ImageLayoutError as exc:
            print(f"  {backend} level {level}: skipped ({exc})")
            continue
        by_workers = {w: Leg(partial(run_blocks, tar, compressor=comp, workers=w)) for w in (1, 2)}
        legs[f"{backend} {level}"] = (comp, by_workers)
    for n in range(args.repeat):
        print(f"  run {n + 1} of {args.repeat}", flush=True)
        baseline.once()
        for _, by_workers in legs.values():
            for leg in by_workers.values():
                leg.once()
    ((_, size),) = baseline.outputs
    cpu = statistics.median(baseline.cpus)
    rows = [
        Row("gzip.GzipFile", "stdlib gzip, level 6", {1: baseline.speed(mb)}, cpu, size, "-", "-")
    ]
    for name, (comp, by_workers) in legs.items():
        verified = "-"
        if not args.no_verify:
            check = Sink(check=True)
            run_blocks(tar, compressor=comp, workers=2, sink=check)
            verified = "yes" if check.plain.hexdigest() == plain else "NO"
        outputs = by_workers[1].outputs | by_workers[2].outputs
        same = "yes" if len(outputs) == 1 else "NO"
        speed = {w: leg.speed(mb) for w, leg in by_workers.items()}
        cpu = statistics.median(by_workers[2].cpus)
        size = next(iter(outputs))[1]
        rows.append(Row(name, comp.ident, speed, cpu, size, same, verified))
    return rows


def report(rows: list[Row], tar_size: int) -> None:
    base = rows[0]
    ref = next((r.size for r in rows if r.name == "zlib 6"), base.size)
    out = []
    for r in rows:
        two = r.speed.get(2)
        out.append([
            r.name,
            f"{r.speed[1]:.1f}",
            f"{two:.1f}" if two else "-",
            f"{(two or r.speed[1]) / base.speed[1]:.2f}x",
            f"{r.cpu:.1f}",
            f"{tar_size / MB / r.cpu:.0f}",
            f"{r.size / MB:.1f}",
            f"{100 * r.size / tar_size:.1f}%",
            f"{100 * (r.size / ref - 1):+.1f}%",
            r.same,
            r.verified,
        ])  # fmt: skip
    heads = ["candidate", "MB/s 1w", "MB/s 2w", "vs GzipFile", "CPU s", "MB/CPU s", "gzip MB"]
    print()
    print(c.table([*heads, "of tar", "vs zlib 6", "1w = 2w", "round trip"], out))
    print("\nidents:")
    for r in rows[1:]:
        print(f"  {r.name}: {r.ident}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing; the median is shown")
    ap.add_argument("--site-mb", type=int, default=200, help="MB of .venv's site-packages")
    ap.add_argument("--so-mb", type=int, default=100, help="MB of /usr/lib shared objects")
    ap.add_argument("--packed-mb", type=int, default=100, help="MB of compressed files")
    ap.add_argument("--workdir", type=Path, default=None, help="keep (and reuse) the tar here")
    ap.add_argument("--no-verify", action="store_true", help="skip the decompressing runs")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-compressors-"))
    try:
        python = sys.version.split()[0]
        print(f"revision: {c.revision()}; python {python}; zlib {zlib.ZLIB_RUNTIME_VERSION}")
        work = args.workdir or tmp
        work.mkdir(parents=True, exist_ok=True)
        tar = work / "layer.tar"
        if not tar.is_file():
            build_tar(tar, args)
        plain = hashlib.sha256()
        for chunk in chunks(tar):  # also warms the page cache
            plain.update(chunk)
        print(f"tar: {tar} ({tar.stat().st_size / MB:.0f} MB); medians of {args.repeat} runs")
        busy, cpu, wall = machine_busy(), time.process_time(), time.perf_counter()
        rows = measure(tar, args, plain.hexdigest())
        report(rows, tar.stat().st_size)
        others = machine_busy() - busy - (time.process_time() - cpu)
        cores = os.cpu_count() or 1
        print(
            f"\nother processes used {others:.0f} CPU s of the {cores} cores' "
            f"{cores * (time.perf_counter() - wall):.0f} while this ran"
        )
        return 0 if all(r.same != "NO" and r.verified != "NO" for r in rows) else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
