"""The ``serving:`` section and ``--profile`` files: defaults, and every refusal by key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ManifestError
from manifest import load_serving_profile, parse_manifest
from manifest.serving import AbContract, Launch, Thresholds
from testbed.manifests import stack_text


def _profile(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profile.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_minimal_profile_takes_the_seed_contract_as_defaults(tmp_path: Path) -> None:
    profile = load_serving_profile(
        _profile(tmp_path, "model: {path: /models/Qwen3-8B-FP8, name: qwen3}\n")
    )
    assert profile.model.mount == "/models/Qwen3-8B-FP8"
    assert profile.launch == Launch()
    assert profile.ab == AbContract()
    assert (profile.ab.input_len, profile.ab.output_len) == (512, 128)
    assert profile.ab.concurrency == (1, 4, 16, 64)
    assert (profile.ab.warmups, profile.ab.runs, profile.ab.requests_per_run) == (2, 3, 64)
    assert profile.ab.thresholds == Thresholds(throughput_delta=-2.0, p99_e2e_delta=5.0)


def test_the_full_launch_section(tmp_path: Path) -> None:
    profile = load_serving_profile(
        _profile(
            tmp_path,
            "model: {path: /models/q, mount: /model, name: q}\n"
            "launch:\n"
            "  args: [--max-model-len, '4096']\n"
            "  port: 8001\n"
            "  env: {VLLM_USE_RUST_FRONTEND: '0', MTHREADS_VISIBLE_DEVICES: '0'}\n"
            "  runtime: mthreads\n"
            "  devices: [/dev/mtgpu.0]\n"
            "  ipc: host\n"
            "  network: host\n"
            "  shm_size: 16G\n"
            "ab: {order: [A1, B1, B2, A2]}\n",
        )
    )
    assert profile.launch == Launch(
        args=("--max-model-len", "4096"),
        port=8001,
        env={"VLLM_USE_RUST_FRONTEND": "0", "MTHREADS_VISIBLE_DEVICES": "0"},
        runtime="mthreads",
        devices=("/dev/mtgpu.0",),
        ipc="host",
        network="host",
        shm_size="16g",
    )
    assert profile.ab.order == ("A1", "B1", "B2", "A2")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "model: {path: /m, name: m}\nlaunch: {args: [--port, '9000']}\n",
            ":2: launch.args.0: --port is set by the tool (from launch.port and model.name)",
        ),
        (
            "model: {path: models/q, name: q}\n",
            ":1: model.mount: a relative model.path needs a mount path",
        ),
        (
            "model: {path: /m, name: m}\nab: {order: [B1, A1, A1]}\n",
            ":2: ab.order: names a lifetime twice",
        ),
        (
            "model: {path: /m, name: m}\nab: {order: [A1, A2]}\n",
            ":2: ab.order: A1 A2 is not a supported order",
        ),
        (
            "model: {path: /m, name: m}\nab: {concurrency: [1, 4, 4]}\n",
            ":2: ab.concurrency: lists a level twice",
        ),
        (
            "model: {path: /m, name: m}\nab: {bootstrap: {confidence: 1.0}}\n",
            ":2: ab.bootstrap.confidence: must be in [0.5, 1), e.g. 0.95",
        ),
        (
            "model: {path: /m, name: m}\ncheck: {log_patterns: ['(']}\n",
            ":2: check.log_patterns.0: is not a regular expression: missing ), unterminated "
            "subpattern at position 0",
        ),
        (
            "model: {path: /m, name: m}\ncheck: {requests: [{name: a, chat: x, prompt: y}]}\n",
            ":2: check.requests.0: give exactly one of chat (a user message) or prompt",
        ),
        (
            "model: {path: /m, name: m}\nlaunch: {port: 70000}\n",
            ":2: launch.port: must be from 1 to 65535, got 70000",
        ),
        (
            "model: {path: /m, name: m}\npreflight: {probe: {command: [], busy: x}}\n",
            ":2: preflight.probe.command: must not be empty",
        ),
        (
            "model: {path: /m, name: m}\nab: {warmup: 2}\n",
            ":2: ab.warmup: unknown key",
        ),
    ],
)
def test_refusals_name_the_file_line_and_key(tmp_path: Path, body: str, message: str) -> None:
    path = _profile(tmp_path, body)
    with pytest.raises(ManifestError) as info:
        load_serving_profile(path)
    assert info.value.message == f"{path}{message}"


def test_an_unknown_key_gets_a_did_you_mean(tmp_path: Path) -> None:
    path = _profile(tmp_path, "model: {path: /m, name: m}\nab: {warmup: 2}\n")
    with pytest.raises(ManifestError) as info:
        load_serving_profile(path)
    assert info.value.hint == "did you mean 'warmups'?"


def test_a_manifest_carries_its_serving_section(tmp_path: Path) -> None:
    text = stack_text() + "serving:\n  model: {path: /m, name: m}\n"
    manifest = parse_manifest(text, path=tmp_path / "stack.yaml")
    assert manifest.serving is not None
    assert manifest.serving.model.name == "m"
    bare = parse_manifest(stack_text(), path=tmp_path / "stack.yaml")
    assert bare.serving is None
    assert bare.lock_inputs_sha256 == manifest.lock_inputs_sha256  # not a lock input
