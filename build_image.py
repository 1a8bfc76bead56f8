#!/usr/bin/env python3
"""build_image.py: lock, build, gate and publish the vLLM-MUSA serving image.

The pipeline, for one stack manifest (stack/*.yaml):

    build_image.py lock STACK --index mthreads=URL   # resolve on each bound index, write the lock
    build_image.py lock STACK --check                # CI: is the lock still what the indexes say?
    build_image.py explain STACK torch               # every torch file, used or refused, and why
    build_image.py why STACK filelock                # the chain that put filelock in the lock
    build_image.py build STACK --target vllm-openai  # render, build with BuildKit, gate, then tag
    build_image.py serve-check IMAGE --stack STACK    # does it serve? (semantic requests, log)
    build_image.py ab CONTROL CANDIDATE --stack STACK # as fast as the pinned image it replaces?
    build_image.py publish STACK --target vllm-openai --nightly   # push, record the digests

`make demo` runs all of it offline on stack/demo.yaml; README.md tells the rest.

Exit codes: 0 success, 1 refused (the resolver, a gate, a drift), 2 usage or manifest error.
Every refusal names the package, the index, the file and the reason, and says what would fix it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from core.console import Console
from core.errors import BuildImageError
from images.build import commands as build_commands
from images.publish import commands as publish_commands
from images.serve import commands as serve_commands
from resolver import commands as resolver_commands

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace, Console], int]


def _program_name() -> str:
    """``build-image`` when run as the installed console script, else ``build_image.py``."""
    return "build-image" if Path(sys.argv[0]).name == "build-image" else "build_image.py"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_program_name(),
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        epilog=(__doc__.split("\n\n", 1)[1] if __doc__ else "")
        + "\nRun `build_image.py COMMAND --help` for the options of each command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for commands in (resolver_commands, build_commands, serve_commands, publish_commands):
        commands.add_commands(sub)
    return parser


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    console = Console(out or sys.stdout, err or sys.stderr)
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args, console)
    except BuildImageError as exc:
        console.error(exc)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        console.note("interrupted; nothing was written")
        return 130


if __name__ == "__main__":
    sys.exit(main())
