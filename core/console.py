"""What every command of ``build_image.py`` shares: the console and the common arguments."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from core.errors import BuildImageError


class Console:
    """Where messages go; redaction of credentials happens before anything reaches here."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        self.err.write(text + "\n")

    def error(self, exc: BuildImageError) -> None:
        self.err.write(f"error[{exc.code}]: {exc.message}\n")
        if exc.hint:
            self.err.write(f"hint: {exc.hint}\n")


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
        "--timeout", type=float, default=30.0, help="seconds per HTTP request (default 30)"
    )
    p.add_argument(
        "--retries", type=int, default=3, help="retries after a failed request (default 3)"
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
