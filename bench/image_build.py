"""Image build benchmark on the demo stack: cold build, one-C-file rebuild, size of final.

    .venv/bin/python -m bench.image_build [--base-image REF]

1. cold: BuildKit cache mounts pruned (ccache, apt lists) and ``--no-cache``; the base image and
   the wheel cache stay (they are inputs, not build work);
2. rebuild: one line appended to ``demo/vllm-musa/csrc/attention.c`` (restored afterwards),
   layer cache on: only the plugin's build step and the final layers run, and ccache serves
   the unchanged C files (target: under 10% of cold);
3. size: ``final`` against its base image, and against what is installed in it (the Python
   packages under /usr/local/lib/python3.X and /opt/vllm-musa) -- no toolchain or cache left.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import time
from pathlib import Path

import build_image
from demo import run_demo
from demo.make_index import write_demo_index
from tests.support.index_server import IndexServer

ROOT = Path(__file__).resolve().parent.parent

DOCKER = "/usr/bin/docker"
C_FILE = ROOT / "demo" / "vllm-musa" / "csrc" / "attention.c"
TAG = "vllm-musa-bench:final"


def _build(stack: Path, lock: Path, url: str, cache: Path, base: str | None, *extra: str) -> float:
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
    return seconds


def _docker(*args: str) -> str:
    return subprocess.run(
        [DOCKER, *args], capture_output=True, text=True, check=True, timeout=600
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-image", default=None)
    args = parser.parse_args()
    stack = ROOT / "stack" / "demo.yaml"
    cache = run_demo.DEMO_DIR / "cache"
    lock = run_demo.lock_dir_for(stack)
    index = write_demo_index(run_demo.DEMO_DIR / "index", run_demo.DEMO_DIR / "bootstrap")
    with IndexServer(index) as server:
        url = server.simple_url
        lock_argv = ["lock", str(stack), "--out", str(lock), "--index", f"demo={url}"]
        code = build_image.main([*lock_argv, "--cache-dir", str(cache)], out=io.StringIO())
        if code != 0:
            return code
        _docker("builder", "prune", "--force", "--filter", "type=exec.cachemount")
        cold = _build(stack, lock, url, cache, args.base_image, "--no-cache")
        original = C_FILE.read_bytes()
        try:
            C_FILE.write_bytes(original + f"/* bench {time.time_ns()} */\n".encode())
            rebuild = _build(stack, lock, url, cache, args.base_image)
        finally:
            C_FILE.write_bytes(original)
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
            "du -sbc /usr/local/lib/python3.*/dist-packages /opt/vllm-musa | tail -1 | cut -f1",
        )
    )
    mib = 1024 * 1024
    sys.stdout.write(
        f"cold build (no layer cache, no ccache): {cold:7.1f} s\n"
        f"rebuild after one C file changed:      {rebuild:7.1f} s "
        f"({100 * rebuild / cold:.1f}% of cold; target < 10%)\n"
        f"final image:                           {final_size / mib:7.1f} MiB\n"
        f"  base image:                          {base_size / mib:7.1f} MiB\n"
        f"  added over the base:                 {(final_size - base_size) / mib:7.1f} MiB\n"
        f"  Python packages + lock/SBOM in it:   {installed / mib:7.1f} MiB "
        "(the rest of the added size: the interpreter from apt)\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
