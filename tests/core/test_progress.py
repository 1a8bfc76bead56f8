"""Download progress bars: drawn on a terminal (a real pseudo-terminal here, the tool in a
subprocess locking against a real index on 127.0.0.1), with the file's name, up to 100%;
never drawn into a pipe or under ``-q``, where the output stays what it always was."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from tests.support.lockcase import NATIVE, Case

REPO = Path(__file__).resolve().parents[2]
RUN = "import sys, build_image; sys.exit(build_image.main(sys.argv[1:]))"
ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07]*\x07|[@-Z\\-_])")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BUILD_IMAGE_", "PYTHON"))}
    env.update(TERM="xterm-256color", COLUMNS="160", LINES="40")
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(name, None)
    return env


def _on_a_terminal(*argv: str) -> tuple[int, str, str]:
    """Run the tool with stderr on a pseudo-terminal (160 columns); (exit code, stdout, what
    the terminal received, escape sequences removed)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN, *argv],
        cwd=REPO,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    drawn = b""
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the tool ended, nothing writes to the terminal any more
            break
        if not data:
            break
        drawn += data
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    code = proc.wait(timeout=120)
    return code, out, ESCAPES.sub("", drawn.decode("utf-8", errors="replace"))


def _stack(case: Case) -> tuple[Path, Path]:
    wheel = case.wheel("numpy", "1.26.4", NATIVE, payload_bytes=300_000)
    case.publish(case.pypi, wheel)
    return wheel, case.stack(requirements=["numpy==1.26.4"])


def _locked(case: Case, *, changes: bool = True) -> str:
    """What ``lock`` prints on stdout; ``-q`` leaves out the table of what changed."""
    locked = f"locked 1 packages for CPython 3.12 (cp312), linux x86_64, glibc 2.35 -> {case.lock_dir()}\n"
    return locked + ("no previous lock: 1 packages locked for the first time\n" if changes else "")


def test_a_download_on_a_terminal_shows_a_bar_that_completes(case: Case) -> None:
    wheel, stack = _stack(case)
    code, out, drawn = _on_a_terminal("lock", str(stack), "--cache-dir", str(case.cache))
    assert (code, out) == (0, _locked(case))
    assert wheel.name in drawn
    [done] = [line for line in re.split(r"[\r\n]", drawn) if wheel.name in line and "100%" in line]
    size_kb = f"{wheel.stat().st_size / 1000:.1f}"
    assert f"{size_kb}/{size_kb} kB" in done, done


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_draws_no_bar_on_a_terminal(case: Case, where: str) -> None:
    _, stack = _stack(case)
    argv = ["lock", str(stack), "--cache-dir", str(case.cache)]
    argv = ["-q", *argv] if where == "before" else [*argv, "-q"]
    code, out, drawn = _on_a_terminal(*argv)
    assert (code, out, drawn) == (0, _locked(case, changes=False), "")


def test_a_download_into_a_pipe_prints_no_bar(case: Case) -> None:
    _, stack = _stack(case)
    result = subprocess.run(
        [sys.executable, "-c", RUN, "lock", str(stack), "--cache-dir", str(case.cache)],
        cwd=REPO,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, _locked(case), "")
