"""Deterministic file writes for the test bed: atomic replacement with mode 0644, a file's
sha256, and placing a file where it belongs (a hard link for a big one, else a copy).

A reader never sees a half-written file: every write goes to a temporary file beside its
target and is renamed over it once complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_output", "place", "sha256_file", "write_text"]

_CHUNK = 1 << 20
_HARDLINK_THRESHOLD = 16 << 20  # copy small files (a test may corrupt one), link big ones


@contextlib.contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed over ``path`` (mode 0644) when the
    block ends without an error, removed in any case."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(0o644)
        tmp.replace(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_output(path) as tmp:
        tmp.write_bytes(text.encode("utf-8"))


def sha256_file(path: Path) -> str:
    """The hex sha256 of the file at ``path``, read in chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _same_file(a: Path, b: Path) -> bool:
    with contextlib.suppress(OSError):
        if a.samefile(b):
            return True
        if a.stat().st_size == b.stat().st_size:
            return sha256_file(a) == sha256_file(b)
    return False


def place(src: Path, dest: Path) -> None:
    """Put ``src`` at ``dest`` (hardlink for big files, else copy) unless it is already there."""
    if dest.exists() and _same_file(src, dest):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    linked = False
    if src.stat().st_size >= _HARDLINK_THRESHOLD:
        with contextlib.suppress(OSError):
            os.link(src, tmp)
            linked = True
    if not linked:
        shutil.copyfile(src, tmp)
    tmp.replace(dest)
