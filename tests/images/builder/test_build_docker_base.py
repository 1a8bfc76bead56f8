"""Docker test: a base image that already holds a Python distribution for the target
interpreter (marked ``docker``). The build records it before anything is installed
(/opt/vllm-musa/base-distributions.json); the installed-equals-lock gate accepts exactly it as
from the base image, the build report and the SBOM list it, and a distribution that is neither
locked, nor the base's, nor built is still refused with its name, version and location.

The base is made here: debian:bookworm-slim plus a tiny wheel's files unpacked into
/usr/lib/python3/dist-packages (Debian's python3.11 has it on sys.path, as a python3-* deb's
would be). It shares the session's demo build (lock and wheel cache) of conftest.py.
"""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

import build_image
from tests.support.demo_build import Demo
from tests.support.environment import BASE_IMAGE
from tests.support.environment import DOCKER_CLI as DOCKER

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[3]
STACKS = ROOT / "build" / "test-stacks"
BASE_TAG = "vllm-musa-test-base:with-dist"
TAG = "vllm-musa-test:base-dist"
EXTRA_TAG = "vllm-musa-test:base-dist-extra"
DEBS = "/usr/lib/python3/dist-packages"
SITE = "/usr/local/lib/python3.11/dist-packages"


def _docker(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKER, *args], input=stdin, capture_output=True, text=True, check=False, timeout=300
    )


def _dist_info(site: str, name: str, version: str) -> str:
    """Dockerfile lines that put a wheel's installed files (a module, its dist-info) in ``site``."""
    info = f"{site}/{name}-{version}.dist-info"
    record = f"{name}.py,,\\n{name}-{version}.dist-info/METADATA,,\\n{name}-{version}.dist-info/RECORD,,\\n"
    return (
        f"RUN mkdir -p {info} \\\n"
        f" && printf 'VALUE = 1\\n' > {site}/{name}.py \\\n"
        f" && printf 'Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n' > {info}/METADATA \\\n"
        f" && printf 'pip\\n' > {info}/INSTALLER \\\n"
        f" && printf '{record}' > {info}/RECORD\n"
    )


def _image(tag: str, base: str, *lines: str) -> None:
    dockerfile = f"FROM {base}\n" + "".join(lines)
    built = _docker("build", "-q", "-t", tag, "-", stdin=dockerfile)
    assert built.returncode == 0, built.stderr


def _run(image: str, *argv: str) -> str:
    result = _docker("run", "--rm", "--entrypoint", argv[0], image, *argv[1:])
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_base_images_own_distribution_is_recorded_accepted_and_listed(demo: Demo) -> None:
    _image(BASE_TAG, BASE_IMAGE, _dist_info(DEBS, "tinybase", "1.0"))
    STACKS.mkdir(parents=True, exist_ok=True)
    stack = STACKS / "demo-basedist.yaml"
    stack.write_text((ROOT / "stack" / "demo.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    _docker("rmi", TAG)
    err = io.StringIO()
    argv = ["build", str(stack), "--lock", str(demo.lock_dir), "--cache-dir", str(demo.cache)]
    argv += ["--index", f"demo={demo.index_url}", "--target", "final", "--tag", TAG]
    argv += ["--base-image", BASE_TAG]
    assert build_image.main(argv, out=io.StringIO(), err=err) == 0, err.getvalue()[-4000:]
    shown = f"tinybase 1.0 ({DEBS})"
    assert f"from the base image: {shown}" in err.getvalue()
    # the record, made before anything was installed: the base's distribution only
    record = json.loads(_run(TAG, "cat", "/opt/vllm-musa/base-distributions.json"))
    assert record == [{"location": DEBS, "name": "tinybase", "version": "1.0"}]
    # the build report and the gate list it
    report = json.loads((ROOT / "build" / "reports" / "demo-basedist-final.json").read_text())
    assert report["base_distributions"] == [shown]
    assert all(report["gates"].values())
    out = io.StringIO()
    gate = ["gate", TAG, str(stack), "--lock", str(demo.lock_dir), "--json"]
    assert build_image.main(gate, out=out, err=io.StringIO()) == 0
    results = {r["name"]: r for r in json.loads(out.getvalue())}
    assert results["installed-equals-lock"]["output"].endswith(
        f"exactly the lock and the sources, and 1 from the base image: {shown}"
    )
    # the SBOM says where it came from
    sbom = json.loads(_run(TAG, "cat", "/opt/vllm-musa/sbom.json"))
    (component,) = [c for c in sbom["components"] if c["name"] == "tinybase"]
    assert component["properties"] == [
        {"name": "vllm-musa:origin", "value": "base image"},
        {"name": "vllm-musa:location", "value": DEBS},
    ]
    # one that is neither locked, nor the base's, nor built is refused, with where it lies
    _image(EXTRA_TAG, TAG, _dist_info(SITE, "strayling", "2.0"))
    out = io.StringIO()
    gate = ["gate", EXTRA_TAG, str(stack), "--lock", str(demo.lock_dir), "--json"]
    assert build_image.main(gate, out=out, err=io.StringIO()) == 1
    results = {r["name"]: r for r in json.loads(out.getvalue())}
    assert results["installed-equals-lock"] == {
        "name": "installed-equals-lock",
        "ok": False,
        "output": f"strayling 2.0 ({SITE}) is installed but is not in the lock, not from the "
        "base image and not built from a source",
    }
    for ref in (EXTRA_TAG, TAG, BASE_TAG):
        _docker("rmi", ref)
    stack.unlink()
