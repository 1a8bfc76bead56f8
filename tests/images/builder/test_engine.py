"""The docker CLI the engine builds with: ``BUILD_IMAGE_DOCKER`` picks it, and a value that is
missing, not executable or without BuildKit is refused, naming the setting and the path; it is
never replaced by ``docker`` on PATH or ``/usr/bin/docker``. The CLIs here are small scripts, so
no Docker is needed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

import build_image
from core.errors import DockerCliError
from images.engine.docker_build import DockerEngine
from images.engine.docker_cli import find_builder
from tests.support.images import stage_ready

HINT = (
    "hint: point BUILD_IMAGE_DOCKER at a docker CLI that builds with BuildKit (one with the "
    "buildx plugin, or Debian's /usr/bin/docker), or unset it to use `docker` on PATH\n"
)


def _script(path: Path, body: str, *, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    path.chmod(mode)
    return path


def _refusal(exc: pytest.ExceptionInfo[DockerCliError]) -> str:
    return f"error[{exc.value.code}]: {exc.value}\nhint: {exc.value.hint}\n"


def test_a_missing_cli_is_refused_before_the_build_command_does_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m, _, lock_dir, cache = stage_ready(tmp_path)
    missing = tmp_path / "bin" / "docker"
    monkeypatch.setenv("BUILD_IMAGE_DOCKER", str(missing))
    out, err = io.StringIO(), io.StringIO()
    argv = ["build", str(m.path), "--target", "final", "--lock", str(lock_dir)]
    code = build_image.main([*argv, "--cache-dir", str(cache.root)], out=out, err=err)
    assert (code, out.getvalue()) == (2, "")
    assert (
        err.getvalue() == f"error[docker-cli]: BUILD_IMAGE_DOCKER={missing}: no such file\n{HINT}"
    )
    assert not (tmp_path / "build").exists()  # nothing staged


@pytest.mark.parametrize(
    ("kind", "problem"),
    [("directory", "not an executable file"), ("not executable", "not an executable file")],
)
def test_a_cli_that_cannot_run_is_refused(tmp_path: Path, kind: str, problem: str) -> None:
    if kind == "directory":
        cli = tmp_path / "docker"
        cli.mkdir()
    else:
        cli = _script(tmp_path / "docker", "exit 0", mode=0o644)
    with pytest.raises(DockerCliError) as exc:
        DockerEngine(cli=str(cli), env={"PATH": "/usr/bin:/bin"})
    assert _refusal(exc) == f"error[docker-cli]: BUILD_IMAGE_DOCKER={cli}: {problem}\n{HINT}"
    assert exc.value.exit_code == 2


def test_a_name_not_on_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DockerCliError) as exc:
        DockerEngine(cli="docker-nowhere", env={"PATH": str(tmp_path)})
    assert _refusal(exc) == (
        f"error[docker-cli]: BUILD_IMAGE_DOCKER=docker-nowhere: no docker-nowhere on PATH\n{HINT}"
    )


def test_a_cli_without_buildkit_is_refused_not_replaced(tmp_path: Path) -> None:
    cli = _script(tmp_path / "docker", "exit 1")  # no buildx, no `build --help`
    on_path = _script(tmp_path / "path" / "docker", 'test "$1" = buildx')  # would build
    env = {"PATH": f"{on_path.parent}:/usr/bin:/bin"}
    with pytest.raises(DockerCliError) as exc:
        DockerEngine(cli=str(cli), env=env).builder()
    assert _refusal(exc) == (
        f"error[docker-cli]: BUILD_IMAGE_DOCKER={cli} does not build with BuildKit: "
        f"`{cli} buildx version` fails, and `DOCKER_BUILDKIT=1 {cli} build --help` has no "
        f"--secret\n{HINT}"
    )


def test_the_chosen_cli_is_the_one_that_builds(tmp_path: Path) -> None:
    buildx = _script(tmp_path / "with-buildx", 'test "$1" = buildx')
    assert find_builder(str(buildx), {}).argv == (str(buildx), "buildx", "build", "--load")
    builtin = _script(
        tmp_path / "with-buildkit",
        'test "$1" = build && test "$DOCKER_BUILDKIT" = 1 && echo "  --secret stringArray"',
    )
    builder = DockerEngine(cli=str(builtin), env={"PATH": "/usr/bin:/bin"}).builder()
    assert (builder.argv, builder.description) == (
        (str(builtin), "build"),
        f"DOCKER_BUILDKIT=1 {builtin} build",
    )
    on_path = _script(tmp_path / "docker", 'test "$1" = buildx')
    assert DockerEngine(cli="docker", env={"PATH": str(tmp_path)}).builder().argv[0] == str(on_path)


def test_build_help_documents_the_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_image.main(["build", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "BUILD_IMAGE_DOCKER=PATH (or a name on PATH) picks one" in text
