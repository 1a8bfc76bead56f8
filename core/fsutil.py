"""Atomic file output: write to a temporary sibling, then ``os.replace``; a directory is
replaced whole, one swap at a time."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

_made_dirs: set[Path] = set()


@functools.cache
def _new_file_mode() -> int:
    """The mode ``open`` gives a new file: 0o666 less the process's umask, read once (from
    /proc, which reads it without setting it: setting it, even back, would let a file
    another thread creates meanwhile get no umask at all)."""
    try:
        with Path("/proc/self/status").open(encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # no /proc: a file made meanwhile gets at most 0o600
    os.umask(mask)
    return 0o666 & ~mask


def _mode_for(path: Path) -> int:
    """The permissions of the regular file at ``path`` (none of set-id or sticky), else those
    of a new file."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return _new_file_mode()
    return st.st_mode & 0o777 if stat.S_ISREG(st.st_mode) else _new_file_mode()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all. The file keeps the mode it had, and a
    new one gets the mode ``open`` would give it: the temporary file would be 0o600."""
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
            os.fchmod(fh.fileno(), _mode_for(path))
            fh.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _lock_current(path: Path) -> int | None:
    """Open ``path`` (made when missing) and wait for an exclusive ``flock`` on it: the open
    descriptor, or None when the file locked is no longer the one at ``path`` (its holder
    removed it meanwhile)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # never a device or a pipe planted there
        os.close(fd)
        raise OSError(errno.EEXIST, "something that is not a regular file is there", str(path))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        held = os.fstat(fd)
        try:
            current = path.lstat()
        except FileNotFoundError:
            current = None
    except BaseException:
        os.close(fd)
        raise
    if current is None or (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
        os.close(fd)
        return None
    return fd


# what keeps a run from making the lock file: then it cannot swap the directory in either
_CANNOT_LOCK = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS})


class _Held(threading.local):
    """The lock files of the swap locks this thread holds."""

    def __init__(self) -> None:
        self.paths: set[Path] = set()


_HELD = _Held()


def _acquire(path: Path) -> int | None:
    """The descriptor of the lock file ``path``, locked; None when it cannot be made."""
    while True:
        try:
            fd = _lock_current(path)
        except OSError as exc:
            if exc.errno in _CANNOT_LOCK:
                return None
            raise
        if fd is not None:
            return fd


@contextlib.contextmanager
def swap_lock(target: Path) -> Iterator[None]:
    """Hold the lock that serializes the swaps of the directory ``target``
    (``replace_directory``) across threads and processes: within the block, no other run
    swaps it, so what is read or checked of it there is never a swap half done. Re-entrant
    in one thread: a ``replace_directory(target)`` in the block does not wait for it.

    The lock is an exclusive ``flock`` on the sibling file ``.<name>.lock``, made when
    missing. The holder removes the file before it lets go, so none is left behind; a waiter
    that got the lock of a file already removed (or replaced by a newer one) locks the one at
    the path instead. When the file cannot be made (no parent directory yet, or one this run
    may not write) this run cannot swap ``target`` either, and the block runs unlocked."""
    path = target.absolute().with_name(f".{target.name}.lock")
    if path in _HELD.paths:
        yield
        return
    fd = _acquire(path)
    if fd is None:
        yield
        return
    _HELD.paths.add(path)
    try:
        yield
    finally:
        _HELD.paths.discard(path)
        path.unlink(missing_ok=True)  # still held: a waiter on this file tries again
        os.close(fd)  # releases the lock


def replace_directory(target: Path, files: Mapping[str, bytes]) -> None:
    """Make ``target`` hold exactly ``files``, all at once.

    The new content is written into a temporary sibling directory first; only when every
    file is complete is it swapped in, under a lock (``swap_lock``): runs that replace the
    same directory at once each swap in a complete one, one after the other, and leave no
    temporary directory behind. On any failure ``target`` is left as it was (or absent, if
    it was absent).
    """
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.name}.", suffix=".new"))
    try:
        for name, data in sorted(files.items()):
            (staging / name).write_bytes(data)
        swap_directory(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def swap_directory(
    staging: Path, target: Path, *, check: Callable[[], None] = lambda: None
) -> None:
    """Put the complete directory ``staging`` (a sibling of ``target``) in ``target``'s place,
    readable as a file is (0755), under ``swap_lock``; ``check`` runs under the lock first
    and may refuse. What was at ``target`` is removed."""
    staging.chmod(0o755)  # mkdtemp makes 0700
    with swap_lock(target):
        check()
        old = _swap_in(staging, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _swap_in(staging: Path, target: Path) -> Path | None:
    """Rename ``staging`` to ``target``; what was there (a directory, a file, a link) is moved
    aside to a new sibling, which is returned for removal (None: there was none). On a failure
    ``target`` is put back."""
    if not os.path.lexists(target):
        staging.replace(target)
        return None
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
    old.rmdir()
    target.replace(old)
    try:
        staging.replace(target)
    except BaseException:
        old.replace(target)
        raise
    return old
