"""BuildKit's display (``build --progress auto|plain|tty|quiet``): chosen as ``docker build``
chooses it, passed through to the build's command line, and shown as asked, with the last
lines kept for the error either way. The builds here run a stand-in docker CLI (a script that
answers ``buildx version`` and writes the ``--iidfile``), never Docker."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from build_image import main
from core.errors import BuildFailedError
from images.engine.docker_build import DockerEngine
from images.engine.docker_cli import build_argv
from images.engine.port import Builder, BuildRequest, progress_mode

FAKE_DOCKER = """\
import os, sys
args = sys.argv[1:]
if args[:2] == ["buildx", "version"]:
    sys.exit(0)
iid = args[args.index("--iidfile") + 1]
progress = next(a for a in args if a.startswith("--progress="))
terminal = os.isatty(1)
print(f"#1 {progress} terminal={terminal}", flush=True)
if terminal:
    sys.stdout.write("\\x1b[1A\\x1b[2K#2 [final 1/2] RUN true\\n")
if os.environ.get("FAIL"):
    print("ERROR: failed to solve: process did not complete successfully", flush=True)
    sys.exit(1)
with open(iid, "w") as fh:
    fh.write("sha256:" + "ab" * 32 + "\\n")
"""


def _request(tmp_path: Path, progress: str) -> BuildRequest:
    return BuildRequest(
        context=tmp_path / "ctx",
        dockerfile=tmp_path / "ctx" / "Dockerfile",
        target="final",
        iidfile=tmp_path / "final.iid",
        progress=progress,
    )


def _fake_cli(tmp_path: Path) -> str:
    script = tmp_path / "docker"
    script.write_text(f"#!{sys.executable}\n{FAKE_DOCKER}")
    script.chmod(0o755)
    return str(script)


@pytest.mark.parametrize(
    ("asked", "terminal", "quiet", "mode"),
    [
        ("auto", True, False, "tty"),
        ("auto", False, False, "plain"),
        ("auto", True, True, "quiet"),
        ("plain", True, False, "plain"),
        ("tty", False, False, "tty"),
        ("quiet", False, False, "quiet"),
        ("plain", False, True, "plain"),  # asked for: -q does not override it
    ],
)
def test_auto_is_tty_on_a_terminal_and_plain_otherwise(
    asked: str, terminal: bool, quiet: bool, mode: str
) -> None:
    assert progress_mode(asked, terminal=terminal, quiet=quiet) == mode


@pytest.mark.parametrize("mode", ["plain", "tty", "quiet"])
def test_the_mode_is_passed_to_docker_build(tmp_path: Path, mode: str) -> None:
    builder = Builder(argv=("docker", "buildx", "build", "--load"), env={}, description="")
    argv = build_argv(builder, _request(tmp_path, mode))
    assert argv[:5] == ["docker", "buildx", "build", "--load", f"--progress={mode}"]
    assert [a for a in argv if a.startswith("--progress")] == [f"--progress={mode}"]


def test_docker_build_without_buildx_is_quiet_through_its_plain_display(tmp_path: Path) -> None:
    builder = Builder(argv=("/usr/bin/docker", "build"), env={}, description="")
    argv = build_argv(builder, _request(tmp_path, "quiet"))
    assert [a for a in argv if a.startswith("--progress")] == ["--progress=plain"]


def test_a_mode_docker_does_not_have_is_a_usage_error() -> None:
    err = io.StringIO()
    code = main(["build", "s.yaml", "--target", "final", "--progress", "fancy"], err=err)
    assert (code, err.getvalue()) == (
        2,
        "error[usage]: build_image.py build: argument --progress: invalid choice: 'fancy' "
        "(choose from 'auto', 'plain', 'tty', 'quiet')\n"
        "hint: `build_image.py build --help` lists the options\n",
    )


def _engine(tmp_path: Path, lines: list[str], drawn: list[bytes], **env: str) -> DockerEngine:
    return DockerEngine(
        cli=_fake_cli(tmp_path),
        env={"PATH": "/usr/bin:/bin", **env},
        on_output=lines.append,
        on_terminal=drawn.append,
    )


def test_plain_streams_each_line(tmp_path: Path) -> None:
    lines: list[str] = []
    drawn: list[bytes] = []
    image = _engine(tmp_path, lines, drawn).build(_request(tmp_path, "plain"))
    assert image == "sha256:" + "ab" * 32
    assert (lines, drawn) == (["#1 --progress=plain terminal=False"], [])


def test_tty_runs_the_build_on_a_terminal_and_draws_its_bytes(tmp_path: Path) -> None:
    lines: list[str] = []
    drawn: list[bytes] = []
    image = _engine(tmp_path, lines, drawn).build(_request(tmp_path, "tty"))
    assert image == "sha256:" + "ab" * 32
    assert lines == []
    assert b"".join(drawn) == (
        b"#1 --progress=tty terminal=True\r\n\x1b[1A\x1b[2K#2 [final 1/2] RUN true\r\n"
    )


def test_quiet_shows_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    drawn: list[bytes] = []
    _engine(tmp_path, lines, drawn).build(_request(tmp_path, "quiet"))
    assert (lines, drawn) == ([], [])


@pytest.mark.parametrize("mode", ["plain", "tty", "quiet"])
def test_a_failed_build_keeps_its_last_lines_in_every_mode(tmp_path: Path, mode: str) -> None:
    with pytest.raises(BuildFailedError) as info:
        _engine(tmp_path, [], [], FAIL="1").build(_request(tmp_path, mode))
    terminal = mode == "tty"
    extra = "#2 [final 1/2] RUN true\n" if terminal else ""
    assert info.value.message == (
        "docker build of target final failed (exit 1); last lines:\n"
        f"#1 --progress={mode} terminal={terminal}\n{extra}"
        "ERROR: failed to solve: process did not complete successfully"
    )
