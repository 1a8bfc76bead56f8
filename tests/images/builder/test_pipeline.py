"""The build side as library calls and its thin commands, without Docker: ``stage``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import build_image
from core.errors import UsageError
from core.network import NetworkOptions
from images.builder.pipeline import StageRequest, check_tags, stage
from images.builder.render import build_args_for
from images.builder.workspace import Workspace
from tests.support.images import manifest, stage_ready


def _stack(tmp_path: Path) -> tuple[Path, Path, Path]:
    m, _, lock_dir, cache = stage_ready(tmp_path)
    return m.path, lock_dir, cache.root


def test_stage_command_stages_the_context_without_docker(tmp_path: Path) -> None:
    stack, lock_dir, cache = _stack(tmp_path)
    out_dir = tmp_path / "ctx"
    out, err = io.StringIO(), io.StringIO()
    argv = ["stage", str(stack), "--target", "final", "--lock", str(lock_dir)]
    argv += ["--cache-dir", str(cache), "--out", str(out_dir)]
    code = build_image.main(argv, out=out, err=err)
    assert code == 0, err.getvalue()
    assert out.getvalue() == f"{out_dir}\n"
    files = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    assert "Dockerfile" in files
    assert "lock/pylock.toml" in files
    assert "lock/requirements.txt" in files
    assert "lock/requirements-build.txt" in files
    # the deps stage's layers: this lock pins nothing (every package is a requirement), so
    # one layer holds the whole runtime lock
    assert sorted(p.name for p in (out_dir / "deps").iterdir()) == ["locked.txt"]
    locked = (out_dir / "deps" / "locked.txt").read_text().splitlines()
    assert locked[0] == "# deps layer: the requirements and every dependency the lock resolved"
    assert [line.split("==")[0] for line in locked if "==" in line] == ["mate", "pip", "torch"]
    assert "wheelhouse/runtime/pip-23.0.1-py3-none-any.whl" in files
    assert "wheelhouse/runtime/torch-2.11.0.post2+musa5.2.0-cp311-cp311-linux_x86_64.whl" in files
    assert "wheelhouse/build/setuptools-66.1.1-py3-none-any.whl" in files
    assert "sources/vllm/pyproject.toml" in files
    assert "sources/vllm-musa/pyproject.toml" in files
    for tool in ("apt-get.sh", "apt-offline.sh"):
        assert f"tools/{tool}" in files
    assert "sbom/sbom.py" in files
    assert "sbom/sbom-facts.json" in files
    text = (out_dir / "Dockerfile").read_text(encoding="utf-8")
    assert text.startswith(
        "# Rendered by `build_image.py render` from the stack manifest demo.yaml"
    )
    assert "org.opencontainers.image.base.digest" not in text  # not pinned, Docker not asked


def test_stage_defaults_to_the_workspace_context_dir(tmp_path: Path) -> None:
    _, lock_dir, cache = _stack(tmp_path)
    m = manifest(tmp_path)
    staged = stage(
        StageRequest(
            manifest=m,
            target="vllm-openai",
            workspace=Workspace(tmp_path),
            env={},
            cache_dir=cache,
            lock_dir=lock_dir,
        )
    )
    assert staged.directory == tmp_path / "build" / "context" / "demo-vllm-openai"
    assert staged.dockerfile.read_text(encoding="utf-8") == staged.dockerfile_text


def test_an_offline_stage_needs_the_base_image_id(tmp_path: Path) -> None:
    _, lock_dir, cache = _stack(tmp_path)
    request = StageRequest(
        manifest=manifest(tmp_path),
        target="final",
        workspace=Workspace(tmp_path),
        env={},
        cache_dir=cache,
        lock_dir=lock_dir,
        options=NetworkOptions(offline=True),
    )
    with pytest.raises(UsageError, match="an offline stage needs the base image's local id"):
        stage(request)


def test_a_tag_with_a_digest_is_refused() -> None:
    with pytest.raises(UsageError) as info:
        check_tags(["r.example/x@sha256:" + "a" * 64])
    assert info.value.message.startswith("--tag 'r.example/x@sha256:")


def test_build_args_carry_the_tooling_labels_and_a_replaced_base_image(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    assert build_args_for(m, base_image=None, tooling_revision="abc", epoch=1767323045) == {
        "MTGPU_TARGET": "mp_31",
        "TOOLING_REVISION": "abc",
        "IMAGE_CREATED": "2026-01-02T03:04:05Z",
        "DEPS_TIME": "1767323045",  # no stage times given: the build's time for both tiers
        "SOURCES_TIME": "1767323045",
    }
    replaced = build_args_for(m, base_image="debian:x", tooling_revision="abc", epoch=None)
    assert replaced["BASE_IMAGE"] == "debian:x"
    assert (replaced["IMAGE_CREATED"], replaced["DEPS_TIME"]) == ("", "0")


def test_a_bad_tag_is_refused_before_any_build(tmp_path: Path) -> None:
    err = io.StringIO()
    code = build_image.main(
        ["build", "stack/demo.yaml", "--target", "final", "--tag", "bad tag"],
        out=io.StringIO(),
        err=err,
    )
    assert code == 2
    assert err.getvalue().startswith("error[")
    assert "'bad tag' is not an image reference" in err.getvalue()
