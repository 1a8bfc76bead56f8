"""The children a lock forks to fetch its pages and METADATA (``resolver.fetch_process``):
answers come back from real forked processes, routed by name; an error of the tool's is
raised in the parent as it was raised in the child; anything else, and a child gone, makes
the parent do the request itself; the children are reaped; and a lock is the same bytes
with children and without."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from core.errors import IndexError_, TransportError
from resolver.fetch_process import FetchProcesses
from tests.support.lockcase import PIN_TORCH, Case, numpy_world

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")


def _pid(_name: str) -> int:
    return os.getpid()


def _index_error(name: str) -> None:
    raise IndexError_(f"index pypi: {name} failed", hint="check the index")


def _transport_error(name: str) -> None:
    raise TransportError(f"GET {name}: broken", kind="broken", name="X", detail="broken")


def _os_error(name: str) -> None:
    raise OSError(f"no {name}")


def _unpicklable(name: str) -> object:
    return lambda: name


def _slow(name: str) -> str:
    time.sleep(30)
    return name


HANDLERS = {
    "pid": _pid,
    "index": _index_error,
    "transport": _transport_error,
    "os": _os_error,
    "unpicklable": _unpicklable,
    "slow": _slow,
}


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def _start(pool: ThreadPoolExecutor, count: int = 2, **kwargs: Any) -> FetchProcesses:
    kwargs.setdefault("note", print)
    procs = FetchProcesses.start(count, HANDLERS, workers=2, local_pool=pool, **kwargs)
    assert procs is not None
    return procs


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_answers_come_from_the_children_each_asked_for_its_share(pool: ThreadPoolExecutor) -> None:
    procs = _start(pool)
    try:
        pids = {n: procs.ask("pid", n, (n,), local=lambda: -1).result(10) for n in "abcdefgh"}
        again = {n: procs.ask("pid", n, (n,), local=lambda: -1).result(10) for n in "abcdefgh"}
    finally:
        procs.close(wait=5)
    assert pids == again  # a name always goes to the same child
    assert len(set(pids.values())) == 2
    assert os.getpid() not in pids.values()
    assert all(_reaped(pid) for pid in set(pids.values()))


def test_an_error_of_the_tools_is_raised_as_the_child_raised_it(pool: ThreadPoolExecutor) -> None:
    procs = _start(pool)
    try:
        fut = procs.ask("index", "numpy", ("numpy",), local=lambda: "asked here")
        with pytest.raises(IndexError_) as caught:
            fut.result(10)
    finally:
        procs.close(wait=5)
    assert (caught.value.message, caught.value.hint) == (
        "index pypi: numpy failed",
        "check the index",
    )


@pytest.mark.parametrize("kind", ["transport", "os", "unpicklable", "missing"])
def test_anything_else_is_asked_for_here(pool: ThreadPoolExecutor, kind: str) -> None:
    procs = _start(pool)
    asked_here: list[str] = []

    def local() -> str:
        asked_here.append(threading.current_thread().name)
        return "asked here"

    try:
        assert procs.ask(kind, "numpy", ("numpy",), local=local).result(10) == "asked here"
    finally:
        procs.close(wait=5)
    assert len(asked_here) == 1


def test_a_child_that_is_gone_leaves_its_requests_to_the_parent(pool: ThreadPoolExecutor) -> None:
    procs = _start(pool, count=1)
    pid = procs.ask("pid", "a", ("a",), local=lambda: -1).result(10)
    waiting = procs.ask("slow", "a", ("a",), local=lambda: "asked here")
    os.kill(pid, signal.SIGKILL)
    try:
        assert waiting.result(10) == "asked here"
        later = procs.ask("pid", "a", ("a",), local=lambda: -1)
        assert later.result(10) == -1
    finally:
        procs.close(wait=5)
    assert _reaped(pid)


def test_kill_ends_a_child_that_is_busy(pool: ThreadPoolExecutor) -> None:
    procs = _start(pool, count=1)
    pid = procs.ask("pid", "a", ("a",), local=lambda: -1).result(10)
    procs.ask("slow", "a", ("a",), local=lambda: "asked here")
    procs.kill()  # without the signal, the reaping would wait for a child that never ends
    assert _reaped(pid)


def test_what_a_closed_child_left_unanswered_is_cancelled_not_asked_here(
    pool: ThreadPoolExecutor,
) -> None:
    procs = _start(pool, count=1)
    asked_here: list[str] = []
    pid = procs.ask("pid", "a", ("a",), local=lambda: -1).result(10)
    waiting = procs.ask("slow", "a", ("a",), local=lambda: asked_here.append("a"))
    procs.close(wait=0.5)  # the child is still answering: it is killed
    assert waiting.cancelled()
    assert asked_here == []
    assert _reaped(pid)


def test_a_childs_notes_reach_the_parent(pool: ThreadPoolExecutor) -> None:
    notes: list[str] = []

    def setup(note: Any) -> None:
        note(f"note: from {os.getpid()}")

    procs = _start(pool, count=1, note=notes.append, child_setup=setup)
    try:
        pid = procs.ask("pid", "a", ("a",), local=lambda: -1).result(10)
    finally:
        procs.close(wait=5)
    assert notes == [f"note: from {pid}"]


def _lock_files(case: Case, cores: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, bytes]:
    monkeypatch.setattr(os, "cpu_count", lambda: cores)  # NetworkSettings' default count
    result = case.run("lock", case.stack(PIN_TORCH, ["numpy", "filelock"]))
    assert result.code == 0, result.err
    lock = case.lock_dir()
    files = {p.name: p.read_bytes() for p in sorted(lock.iterdir())}
    shutil.rmtree(lock)
    shutil.rmtree(case.cache)  # each lock a cold one
    return files


def test_a_lock_is_the_same_bytes_with_children_and_without(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    numpy_world(case)
    forks: list[int] = []
    start = FetchProcesses.start

    def counted(count: int, *args: Any, **kwargs: Any) -> FetchProcesses | None:
        forks.append(count)
        return start(count, *args, **kwargs)

    monkeypatch.setattr(FetchProcesses, "start", counted)
    with_children = _lock_files(case, 2, monkeypatch)
    without = _lock_files(case, 1, monkeypatch)
    assert forks == [2, 0]
    assert with_children == without
    assert "numpy==1.26.4" in with_children["requirements.txt"].decode()


def test_a_lock_whose_answers_are_there_at_once_never_waits_on_itself(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer can be in before the lock has hooked onto it (then its hooks run at once,
    in the thread that asks): the lock must not be holding its own lock then."""
    numpy_world(case)
    expected = _lock_files(case, 1, monkeypatch)

    def at_once(
        _self: FetchProcesses, _kind: str, _key: str, _args: Any, *, local: Any, convert: Any = None
    ) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(local())
        return done

    monkeypatch.setattr(FetchProcesses, "start", lambda *_a, **_k: FetchProcesses([]))
    monkeypatch.setattr(FetchProcesses, "ask", at_once)
    got: list[dict[str, bytes]] = []
    runner = threading.Thread(
        target=lambda: got.append(_lock_files(case, 2, monkeypatch)), daemon=True
    )
    runner.start()
    runner.join(120)  # a lock waiting on itself never ends: this bounds the test, not a speed
    assert not runner.is_alive()
    assert got == [expected]
