"""Apply the vllm-musa patch series to a vLLM source tree, strictly (pure Python, stdlib only).

setup.py loads this file by path and calls ``apply_patch_series(tree, series)`` before it
installs vLLM, so the installed vLLM is the patched one. Strict means:

- every hunk's old side must be in the file at exactly the line its ``@@`` header names
  (shifted only by the earlier hunks of the same change), byte for byte: no fuzz, no offset,
  no whitespace tolerance; a new file must not exist yet, a deleted one must match whole;
- the whole series is applied in memory first and the tree is written only if every patch
  applies, so a failure leaves the tree as it was;
- the tree then gets the stamp ``.musa-series-applied`` holding the series' sha256. A tree
  stamped by this series is checked (the series must reverse-apply exactly) and left alone;
  a stamp of another series is an error.

A failure is a ``PatchError`` naming the patch and the file. Patches are unified diffs with
``a/`` and ``b/`` prefixes (``git format-patch`` or ``diff -u`` output; a preamble before the
first ``--- a/...`` header is ignored); the files a patch touches are its ``+++ b/...`` paths
(``--- a/...`` for a deletion).

    python build_apply.py TREE [--series DIR]     apply the series (default: ./series)
    python build_apply.py --files PATCH...         list the files each patch touches
"""

import argparse
import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

STAMP = ".musa-series-applied"
SERIES_DIR = Path(__file__).resolve().parent / "series"

_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_LINE_RE = re.compile(rb"[^\n]*\n|[^\n]+\Z")


class PatchError(Exception):
    """A patch that does not parse, does not apply, or a tree in an unexpected state."""

    def __init__(self, message: str, patch: str | None = None) -> None:
        super().__init__(message)
        self.patch = patch  # the patch that failed to apply, if one did


@dataclass(frozen=True)
class Hunk:
    header: str  # "@@ -213,6 +213,8 @@"
    old_start: int  # 1-based; for an empty old side, the line after which the new lines go
    new_start: int
    old: tuple[bytes, ...]  # lines with their b"\n" (none on a "\ No newline" line)
    new: tuple[bytes, ...]

    def reversed(self) -> "Hunk":
        return Hunk(
            header=self.header,
            old_start=self.new_start,
            new_start=self.old_start,
            old=self.new,
            new=self.old,
        )


@dataclass(frozen=True)
class FileChange:
    old_path: str | None  # None: the file is created (--- /dev/null)
    new_path: str | None  # None: the file is deleted (+++ /dev/null)
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        path = self.new_path or self.old_path
        assert path is not None
        return path

    def reversed(self) -> "FileChange":
        hunks = tuple(h.reversed() for h in self.hunks)
        return FileChange(old_path=self.new_path, new_path=self.old_path, hunks=hunks)


@dataclass(frozen=True)
class Patch:
    name: str
    changes: tuple[FileChange, ...]

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(c.path for c in self.changes)

    def reversed(self) -> "Patch":
        return Patch(name=self.name, changes=tuple(c.reversed() for c in reversed(self.changes)))


# ----------------------------------------------------------------------------- parsing


def _lines(data: bytes) -> list[bytes]:
    return _LINE_RE.findall(data)


def _header_path(name: str, line: bytes, prefix: str) -> str | None:
    raw = line[4:].rstrip(b"\r\n").split(b"\t", 1)[0].decode("utf-8", errors="replace")
    if raw == "/dev/null":
        return None
    if not raw.startswith(prefix):
        raise PatchError(f"patch {name}: file header {raw!r} has no {prefix!r} prefix")
    path = raw[len(prefix) :]
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or "" in parts:
        raise PatchError(f"patch {name}: file header {raw!r} is not a path inside the tree")
    return path


def _parse_hunk(name: str, path: str, lines: list[bytes], i: int) -> tuple[Hunk, int]:
    match = _HUNK_RE.match(lines[i])
    assert match is not None
    header = match.group(0).decode("ascii")
    old_count = int(match.group(2) or b"1")
    new_count = int(match.group(4) or b"1")
    old: list[bytes] = []
    new: list[bytes] = []
    i += 1
    while len(old) < old_count or len(new) < new_count:
        if i == len(lines):
            raise PatchError(f"patch {name}: {path}: hunk {header} ends early")
        line = lines[i]
        tag, text = line[:1], line[1:]
        if line in (b"\n", b"\r\n"):  # a blank context line whose space an editor dropped
            tag, text = b" ", line
        if tag == b" ":
            old.append(text)
            new.append(text)
        elif tag == b"-":
            old.append(text)
        elif tag == b"+":
            new.append(text)
        elif tag == b"\\" and old + new:
            _drop_newline(old, new, lines[i - 1][:1])
        else:
            raise PatchError(f"patch {name}: {path}: hunk {header} has a bad line {line!r}")
        i += 1
    if len(old) != old_count or len(new) != new_count:
        raise PatchError(f"patch {name}: {path}: hunk {header} has the wrong line counts")
    if i < len(lines) and lines[i].startswith(b"\\"):
        _drop_newline(old, new, lines[i - 1][:1])
        i += 1
    hunk = Hunk(
        header=header,
        old_start=int(match.group(1)),
        new_start=int(match.group(3)),
        old=tuple(old),
        new=tuple(new),
    )
    return hunk, i


def _drop_newline(old: list[bytes], new: list[bytes], previous_tag: bytes) -> None:
    """``\\ No newline at end of file``: the previous line has no b"\\n"."""
    sides = {b"-": (old,), b"+": (new,)}.get(previous_tag, (old, new))
    for side in sides:
        side[-1] = side[-1].removesuffix(b"\n")


def parse_patch(name: str, data: bytes) -> Patch:
    """The file changes of one unified diff; ``name`` is used in messages."""
    lines = _lines(data)
    changes: list[FileChange] = []
    git_sections = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith(b"diff --git "):
            git_sections += 1
        if line.startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ "):
            old_path = _header_path(name, line, "a/")
            new_path = _header_path(name, lines[i + 1], "b/")
            if old_path is None and new_path is None:
                raise PatchError(f"patch {name}: a change from /dev/null to /dev/null")
            if old_path is not None and new_path is not None and old_path != new_path:
                raise PatchError(f"patch {name}: renames are not supported ({old_path})")
            path = new_path or old_path
            assert path is not None
            i += 2
            hunks: list[Hunk] = []
            while i < len(lines) and lines[i].startswith(b"@@ "):
                if not _HUNK_RE.match(lines[i]):
                    raise PatchError(f"patch {name}: {path}: bad hunk header {lines[i]!r}")
                hunk, i = _parse_hunk(name, path, lines, i)
                hunks.append(hunk)
            if not hunks:
                raise PatchError(f"patch {name}: {path}: no hunks")
            changes.append(FileChange(old_path=old_path, new_path=new_path, hunks=tuple(hunks)))
            continue
        i += 1
    if not changes:
        raise PatchError(f"patch {name}: no file changes (no '--- a/...' / '+++ b/...' headers)")
    if git_sections > len(changes):
        raise PatchError(
            f"patch {name}: {git_sections} 'diff --git' sections but {len(changes)} text "
            "changes; renames, mode-only and binary changes are not supported"
        )
    seen = [c.path for c in changes]
    if len(set(seen)) != len(seen):
        raise PatchError(f"patch {name}: touches a file twice ({', '.join(seen)})")
    return Patch(name=name, changes=tuple(changes))


def read_patch(path: Path) -> Patch:
    return parse_patch(path.name, path.read_bytes())


def touched_files(path: Path) -> tuple[str, ...]:
    """The tree paths a patch file touches, in order."""
    return read_patch(path).files


# ----------------------------------------------------------------------------- applying


def _show(line: bytes) -> str:
    return line.removesuffix(b"\n").decode("utf-8", errors="replace")


def _apply_change(patch: str, change: FileChange, current: bytes | None) -> bytes | None:
    path = change.path

    def fail(reason: str) -> PatchError:
        return PatchError(f"patch {patch} does not apply to {path}: {reason}", patch)

    if change.old_path is None:
        if current is not None:
            raise fail("it creates the file, which exists already")
        current = b""
    elif current is None:
        raise fail("the file does not exist")
    lines = _lines(current)
    shift = 0
    previous_end = 0
    for number, hunk in enumerate(change.hunks, 1):
        first = hunk.old_start - 1 if hunk.old else hunk.old_start
        if first < previous_end:
            raise fail(f"hunk {number} ({hunk.header}) overlaps the one before it")
        previous_end = first + len(hunk.old)
        at = first + shift
        for offset, want in enumerate(hunk.old):
            lineno = first + offset + 1
            if at + offset >= len(lines):
                raise fail(
                    f"hunk {number} ({hunk.header}) expects line {lineno} to be "
                    f"{_show(want)!r}, but the file ends at line {len(lines) - shift}"
                )
            have = lines[at + offset]
            if have != want:
                raise fail(
                    f"hunk {number} ({hunk.header}) expects line {lineno} to be "
                    f"{_show(want)!r}, found {_show(have)!r}"
                )
        lines[at : at + len(hunk.old)] = hunk.new
        shift += len(hunk.new) - len(hunk.old)
    if change.new_path is None:
        if lines:
            raise fail("it deletes the file, which has more lines than the patch removes")
        return None
    return b"".join(lines)


def _apply_in_memory(tree: Path, patches: Sequence[Patch]) -> dict[str, bytes | None]:
    """Every patch applied in order; the new content (None: deleted) of each touched path."""
    state: dict[str, bytes | None] = {}
    for patch in patches:
        for change in patch.changes:
            if change.path not in state:
                disk = tree / change.path
                state[change.path] = disk.read_bytes() if disk.is_file() else None
            state[change.path] = _apply_change(patch.name, change, state[change.path])
    return state


def series_digest(patch_files: Sequence[Path]) -> str:
    """The sha256 of a series: its patch names and contents, in order."""
    digest = hashlib.sha256()
    for path in patch_files:
        digest.update(path.name.encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def series_files(series: Path) -> list[Path]:
    found = sorted(series.glob("*.patch"))
    if not found:
        raise PatchError(f"no *.patch files in {series}")
    return found


def _check_applied(tree: Path, patches: Sequence[Patch]) -> None:
    try:
        _apply_in_memory(tree, [p.reversed() for p in reversed(patches)])
    except PatchError as exc:
        raise PatchError(
            f"{tree} has the stamp of this series but its changes are not all there "
            f"(edited after patching?): {exc}"
        ) from None


def _already_applied_hint(tree: Path, patches: Sequence[Patch], failed: str | None) -> str:
    """Why a patch failed when its changes are there already (a tree patched without stamp)."""
    names = [p.name for p in patches]
    if failed not in names:
        return ""
    done = patches[: names.index(failed) + 1]
    try:
        _apply_in_memory(tree, [p.reversed() for p in reversed(done)])
    except PatchError:
        return ""
    return f" (its changes are there already but the tree has no {STAMP}: restage it pristine)"


def apply_patch_series(tree: Path, series: Path = SERIES_DIR) -> list[tuple[str, str]]:
    """Apply ``series/*.patch`` (in name order) to ``tree``; [(patch name, status)].

    The status is ``applied``, or ``already applied`` for a tree stamped by this series.
    """
    files = series_files(series)
    digest = series_digest(files)
    patches = [read_patch(f) for f in files]
    stamp = tree / STAMP
    if stamp.is_file():
        stamped = stamp.read_text("utf-8").split()[:2]
        if stamped != ["sha256", digest]:
            raise PatchError(
                f"{tree} was patched by another series ({STAMP}: {' '.join(stamped)}; this "
                f"series: sha256 {digest}): restage a pristine vLLM tree"
            )
        _check_applied(tree, patches)
        return [(p.name, "already applied") for p in patches]
    try:
        state = _apply_in_memory(tree, patches)
    except PatchError as exc:
        hint = _already_applied_hint(tree, patches, exc.patch)
        raise PatchError(f"{exc}{hint}", exc.patch) from None
    for relpath, content in state.items():
        target = tree / relpath
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
    names = "".join(f"{p.name}\n" for p in patches)
    stamp.write_text(f"sha256 {digest}\n{names}", "utf-8")
    return [(p.name, "applied") for p in patches]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", type=Path, help="the vLLM source tree to patch")
    parser.add_argument("--series", type=Path, default=SERIES_DIR, help="the patch directory")
    parser.add_argument("--files", nargs="+", type=Path, metavar="PATCH", help="list touched files")
    args = parser.parse_args(argv)
    try:
        if args.files:
            for patch in args.files:
                sys.stdout.write("".join(f"{patch.name}: {f}\n" for f in touched_files(patch)))
            return 0
        if args.tree is None:
            parser.error("give the vLLM tree, or --files PATCH...")
        for name, status in apply_patch_series(args.tree, args.series):
            sys.stdout.write(f"MUSA build patch: {status:16} {name}\n")
    except PatchError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
