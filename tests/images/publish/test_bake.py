"""docker-bake.json for stacks and targets: deterministic, staging tags only."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import build_image
from core.errors import PublishError
from images.publish.bake import BakeTarget, render_bake
from tests.support.publishing import TAGGED_STACK


def test_bake_file_for_stacks_and_targets() -> None:
    plan = [
        BakeTarget(
            stack=f"vllm-musa-0.28.0-{cpu}", target=target, context=f"build/context/{cpu}-{target}",
            arch="x86_64", release="0.28.0", args={"MTGPU_TARGET": "mp_31", "TOOLING_REVISION": "abc"},
            tags=[f"r.example/vllm:v0.28.0-{cpu}-ph1-musa5.2.0"],
        )
        for cpu in ("amd64", "hygon")
        for target in ("vllm-openai", "final")
    ]  # fmt: skip
    text = render_bake(plan)
    assert text == render_bake(list(reversed(plan)))  # order-independent, byte-identical
    doc = json.loads(text)
    assert doc["group"] == {
        "default": {
            "targets": [
                "vllm-musa-0_28_0-amd64-final",
                "vllm-musa-0_28_0-amd64-vllm-openai",
                "vllm-musa-0_28_0-hygon-final",
                "vllm-musa-0_28_0-hygon-vllm-openai",
            ]
        }
    }
    assert doc["target"]["vllm-musa-0_28_0-hygon-vllm-openai"] == {
        "args": {"MTGPU_TARGET": "mp_31", "TOOLING_REVISION": "abc"},
        "context": "build/context/hygon-vllm-openai",
        "contexts": {},
        "dockerfile": "Dockerfile",
        "labels": {"org.opencontainers.image.version": "0.28.0"},
        "platforms": ["linux/amd64"],
        "tags": ["r.example/vllm:v0.28.0-hygon-ph1-musa5.2.0"],
        "target": "vllm-openai",
    }
    with pytest.raises(PublishError) as exc:
        render_bake([plan[0], plan[0]])
    assert exc.value.message == "two bake targets are named 'vllm-musa-0_28_0-amd64-vllm-openai'"


def test_bake_command_writes_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    stack = tmp_path / "stack" / "pubtest.yaml"
    stack.parent.mkdir()
    stack.write_text(TAGGED_STACK)
    out = tmp_path / "docker-bake.json"
    err = io.StringIO()
    code = build_image.main(
        ["bake", str(stack), "--target", "vllm-openai", "--out", str(out)],
        out=io.StringIO(), err=err,
    )  # fmt: skip
    assert code == 0, err.getvalue()
    doc = json.loads(out.read_text())
    [(name, target)] = doc["target"].items()
    assert name == "pubtest-vllm-openai"
    # never a release or nightly tag: those follow the gates, in publish
    assert target["tags"] == [
        "registry.mthreads.com/mcconline/inference/vllm:staging-pubtest-vllm-openai"
    ]
    assert target["context"] == "build/context/pubtest-vllm-openai"
    # the label args of a build (outside a git checkout: no tooling commit)
    assert target["args"] == {
        "IMAGE_CREATED": "2026-01-01T00:00:00Z",
        "TOOLING_REVISION": "unknown",
    }
