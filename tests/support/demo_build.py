"""The demo builds that the docker tests of ``tests/images/`` share (their fixtures, ``demo`` and
``components``, are in the conftest.py files there): ``make demo`` once per session, with an
index credential set, so the tests can check that it leaks nowhere, and on its cache the
components stack's final image."""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-token-do-not-leak"
COMPONENTS_STACK = ROOT / "stack" / "demo-components.yaml"
COMPONENTS_REPOSITORY = "vllm-musa-test-components"


@dataclass(frozen=True)
class Demo:
    lock_dir: Path
    cache: Path
    index_url: str
    digests: dict[str, str]  # target -> the digest of the image the demo built


def build_demo(cache: Path) -> Demo:
    """``make demo``: both targets of stack/demo.yaml built, gated and tagged
    (``vllm-musa-demo:final`` and ``:vllm-openai``), with an index credential set."""
    from demo import run_demo

    os.environ["BUILD_IMAGE_INDEX_DEMO_AUTH"] = f"ci-user:{SECRET}"
    try:
        run_demo.run(ROOT / "stack" / "demo.yaml", cache_dir=cache)
    finally:
        del os.environ["BUILD_IMAGE_INDEX_DEMO_AUTH"]
    reports = ROOT / "build" / "reports"
    return Demo(
        lock_dir=run_demo.lock_dir_for(Path("demo.yaml")),
        cache=cache,
        index_url="http://127.0.0.1:9/simple/",  # every wheel is in the cache by now
        digests={
            target: json.loads((reports / f"demo-{target}.json").read_text())["digest"]
            for target in ("final", "vllm-openai")
        },
    )


def build_components(demo: Demo) -> Demo:
    """stack/demo-components.yaml's final target (vllm-rs with Debian's rustc/cargo, mooncake)
    built on the demo's cache and tagged ``vllm-musa-test-components:final``; its lock (its
    digests are not the demo's: none are recorded)."""
    from demo import run_demo

    run_demo.run(
        COMPONENTS_STACK, targets=("final",), cache_dir=demo.cache, repository=COMPONENTS_REPOSITORY
    )
    return dataclasses.replace(demo, lock_dir=run_demo.lock_dir_for(COMPONENTS_STACK), digests={})
