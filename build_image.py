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
    build_image.py verify-rebuild releases/NAME.json  # rebuild a release: the same digest?

`make demo` runs all of it offline on stack/demo.yaml; README.md tells the rest.

Exit codes: 0 success, 1 refused (the resolver, a gate, a drift), 2 usage, manifest or
environment error (a bad flag value too), 130 interrupted (Ctrl-C); `diff` answers as diff(1)
does: 0 same, 1 different, 2 trouble. Every refusal is one `error[code]: message` with a
`hint:`, and names the package, the index, the file and the reason, and says what would fix
it. A path the run cannot use (permission denied, a read-only filesystem, a full disk, a file
or a link where a directory must be) is `error[environment]`, exit 2, naming the flag that chose
it (--cache-dir, --out, ...), the path and the reason. Whatever else the machine refuses is
exit 1: `error[os]` (the path and the system's reason), `error[memory]`,
`error[recursion]`. Anything else is a bug of this tool: `error[internal]`, exit 1, says what
to put in a report.

Output: the result on stdout; notes, progress and errors on stderr. -q/--quiet leaves errors
and the result only; -v/--verbose adds details, and the traceback behind an error[internal],
error[os], error[memory] or error[recursion]. Both go before or after COMMAND. On a terminal
(and not under -q), downloads show progress bars; in a pipe or a log, nothing changes.

For CI: with --json, lock, build, publish, pin, verify-pins, rollback, diff and verify-rebuild
print one JSON document on stdout (an error document when they fail) and their text on stderr;
docs/json.md describes each. --version prints the installed version.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TextIO

from core.chosen_paths import ENVIRONMENT_HINTS, os_reason, place
from core.console import NORMAL, QUIET, VERBOSE, Console
from core.errors import (
    BuildImageError,
    EnvironmentFailureError,
    ExitCode,
    InternalError,
    OSFailureError,
    OutOfMemoryError,
    RecursionLimitError,
    UsageError,
)
from core.json_output import error_document, error_document_of
from core.urls import redact_text
from core.version import tool_version
from images.builder import commands as build_commands
from images.publish import commands as publish_commands
from images.publish import rebuild_commands
from images.serve import commands as serve_commands
from manifest import commands as manifest_commands
from resolver import commands as resolver_commands

__all__ = ["build_parser", "main"]

Handler = Callable[[argparse.Namespace, Console], int]
INTERRUPTED = 130


def _program_name() -> str:
    """``build-image`` when run as the installed console script, else ``build_image.py``."""
    return "build-image" if Path(sys.argv[0]).name == "build-image" else "build_image.py"


class _Parser(argparse.ArgumentParser):
    """argparse, but a wrong command line is an ``error[usage]`` (exit 2) like every other, and
    an option is never guessed from its first letters (``--lo`` is not ``--lock``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False  # the subparsers are made by this class too
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", hint=f"`{self.prog} --help` lists the options")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside the choices names them quoted, as on every Python (argparse's
        wording differs between versions)."""
        if action.choices is not None and value not in action.choices:
            choices = ", ".join(repr(c) for c in action.choices)
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r} (choose from {choices})"
            )


class _VersionAsked(Exception):
    """``--version`` was given: ``main`` prints the version and exits 0."""


class _Version(argparse.Action):
    def __call__(self, *_args: object, **_kwargs: object) -> NoReturn:
        raise _VersionAsked


def _add_verbosity(p: argparse.ArgumentParser, *, default: object) -> None:
    """``-q`` and ``-v``: one level (the last given wins), before or after COMMAND."""
    p.add_argument(
        "-q",
        "--quiet",
        dest="verbosity",
        action="store_const",
        const=QUIET,
        default=default,
        help="print errors and the command's result only (no notes, no progress bars)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="verbosity",
        action="store_const",
        const=VERBOSE,
        default=default,
        help="print more detail, and with error[internal], error[os], error[memory] or "
        "error[recursion] the traceback behind it",
    )


def _path_flags(p: argparse.ArgumentParser) -> tuple[tuple[str, str], ...]:
    """(flag, dest) of each option of ``p`` that names a path (``--cache-dir``, ``--out``)."""
    return tuple(
        (a.option_strings[-1], a.dest) for a in p._actions if a.option_strings and a.type is Path
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=_program_name(),
        description=__doc__.split("\n\n", 1)[0] if __doc__ else None,
        epilog=(__doc__.split("\n\n", 1)[1] if __doc__ else "")
        + "\nRun `build_image.py COMMAND --help` for the options of each command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_verbosity(parser, default=NORMAL)
    parser.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        default=argparse.SUPPRESS,
        help=f"print `{_program_name()} VERSION` (the installed version) and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for commands in (
        resolver_commands,
        build_commands,
        serve_commands,
        publish_commands,
        rebuild_commands,
        manifest_commands,
    ):
        commands.add_commands(sub)
    for command in sub.choices.values():  # -q and -v also after COMMAND
        _add_verbosity(command, default=argparse.SUPPRESS)
        command.set_defaults(path_flags=_path_flags(command))
    return parser


@dataclass
class _Run:
    """What the error boundary needs to know of the command line, as far as it was read."""

    verbose: bool
    json: bool  # --json: stdout carries one JSON document, an error document on a failure
    command: str | None
    trouble: int | None = None  # a command's own exit code for any error (diff: 2)


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run one command; the one place where what went wrong becomes a message and an exit
    code (``core.errors`` lists them). No traceback reaches a user unless ``-v`` asks."""
    console = Console(out or sys.stdout, err or sys.stderr)
    args_list = list(sys.argv[1:] if argv is None else argv)
    run = _Run(
        verbose=any(a in ("-v", "--verbose") for a in args_list),
        json="--json" in args_list,
        command=next((a for a in args_list if not a.startswith("-")), None),
    )
    args: argparse.Namespace | None = None
    try:
        args = build_parser().parse_args(args_list)
        console.level = int(args.verbosity)
        run = _Run(
            verbose=console.verbose,
            json=bool(getattr(args, "json", False)),
            command=str(args.command),
            trouble=getattr(args, "trouble_exit_code", None),
        )
        handler: Handler = args.handler
        code = handler(args, console)
        console.out.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except _VersionAsked:
        console.print(f"{_program_name()} {tool_version()}")
        return int(ExitCode.OK)
    except BuildImageError as exc:
        return _fail(console, exc, run)
    except KeyboardInterrupt:
        console.say("interrupted; nothing was written")
        if run.json and not console.json_written:
            _print_json(
                console,
                error_document(
                    run.command,
                    code="interrupted",
                    message="interrupted; nothing was written",
                    hint=None,
                    exit_code=INTERRUPTED,
                ),
            )
        return INTERRUPTED
    except BrokenPipeError as exc:
        if _output_closed(console):  # `build_image.py explain ... | head`: the reader left
            return int(ExitCode.REFUSED)
        return _report(console, exc, _os_error(exc, args), run)
    except OSError as exc:
        return _report(console, exc, _os_error(exc, args), run)
    except MemoryError as exc:
        return _report(console, exc, _memory_error(), run)
    except RecursionError as exc:
        return _report(console, exc, _recursion_error(exc), run)
    except Exception as exc:  # noqa: BLE001 - the one boundary: a bug becomes error[internal]
        return _report(console, exc, _internal_error(exc), run)
    finally:
        console.close()


def _fail(console: Console, error: BuildImageError, run: _Run) -> int:
    """``error[code]`` on stderr; under ``--json`` also the error document on stdout, unless
    the command's own document is already there (``lock --check`` that found drift)."""
    console.error(error)
    code = run.trouble if run.trouble is not None else int(error.exit_code)
    if run.json and not console.json_written:
        _print_json(console, error_document_of(run.command, error, exit_code=code))
    return code


def _print_json(console: Console, doc: dict[str, object]) -> None:
    """The error document; an output that is closed by now gets none (stderr has it all)."""
    try:
        console.json(doc)
        console.out.flush()
    except (OSError, ValueError):  # ValueError: the stream was closed
        pass


def _output_closed(console: Console) -> bool:
    """True when the console's own output is what broke; then nothing more is printed (and
    the interpreter's last flush of stdout must not fail either)."""
    try:
        console.out.flush()
    except BrokenPipeError:
        if console.out is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return True
    except (OSError, ValueError):
        return False
    return False


def _report(console: Console, exc: BaseException, error: BuildImageError, run: _Run) -> int:
    if run.verbose:
        import traceback

        console.say(redact_text("".join(traceback.format_exception(exc)).rstrip()))
    return _fail(console, error, run)


# ------------------------------------------------------------------ what went wrong, in words

_OS_HINTS = {
    errno.EACCES: "check the permissions of that path, or choose another one "
    "(--out, --cache-dir, BUILD_IMAGE_CACHE_DIR)",
    errno.EPERM: "check the permissions of that path, or choose another one",
    errno.EROFS: "that filesystem is read-only: choose a path on a writable one "
    "(--out, --cache-dir, BUILD_IMAGE_CACHE_DIR)",
    errno.ENOTDIR: "a part of that path is a file, not a directory: choose another path",
    errno.ENOENT: "that path, or a directory or a link on the way to it, does not exist",
    errno.ELOOP: "that path goes through a loop of symbolic links",
    errno.EEXIST: "something is already at that path: move it away or choose another path",
    errno.EISDIR: "that path is a directory where a file was expected",
    errno.ENOSPC: "the disk is full: free some space (the cache can be deleted) and run again",
    errno.EDQUOT: "the disk quota is used up: free some space and run again",
    errno.ENAMETOOLONG: "the path is too long for the filesystem: choose a shorter one",
}


_ONLY_CHOSEN = frozenset({errno.EEXIST})  # environment errors on a path the user chose only


def _os_error(exc: OSError, args: argparse.Namespace | None = None) -> BuildImageError:
    paths = [str(p) for p in (exc.filename, exc.filename2) if p is not None]
    what = (f"{' -> '.join(paths)}: " if paths else "") + os_reason(exc)
    number = exc.errno or 0
    hint = _OS_HINTS.get(number, "the system refused it; -v shows where it happened")
    if number not in ENVIRONMENT_HINTS:
        return OSFailureError(what, hint=hint)
    chosen = _chosen_path(paths, args)
    if chosen is None:
        if number in _ONLY_CHOSEN:
            return OSFailureError(what, hint=hint)
        return EnvironmentFailureError(what, hint=hint)
    flag, path, default = chosen
    where = place(flag, path, default_of="the cache" if default else None)
    return EnvironmentFailureError(
        f"{where} cannot be used: {what}", hint=ENVIRONMENT_HINTS[number].format(flag=flag)
    )


def _chosen_path(
    paths: Sequence[str], args: argparse.Namespace | None
) -> tuple[str, str, bool] | None:
    """(flag, its path, whether it is the default) of the path option of the command that one
    of ``paths`` lies in or on the way to: the path the user chose (or the default cache)."""
    if args is None or not paths:
        return None
    chosen: list[tuple[str, Path, bool]] = []
    for flag, dest in getattr(args, "path_flags", ()):
        value = getattr(args, dest, None)
        if isinstance(value, Path):
            chosen.append((flag, value, False))
        elif dest == "cache_dir" and value is None:
            from core.file_store import default_cache_dir

            chosen.append((flag, default_cache_dir(os.environ), True))
    for flag, value, default in chosen:
        root = Path(value).absolute()
        for p in paths:
            full = Path(p).absolute()  # in the chosen path, or on the way to it
            if full.is_relative_to(root) or root.is_relative_to(full):
                return flag, str(value), default
    return None


def _memory_error() -> BuildImageError:
    return OutOfMemoryError(
        "ran out of memory",
        hint="an input (an index page, a wheel, a lock) may be larger than this machine can "
        "hold; free memory or raise the limit and run again, and if the inputs are ordinary, "
        f"report it with the command and the output of `{_program_name()} -v`",
    )


def _recursion_error(exc: RecursionError) -> BuildImageError:
    return RecursionLimitError(
        f"an input is nested deeper than Python's recursion limit ({sys.getrecursionlimit()})",
        hint="check the inputs for deep nesting; if they are ordinary this is a bug: report it "
        f"with the command and the output of `{_program_name()} -v`",
    )


def _internal_error(exc: Exception) -> BuildImageError:
    try:
        text = redact_text(str(exc))
    except Exception:  # noqa: BLE001 - an exception whose str() fails still gets reported
        text = ""
    text = text if len(text) <= 300 else text[:300] + "..."
    return InternalError(
        f"unexpected {type(exc).__name__}"
        + (f": {text}" if text else "")
        + "; this is a bug of build-image, not of your input",
        hint=f"please report it with: the command line (credentials removed), this message, "
        f"the traceback that `{_program_name()} -v COMMAND ...` prints, and the versions "
        f"(build-image {tool_version()}, Python {sys.version.split()[0]})",
    )


def cli() -> NoReturn:
    """The command line's entry point (``build-image``, ``python build_image.py``): ``main``,
    then out of the process as soon as its output is written. An interpreter that tears
    itself down frees every object one by one, and a lock ends with hundreds of thousands of
    them (tens of milliseconds); so when every other thread is a daemon (none has work left)
    and the output flushes, the exit handlers run and the process ends there. After Ctrl-C
    the process ends there too, once the threads whose requests were cut off have cleaned up
    or half a second has passed (one may still be connecting to a host that does not
    answer). Otherwise, and for a ``main`` called in-process (the tests), the exit is
    Python's own."""
    code = main()
    import atexit
    import threading

    if code == INTERRUPTED:
        _join_others(_INTERRUPT_GRACE)
    idle = all(t.daemon for t in threading.enumerate() if t is not threading.main_thread())
    if not ((idle or code == INTERRUPTED) and _flushed()):
        sys.exit(code)  # Python reports a failed last flush as it always does
    atexit._run_exitfuncs()  # each runs once: a later sys.exit does not run them again
    if not _flushed():  # what an exit handler printed
        sys.exit(code)
    os._exit(code)


_INTERRUPT_GRACE = 0.5  # seconds the threads of an interrupted command get to clean up


def _join_others(seconds: float) -> None:
    """Wait at most ``seconds`` in all for the threads other than this one to end."""
    import threading
    import time

    end = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, end - time.monotonic()))


def _flushed() -> bool:
    """Whether stdout and stderr flushed (a closed pipe, a closed stream do not)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return False
    return True


if __name__ == "__main__":
    cli()
