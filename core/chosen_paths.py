"""The paths a command's flags choose (``--cache-dir``, ``--out``), checked before the work.

A path the run cannot use is one ``error[environment]`` (exit 2) that names the flag, the
path and the reason, whether it is found here, before the work, or by the command line's
boundary (``build_image.py``) when the system refuses it later: both word it with ``place``
and ``ENVIRONMENT_HINTS``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from core.errors import EnvironmentFailureError

# what the environment refuses on a chosen path (exit 2): the fix is in where the tool is told
# to write. The boundary counts an OSError of these numbers as an error of the environment.
ENVIRONMENT_HINTS = {
    errno.EACCES: "check the permissions of that path, or choose another {flag}",
    errno.EPERM: "check the permissions of that path, or choose another {flag}",
    errno.EROFS: "that filesystem is read-only: choose a {flag} on a writable one",
    errno.ENOSPC: "the disk is full: free some space (the cache can be deleted), or choose a "
    "{flag} on another disk, and run again",
    errno.EDQUOT: "the disk quota is used up: free some space, or choose a {flag} elsewhere",
    errno.ENOTDIR: "a part of that path is a file, not a directory: choose another {flag}",
    errno.EEXIST: "a file is in the way where a directory must be: choose another {flag}",
}
# what else makes a directory unusable when it is checked before the work
_CHECK_HINTS = {
    errno.ENOENT: "the filesystem there takes no new directory (as /proc does): choose "
    "another {flag}",
    errno.ELOOP: "that path goes through a loop of symbolic links: choose another {flag}",
    errno.ENAMETOOLONG: "the path is too long for the filesystem: choose a shorter {flag}",
}


def place(flag: str, path: object, *, default_of: str | None = None) -> str:
    """How a message names a path: ``--out DIR`` when the flag chose it, else, for the default
    (``default_of``, e.g. "the cache"), ``the cache DIR (the default; --cache-dir chooses
    another)``."""
    if default_of is None:
        return f"{flag} {path}"
    return f"{default_of} {path} (the default; {flag} chooses another)"


def os_reason(exc: OSError) -> str:
    """The system's reason for ``exc`` and its errno's name: ``Not a directory (ENOTDIR)``."""
    code = errno.errorcode.get(exc.errno or 0)
    return (exc.strerror or str(exc) or type(exc).__name__) + (f" ({code})" if code else "")


def _unusable(where: str, doing: str, exc: OSError, *, flag: str) -> EnvironmentFailureError:
    number = exc.errno or 0
    hint = ENVIRONMENT_HINTS.get(number) or _CHECK_HINTS.get(number) or "choose another {flag}"
    return EnvironmentFailureError(
        f"{where} cannot be used: {doing}: {os_reason(exc)}", hint=hint.format(flag=flag)
    )


def usable_cache_dir(chosen: Path | None, default: Path, *, flag: str = "--cache-dir") -> Path:
    """The cache root of a command: ``chosen`` (its ``--cache-dir``), else ``default``; made
    when missing, and proved writable by creating (and removing) a file in it. One that
    cannot be made or written is an ``EnvironmentFailureError`` naming the flag, the path
    and the system's reason."""
    root = chosen if chosen is not None else default
    where = place(flag, root, default_of=None if chosen is not None else "the cache")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        made = exc.filename if exc.filename is not None else root
        raise _unusable(where, f"cannot create the directory {made}", exc, flag=flag) from None
    import tempfile  # not at the start of every command

    try:
        fd, probe = tempfile.mkstemp(dir=root, prefix=".write-check-", suffix=".tmp")
    except OSError as exc:
        raise _unusable(where, "cannot create a file in it", exc, flag=flag) from None
    os.close(fd)
    Path(probe).unlink(missing_ok=True)
    return root


def check_out_dir(
    directory: Path, *, writes: str, default_of: str | None = None, flag: str = "--out"
) -> None:
    """Refuse an output directory a command replaces whole (``writes`` says with what, e.g.
    "the lock") when it is a symbolic link (the link would be replaced, not written through)
    or something that is not a directory: an ``EnvironmentFailureError`` naming ``flag`` (or
    the default, ``default_of``), the path and the reason, before the work."""
    where = place(flag, directory, default_of=default_of)
    if directory.is_symlink():
        raise EnvironmentFailureError(
            f"{where} cannot be used: it is a symbolic link (to {directory.readlink()}); "
            f"writing {writes} replaces the whole directory, so it would replace the link",
            hint=f"give the real directory as {flag}, or remove the link",
        )
    if directory.exists() and not directory.is_dir():
        raise EnvironmentFailureError(
            f"{where} cannot be used: it exists and is not a directory",
            hint=f"choose another {flag} DIR",
        )
