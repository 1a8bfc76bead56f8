"""Serving-stage test tools: evidence bundles written as ``serve-check`` writes them, and the
small serving profiles of the docker tests."""

from __future__ import annotations

from pathlib import Path

from images.build.workspace import Workspace
from images.serve.check import CheckOutcome, ServeCheckBundle, write_bundle


def write_serve_check(root: Path, image_id: str, *, passed: bool = True) -> Path:
    """A serve-check bundle of ``image_id`` under the workspace ``root``; returns its path."""
    outcome = CheckOutcome(
        name="capital",
        passed=passed,
        reason=None if passed else "the answer 'Paris' does not contain 'Beijing'",
        text="Beijing" if passed else "Paris",
        finish_reason="stop",
        output_tokens=1,
        ttft_ms=20.0,
        e2e_ms=20.0,
    )
    bundle = ServeCheckBundle(
        image=image_id,
        image_id=image_id,
        repo_digests=(),
        docker_host="unix:///var/run/docker.sock",
        launch=("docker", "run", image_id),
        server_url="http://127.0.0.1:8000",
        ready_after=1.0,
        checks=(outcome,),
        log_patterns={},
        log_tail="",
        failures=() if passed else (f"request capital: {outcome.reason}",),
        time="2026-12-01T00:00:00Z",
        profile={},
    )
    return write_bundle(Workspace(root).serve_check_dir(image_id), bundle, "")
