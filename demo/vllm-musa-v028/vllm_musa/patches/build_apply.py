"""Apply the vllm-musa patch series to a vLLM source tree with ``git apply``, as upstream does.

Stdlib only, and no ``vllm_musa`` import: setup.py loads this file by path before the package
is installed, and calls ``apply_patch_series(tree, series, strict=True)`` before it installs
vLLM, so the installed vLLM is the patched one.

Each patch of ``series/*.patch`` (in name order) goes through the three calls of upstream's
applier (MooreThreads/vllm_musa@b78203f400eb222bb098a09320b01e1d2d613e15
vllm_musa/patches/build_apply.py), each ``git -C TREE apply --recount -p 1`` with the patch's
absolute path:

1. ``--reverse --check``: when the patch reverse-applies, its changes are there already and it
   is skipped (``already-applied``), so a second run changes nothing;
2. ``--check``: when the patch does not apply, it is a ``conflict``;
3. ``--whitespace=nowarn``: the patch is applied (``applied``).

``git apply`` takes no fuzz (every context line must match) and applies one patch whole or not
at all. As upstream: no ``--3way``, no ``--index``, so the tree needs no repository of its own
(the staged vLLM sdist has none). Strict, the default and what setup.py asks: a conflict raises
``PatchError`` naming the patch, the tree and git's first lines; the patches before it stay
applied (a rerun skips them). ``strict=False`` reports the conflict and goes on.

One thing upstream's applier does not need: git looks for a repository in the tree itself and
never above it (``GIT_CEILING_DIRECTORIES`` is the tree's parent). Upstream's tree is a clone
of its own; a tree without one inside some other repository would make git read a ``diff
--git`` patch's paths from that repository's top and silently skip them all, so the reverse
check would pass and an unpatched tree would count as patched.

    python build_apply.py TREE [--series DIR] [--no-strict]   apply the series (./series)
    python build_apply.py --files PATCH...                    list the files each patch touches
"""

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

SERIES_DIR = Path(__file__).resolve().parent / "series"
GIT_OPTIONS = ("--recount", "-p", "1")  # upstream's: recount the hunks, strip a/ and b/
ALREADY_APPLIED = "already-applied"
APPLIED = "applied"
CONFLICT = "conflict"
MESSAGE_LINES = 8  # of git's output, in an error
# what would point git at another repository than the tree's own
_REPOSITORY_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CEILING_DIRECTORIES")


class PatchError(Exception):
    """A patch that does not apply, or a series or tree that cannot be used."""

    def __init__(self, message: str, patch: str | None = None) -> None:
        super().__init__(message)
        self.patch = patch  # the patch that failed to apply, if one did


def git(directory: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``git -C DIRECTORY ARGS...``; git finds a repository only in DIRECTORY itself."""
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_ENV}
    env["GIT_CEILING_DIRECTORIES"] = str(Path(directory).resolve().parent)
    try:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise PatchError(
            "git is not on PATH: the patch series is applied with `git apply` (install git)"
        ) from None


def first_lines(text: str, count: int = MESSAGE_LINES) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()][:count]


def apply_patch(tree: Path, patch: Path) -> tuple[str, str]:
    """One patch: (``already-applied`` | ``applied`` | ``conflict``, git's output on a
    conflict)."""
    patch = patch.resolve()  # git -C does not move the process: the patch's path is absolute
    if git(tree, ["apply", "--reverse", "--check", *GIT_OPTIONS, str(patch)]).returncode == 0:
        return ALREADY_APPLIED, ""
    for args in (["--check"], ["--whitespace=nowarn"]):
        done = git(tree, ["apply", *args, *GIT_OPTIONS, str(patch)])
        if done.returncode != 0:
            return CONFLICT, done.stderr + done.stdout
    return APPLIED, ""


def series_files(series: Path) -> list[Path]:
    found = sorted(series.glob("*.patch"))
    if not found:
        raise PatchError(f"no *.patch files in {series}")
    return found


def apply_patch_series(
    tree: Path, series: Path = SERIES_DIR, *, strict: bool = True
) -> list[tuple[str, str]]:
    """Apply ``series/*.patch`` (in name order) to ``tree``: [(patch name, status)]."""
    if not Path(tree).is_dir():
        raise PatchError(f"{tree} is not a directory: stage the vLLM tree there first")
    results: list[tuple[str, str]] = []
    for patch in series_files(series):
        status, output = apply_patch(tree, patch)
        results.append((patch.name, status))
        if status == CONFLICT and strict:
            said = "".join(f"\n  {line}" for line in first_lines(output))
            raise PatchError(
                f"patch {patch.name} does not apply to {tree} (git apply --recount -p 1):"
                f"{said}\nthe tree is not the vLLM this series was made for: stage the pinned "
                "vLLM pristine, or regenerate the series against it",
                patch.name,
            )
    return results


def touched_files(patch: Path) -> tuple[str, ...]:
    """The tree paths a patch touches, in order, as ``git apply --numstat -p 1`` reads them."""
    patch = patch.resolve()
    done = git(patch.parent, ["apply", "--numstat", "-z", *GIT_OPTIONS, str(patch)])
    if done.returncode != 0:
        lines = "; ".join(first_lines(done.stderr + done.stdout))
        raise PatchError(f"patch {patch.name} does not parse: {lines}", patch.name)
    return tuple(entry.split("\t", 2)[2] for entry in done.stdout.split("\0") if entry)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", type=Path, help="the vLLM source tree to patch")
    parser.add_argument("--series", type=Path, default=SERIES_DIR, help="the patch directory")
    parser.add_argument("--no-strict", action="store_true", help="report a conflict, go on")
    parser.add_argument("--files", nargs="+", type=Path, metavar="PATCH", help="list touched files")
    args = parser.parse_args(argv)
    try:
        if args.files:
            for patch in args.files:
                sys.stdout.write("".join(f"{patch.name}: {f}\n" for f in touched_files(patch)))
            return 0
        if args.tree is None:
            parser.error("give the vLLM tree, or --files PATCH...")
        results = apply_patch_series(args.tree, args.series, strict=not args.no_strict)
    except PatchError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    for name, status in results:
        sys.stdout.write(f"MUSA build patch: {status:16} {name}\n")
    return 1 if any(status == CONFLICT for _, status in results) else 0


if __name__ == "__main__":
    sys.exit(main())
