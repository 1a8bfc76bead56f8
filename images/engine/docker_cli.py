"""The docker CLI that builds: which one, its command line, and its output as it runs.

``check_cli`` checks the CLI ``BUILD_IMAGE_DOCKER`` names; ``find_builder`` finds the first CLI
that builds with BuildKit (``docker buildx build --load`` when the buildx plugin answers, else
``docker build`` with ``DOCKER_BUILDKIT=1`` on a CLI that has BuildKit built in, such as
Debian's ``/usr/bin/docker``) and never replaces a chosen CLI by another. ``build_argv`` is the
command line of one build (pure). ``run_piped`` and ``run_on_pty`` run it, its output read line
by line or drawn as a terminal would, its last lines kept for the error.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import shutil
import struct
import subprocess
import termios
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from core.errors import DockerCliError, DockerError
from images.engine.port import Builder, BuildRequest

FALLBACK_CLI = "/usr/bin/docker"  # Debian's docker.io: BuildKit built in, no buildx needed
CLI_SETTING = "BUILD_IMAGE_DOCKER"  # the environment variable that picks the docker CLI
_CLI_HINT = (
    f"point {CLI_SETTING} at a docker CLI that builds with BuildKit (one with the buildx "
    f"plugin, or Debian's {FALLBACK_CLI}), or unset it to use `docker` on PATH"
)


def _probe(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=dict(env), check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(argv), 127, "", str(exc))


def check_cli(value: str, env: Mapping[str, str]) -> str:
    """The docker CLI that ``BUILD_IMAGE_DOCKER`` names: a path, or a name looked up on the
    ``PATH`` of ``env``; refused when it is missing or not an executable file."""
    shown = f"{CLI_SETTING}={value}"
    if os.sep not in value:
        found = shutil.which(value, path=env.get("PATH", os.defpath))
        if found is None:
            raise DockerCliError(f"{shown}: no {value} on PATH", hint=_CLI_HINT)
        return found
    path = Path(value)
    if not path.exists():
        raise DockerCliError(f"{shown}: no such file", hint=_CLI_HINT)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise DockerCliError(f"{shown}: not an executable file", hint=_CLI_HINT)
    return value


def find_builder(cli: str | None, env: Mapping[str, str]) -> Builder:
    """The first docker CLI that builds with BuildKit: buildx, else DOCKER_BUILDKIT=1.

    ``cli`` is the one ``BUILD_IMAGE_DOCKER`` chose (checked by ``check_cli``): it is the only
    one tried, and one without BuildKit is refused. Without it, ``docker`` on PATH is tried,
    then Debian's ``/usr/bin/docker``."""
    candidates = [cli] if cli else ["docker", FALLBACK_CLI]
    seen: list[str] = []
    for c in candidates:
        if c in seen:
            continue
        seen.append(c)
        if _probe([c, "buildx", "version"], env).returncode == 0:
            return Builder(
                argv=(c, "buildx", "build", "--load"),
                env=dict(env),
                description=f"{c} buildx build",
            )
    for c in seen:
        bk_env = {**env, "DOCKER_BUILDKIT": "1"}
        res = _probe([c, "build", "--help"], bk_env)
        text = res.stdout + res.stderr
        if res.returncode == 0 and "--secret" in text and "buildx component is missing" not in text:
            return Builder(
                argv=(c, "build"), env=bk_env, description=f"DOCKER_BUILDKIT=1 {c} build"
            )
    if cli:
        raise DockerCliError(
            f"{CLI_SETTING}={cli} does not build with BuildKit: `{cli} buildx version` fails, "
            f"and `DOCKER_BUILDKIT=1 {cli} build --help` has no --secret",
            hint=_CLI_HINT,
        )
    raise DockerError(
        f"no docker CLI here builds with BuildKit (tried: {', '.join(seen)}): none has the "
        "buildx plugin, and none builds with DOCKER_BUILDKIT=1",
        hint="install the buildx plugin (docker-buildx), or Debian's docker.io whose "
        f"{FALLBACK_CLI} has BuildKit built in; BUILD_IMAGE_DOCKER=/path/to/docker picks a CLI",
    )


def build_argv(builder: Builder, req: BuildRequest) -> list[str]:
    """The command line of one build (pure). ``docker build`` without buildx has no quiet
    display: it gets the plain one, which the engine does not show."""
    progress = req.progress
    if progress == "quiet" and "buildx" not in builder.argv:
        progress = "plain"
    argv = [
        *builder.argv,
        f"--progress={progress}",
        "--file",
        str(req.dockerfile),
        "--target",
        req.target,
        "--iidfile",
        str(req.iidfile),
    ]
    for name, value in sorted(req.build_args.items()):
        argv += ["--build-arg", f"{name}={value}"]
    if req.network:
        argv += ["--network", req.network]
    if req.no_cache:
        argv.append("--no-cache")
    argv.append(str(req.context))
    return argv


def run_piped(
    argv: Sequence[str],
    env: Mapping[str, str],
    show: Callable[[str], None] | None,
    tail: collections.deque[str],
    count: Callable[[str], None] | None = None,
) -> int:
    """Run ``argv`` with its output read line by line (into ``tail``, to ``show``, and to
    ``count``, which reads BuildKit's plain progress)."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise DockerError(f"cannot run {argv[0]}: {exc}") from None
    with proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            if show is not None:
                show(line)
            if count is not None:
                count(line)
        return proc.wait()


_ESCAPE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def run_on_pty(
    argv: Sequence[str],
    env: Mapping[str, str],
    draw: Callable[[bytes], None],
    tail: collections.deque[str],
    count: Callable[[str], None] | None = None,
) -> int:
    """Run ``argv`` on a pseudo-terminal (of this terminal's size), its bytes to ``draw`` as
    they come; ``tail`` gets its lines without the terminal's escape sequences."""
    master, slave = os.openpty()
    with contextlib.suppress(OSError):
        size = shutil.get_terminal_size()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size.lines, size.columns, 0, 0))
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=dict(env)
        )
    except OSError as exc:
        os.close(master)
        raise DockerError(f"cannot run {argv[0]}: {exc}") from None
    finally:
        os.close(slave)
    pending = b""
    try:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            draw(data)
            *lines, pending = re.split(rb"\r\n|\n|\r", pending + data)
            pending = pending[-(1 << 16) :]  # a line without an end is not kept whole
            for line in lines:
                text = _ESCAPE.sub(b"", line).decode("utf-8", errors="replace").rstrip()
                if text:
                    tail.append(text)
                    if count is not None:
                        count(text)
        return proc.wait()
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
