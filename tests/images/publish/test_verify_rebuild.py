"""Docker and registry tests: the demo's image is reproducible, and verify-rebuild proves it.

The session's demo (``make demo``, the ``demo`` fixture) is published as a nightly to a fresh
repository of the local registry, its SBOM and provenance attached, then ``verify-rebuild``
rebuilds it from its record without the layer cache: the same digest, which is also the one
the registry serves (skopeo), and the same SBOM and provenance, byte for byte. A
variant of the demo with one more source, whose setup.py writes the time of its build into
its package, is published and rebuilt the same way: verify-rebuild exits 1 and names that
file, and what else differs because of it.
"""

from __future__ import annotations

import io
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import build_image
from tests.support.demo_build import ROOT, Demo
from tests.support.environment import REGISTRY
from tests.support.publishing import served_digest

pytestmark = [pytest.mark.docker, pytest.mark.registry]

STACKS = ROOT / "build" / "test-stacks" / "verify"  # in the repository: path sources resolve
STAMP_SETUP = """\
import pathlib
import time

from setuptools import setup

# a step that is not reproducible: the time of the build, written into the package
pathlib.Path("stamp_pkg").mkdir(exist_ok=True)
pathlib.Path("stamp_pkg/__init__.py").write_text(f"BUILT_AT = {time.time_ns()}\\n")
setup(name="stamp", version="1.0", packages=["stamp_pkg"])
"""


@pytest.fixture(scope="module", autouse=True)
def _remove_test_stacks() -> Iterator[None]:
    yield
    shutil.rmtree(STACKS, ignore_errors=True)


def _cli(*argv: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main([str(a) for a in argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _inputs(demo: Demo) -> list[str | Path]:
    return ["--lock", demo.lock_dir, "--cache-dir", demo.cache, "--index", f"demo={demo.index_url}"]


def _build(stack: Path, report: Path, demo: Demo) -> None:
    code, _, err = _cli(
        "build", stack, "--target", "final", *_inputs(demo), "--build-report", report,
        "--progress", "quiet",
    )  # fmt: skip
    assert code == 0, err


def _publish(stack: Path, report: Path, record: Path, lock: Path) -> str:
    """Publish the build of ``report`` as a nightly to a fresh repository, its SBOM and
    provenance attached; its repository."""
    repository = f"{REGISTRY}/verify-tests/{uuid.uuid4().hex[:12]}"
    code, _, err = _cli(
        "publish", stack, "--target", "final", "--nightly", "--build-report", report,
        "--repository", repository, "--record", record, "--date", "20261202", "--lock", lock,
    )  # fmt: skip
    assert code == 0, err
    return repository


def test_the_demo_rebuilt_without_cache_has_the_published_digest(
    demo: Demo, tmp_path: Path
) -> None:
    stack = ROOT / "stack" / "demo.yaml"
    report = tmp_path / "demo-final.json"
    _build(stack, report, demo)
    digest = json.loads(report.read_text())["digest"]
    assert digest == demo.digests["final"]  # built twice in this session: one digest
    record = tmp_path / "releases" / "vllm-musa-demo.json"
    repository = _publish(stack, report, record, demo.lock_dir)
    assert served_digest(f"{repository}:nightly-final") == digest
    code, out, err = _cli("verify-rebuild", record, *_inputs(demo), "--progress", "plain")
    assert code == 0, err
    # the rebuilt image's SBOM and provenance, made again, are the documents published
    attached = json.loads(record.read_text())["records"][-1]["attestations"]
    assert out == (
        f"reproduced final: {digest}\n"
        f"the same SBOM {attached['sbom_document']} and provenance "
        f"{attached['provenance_document']}\n"
    )
    rebuilt = json.loads((ROOT / "build" / "verify" / digest[7:23] / "report.json").read_text())
    assert rebuilt["digest"] == digest
    assert rebuilt["cache"]["steps_cached"] <= 1  # no layer cache; BuildKit may name FROM cached
    assert rebuilt["cache"]["steps_run"] > 10


def _stamp_stack() -> Path:
    source = STACKS / "stamp-src"
    source.mkdir(parents=True, exist_ok=True)
    (source / "setup.py").write_text(STAMP_SETUP, encoding="utf-8")
    text = (ROOT / "stack" / "demo.yaml").read_text(encoding="utf-8")
    text = text.replace(
        "  vllm-musa: {path: demo/vllm-musa}\n",
        "  vllm-musa: {path: demo/vllm-musa}\n"
        f"  stamp: {{path: {source.relative_to(ROOT).as_posix()}}}\n",
    )
    stack = STACKS / "stamp.yaml"
    stack.write_text(text, encoding="utf-8")
    return stack


def test_a_step_that_writes_the_time_is_named_by_verify_rebuild(demo: Demo, tmp_path: Path) -> None:
    stack = _stamp_stack()
    report = tmp_path / "stamp-final.json"
    _build(stack, report, demo)
    record = tmp_path / "releases" / "stamp.json"
    _publish(stack, report, record, demo.lock_dir)
    code, out, err = _cli(
        "verify-rebuild", record, "--stack", stack, *_inputs(demo), "--progress", "quiet",
        "--json",
    )  # fmt: skip
    assert code == 1, err
    doc = json.loads(out)
    published = json.loads(report.read_text())["digest"]
    assert (doc["schema"], doc["recorded"], doc["same"]) == (
        "build-image/verify-rebuild/1",
        published,
        False,
    )
    assert doc["rebuilt"] != published
    changed = _changed_files(doc["diff"])
    stamp = "usr/local/lib/python3.11/dist-packages/stamp_pkg/__init__.py"
    assert changed[stamp] == ["content"]
    assert err.splitlines()[-2] == (
        f"error[not-reproduced]: the rebuild of final is {doc['rebuilt']}, not the recorded "
        f"{published}"
    )


def _changed_files(diff: dict[str, Any]) -> dict[str, list[str]]:
    return {f["path"]: f["what"] for layer in diff["layers"] for f in layer["files"]}
