"""docker-bake.json for stacks and targets: deterministic, staging tags only."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

import build_image
from core.errors import PublishError
from images.builder.render import declared_args
from images.publish.bake import BakeTarget, render_bake
from tests.support.images import MANIFEST, MOONCAKE, components_text, manifest, render_text
from tests.support.publishing import TAGGED_STACK

IMAGE = """\
image:
  repository: "127.0.0.1:5000/vllm-musa-demo"
  release_tags: ["v{release}"]
  nightly_tags: ["nightly"]
"""


def _bake(stack: Path, out: Path, *targets: str) -> tuple[dict[str, dict[str, object]], str]:
    err, printed = io.StringIO(), io.StringIO()
    argv = ["bake", str(stack), *(a for t in targets for a in ("--target", t)), "--out", str(out)]
    code = build_image.main(argv, out=printed, err=err)
    assert code == 0, err.getvalue()
    targets_: dict[str, dict[str, object]] = json.loads(out.read_text())["target"]
    return targets_, printed.getvalue()


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
        "labels": {"org.opencontainers.image.version": "v0.28.0"},  # labels.image_version
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
    stack.write_text(TAGGED_STACK + 'base_image: "debian:bookworm-slim"\n')
    out = tmp_path / "docker-bake.json"
    doc, _ = _bake(stack, out, "vllm-openai")
    [(name, target)] = doc.items()
    assert name == "pubtest-vllm-openai"
    # never a release or nightly tag: those follow the gates, in publish
    assert target["tags"] == [
        "registry.mthreads.com/mcconline/inference/vllm:staging-pubtest-vllm-openai"
    ]
    # the build args of a build (outside a git checkout: no tooling commit)
    assert target["args"] == {
        "BASE_IMAGE": "debian:bookworm-slim",
        "DEPS_TIME": "1767225600",  # outside git: each tier's time is the build's
        "IMAGE_CREATED": "2026-01-01T00:00:00Z",
        "SOURCES_TIME": "1767225600",
        "TOOLING_REVISION": "unknown",
    }


def test_bake_contexts_are_the_staged_directories_wherever_the_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """buildx reads a relative context against its own working directory, not the bake file's:
    every context is the absolute path `stage` writes, and the output says the file is
    machine-local and how to run it from anywhere."""
    manifest(tmp_path, MANIFEST + IMAGE)
    monkeypatch.chdir(tmp_path / "stack")  # neither the repository nor the bake file's directory
    out = Path("../build/bake/docker-bake.json")
    doc, printed = _bake(Path("demo.yaml"), out)
    contexts = {name: t["context"] for name, t in doc.items()}
    assert contexts == {
        f"demo-{t}": str((tmp_path / "build" / "context" / f"demo-{t}").resolve())
        for t in ("final", "vllm-openai")
    }
    assert printed == (
        f"wrote {out}: 2 targets\n"
        "its contexts are absolute paths of this machine: the file is for this checkout only "
        "(do not commit it)\n"
        "stage each context first:\n"
        "  build_image.py stage demo.yaml --target final\n"
        "  build_image.py stage demo.yaml --target vllm-openai\n"
        f"then, from any directory: docker buildx bake --file {out.resolve()}\n"
        "and gate the results (build_image.py gate) before anything is published\n"
    )


@pytest.mark.parametrize("text", [MANIFEST, components_text(MOONCAKE)], ids=["plain", "mooncake"])
def test_bake_passes_every_build_arg_the_render_declares(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """The args of each bake target are exactly the ARGs of the rendered Dockerfile: one the
    template starts to declare cannot be left out of the bake again."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    m = manifest(tmp_path, text + IMAGE)
    declared = declared_args(render_text(m))
    assert {"BASE_IMAGE", "MTGPU_TARGET", "TOOLING_REVISION", "IMAGE_CREATED"} <= declared
    doc, _ = _bake(m.path, tmp_path / "docker-bake.json")
    for name, target in doc.items():
        args = target["args"]
        assert isinstance(args, dict)
        assert set(args) == declared, name
        assert args["BASE_IMAGE"] == "debian:bookworm-slim"
        assert args["MTGPU_TARGET"] == "mp_31"


def test_bake_refuses_a_stack_without_a_base_image(tmp_path: Path) -> None:
    stack = tmp_path / "stack" / "pubtest.yaml"
    stack.parent.mkdir()
    stack.write_text(TAGGED_STACK)
    err = io.StringIO()
    argv = ["bake", str(stack), "--out", str(tmp_path / "docker-bake.json")]
    assert build_image.main(argv, out=io.StringIO(), err=err) == 1
    assert err.getvalue() == (
        f"error[render]: {stack}: no base_image\n"
        'hint: add base_image: "<registry>/<image>:<tag>@sha256:<digest>" to the manifest\n'
    )
    assert not (tmp_path / "docker-bake.json").exists()
