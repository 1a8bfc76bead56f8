"""The resolver's commands of ``build_image.py``: ``lock``, ``explain`` and ``why``.

``add_commands`` registers them, each next to its handler ``(args, console) -> int``. The
resolver's modules are imported inside the handlers, so ``build_image.py --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.console import (
    Console,
    add_index_argument,
    add_json_argument,
    add_network_arguments,
    add_stack_argument,
)
from core.errors import ExitCode
from resolver.endpoints import effective_endpoints, parse_index_overrides

if TYPE_CHECKING:
    from packaging.utils import NormalizedName

    from resolver.index_client import IndexClient
    from resolver.lockfile import Lock


def _add_network(p: argparse.ArgumentParser) -> None:
    add_network_arguments(p)
    p.add_argument(
        "--max-page-mb",
        type=int,
        default=64,  # resolver.index_client.MAX_PAGE_BYTES
        metavar="MB",
        help="the biggest index page read, decoded, in MB (default 64; PyPI's biggest are a "
        "few MB)",
    )


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "lock",
        help="resolve a stack and write its hash-locked lock",
        description="Resolve every pin on its own index, fail closed, and write pylock.toml, "
        "requirements.txt and constraints.txt atomically into DIR (default: "
        "stack/<stem>.lock/). With --check, resolve again and compare with the lock on disk.",
    )
    add_stack_argument(p)
    add_index_argument(p)
    _add_network(p)
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help="where to write the lock")
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="trust the index's sha256 and download only files that have none",
    )
    p.add_argument(
        "--check", action="store_true", help="compare a fresh resolve with the lock; write nothing"
    )
    add_json_argument(p, "what changed against the previous lock")
    p.set_defaults(handler=cmd_lock)

    p = sub.add_parser(
        "explain",
        help="list every file of a package on its index, accepted or refused, with the reason",
    )
    add_stack_argument(p)
    p.add_argument("package", help="a project name (pinned, a root, or in the lock's closure)")
    add_index_argument(p)
    _add_network(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=cmd_explain)

    p = sub.add_parser("why", help="print the chain of requirements that put a package in the lock")
    add_stack_argument(p)
    p.add_argument("package")
    p.add_argument(
        "--lock",
        type=Path,
        default=None,
        metavar="DIR",
        help="the lock directory (default: next to the manifest)",
    )
    p.set_defaults(handler=cmd_why)


def _client(
    args: argparse.Namespace, env: Mapping[str, str], console: Console, *, refresh: bool = False
) -> IndexClient:
    """The index client of ``args``; ``refresh``: revalidate every page, ``--refresh`` or not."""
    from dataclasses import replace

    from core.chosen_paths import usable_cache_dir
    from core.errors import UsageError
    from core.file_store import default_cache_dir
    from core.network import network_options
    from resolver.index_client import open_client

    if args.max_page_mb < 1:
        raise UsageError(f"--max-page-mb {args.max_page_mb}: the size is a positive number of MB")
    return open_client(
        usable_cache_dir(args.cache_dir, default_cache_dir(env)),
        env,
        replace(network_options(args, env), refresh=args.refresh or refresh),
        max_page_bytes=args.max_page_mb << 20,
        note=console.note,
        progress=console.downloads(),
    )


def _previous_bytes(out_dir: Path, console: Console) -> bytes | None:
    """The ``pylock.toml`` in ``out_dir`` before this run, as bytes (parsed only if the new
    lock differs); None when there is none, or it cannot be read (a note says so)."""
    from resolver.lockfile import PYLOCK

    path = out_dir / PYLOCK
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        console.note(f"note: the previous lock cannot be compared: {path}: {exc.strerror}")
        return None


def _before(
    out_dir: Path, *, check: bool, console: Console
) -> tuple[Lock | None, bytes | None, list[NormalizedName]]:
    """What a lock run needs of the lock in ``out_dir`` before it: for ``check``, that lock
    parsed (the drift is against it); else its ``pylock.toml`` bytes (``_previous_lock``).
    And the names the search will likely ask for, fetched from the start."""
    from resolver.lockfile import constrained_names, load_lock

    if check:
        lock = load_lock(out_dir)
        return lock, None, [p.name for p in lock.packages]
    return None, _previous_bytes(out_dir, console), constrained_names(out_dir)


def _previous_lock(
    before: bytes | None,
    out_dir: Path,
    new: Lock,
    files: Mapping[str, bytes],
    console: Console,
) -> Lock | None:
    """The lock whose ``pylock.toml`` in ``out_dir`` was ``before``, to say what changed:
    ``new`` itself when its rendered ``files`` hold the same bytes (nothing to parse); None
    when there was none, or it cannot be read (a note says so: a broken lock never blocks a
    new one)."""
    from core.errors import LockError
    from resolver.lockfile import PYLOCK, parse_pylock

    path = out_dir / PYLOCK
    if before is None:
        return None
    if before == files[PYLOCK]:
        return new
    try:
        return parse_pylock(before.decode("utf-8"), where=str(path))
    except UnicodeDecodeError:
        console.note(f"note: the previous lock cannot be compared: {path} is not UTF-8")
    except LockError as exc:
        console.note(f"note: the previous lock cannot be compared: {exc.message}")
    return None


def cmd_lock(args: argparse.Namespace, console: Console) -> int:
    from core.chosen_paths import check_out_dir
    from core.errors import LockError
    from core.fsutil import swap_lock
    from manifest import load_manifest
    from resolver.lock import lock_stack
    from resolver.lock_report import (
        lock_changes,
        lock_document,
        moved_packages,
        render_lock_changes,
    )
    from resolver.lockfile import check_lock_dir, diff_locks, render_all, write_rendered

    manifest = load_manifest(args.stack)
    endpoints = effective_endpoints(manifest, parse_index_overrides(args.index), os.environ)
    out_dir: Path = args.out or manifest.default_lock_dir()
    with swap_lock(out_dir):  # another run's write of out_dir is never seen half done
        if not args.check:  # before the work, not after it
            default_of = None if args.out else "the lock directory"
            check_out_dir(out_dir, writes="the lock", default_of=default_of)
            check_lock_dir(out_dir)
        checked, before, hints = _before(out_dir, check=args.check, console=console)
    # a drift check sees everything as the index has it now
    client = _client(args, os.environ, console, refresh=args.check)
    try:
        result = lock_stack(manifest, client, endpoints, verify=not args.no_verify, hints=hints)
    finally:
        client.close()
    files = render_all(result.lock)
    old = checked if args.check else _previous_lock(before, out_dir, result.lock, files, console)
    console.detail(_network_summary(client.stats))
    console.detail(result.search)
    for note in result.notes:
        console.note(note)
    say = console.note if args.json else console.print  # --json: stdout is the document's
    changes = lock_changes(old, result.lock)
    drift = diff_locks(old, result.lock) if old is not None else ["no previous lock"]
    doc = lock_document(
        result.lock,
        changes,
        stack=str(args.stack),
        lock_dir=str(out_dir),
        check=args.check,
        current=not drift,
    )
    if args.check:
        if args.json:
            console.json(doc)
        if drift:
            raise LockError(
                f"{out_dir} is not current for {args.stack}:\n  " + "\n  ".join(drift),
                hint=f"review the changes, then run `build_image.py lock {args.stack}`",
            )
        moved = moved_packages(changes)
        if moved:
            console.note(
                f"note: {len(moved)} of the locked files were found at other URLs than the lock "
                f"records (an index mirror?): the same files with the same sha256, so not "
                f"drift ({', '.join(moved)})"
            )
        say(f"{out_dir}: current ({len(result.lock.packages)} packages)")
        return ExitCode.OK
    with swap_lock(out_dir):  # its last check and the swap, with no other write between
        write_rendered(out_dir, files)
    if args.json:
        console.json(doc)
    target = manifest.target.describe()
    say(f"locked {len(result.lock.packages)} packages for {target} -> {out_dir}")
    for line in [] if console.quiet else render_lock_changes(changes):
        say(line)
    return ExitCode.OK


def _network_summary(stats: Mapping[str, int]) -> str:
    return (
        f"network: {stats['pages']} index pages read ({stats['fresh']} fresh in the cache, "
        f"{stats['not_modified']} not modified), {stats['downloads']} downloads, "
        f"{stats['metadata']} metadata files, {stats['ranges']} range reads"
    )


def cmd_explain(args: argparse.Namespace, console: Console) -> int:
    from manifest import load_manifest
    from resolver.explain import explain_package, render_explain_table
    from resolver.lockfile import load_lock

    manifest = load_manifest(args.stack)
    endpoints = effective_endpoints(manifest, parse_index_overrides(args.index), os.environ)
    client = _client(args, os.environ, console)
    lock = None
    if (manifest.default_lock_dir() / "pylock.toml").is_file():
        lock = load_lock(manifest.default_lock_dir())
    try:
        report = explain_package(manifest, client, endpoints, args.package, lock=lock)
    finally:
        client.close()
    if args.json:
        console.json(report.to_json())
    else:
        console.print(render_explain_table(report))
    return ExitCode.OK


def cmd_why(args: argparse.Namespace, console: Console) -> int:
    from manifest import load_manifest
    from resolver.explain import why_chains
    from resolver.lockfile import load_lock

    manifest = load_manifest(args.stack)
    lock = load_lock(args.lock or manifest.default_lock_dir())
    for line in why_chains(lock, args.package):
        console.print(line)
    return ExitCode.OK
