"""``lock --out DIR`` as a command: runs that write one lock directory at once take turns
(``core.fsutil.swap_lock``), so each succeeds, the directory is a whole lock after each, and
nothing of theirs is left beside it."""

from __future__ import annotations

import io
import threading

from build_image import main
from resolver.lockfile import CONSTRAINTS, PYLOCK, REQUIREMENTS
from tests.support.lockcase import Case

RUNS = 6
ROUNDS = 3


def test_concurrent_locks_of_one_directory_each_succeed_and_leave_it_whole(case: Case) -> None:
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"))
    stack = case.stack(requirements=["filelock"])
    out = case.tmp / "out" / "t.lock"
    assert case.run("lock", stack, "--out", out).code == 0  # the cache is warm for all
    start = threading.Barrier(RUNS)
    ended: list[tuple[int, str]] = []

    def lock() -> None:
        start.wait()
        for _ in range(ROUNDS):
            err = io.StringIO()
            argv = ["lock", str(stack), "--out", str(out), "--cache-dir", str(case.cache)]
            ended.append((main(argv, out=io.StringIO(), err=err), err.getvalue()))

    threads = [threading.Thread(target=lock) for _ in range(RUNS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ended == [(0, "")] * (RUNS * ROUNDS)
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.lock"]
    assert sorted(p.name for p in out.iterdir()) == sorted([CONSTRAINTS, PYLOCK, REQUIREMENTS])
    assert "filelock==3.17.0" in (out / REQUIREMENTS).read_text()
