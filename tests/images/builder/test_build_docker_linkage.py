"""Docker test (marked ``docker``): the linkage gate fails a real build whose installed wheel
has a native library needing a library the image lacks.

stack/demo.yaml with Mooncake on and without its ``runtime.apt_packages`` (its curl brings
libcurl4): the stand-in mooncake-transfer-engine-musa wheel carries
``mooncake/libtransfer_engine.so``, which needs libcurl.so.4 as the real ``mooncake/engine.so``
does, and bookworm-slim has no libcurl4 (stack/demo-components.yaml and stack/demo-v028.yaml
install it, and pass). The build must stop at the gates, name the file, its distribution, the
library and the package, and tag nothing.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import build_image
from demo import run_demo
from manifest import load_manifest
from tests.support.demo_build import ROOT, Demo
from tests.support.environment import DOCKER_CLI as DOCKER

pytestmark = pytest.mark.docker

STACKS = ROOT / "build" / "test-stacks-linkage"  # inside the repository: path sources resolve
SITE = "/usr/local/lib/python3.11/dist-packages"  # where pip installs on Debian's python3.11
TAG = "vllm-musa-test:linkage"
MOONCAKE = 'components:\n  mooncake: {enabled: true, version: "0.3.12.post1", index: demo}\n'


def _without_runtime_packages(text: str) -> str:
    """``text`` without the ``apt_packages`` line of its top-level ``runtime:`` block."""
    out: list[str] = []
    in_runtime = False
    for line in text.splitlines(keepends=True):
        if line[:1] not in ("", " ", "#", "\n"):
            in_runtime = line.startswith("runtime:")
        if not (in_runtime and line.startswith("  apt_packages:")):
            out.append(line)
    return "".join(out)


@pytest.fixture(scope="module")
def without_libcurl(demo: Demo) -> Iterator[tuple[Path, Path]]:
    """stack/demo.yaml with Mooncake on and no runtime package, locked against the demo index;
    the stack and its lock directory."""
    text = (ROOT / "stack" / "demo.yaml").read_text(encoding="utf-8")
    assert "components:" not in text
    STACKS.mkdir(parents=True, exist_ok=True)
    stack = STACKS / "demo-linkage.yaml"
    try:
        stack.write_text(_without_runtime_packages(text) + MOONCAKE, encoding="utf-8")
        m = load_manifest(stack)
        assert (m.runtime.apt_packages, m.components.enabled()) == ((), ("mooncake",))
        run_demo.run(stack, targets=(), cache_dir=demo.cache)
        yield stack, run_demo.lock_dir_for(stack)
    finally:
        shutil.rmtree(STACKS, ignore_errors=True)


def test_a_wheels_library_needing_a_missing_library_fails_the_build(
    demo: Demo, without_libcurl: tuple[Path, Path]
) -> None:
    stack, lock_dir = without_libcurl
    subprocess.run([DOCKER, "rmi", TAG], capture_output=True, check=False, timeout=120)
    err = io.StringIO()
    argv = ["build", str(stack), "--lock", str(lock_dir), "--cache-dir", str(demo.cache)]
    argv += ["--index", f"demo={demo.index_url}", "--target", "final", "--tag", TAG]
    code = build_image.main(argv, out=io.StringIO(), err=err)
    lines = err.getvalue().splitlines()
    assert code == 1, err.getvalue()[-3000:]
    at = lines.index("  gate linkage failed:")
    assert lines[at + 1] == (
        "    mooncake/libtransfer_engine.so (mooncake-transfer-engine-musa 0.3.12.post1): needs "
        "libcurl.so.4, which the image does not have (searched: LD_LIBRARY_PATH "
        f"/usr/local/musa/lib, RUNPATH $ORIGIN ({SITE}/mooncake), the ld.so cache, "
        "/lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib, /usr/lib); runtime packages "
        "that give it: libcurl4 (Debian/Ubuntu); add one to runtime.apt_packages, or declare it "
        "under runtime.host_libraries if the host provides it at run time"
    )
    assert not lines[at + 2].startswith("    ")  # that need alone
    inspect = subprocess.run(
        [DOCKER, "image", "inspect", TAG], capture_output=True, check=False, timeout=120
    )
    assert inspect.returncode != 0  # no tag was applied
