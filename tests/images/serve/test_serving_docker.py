"""serve-check and ab with real containers of the demo image (marked ``docker``).

The demo's stand-in ``vllm serve`` paces its tokens from the environment, so a candidate built
``FROM`` the demo image with a slower pace is really slower. The workloads are a few short
requests per concurrency level; the assertions are on verdicts, counts and messages, never on
time.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import build_image
from demo.ab_demo import build_candidate
from images.builder.workspace import Workspace
from testbed.serving import DockerTcpEndpoint, write_profile
from tests.support.demo_build import Demo
from tests.support.environment import BASE_IMAGE, REGISTRY
from tests.support.environment import DOCKER_CLI as DOCKER

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[3]
RUN_LABEL = "io.vllm-musa.serve.run"


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


def _cli(*argv: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    code = build_image.main(list(argv), out=out, err=err)
    return Run(code, out.getvalue(), err.getvalue())


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def control(demo: Demo) -> str:
    """The demo image's ID (``make demo``'s vllm-openai target: the session's demo build)."""
    found = _docker("image", "inspect", "--format", "{{.Id}}", "vllm-musa-demo:vllm-openai")
    assert found.returncode == 0, found.stderr
    return found.stdout.strip()


@pytest.fixture(scope="module")
def same_pace(control: str) -> str:
    build_candidate("vllm-musa-demo:vllm-openai", 0.0, tag="vllm-musa-test:ab-same-pace")
    return "vllm-musa-test:ab-same-pace"


@pytest.fixture(scope="module")
def slower(control: str) -> str:
    build_candidate("vllm-musa-demo:vllm-openai", 20.0, tag="vllm-musa-test:ab-slower")
    return "vllm-musa-test:ab-slower"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace root (no git): profiles in profiles/, bundles under build/serve-check/."""
    (tmp_path / "model").mkdir()
    return tmp_path


def _profile(ws: Path, **options: object) -> Path:
    return write_profile(ws / "profiles" / "p.yaml", ws / "model", **options)  # type: ignore[arg-type]


def _from_error(err: str) -> list[str]:
    """The lines of the refusal: progress notes come before it."""
    lines = err.splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("error[")) :]


def _bundle(workspace: Path, image_id: str) -> dict[str, Any]:
    """The serve-check bundle of ``image_id`` in the workspace."""
    doc: dict[str, Any] = json.loads(
        (Workspace(workspace).serve_check_dir(image_id) / "bundle.json").read_text()
    )
    return doc


@contextlib.contextmanager
def _holding(device: str, *how: str) -> Iterator[str]:
    """A container this tool did not start, holding ``device`` open (``how``: the docker run
    options that give it the device); yields its name."""
    name = f"holder-{uuid.uuid4().hex[:8]}"
    started = _docker(
        "run", "-d", "--name", name, *how, BASE_IMAGE, "sh", "-c", f"exec 3<{device}; sleep 300",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        yield name
    finally:
        _docker("rm", "-f", name)


def _ours() -> list[str]:
    """Containers the serving stage started and left behind (must be none)."""
    listed = _docker("ps", "-a", "--filter", f"label={RUN_LABEL}", "--format", "{{.ID}}")
    return listed.stdout.split()


def test_equal_images_pass_with_no_resolvable_difference(
    workspace: Path, control: str, same_pace: str
) -> None:
    out = workspace / "ab"
    run = _cli("ab", control, same_pace, "--profile", str(_profile(workspace)), "--out", str(out))
    assert run.code == 0, run.err
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] is True
    assert [row["concurrency"] for row in report["rows"]] == [1, 2]
    for row in report["rows"]:
        assert row["control"]["failures"] == row["candidate"]["failures"] == 0
        assert (row["control"]["requests"], row["candidate"]["requests"]) == (4, 4)
        assert row["delta"]["output_tok_s"]["resolvable"] is False
    markdown = (out / "report.md").read_text()
    throughput = [
        line for line in markdown.splitlines() if re.match(r"^\| [12] \| 4 \| 4 \|", line)
    ]
    assert len(throughput) == 2
    assert all(line.endswith("no resolvable difference | 0 | 0 |") for line in throughput)
    assert "No threshold crossed and no request failed." in markdown
    assert (out / "report.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert len((out / "requests.jsonl").read_text().splitlines()) == 16
    assert _ours() == []


def test_a_candidate_20_percent_slower_is_refused_naming_the_rows(
    workspace: Path, control: str, slower: str
) -> None:
    out = workspace / "ab"
    run = _cli("ab", control, slower, "--profile", str(_profile(workspace)), "--out", str(out))
    assert run.code == 1
    lines = _from_error(run.err)
    assert lines[0] == f"error[ab-regression]: the candidate {slower} is refused against {control}:"
    throughput = [line for line in lines if "output tok/s" in line]
    assert [line.split(":", 1)[0] for line in throughput] == [
        "  - concurrency 1",
        "  - concurrency 2",
    ]
    for line in throughput:
        assert re.fullmatch(
            r"  - concurrency [12]: output tok/s -1\d\.\d\d% \(\d+\.\d\d -> \d+\.\d\d\), below "
            r"the threshold -5\.00%",
            line,
        ), line
    assert json.loads((out / "report.json").read_text())["passed"] is False
    assert _ours() == []


def test_a_server_that_fails_requests_is_refused_with_the_count(
    workspace: Path, control: str, same_pace: str
) -> None:
    profile = _profile(workspace, env={"VLLM_DEMO_FAIL_EVERY": "3"})
    run = _cli("ab", control, same_pace, "--profile", str(profile), "--out", str(workspace / "ab"))
    assert run.code == 1
    failed = [line for line in run.err.splitlines() if "requests failed" in line]
    body = 'HTTP 500: {"error": {"message": "stand-in failure of request %d"}}'
    assert failed == [
        f"  - concurrency 1: 1 of 4 control requests failed ({body % 3})",
        f"  - concurrency 1: 1 of 4 candidate requests failed ({body % 3})",
        f"  - concurrency 2: 1 of 4 control requests failed ({body % 6})",
        f"  - concurrency 2: 1 of 4 candidate requests failed ({body % 6})",
    ]


def test_a_server_that_never_becomes_healthy_is_refused_after_the_deadline(
    workspace: Path, control: str
) -> None:
    profile = _profile(workspace, env={"VLLM_DEMO_NEVER_HEALTHY": "1"}, deadline=3)
    run = _cli("serve-check", control, "--profile", str(profile))
    assert run.code == 1
    lines = _from_error(run.err)
    assert lines[:3] == [
        f"error[serve-check]: serve-check of {control} ({control}) failed:",
        f"  - serve-check of {control}: the server of {control} was not healthy within 3 s "
        "(/health answers HTTP 503)",
        "the last lines of the server log:",
    ]
    assert "INFO:     Application startup complete." in lines
    bundle = _bundle(workspace, control)
    assert bundle["passed"] is False
    assert bundle["server_url"] is None
    assert "Application startup complete." in bundle["log_tail"]
    assert _ours() == []


def test_serve_check_passes_and_its_bundle_holds_the_evidence(
    workspace: Path, control: str
) -> None:
    run = _cli("serve-check", control, "--profile", str(_profile(workspace)))
    assert run.code == 0, run.err
    assert run.err.splitlines()[0] == "check capital: ok"
    bundle = _bundle(workspace, control)
    assert bundle["passed"] is True
    assert bundle["image_id"] == control
    assert bundle["checks"][0]["text"] == "The capital of China is Beijing."
    assert bundle["checks"][0]["finish_reason"] == "stop"
    assert bundle["log_patterns"]["FLASH_ATTN"].endswith(
        "Using FLASH_ATTN attention backend (stand-in)"
    )
    assert bundle["launch"][:3] == ["docker", "run", "--detach"]
    assert bundle["launch"][-7:] == [
        "/models/demo", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "demo-model",
    ]  # fmt: skip


def test_a_health_probe_runs_curl_inside_the_serving_container(control: str) -> None:
    """The demo image has curl (runtime.apt_packages: ca-certificates and curl), as the real
    stacks have it from upstream's apt_base: a probe that runs in the container (an exec probe,
    a HEALTHCHECK) reaches the server on the container's own loopback."""
    name = f"curl-probe-{uuid.uuid4().hex[:8]}"
    started = _docker(
        "run", "--detach", "--name", name, "-e", "VLLM_USE_RUST_FRONTEND=0",
        "-v", f"{ROOT / 'demo' / 'model'}:/models/demo:ro", control,
        "/models/demo", "--host", "0.0.0.0", "--port", "8000", "--served-model-name", "demo-model",
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    try:
        probe = _docker(
            "exec", name, "curl", "-fsS", "--retry", "30", "--retry-connrefused",
            "--retry-delay", "1", "-o", "/dev/null", "-w", "%{http_code}",
            "http://127.0.0.1:8000/health",
        )  # fmt: skip
        # stderr may hold curl's "Will retry" lines while the server starts
        assert (probe.returncode, probe.stdout) == (0, "200"), probe.stderr
        models = _docker("exec", name, "curl", "-fsS", "http://127.0.0.1:8000/v1/models")
        assert models.returncode == 0, models.stderr
        assert json.loads(models.stdout) == {
            "object": "list",
            "data": [{"id": "demo-model", "object": "model", "owned_by": "vllm-demo"}],
        }
        # the trust store curl reads for https: ca-certificates' bundle, not empty
        bundle = _docker("exec", name, "test", "-s", "/etc/ssl/certs/ca-certificates.crt")
        assert (bundle.returncode, bundle.stderr) == (0, "")
    finally:
        _docker("rm", "-f", name)


@pytest.fixture
def foreign() -> Iterator[str]:
    """A container this tool did not start, holding /dev/zero as a "device"."""
    with _holding("/dev/zero", "--device", "/dev/zero:/dev/zero") as name:
        yield name


def test_a_device_held_by_a_foreign_container_is_refused_before_any_server(
    workspace: Path, control: str, same_pace: str, foreign: str
) -> None:
    profile = _profile(workspace, devices=("/dev/zero",))
    run = _cli("ab", control, same_pace, "--profile", str(profile), "--out", str(workspace / "ab"))
    assert run.code == 1
    container = _docker("inspect", "--format", "{{.Id}}", foreign).stdout.strip()
    assert _from_error(run.err) == [
        f"error[preflight]: the A/B of {same_pace} against {control} did not start, on "
        "unix:///var/run/docker.sock:",
        f"  - container {foreign} ({container[:12]}, image {BASE_IMAGE}) holds /dev/zero",
        "hint: nothing was started or stopped; fix each line above and run again",
    ]
    assert _docker("inspect", "--format", "{{.State.Running}}", foreign).stdout.strip() == "true"
    assert not (workspace / "ab").exists()
    assert _ours() == []


# the stand-in for mthreads-gmi: with the host's PID namespace, every process holding the device
PROBE = [
    "sh", "-c",
    'for p in /proc/[0-9]*; do for f in "$p"/fd/*; do '
    '[ "$(readlink "$f" 2>/dev/null)" = /dev/full ] && echo "${p#/proc/} $(cat "$p/comm") holds /dev/full"; '
    "done; done; true",
]  # fmt: skip


def test_a_device_busy_elsewhere_is_refused_by_the_probe(
    workspace: Path, control: str, same_pace: str
) -> None:
    """A process holds the device without a --device mapping the Docker API would show (here a
    container with /dev/full bind-mounted): only the probe sees it."""
    profile = _profile(workspace, devices=("/dev/full",), probe=(PROBE, "holds"))
    argv = ["ab", control, same_pace, "--profile", str(profile), "--out", str(workspace / "ab")]
    with _holding("/dev/full", "-v", "/dev/full:/dev/full"):
        run = _cli(*argv)
    assert run.code == 1
    problems = [line for line in run.err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 2, run.err  # the container's sh, then its sleep (the same files)
    for problem in problems:
        assert re.fullmatch(
            r"  - the device probe `sh -c .*` shows a process on the device: \d+ (sh|sleep) "
            r"holds /dev/full",
            problem,
        ), problem
    assert not (workspace / "ab").exists()
    quiet = _cli(*argv)
    assert quiet.code == 0, quiet.err  # nothing holds it now: the same probe lets the A/B run


@pytest.mark.registry
def test_a_control_by_tag_whose_digest_differs_from_the_record_is_refused(
    workspace: Path, control: str, same_pace: str
) -> None:
    tag = f"{REGISTRY}/serve-test/demo:v{uuid.uuid4().hex[:8]}"
    assert _docker("tag", control, tag).returncode == 0
    pushed = _docker("push", tag)
    assert pushed.returncode == 0, pushed.stderr
    digest = re.search(r"digest: (sha256:[0-9a-f]{64})", pushed.stdout)
    assert digest is not None, pushed.stdout
    recorded = "sha256:" + "0" * 64
    record = workspace / "releases" / "demo.json"
    record.parent.mkdir()
    record.write_text(
        json.dumps(
            {
                "schema": 1,
                "stack": "demo",
                "records": [
                    {
                        "channel": "release",
                        "digest": recorded,
                        "image_id": control,
                        "manifest_sha256": "0" * 64,
                        "repository": tag.rsplit(":", 1)[0],
                        "stack": "demo",
                        "tags": [tag],
                        "target": "vllm-openai",
                        "time": "2026-12-01T00:00:00Z",
                        "tool_version": "test",
                    }
                ],
            }
        )
    )
    try:
        argv = [
            "ab",
            tag,
            same_pace,
            "--profile",
            str(_profile(workspace)),
            "--record",
            str(record),
        ]
        run = _cli(*argv, "--out", str(workspace / "ab"))
    finally:
        _docker("rmi", tag)
    assert run.code == 1
    repository = tag.rsplit(":", 1)[0]
    assert _from_error(run.err)[1] == (
        f"  - the control {tag} is {digest.group(1)} on the Docker host, but "
        f"releases/demo.json pins {recorded} for it: pull {repository}@{recorded} and give the "
        "control by that digest"
    )


def test_serve_check_runs_unchanged_against_a_daemon_on_tcp(
    workspace: Path, control: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with DockerTcpEndpoint() as endpoint:
        monkeypatch.setenv("DOCKER_HOST", endpoint.docker_host)
        run = _cli("serve-check", control, "--profile", str(_profile(workspace)))
    assert run.code == 0, run.err
    bundle = _bundle(workspace, control)
    assert bundle["docker_host"] == endpoint.docker_host
    assert "0.0.0.0::8000" in bundle["launch"]  # a remote daemon publishes on every interface
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", bundle["server_url"])
    assert bundle["passed"] is True
