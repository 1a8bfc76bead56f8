"""A lock's index pages and METADATA files fetched in a second process.

A cold lock has two kinds of work: the dependency search, and the requests, page parses and
cache writes that feed it. In one interpreter they take turns on one core (the GIL), however
many threads there are. ``FetchProcesses.start`` forks the process before it starts a
thread of its own (Linux only), into a child per core: each child serves the requests the
parent routes to it (by project name) on its own threads, with its own copy of the index
client on the same cache, and sends back only what the search reads (a page's rows for the
target, a METADATA file's bytes). The parent's search runs beside them.

The child is never trusted with a decision the parent would make differently:

- a ``BuildImageError`` it raises (an index that fails, a broken page, a deadline spent) is
  raised in the parent as the same class, with the same message and hint;
- anything else (an ``OSError``, a bug, the child gone) makes the parent do that request
  itself, in-process, where it succeeds or fails exactly as it would without the child.

Both sides are this tool, forked from one process: the pickled messages between them never
carry anything an index sent that has not been checked as it is without the child. The child
ignores Ctrl-C (the parent ends it), never writes to the terminal (its cache notes go to the
parent), and leaves with ``os._exit`` (no handler of the parent runs in it).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import sys
import threading
import warnings
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from core import errors
from core.errors import BuildImageError
from core.transport import Deadline

T = TypeVar("T")

_HEADER = 8  # bytes of length before each message


def _send(sock: socket.socket, lock: threading.Lock, message: tuple[Any, ...]) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    with lock:
        sock.sendall(len(data).to_bytes(_HEADER, "big") + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    parts: list[bytes] = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def _recv(sock: socket.socket) -> tuple[Any, ...] | None:
    """The next message, None when the other side is gone."""
    try:
        head = _recv_exact(sock, _HEADER)
        if head is None:
            return None
        data = _recv_exact(sock, int.from_bytes(head, "big"))
    except OSError:
        return None
    if data is None:
        return None
    message = pickle.loads(data)  # noqa: S301 - our own forked process, never an index
    assert isinstance(message, tuple)
    return message


def _error_parts(exc: BuildImageError) -> tuple[str, str, str | None] | None:
    """How the parent makes ``exc`` again: a class of ``core.errors`` made from a message and
    a hint only; None for any other (the parent does the request itself)."""
    cls = type(exc)
    if getattr(errors, cls.__name__, None) is not cls:
        return None
    if cls.__init__ is not BuildImageError.__init__:
        return None
    return cls.__name__, exc.message, exc.hint


def _remade(name: str, message: str, hint: str | None) -> BuildImageError:
    cls = getattr(errors, name)
    assert isinstance(cls, type)
    assert issubclass(cls, BuildImageError)
    return cls(message, hint=hint)


class _Child:
    """The parent's side of one child: ``ask`` sends a request and gives its future; ``close``
    ends the child and reaps it."""

    def __init__(
        self,
        pid: int,
        sock: socket.socket,
        *,
        local_pool: ThreadPoolExecutor,
        note: Callable[[str], None],
        deadline: Deadline | None,
    ) -> None:
        self.pid = pid
        self._deadline = deadline
        self._sock = sock
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._pool = local_pool
        self._note = note
        self._waiting: dict[int, tuple[Future[Any], Callable[[], Any], Callable[[Any], Any]]] = {}
        self._next = 0
        self._gone = False
        self._closing = False  # what is left unanswered then is no longer wanted
        self._reaped = False
        self._reader = threading.Thread(target=self._read, name="fetch-process", daemon=True)
        self._reader.start()

    def ask(
        self,
        kind: str,
        args: tuple[Any, ...],
        *,
        local: Callable[[], T],
        convert: Callable[[Any], T] = lambda value: value,
    ) -> Future[T]:
        """The future of request ``kind`` with ``args`` in the child: its answer through
        ``convert``, or the error it raised; ``local()`` on the parent's pool when the child
        cannot answer it (or is gone)."""
        fut: Future[T] = Future()
        if self._deadline is not None:  # the parent's budget is spent while the child works
            try:
                watch = self._deadline.begin("GET", kind)
            except BuildImageError:  # spent or cancelled: the request here says so, naming it
                self._redo(fut, local)
                return fut
            deadline = self._deadline
            fut.add_done_callback(lambda _done: deadline.end(watch))
        with self._lock:
            if not self._gone:
                self._next += 1
                key = self._next
                self._waiting[key] = (fut, local, convert)
            else:
                key = 0
        if key == 0:
            self._redo(fut, local)
            return fut
        try:
            _send(self._sock, self._send_lock, (kind, key, *args))
        except OSError:
            with self._lock:
                self._waiting.pop(key, None)
            self._redo(fut, local)
        return fut

    def owns(self, sock: socket.socket) -> bool:
        return sock is self._sock

    def send_close(self) -> None:
        with self._lock:
            self._closing = True
        with contextlib.suppress(OSError):
            _send(self._sock, self._send_lock, ("close",))

    def close(self, *, wait: float) -> None:
        """End the child: it finishes the requests it is answering (at most ``wait``
        seconds), then leaves; it is killed when it does not. A request it leaves
        unanswered is cancelled, not asked for here: the run is over."""
        with self._lock:
            self._closing = True
        self.send_close()
        self._reader.join(wait)  # the child's end closes its socket: the reader sees it
        self._end(kill=self._reader.is_alive())

    def kill(self) -> None:
        """End the child now (Ctrl-C); what it leaves unanswered is cancelled."""
        with self._lock:
            self._closing = True
        self._end(kill=True)

    # -- internals

    def _end(self, *, kill: bool) -> None:
        with self._lock:
            if self._reaped:
                return
            self._reaped = True
        if kill:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._reader.join(5.0)
        self._sock.close()

    def _redo(self, fut: Future[T], local: Callable[[], T]) -> None:
        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(local())
            except BaseException as exc:  # noqa: BLE001 - the future carries it
                fut.set_exception(exc)

        try:
            self._pool.submit(run)
        except RuntimeError:  # the pool is shut down: the run is over
            fut.cancel()

    def _read(self) -> None:
        try:
            while (message := _recv(self._sock)) is not None:
                kind = message[0]
                if kind == "note":
                    self._note(message[1])
                    continue
                with self._lock:
                    entry = self._waiting.pop(message[1], None)
                if entry is None:
                    continue
                fut, local, convert = entry
                if kind == "done":
                    try:
                        value = convert(message[2])
                    except BaseException as exc:  # noqa: BLE001 - the future carries it
                        fut.set_exception(exc)
                    else:
                        fut.set_result(value)
                elif kind == "error":
                    fut.set_exception(_remade(*message[2:]))
                else:  # "redo"
                    self._redo(fut, local)
        finally:
            with self._lock:
                self._gone = True
                left = list(self._waiting.values())
                self._waiting.clear()
                closing = self._closing
            for fut, local, _ in left:
                if closing:
                    fut.cancel()
                else:
                    self._redo(fut, local)


def _serve(
    sock: socket.socket,
    handlers: Mapping[str, Callable[..., Any]],
    *,
    workers: int,
    setup: Callable[[Callable[[str], None]], None],
) -> None:
    """The child's loop: each request answered on a thread of its own pool, until the
    parent says close or is gone."""
    lock = threading.Lock()

    def reply(message: tuple[Any, ...]) -> None:
        with contextlib.suppress(OSError):
            _send(sock, lock, message)

    setup(lambda text: reply(("note", text)))

    def answer(kind: str, key: int, args: tuple[Any, ...]) -> None:
        try:
            value = handlers[kind](*args)
        except BuildImageError as exc:
            parts = _error_parts(exc)
            reply(("redo", key) if parts is None else ("error", key, *parts))
        except BaseException:  # noqa: BLE001 - the parent does it itself and says why
            reply(("redo", key))
        else:
            try:
                reply(("done", key, value))
            except Exception:  # noqa: BLE001 - an answer that does not pickle
                reply(("redo", key))

    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        while (message := _recv(sock)) is not None and message[0] != "close":
            kind, key, *args = message
            if kind not in handlers:
                reply(("redo", key))
                continue
            pool.submit(answer, kind, key, tuple(args))
    finally:  # what is asked already is answered; what waits for a thread is not
        pool.shutdown(wait=True, cancel_futures=True)


class FetchProcesses:
    """The children of one run, each asked for the projects its share of names falls to."""

    def __init__(self, children: list[_Child]) -> None:
        self._children = children

    @classmethod
    def start(
        cls,
        count: int,
        handlers: Mapping[str, Callable[..., Any]],
        *,
        workers: int,
        local_pool: ThreadPoolExecutor,
        note: Callable[[str], None],
        child_setup: Callable[[Callable[[str], None]], None] = lambda _note: None,
        deadline: Deadline | None = None,
    ) -> FetchProcesses | None:
        """Fork ``count`` children that serve ``handlers`` (a request's kind -> the function
        that answers it, called with the request's arguments on one of ``workers`` threads
        of the child). ``child_setup`` runs first in each child, given the function that
        sends a note to the parent. ``deadline``: the parent's network budget, spent while a
        request is with a child (each child spends its own copy as it fetches). None where
        there is no fork (not Linux), for a count below 1, or when the first fork fails."""
        if count < 1 or sys.platform != "linux" or not hasattr(os, "fork"):
            return None
        pairs = [socket.socketpair() for _ in range(count)]
        children: list[_Child] = []
        for i, (parent_end, child_end) in enumerate(pairs):
            try:
                with warnings.catch_warnings():
                    # Python 3.12+ warns of a fork while other threads run (they could hold a
                    # lock the child needs). A lock forks before it starts a thread; the
                    # threads an embedding process may have (a test's servers) hold nothing
                    # the child takes: it serves with a client of its own (``child_setup``).
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:
                break
            if pid == 0:  # the child: serve, then leave without running anything of the parent's
                code = 1
                try:
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                    for j, (theirs, other) in enumerate(pairs):  # only its own end stays open
                        theirs.close()
                        if j != i:
                            other.close()
                    _serve(child_end, handlers, workers=workers, setup=child_setup)
                    code = 0
                finally:
                    os._exit(code)
            child = _Child(pid, parent_end, local_pool=local_pool, note=note, deadline=deadline)
            children.append(child)
        for parent_end, child_end in pairs:
            child_end.close()
            if not any(c.owns(parent_end) for c in children):
                parent_end.close()
        return cls(children) if children else None

    def ask(
        self,
        kind: str,
        key: str,
        args: tuple[Any, ...],
        *,
        local: Callable[[], T],
        convert: Callable[[Any], T] = lambda value: value,
    ) -> Future[T]:
        """``_Child.ask`` of the child whose share ``key`` (a project name) falls in."""
        child = self._children[zlib.crc32(key.encode()) % len(self._children)]
        return child.ask(kind, args, local=local, convert=convert)

    def counts(self) -> dict[str, int]:
        """The counters each child's ``stats`` handler gives, summed (a child gone gives
        none)."""
        total: dict[str, int] = {}
        asked: list[Future[dict[str, int]]] = [
            c.ask("stats", (), local=dict) for c in self._children
        ]
        for fut in asked:
            for name, value in fut.result().items():
                total[name] = total.get(name, 0) + value
        return total

    def close(self, *, wait: float) -> None:
        """End every child (each finishes what it is answering, at most ``wait`` seconds)."""
        for child in self._children:
            child.send_close()
        for child in self._children:
            child.close(wait=wait)

    def kill(self) -> None:
        """End every child now (Ctrl-C)."""
        for child in self._children:
            child.kill()
