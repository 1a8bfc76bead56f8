"""What the ``docker`` and ``registry`` tests need from the machine, and the one rule for when
it is missing: skip locally, fail when ``CI=true`` (CI must have run the ``ci/`` scripts).

``tests/conftest.py`` applies the rule to every test marked ``docker`` or ``registry`` before
any of its fixtures run, so a test module needs no probe of its own:

- ``docker``: a docker CLI, a daemon that answers, a CLI that builds with BuildKit, and the
  base image the tests build ``FROM`` (``BASE_IMAGE``, made by ``ci/make-base-image.sh``).
- ``registry``: the open registry (``REGISTRY``, HTTP 200 on ``/v2/``), the htpasswd registry
  (``AUTH_REGISTRY``, HTTP 401 on ``/v2/``), a daemon that answers, and ``skopeo``.

Addresses and tools can be moved with BUILD_IMAGE_TEST_REGISTRY,
BUILD_IMAGE_TEST_AUTH_REGISTRY and BUILD_IMAGE_DOCKER_CLI. Each probe runs once per session.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import pytest

from core.errors import DockerError
from images.engine.docker_cli import find_builder

REGISTRY = os.environ.get("BUILD_IMAGE_TEST_REGISTRY", "127.0.0.1:5000")
AUTH_REGISTRY = os.environ.get("BUILD_IMAGE_TEST_AUTH_REGISTRY", "127.0.0.1:5001")
DOCKER_CLI = os.environ.get("BUILD_IMAGE_DOCKER_CLI") or (
    "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
)
BASE_IMAGE = "debian:bookworm-slim"
_TIMEOUT = 120


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def unavailable(reason: str, *, marker: str) -> NoReturn:
    """Skip the test, or fail it when ``CI=true``: CI must provide what ``marker`` needs."""
    if in_ci():
        pytest.fail(f"{reason}; CI=true, so the tests marked {marker!r} must run")
    pytest.skip(reason)


def _run(*argv: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _daemon_missing() -> str | None:
    if shutil.which(DOCKER_CLI) is None:
        return f"the docker CLI {DOCKER_CLI} is not installed (ci/install-system-deps.sh)"
    answer = _run(DOCKER_CLI, "version", "--format", "{{.Server.Version}}")
    if answer is None or answer.returncode != 0:
        detail = answer.stderr.strip() if answer is not None else "no answer"
        return f"no Docker daemon answers ({detail}; run ci/start-docker.sh)"
    return None


def v2_status(registry: str) -> int | None:
    """The HTTP status of ``http://REGISTRY/v2/``, or None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{registry}/v2/", timeout=3) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


@functools.cache
def docker_missing() -> str | None:
    """Why the ``docker`` tests cannot run here, or None when they can."""
    missing = _daemon_missing()
    if missing is not None:
        return missing
    try:
        find_builder(DOCKER_CLI, os.environ)
    except DockerError as exc:
        return f"BuildKit is not available: {exc.message}"
    inspect = _run(DOCKER_CLI, "image", "inspect", BASE_IMAGE)
    if inspect is None or inspect.returncode != 0:
        return f"base image {BASE_IMAGE} is missing (run ci/make-base-image.sh)"
    return None


@functools.cache
def registry_missing() -> str | None:
    """Why the ``registry`` tests cannot run here, or None when they can."""
    status = v2_status(REGISTRY)
    if status != 200:
        return (
            f"no open registry answers on http://{REGISTRY}/v2/ (got {status}; "
            "run ci/start-registry.sh)"
        )
    status = v2_status(AUTH_REGISTRY)
    if status != 401:
        return (
            f"no htpasswd registry answers on http://{AUTH_REGISTRY}/v2/ (got {status}; "
            "run ci/start-registry.sh --auth)"
        )
    missing = _daemon_missing()
    if missing is not None:
        return missing
    if shutil.which("skopeo") is None:
        return "skopeo is not installed (ci/install-system-deps.sh)"
    return None


NEEDS: dict[str, Callable[[], str | None]] = {
    "docker": docker_missing,
    "registry": registry_missing,
}
"""Marker name -> the probe that says why its tests cannot run (None: they can)."""
