"""``make demo``: the whole pipeline on the demo stack, offline, on any machine with Docker.

1. write the demo index (``demo/make_index.py``) into ``build/demo/index/`` and serve it on
   127.0.0.1 (``testbed.index_server``), on the port the manifest's ``demo`` URL names: the
   lock then records the manifest's URLs, the same in every run, and so the image has the same
   digest in every run;
2. lock ``stack/demo.yaml`` against it into ``build/demo/<stem>.lock/``, unless the stack
   has a committed lock (``stack/<stem>.lock/``, as ``stack/demo-v028.yaml`` has: its public
   files are locked against the real index, and a build only downloads the locked files by
   hash);
3. ``build_image.py build`` each target (gates run before any tag), tagged
   ``<repository>:<target>`` (``vllm-musa-demo``, or ``vllm-musa-<stem>`` for another
   stack); the build reports land in ``build/reports/``.

``--publish`` (``make demo-publish``) then publishes what those builds made, the way a release
engineer publishes a nightly: ``build_image.py publish --nightly`` of each target, to the
manifest's ``image.repository`` (``127.0.0.1:5000/vllm-musa-demo``: the open registry of
``ci/start-registry.sh``, started first when nothing answers there and this is root), its
release record in ``build/demo/releases/`` (not the committed ``releases/``).

    python -m demo.run_demo [--stack stack/demo.yaml] [--base-image REF] [--target T]...
    python -m demo.run_demo --publish [--target T]...                # after a run
    python -m demo.run_demo --stack stack/demo-v028.yaml --relock   # renew the committed lock

``--relock`` resolves again (against the live public index, by hand, never in CI) and writes the
stack's committed lock, with the demo index served on the port its manifest URL names, so the
lock records the manifest's URLs and nothing of this run.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import build_image
from demo.make_index import write_demo_index
from images.builder.tags import parse_reference
from manifest import TARGETS, load_manifest
from testbed.index_server import IndexServer

ROOT = Path(__file__).resolve().parent.parent

DEMO_DIR = ROOT / "build" / "demo"
REPOSITORY = "vllm-musa-demo"
LOCAL_REGISTRY = "127.0.0.1:5000"  # the open registry of ci/start-registry.sh
START_REGISTRY = ROOT / "ci" / "start-registry.sh"


def lock_dir_for(stack: Path) -> Path:
    return DEMO_DIR / f"{stack.name.removesuffix('.yaml')}.lock"


def committed_lock(stack: Path) -> Path | None:
    """The stack's committed lock directory (``stack/<stem>.lock/``), if it has one."""
    lock = stack.with_name(f"{stack.name.removesuffix('.yaml')}.lock")
    return lock if (lock / "pylock.toml").is_file() else None


def repository_for(stack: Path) -> str:
    """``vllm-musa-demo`` for stack/demo.yaml, ``vllm-musa-demo-v028`` for demo-v028.yaml."""
    stem = stack.name.removesuffix(".yaml")
    return REPOSITORY if stem == "demo" else f"vllm-musa-{stem}"


def run(
    stack: Path,
    *,
    targets: Sequence[str] = TARGETS,
    base_image: str | None = None,
    cache_dir: Path | None = None,
    network: str | None = None,
    extra_build_args: Sequence[str] = (),
    repository: str | None = None,
) -> dict[str, float]:
    """Lock and build ``stack``'s targets; returns seconds per step. Raises SystemExit on error."""
    timings: dict[str, float] = {}
    cache = cache_dir or DEMO_DIR / "cache"
    t = time.monotonic()
    index_root = write_demo_index(DEMO_DIR / "index", DEMO_DIR / "bootstrap")
    timings["index"] = time.monotonic() - t
    repository = repository or repository_for(stack)
    committed = committed_lock(stack)
    lock_dir = committed or lock_dir_for(stack)
    # on the port the manifest's URL names, so the lock records the manifest's URLs and two
    # runs give the same lock, and so the same image digest
    port = urlsplit(load_manifest(stack).indexes["demo"].url).port or 0
    with IndexServer(index_root, port=port) as server:
        common = ["--cache-dir", str(cache)]
        if not port:
            common += ["--index", f"demo={server.simple_url}"]
        t = time.monotonic()
        if committed is None:
            _call(["lock", str(stack), "--out", str(lock_dir), *common])
        else:
            sys.stderr.write(f"using the committed lock {committed} (not locking again)\n")
        timings["lock"] = time.monotonic() - t
        for target in targets:
            argv = ["build", str(stack), "--lock", str(lock_dir), "--target", target]
            argv += ["--tag", f"{repository}:{target}", *common, *extra_build_args]
            if base_image:
                argv += ["--base-image", base_image]
            if network:
                argv += ["--network", network]
            t = time.monotonic()
            _call(argv)
            timings[f"build {target}"] = time.monotonic() - t
    return timings


def relock(stack: Path, *, cache_dir: Path | None = None) -> Path:
    """Lock ``stack`` into its committed lock directory (``stack/<stem>.lock``), the demo
    index served at the manifest's own ``demo`` URL; returns the lock directory."""
    manifest = load_manifest(stack)
    port = urlsplit(manifest.indexes["demo"].url).port or 80
    index_root = write_demo_index(DEMO_DIR / "index", DEMO_DIR / "bootstrap")
    out = manifest.default_lock_dir()
    with IndexServer(index_root, port=port):
        _call(
            [
                "lock",
                str(stack),
                "--out",
                str(out),
                "--cache-dir",
                str(cache_dir or DEMO_DIR / "cache"),
            ]
        )
    return out


def record_for(stack: Path) -> Path:
    """The demo's release record: under build/demo/, never the committed releases/."""
    return DEMO_DIR / "releases" / f"{load_manifest(stack).name}.json"


def publish(
    stack: Path,
    *,
    targets: Sequence[str] = TARGETS,
    record: Path | None = None,
    repository: str | None = None,
    build_reports: dict[str, Path] | None = None,
    date: str | None = None,
    attach: bool = True,
) -> Path:
    """``build_image.py publish --nightly`` of each target of ``stack`` that a run built (its
    build report, default ``build/reports/<stem>-<target>.json``), its SBOM and provenance
    attached (unless not ``attach``); returns the record."""
    record = record or record_for(stack)
    lock_dir = committed_lock(stack) or lock_dir_for(stack)
    for target in targets:
        argv = ["publish", str(stack), "--target", target, "--nightly", "--record", str(record)]
        argv += ["--lock", str(lock_dir)] if attach else ["--no-attach"]
        if repository:
            argv += ["--repository", repository]
        if build_reports:
            argv += ["--build-report", str(build_reports[target])]
        if date:
            argv += ["--date", date]
        _call(argv)
    return record


def _answers(registry: str) -> bool:
    host, _, port = registry.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return True
    except OSError:
        return False


def ensure_registry(stack: Path) -> None:
    """The registry of ``stack``'s image.repository accepts connections: started with
    ci/start-registry.sh when it is the local one and this is root, else a clear stop."""
    manifest = load_manifest(stack)
    if manifest.image is None:
        raise SystemExit(f"{stack} has no image: section to publish to")
    registry = parse_reference(manifest.image.repository).registry
    if _answers(registry):
        return
    if registry == LOCAL_REGISTRY and os.geteuid() == 0:
        sys.stderr.write(f"+ bash {START_REGISTRY.relative_to(ROOT)}\n")
        if subprocess.run(["bash", str(START_REGISTRY)], check=False).returncode == 0:
            return
    raise SystemExit(
        f"no registry answers at {registry} (image.repository of {stack}): start one first, "
        f"as root `bash ci/start-registry.sh` (Debian's docker-registry on {LOCAL_REGISTRY}), "
        f"or `docker run -d -p {LOCAL_REGISTRY}:5000 registry:2`"
    )


def _call(argv: list[str]) -> None:
    sys.stderr.write("+ build_image.py " + " ".join(argv) + "\n")
    code = build_image.main(argv)
    if code != 0:
        raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.run_demo", description=__doc__)
    parser.add_argument("--stack", type=Path, default=Path("stack/demo.yaml"))
    parser.add_argument("--base-image", default=None)
    parser.add_argument("--target", action="append", choices=TARGETS, default=None)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--network", default=None)
    parser.add_argument(
        "--publish",
        action="store_true",
        help="publish the images a run built (nightly tags, to the manifest's image.repository; "
        "record in build/demo/releases/), then stop",
    )
    parser.add_argument(
        "--relock",
        action="store_true",
        help="resolve again and write the stack's committed lock (by hand: it asks the live "
        "public index), then stop",
    )
    args = parser.parse_args(argv)
    if args.publish:
        ensure_registry(args.stack)
        record = publish(args.stack, targets=args.target or TARGETS)
        sys.stdout.write(
            f"published: record {record}; check the tags with `build_image.py verify-pins "
            f"{args.stack} --record {record}`\n"
        )
        return 0
    if args.relock:
        sys.stdout.write(f"locked: {relock(args.stack, cache_dir=args.cache_dir)}\n")
        return 0
    timings = run(
        args.stack,
        targets=args.target or TARGETS,
        base_image=args.base_image,
        cache_dir=args.cache_dir,
        network=args.network,
    )
    for step, seconds in timings.items():
        sys.stdout.write(f"{step:>20}: {seconds:6.1f} s\n")
    repository = repository_for(args.stack)
    sys.stdout.write(
        f"demo done: {', '.join(f'{repository}:{t}' for t in args.target or TARGETS)}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
