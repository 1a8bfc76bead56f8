"""What every command of ``build_image.py`` shares: the console, the common arguments and
the types that check argument values (``seconds``, ``count``: a bad value is an
``error[usage]``, exit 2, before any work starts)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TextIO

from core.errors import BuildImageError
from core.urls import redact_text


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
    """Where messages go. Credentials are redacted where a message is made; as a last guard,
    every ``scheme://user:secret@`` left in an error or a note is masked here too."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        self.err.write(redact_text(text) + "\n")

    def json(self, doc: object) -> None:
        """Print the one JSON document of ``--json`` (``core.json_output``) to stdout."""
        from core.json_output import render_json

        self.print(render_json(doc))
        self.json_written = True

    json_written = False  # a --json document is on stdout: an error adds no second one

    def error(self, exc: BuildImageError) -> None:
        self.err.write(f"error[{exc.code}]: {redact_text(exc.message)}\n")
        if exc.hint:
            self.err.write(f"hint: {redact_text(exc.hint)}\n")


def add_stack_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "stack", type=Path, help="the stack manifest, e.g. stack/vllm-musa-0.28.0-py312.yaml"
    )


def add_index_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="NAME=URL",
        help="replace the URL of manifest index NAME (a mirror); repeatable",
    )


def add_network_arguments(p: argparse.ArgumentParser) -> None:
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
        help="revalidate every cached index page, even one its server said is still fresh",
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
