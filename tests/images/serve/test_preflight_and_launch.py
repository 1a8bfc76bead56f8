"""The preflight's checks and the server's launch, over facts as the engine reports them."""

from __future__ import annotations

from pathlib import Path

import pytest

from images.engine.port import ContainerFacts, LocalImage, Mount
from images.serve.launch import docker_run_words, server_host, server_spec
from images.serve.preflight import control_problem, device_holders, probe_problems, repository_of
from manifest.serving import Launch, ModelMount, Probe, ServingProfile

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
REPO = "127.0.0.1:5000/inference/vllm"
TAG = f"{REPO}:v0.28.0-amd64-ph1-musa5.2.0"
RECORD = "releases/vllm-musa-0.28.0-py312.json"


def _image(*digests: str) -> LocalImage:
    return LocalImage(id="sha256:" + "9" * 64, repo_digests=digests)


def _container(name: str, **facts: object) -> ContainerFacts:
    base: dict[str, object] = {
        "id": "c" * 64,
        "name": name,
        "image": "debian:bookworm-slim",
        "image_id": "sha256:" + "e" * 64,
        "labels": {},
        "devices": (),
        "runtime": None,
        "env": {},
        "status": "running",
        "exit_code": None,
        "host_port": None,
    }
    base.update(facts)
    return ContainerFacts(**base)  # type: ignore[arg-type]


PROFILE = ServingProfile(
    model=ModelMount(path="/models/q", mount="/model", name="q"),
    launch=Launch(
        devices=("/dev/mtgpu.0",),
        runtime="mthreads",
        env={"MTHREADS_VISIBLE_DEVICES": "0", "VLLM_USE_RUST_FRONTEND": "0"},
        ipc="host",
        shm_size="16g",
    ),
)


@pytest.mark.parametrize(
    ("ref", "repository"),
    [
        (TAG, REPO),
        (f"{REPO}@{D1}", REPO),
        ("vllm-musa-demo:vllm-openai", "vllm-musa-demo"),
        ("localhost:5000/x", "localhost:5000/x"),
    ],
)
def test_repository_of(ref: str, repository: str) -> None:
    assert repository_of(ref) == repository


def test_a_control_by_digest_or_image_id_is_pinned() -> None:
    image = _image(f"{REPO}@{D1}")
    assert control_problem(f"{REPO}@{D1}", image, {}, RECORD) is None
    assert control_problem(image.id, image, {}, RECORD) is None


def test_a_control_by_tag_must_have_the_recorded_digest() -> None:
    assert control_problem(TAG, _image(f"{REPO}@{D1}"), {TAG: D1}, RECORD) is None
    assert control_problem(TAG, _image(f"{REPO}@{D2}"), {TAG: D1}, RECORD) == (
        f"the control {TAG} is {D2} on the Docker host, but {RECORD} pins {D1} for it: pull "
        f"{REPO}@{D1} and give the control by that digest"
    )
    assert control_problem(TAG, _image(), {TAG: D1}, RECORD) == (
        f"the control {TAG} is no registry digest on the Docker host, but {RECORD} pins {D1} "
        f"for it: pull {REPO}@{D1} and give the control by that digest"
    )
    assert control_problem(TAG, _image(f"{REPO}@{D1}"), {}, RECORD) == (
        f"the control {TAG} is given by tag, and {RECORD} pins no digest for that tag: give "
        "the control by digest (REPO@sha256:...), or a tag of that record"
    )
    assert control_problem(TAG, None, {TAG: D1}, RECORD) == (
        f"the control {TAG} is not on the Docker host (pull it first)"
    )


def test_a_container_holding_a_device_is_named_and_ours_are_not() -> None:
    running = [
        _container("profiler", devices=("/dev/mtgpu.0",)),
        _container("sglang", runtime="mthreads", env={"MTHREADS_VISIBLE_DEVICES": "0,1"}),
        _container("other-gpu", runtime="mthreads", env={"MTHREADS_VISIBLE_DEVICES": "4"}),
        _container("web", devices=("/dev/null",)),
        _container("ours", devices=("/dev/mtgpu.0",), labels={"io.vllm-musa.serve.run": "r1"}),
    ]
    assert device_holders(running, PROFILE, "r1") == [
        "container profiler (cccccccccccc, image debian:bookworm-slim) holds /dev/mtgpu.0",
        "container sglang (cccccccccccc, image debian:bookworm-slim) runs on the mthreads "
        "runtime with overlapping devices",
    ]


def test_the_probe_must_exit_0_and_show_no_process() -> None:
    probe = Probe(command=("mthreads-gmi",), busy=r"^\s*\d+\s+\S+")
    assert probe_problems(probe, 0, "No running processes found\n") == []
    assert probe_problems(probe, 0, "  4242 python3 /dev/mtgpu.0\n") == [
        "the device probe `mthreads-gmi` shows a process on the device: 4242 python3 /dev/mtgpu.0"
    ]
    assert probe_problems(probe, 127, "sh: mthreads-gmi: not found\n") == [
        "the device probe `mthreads-gmi` exited 127: sh: mthreads-gmi: not found"
    ]


@pytest.mark.parametrize(
    ("docker_host", "override", "host"),
    [
        ("unix:///var/run/docker.sock", None, "127.0.0.1"),
        ("tcp://gpu-host.example:2376", None, "gpu-host.example"),
        ("ssh://ci@10.0.0.7", None, "10.0.0.7"),
        ("ssh://ci@10.0.0.7", "10.1.0.7", "10.1.0.7"),
    ],
)
def test_where_the_client_reaches_the_server(
    docker_host: str, override: str | None, host: str
) -> None:
    assert server_host(docker_host, override) == host


def test_the_launch_is_the_profile_and_says_so_as_docker_run() -> None:
    spec = server_spec(PROFILE, "sha256:" + "9" * 64, run_id="r1", role="A1", docker_host="unix://")
    assert spec.mounts == (Mount(source=Path("/models/q"), target="/model"),)
    assert spec.publish_address == "127.0.0.1"
    remote = server_spec(PROFILE, "img", run_id="r1", role="B1", docker_host="tcp://gpu:2376")
    assert remote.publish_address == "0.0.0.0"
    assert docker_run_words(spec) == [
        "docker", "run", "--detach",
        "--label", "io.vllm-musa.serve.role=A1",
        "--label", "io.vllm-musa.serve.run=r1",
        "--runtime", "mthreads",
        "--device", "/dev/mtgpu.0",
        "--ipc", "host",
        "--shm-size", "16g",
        "--publish", "127.0.0.1::8000",
        "--volume", "/models/q:/model:ro",
        "--env", "MTHREADS_VISIBLE_DEVICES=0",
        "--env", "VLLM_USE_RUST_FRONTEND=0",
        "sha256:" + "9" * 64,
        "/model", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "q",
    ]  # fmt: skip
