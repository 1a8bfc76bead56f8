"""``core.fsutil``: a file is written whole, with the mode ``open`` would give it or the mode
it had; a directory is replaced whole, and runs that replace the same directory at once
(threads of one process, or processes) take turns: each swaps in a complete directory, and
nothing of theirs is left beside it."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.fsutil import replace_directory, swap_lock

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 20

# one writer in its own process: ROUNDS swaps of files that all say which writer it is
_WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from core.fsutil import replace_directory, swap_lock
target, writer, rounds = Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
for _ in range(rounds):
    replace_directory(target, {name: writer.encode() * 4096 for name in ("a", "b", "c")})
"""


def _files(writer: str) -> dict[str, bytes]:
    return {name: writer.encode() * 4096 for name in ("a", "b", "c")}


def _assert_whole_and_alone(target: Path, writers: list[str]) -> None:
    """``target`` holds exactly the files of one writer, and is all its parent holds."""
    assert sorted(p.name for p in target.parent.iterdir()) == [target.name]
    assert sorted(p.name for p in target.iterdir()) == ["a", "b", "c"]
    contents = {(target / name).read_bytes() for name in ("a", "b", "c")}
    assert len(contents) == 1
    assert contents.pop() in {_files(w)["a"] for w in writers}


def test_a_directory_is_replaced_whole(tmp_path: Path) -> None:
    target = tmp_path / "out" / "lock"
    replace_directory(target, {"a": b"1", "b": b"2", "old": b"x"})
    replace_directory(target, {"a": b"3", "c": b"4"})
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {"a": b"3", "c": b"4"}
    assert sorted(p.name for p in target.parent.iterdir()) == ["lock"]


def test_concurrent_swaps_in_threads_each_leave_a_whole_directory(tmp_path: Path) -> None:
    target = tmp_path / "lock"
    writers = [f"{i}" for i in range(8)]
    start = threading.Barrier(len(writers))
    failures: list[BaseException] = []

    def swap(writer: str) -> None:
        try:
            start.wait()
            for _ in range(ROUNDS):
                replace_directory(target, _files(writer))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=swap, args=(w,)) for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    _assert_whole_and_alone(target, writers)


def test_concurrent_swaps_in_processes_each_leave_a_whole_directory(tmp_path: Path) -> None:
    target = tmp_path / "lock"
    writers = [f"{i}" for i in range(6)]
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(REPO), str(target), w, str(ROUNDS)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in writers
    ]
    ended = []
    for run in runs:
        _, err = run.communicate()
        ended.append((err, run.returncode))
    assert ended == [("", 0)] * len(writers)
    _assert_whole_and_alone(target, writers)


def test_a_failed_swap_leaves_the_directory_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "lock"
    replace_directory(target, {"a": b"1"})
    real = Path.replace

    def refuse_the_new(self: Path, dest: Path) -> Path:
        if self.name.endswith(".new"):
            raise OSError(28, "No space left on device")
        return real(self, dest)

    monkeypatch.setattr(Path, "replace", refuse_the_new)
    with pytest.raises(OSError, match="No space left"):
        replace_directory(target, {"a": b"2"})
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {"a": b"1"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]


def test_a_swap_inside_the_swap_lock_of_its_thread_does_not_wait(tmp_path: Path) -> None:
    target = tmp_path / "lock"
    with swap_lock(target):
        assert sorted(p.name for p in tmp_path.iterdir()) == [".lock.lock"]
        replace_directory(target, {"a": b"1"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock"]


def test_the_swap_lock_of_a_directory_with_no_parent_yet_locks_nothing(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "lock"
    with swap_lock(target):
        assert not target.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- atomic writes

# writes under a umask of its own, in a process of its own (the mode of a new file is read
# once a process): a new file, and files that were there with their own modes
_MODES = """
import os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
sys.path.insert(0, sys.argv[1])
from core.fsutil import atomic_write_text
root = Path(sys.argv[3])
for name in sys.argv[4:]:
    atomic_write_text(root / name, "new\\n")
"""


def _write_with_umask(tmp_path: Path, umask: str, *names: str) -> dict[str, str]:
    argv = [sys.executable, "-c", _MODES, str(REPO), umask, str(tmp_path), *names]
    subprocess.run(argv, check=True)
    return {name: oct((tmp_path / name).stat().st_mode & 0o7777) for name in names}


@pytest.mark.parametrize(("umask", "mode"), [("022", "0o644"), ("027", "0o640"), ("077", "0o600")])
def test_a_file_written_whole_is_made_as_open_makes_it(
    tmp_path: Path, umask: str, mode: str
) -> None:
    assert _write_with_umask(tmp_path, umask, "new.json") == {"new.json": mode}
    assert (tmp_path / "new.json").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json"]  # no temporary left


def test_a_file_rewritten_whole_keeps_its_mode(tmp_path: Path) -> None:
    for name, mode in (("stack.yaml", 0o640), ("run.sh", 0o755), ("private.json", 0o600)):
        (tmp_path / name).write_text("old\n")
        (tmp_path / name).chmod(mode)
    (tmp_path / "setuid").write_text("old\n")
    (tmp_path / "setuid").chmod(0o4755)
    (tmp_path / "target.json").write_text("old\n")
    (tmp_path / "target.json").chmod(0o600)
    (tmp_path / "link").symlink_to(tmp_path / "target.json")
    got = _write_with_umask(tmp_path, "022", "stack.yaml", "run.sh", "private.json", "setuid")
    assert got == {
        "stack.yaml": "0o640",
        "run.sh": "0o755",
        "private.json": "0o600",
        "setuid": "0o755",
    }
    # a symbolic link is replaced by a file of its own, made as a new file is
    assert _write_with_umask(tmp_path, "022", "link") == {"link": "0o644"}
    assert not (tmp_path / "link").is_symlink()
    assert (tmp_path / "target.json").read_text() == "old\n"
    assert (tmp_path / "target.json").stat().st_mode & 0o777 == 0o600
