"""Image build benchmark on a demo stack: cold build, one-line rebuild, size of final.

    .venv/bin/python -m bench.image_build [--stack stack/demo-v028.yaml] [--base-image REF]

1. cold: BuildKit cache mounts pruned (ccache, apt lists) and ``--no-cache``; the base image and
   the wheel cache stay (they are inputs, not build work);
2. rebuild: one line of code appended to one kernel source of the stand-in plugin (restored
   afterwards), layer cache on: only the plugin's build step and the final layers run, and
   ccache serves the unchanged sources; the compiler cache's own count of that step's hits
   and misses (``ccache --show-log-stats`` in the build log) is printed;
3. size: ``final`` against its base image, and against what is installed in it (the Python
   packages under /usr/local/lib/python3.X and /opt/vllm-musa, and /vllm-workspace where the
   plugin's tree is kept) -- no toolchain or cache left.

``stack/demo.yaml`` is locked first against the generated index; ``stack/demo-v028.yaml`` builds
from its committed lock (the real vLLM 0.28.0 sdist and its requirements, fetched by hash into
the demo cache on the first run, which is not timed).
"""

from __future__ import annotations

import argparse
import io
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import build_image
from demo import run_demo
from demo.make_index import write_demo_index
from testbed.index_server import IndexServer

ROOT = Path(__file__).resolve().parent.parent

DOCKER = "/usr/bin/docker"
TAG = "vllm-musa-bench:final"
# the kernel source whose one-line change the rebuild measures, per stack
TOUCHED = {
    "demo": ROOT / "demo" / "vllm-musa" / "csrc" / "attention.c",
    "demo-v028": ROOT / "demo" / "vllm-musa-v028" / "csrc" / "norm.mu",
}
# `ccache --show-log-stats` lines: "  Hits:   19 /   26 (73.08%)"
STAT = re.compile(
    r"^#\d+ [\d.]+ +(Cacheable calls|Hits|Misses|Uncacheable calls): +(\d+) +/ +(\d+)"
)


@dataclass(frozen=True, kw_only=True)
class Build:
    seconds: float
    log: str

    def ccache(self) -> str:
        """The last source step's own ccache counts, as ``Hits 19/26, Misses 7/26, ...``."""
        steps: list[dict[str, str]] = [{}]
        for line in self.log.splitlines():
            found = STAT.match(line)
            if found:
                name, count, total = found.groups()
                if name in steps[-1]:
                    steps.append({})
                steps[-1][name] = f"{count}/{total}"
            elif "ccache: no compiler call in this step" in line:
                steps.append({"Cacheable calls": "0/0"})
        last = steps[-1]
        return ", ".join(f"{k} {v}" for k, v in last.items()) or "no ccache statistics in the log"


def _build(stack: Path, lock: Path, url: str, cache: Path, base: str | None, *extra: str) -> Build:
    argv = ["build", str(stack), "--lock", str(lock), "--target", "final", "--tag", TAG]
    argv += ["--index", f"demo={url}", "--cache-dir", str(cache), *extra]
    if base:
        argv += ["--base-image", base]
    err = io.StringIO()
    t = time.monotonic()
    code = build_image.main(argv, out=io.StringIO(), err=err)
    seconds = time.monotonic() - t
    if code != 0:
        sys.stderr.write(err.getvalue()[-4000:])
        raise SystemExit(code)
    return Build(seconds=seconds, log=err.getvalue())


def _docker(*args: str) -> str:
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, check=True, timeout=600
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stack", type=Path, default=ROOT / "stack" / "demo.yaml")
    parser.add_argument("--base-image", default=None)
    args = parser.parse_args()
    stack: Path = args.stack.resolve()
    stem = stack.name.removesuffix(".yaml")
    if stem not in TOUCHED:
        parser.error(f"--stack: one of {', '.join(f'stack/{s}.yaml' for s in TOUCHED)}")
    touched = TOUCHED[stem]
    cache = run_demo.DEMO_DIR / "cache"
    committed = run_demo.committed_lock(stack)
    lock = committed or run_demo.lock_dir_for(stack)
    index = write_demo_index(run_demo.DEMO_DIR / "index", run_demo.DEMO_DIR / "bootstrap")
    with IndexServer(index) as server:
        url = server.simple_url
        common = ["--index", f"demo={url}", "--cache-dir", str(cache)]
        if committed is None:
            argv = ["lock", str(stack), "--out", str(lock), *common]
        else:  # fills the cache with every locked input, by hash (not timed)
            argv = ["fetch", str(stack), "--lock", str(lock), *common]
        code = build_image.main(argv, out=io.StringIO())
        if code != 0:
            return code
        _docker("builder", "prune", "--force", "--filter", "type=exec.cachemount")
        cold = _build(stack, lock, url, cache, args.base_image, "--no-cache")
        original = touched.read_bytes()
        try:
            # a line of code, not a comment: ccache's preprocessed mode would still hit on that
            stamp = time.time_ns()
            line = f"int vllm_musa_bench_{stamp}(void) {{ return {stamp % 1000}; }}\n"
            touched.write_bytes(original + line.encode())
            rebuild = _build(stack, lock, url, cache, args.base_image)
        finally:
            touched.write_bytes(original)
    base = args.base_image or "debian:bookworm-slim"
    final_size = int(_docker("image", "inspect", "--format", "{{.Size}}", TAG))
    base_size = int(_docker("image", "inspect", "--format", "{{.Size}}", base))
    installed = int(
        _docker(
            "run",
            "--rm",
            "--entrypoint",
            "sh",
            TAG,
            "-c",
            "du -sbc /usr/local/lib/python3.*/dist-packages /opt/vllm-musa "
            "$(test -d /vllm-workspace && echo /vllm-workspace) | tail -1 | cut -f1",
        )
    )
    mib = 1024 * 1024
    sys.stdout.write(
        f"{stack.relative_to(ROOT)}, target final\n"
        f"cold build (no layer cache, no ccache): {cold.seconds:7.1f} s\n"
        f"  its compiles:                        {cold.ccache()}\n"
        f"rebuild after one line of {touched.relative_to(ROOT)} changed:\n"
        f"                                       {rebuild.seconds:7.1f} s "
        f"({100 * rebuild.seconds / cold.seconds:.1f}% of cold)\n"
        f"  its compiles:                        {rebuild.ccache()}\n"
        f"final image:                           {final_size / mib:7.1f} MiB\n"
        f"  base image:                          {base_size / mib:7.1f} MiB\n"
        f"  added over the base:                 {(final_size - base_size) / mib:7.1f} MiB\n"
        f"  Python packages, lock/SBOM, workspace:{installed / mib:7.1f} MiB "
        "(the rest of the added size: the interpreter and runtime packages from apt)\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
