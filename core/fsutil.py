"""Atomic file output: write to a temporary sibling, then ``os.replace``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

_made_dirs: set[Path] = set()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    if path.parent not in _made_dirs:  # the cache writes thousands of files into few dirs
        path.parent.mkdir(parents=True, exist_ok=True)
        _made_dirs.add(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except FileNotFoundError:  # the directory went away since we made it
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def replace_directory(target: Path, files: Mapping[str, bytes]) -> None:
    """Make ``target`` hold exactly ``files``, all at once.

    The new content is written into a temporary sibling directory first; only when every
    file is complete is it swapped in. On any failure ``target`` is left as it was (or
    absent, if it was absent).
    """
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".new"))
    try:
        for name, data in sorted(files.items()):
            (staging / name).write_bytes(data)
        staging.chmod(0o755)  # mkdtemp makes 0700; a lock dir is readable like a file
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".old"))
            old.rmdir()
            target.replace(old)
            try:
                staging.replace(target)
            except BaseException:
                old.replace(target)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.replace(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
