"""What every command of ``build_image.py`` shares: the console, the common arguments and
the types that check argument values (``seconds``, ``count``: a bad value is an
``error[usage]``, exit 2, before any work starts).

The console has one verbosity level, set once from ``-q``/``-v``: ``QUIET`` shows errors and
the command's result only; ``NORMAL`` adds the notes (what the cache removed, what a build is
doing); ``VERBOSE`` adds details and the traceback behind an ``error[internal]``/``error[os]``.
Download progress bars (``core.progress``) show only on a terminal and not under ``-q``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from core.errors import BuildImageError, UsageError
from core.urls import redact_text

if TYPE_CHECKING:
    from core.progress import DownloadProgress

QUIET, NORMAL, VERBOSE = -1, 0, 1


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds (``--timeout``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive, finite number of seconds")
    return value


def count(text: str) -> int:
    """An argparse type: a whole number, zero or more (``--retries``)."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is less than zero")
    return value


class Console:
    """Where messages go: the result to ``out``, everything else to ``err``. Credentials are
    redacted where a message is made; as a last guard, every ``scheme://user:secret@`` left in
    an error or a note is masked here too. ``level`` is ``QUIET``, ``NORMAL`` or ``VERBOSE``."""

    def __init__(self, out: TextIO, err: TextIO, *, level: int = NORMAL) -> None:
        self.out = out
        self.err = err
        self.level = level
        self._progress: DownloadProgress | None = None

    @property
    def quiet(self) -> bool:
        return self.level <= QUIET

    @property
    def verbose(self) -> bool:
        return self.level >= VERBOSE

    def print(self, text: str = "") -> None:
        """The command's result (shown at every level)."""
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        """What the command is doing or found on the way (not under ``-q``)."""
        if self.level >= NORMAL:
            self.say(text)

    def detail(self, text: str) -> None:
        """More than a note: shown under ``-v`` only."""
        if self.level >= VERBOSE:
            self.say(text)

    def say(self, text: str) -> None:
        """A line on ``err`` at every level (an interrupt, a traceback ``-v`` asked for)."""
        line = redact_text(text)
        if self._progress is not None and self._progress.write_line(line):
            return  # printed above the bars of the downloads in flight
        self.err.write(line + "\n")

    @property
    def on_terminal(self) -> bool:
        """``err`` is a terminal (progress may be drawn there)."""
        try:
            return bool(self.err.isatty())
        except (AttributeError, ValueError, OSError):
            return False

    def draw(self, data: bytes) -> None:
        """Bytes another program draws on the terminal (BuildKit's tty display), as they are."""
        buffer = getattr(self.err, "buffer", None)
        if buffer is not None:
            self.err.flush()
            buffer.write(data)
            buffer.flush()
        else:
            self.err.write(data.decode("utf-8", errors="replace"))

    def json(self, doc: object) -> None:
        """Print the one JSON document of ``--json`` (``core.json_output``) to stdout."""
        from core.json_output import render_json

        self.print(render_json(doc))
        self.json_written = True

    json_written = False  # a --json document is on stdout: an error adds no second one

    def error(self, exc: BuildImageError) -> None:
        self.say(f"error[{exc.code}]: {redact_text(exc.message)}")
        if exc.hint:
            self.say(f"hint: {redact_text(exc.hint)}")

    def downloads(self) -> DownloadProgress:
        """Where downloads report their bytes: bars on a terminal (not under ``-q``), else
        nothing (the output of a pipe or a CI log stays as it is), or under ``-v`` a line as
        each download starts, resumes and ends."""
        if self._progress is None:
            from core.progress import DownloadProgress

            self._progress = DownloadProgress(
                self.err,
                enabled=self.level >= NORMAL,
                log=self.detail if self.level >= VERBOSE else None,
            )
        return self._progress

    def close(self) -> None:
        """Take down the bars still shown (the end of a command)."""
        if self._progress is not None:
            self._progress.close()


def add_stack_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "stack", type=Path, help="the stack manifest, e.g. stack/vllm-musa-0.28.0-py312.yaml"
    )


def add_json_argument(p: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` as one JSON document on stdout, the text on stderr."""
    p.add_argument(
        "--json",
        action="store_true",
        help=f"print {what} as one JSON document (docs/json.md); the text goes to stderr",
    )


def add_name_url_argument(p: argparse.ArgumentParser, flag: str, *, replaces: str) -> None:
    """A repeatable ``flag NAME=URL`` that replaces ``replaces`` (read with ``name_and_url``)."""
    p.add_argument(
        flag,
        action="append",
        default=[],
        metavar="NAME=URL",
        help=f"replace {replaces}; repeatable",
    )


def add_index_argument(p: argparse.ArgumentParser) -> None:
    add_name_url_argument(p, "--index", replaces="the URL of manifest index NAME (a mirror)")


def name_and_url(value: str, *, flag: str) -> tuple[str, str]:
    """The NAME and the URL of a ``flag NAME=URL`` value (``--index``, ``--mirror``); a
    ``UsageError`` when it is not one."""
    name, sep, url = value.partition("=")
    if not sep or not name or not url:
        raise UsageError(f"{flag} {value!r}: expected NAME=URL")
    return name, url


def add_network_arguments(p: argparse.ArgumentParser) -> None:
    """What a command that reads the indexes takes: ``--cache-dir``, ``--timeout``,
    ``--retries``, ``--refresh``, then ``add_deadline_argument`` and
    ``add_connection_arguments``."""
    p.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="cache root (default: $BUILD_IMAGE_CACHE_DIR or ~/.cache/vllm-musa-image)",
    )
    p.add_argument(
        "--timeout",
        type=seconds,
        default=30.0,
        help="seconds per HTTP request, more than 0 (default 30)",
    )
    p.add_argument(
        "--retries",
        type=count,
        default=3,
        help="retries after a failed request, 0 or more (default 3)",
    )
    p.add_argument(
        "--refresh",
        action="store_true",
        help="revalidate every cached index page, even one still fresh (by its server's "
        "max-age, or a tenth of its age, at most ten minutes)",
    )
    add_deadline_argument(p)
    add_connection_arguments(p)


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    """``--proxy URL`` and ``--cert FILE``: how this host reaches an index or a registry
    (``core.network``; the environment's proxies and trust store when not given)."""
    p.add_argument(
        "--proxy",
        default=None,
        metavar="URL",
        help="send every request through this HTTP proxy, http://[USER:PASSWORD@]HOST:PORT "
        "(default: $HTTPS_PROXY for https, $HTTP_PROXY for http, else $ALL_PROXY; hosts in "
        "$NO_PROXY are reached directly either way)",
    )
    p.add_argument(
        "--cert",
        type=Path,
        default=None,
        metavar="FILE",
        help="trust the CA certificates in this PEM file for https (default: $SSL_CERT_FILE "
        "and $SSL_CERT_DIR, else the system's CA certificates)",
    )


def add_deadline_argument(p: argparse.ArgumentParser) -> None:
    """``--deadline SECONDS``: the command's network budget (``core.transport.Deadline``)."""
    p.add_argument(
        "--deadline",
        type=float,
        default=3600.0,  # core.transport.DEFAULT_DEADLINE (not imported: the CLI starts fast)
        metavar="SECONDS",
        help="the most time the command may spend on the network in all, every request, retry "
        "and backoff included (default 3600); a server that trickles is cut off then",
    )
