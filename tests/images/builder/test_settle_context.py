"""What the build copies from its context has the same modes on every host, whatever the
umask, and mtimes after the build's time (normalizing clamps them to it); nothing outside the
context and nothing the cache owns is touched."""

from __future__ import annotations

import os
from pathlib import Path

from images.builder.reproducible import settle_context

EPOCH = 1_000_000


def test_modes_follow_the_executable_bit_and_mtimes_are_after_the_epoch(tmp_path: Path) -> None:
    context = tmp_path / "context"
    (context / "lock").mkdir(parents=True)
    (context / "lock").chmod(0o700)
    (context / "lock" / "pylock.toml").write_text("x")
    (context / "lock" / "pylock.toml").chmod(0o600)
    (context / "tools").mkdir()
    (context / "tools" / "run.sh").write_text("#!/bin/sh\n")
    (context / "tools" / "run.sh").chmod(0o700)
    outside = tmp_path / "secret"
    outside.write_text("s")
    outside.chmod(0o600)
    (context / "tools" / "link").symlink_to(outside)
    cached = tmp_path / "cache-file"
    cached.write_text("w")
    cached.chmod(0o600)
    os.link(cached, context / "wheel.whl")

    settle_context(context, epoch=EPOCH)

    def mode(path: Path) -> int:
        return path.lstat().st_mode & 0o7777

    assert [mode(context / p) for p in ("", "lock", "lock/pylock.toml", "tools/run.sh")] == [
        0o755,
        0o755,
        0o644,
        0o755,
    ]
    assert (mode(outside), mode(cached)) == (0o600, 0o600)  # not ours: untouched
    stamps = {
        (context / p).lstat().st_mtime for p in ("", "lock", "lock/pylock.toml", "tools/link")
    }
    assert len(stamps) == 1
    assert stamps.pop() > EPOCH  # never the epoch itself: BuildKit would take stale files
