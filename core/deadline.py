"""Bounds in time for the requests of one command: its network budget, stalls and Ctrl-C.

A timeout per read does not bound a request: a server that sends one byte a second never lets
a read time out. So every request runs under a ``Deadline``, shared by all the transports of
a command, with one watchdog thread that shuts down the socket of a request when

- the command's network budget (``--deadline``) is spent: the budget runs while at least one
  request is in flight (connecting, waiting, reading, or backing off between attempts), not
  while the command does other work (Docker pushing an image, say); every later request then
  fails at once with ``DeadlineError``;
- the request stalls: its head has not arrived twice ``timeout`` seconds after it was sent
  (a connect and a first byte may each take ``timeout``), or its body brought less than
  ``min_rate`` bytes a second over ``timeout`` seconds (curl's ``--speed-limit``/
  ``--speed-time``). A stall fails that request as a timeout, which the
  transport retries like any other;
- ``cancel`` is called (Ctrl-C): every request in flight ends within moments and every later
  one is refused.

The transport marks the phases of a request on its ``RequestWatch``; the reading thread
reports the bytes it receives. Nothing here knows HTTP.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from collections.abc import Callable

from core.errors import BuildImageError, DeadlineError, TransportError, UsageError
from core.urls import redact

DEFAULT_DEADLINE = 3600.0  # seconds of network time for one command (--deadline)
DEADLINE_HINT = (
    "--deadline bounds the seconds a command spends on the network in all (default "
    f"{DEFAULT_DEADLINE:g}); raise it for a slow link or big files. --timeout bounds each "
    "connect and each read"
)
_IDLE_EXIT = 1.0  # the watchdog thread ends after this long with nothing in flight
_TICK = 0.5  # the watchdog looks at the requests in flight at least this often


class Deadline:
    """The network budget of one command: ``seconds`` of time with at least one request in
    flight (None: no budget, only stalls and ``cancel``). Thread-safe: share one between the
    transports of a command. ``flag`` names the setting in messages."""

    def __init__(
        self,
        seconds: float | None = DEFAULT_DEADLINE,
        *,
        flag: str = "--deadline",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            raise UsageError(
                f"{flag} {seconds:g}: a deadline is a positive number of seconds",
                hint=f"the default is {flag} {DEFAULT_DEADLINE:g}",
            )
        self.seconds = seconds
        self.flag = flag
        self._clock = clock
        self._cond = threading.Condition()  # an RLock underneath: methods nest
        self._left = seconds
        self._since: float | None = None  # when the current stretch of busy time began
        self._watches: set[RequestWatch] = set()
        self._state = ""  # "" | "expired" | "cancelled"
        self._watching = False  # a watchdog thread runs

    def describe(self) -> str:
        return self.flag if self.seconds is None else f"{self.flag} {self.seconds:g}"

    def left(self) -> float | None:
        """Seconds of budget left (None: unbounded)."""
        with self._cond:
            return self._left_now()

    def cancel(self) -> None:
        """Stop every request in flight now and refuse every later one (Ctrl-C)."""
        with self._cond:
            if not self._state:
                self._state = "cancelled"
            for watch in list(self._watches):
                watch.fire(self._state)
            self._cond.notify_all()

    @property
    def cancelled(self) -> bool:
        return self._state == "cancelled"

    def error(self, method: str, url: str) -> DeadlineError:
        return DeadlineError(
            f"{method} {redact(url)} did not finish within the network deadline of this "
            f"command ({self.describe()})",
            hint=DEADLINE_HINT,
        )

    # -- for the transport

    def begin(self, method: str, url: str) -> RequestWatch:
        """A request starts (refused when the budget is spent or cancelled)."""
        with self._cond:
            self.check(None, method, url)
            first = not self._watches
            if first and self._left is not None:
                self._since = self._clock()
            watch = RequestWatch(self._clock)
            self._watches.add(watch)
            if not self._watching:
                self._watching = True
                threading.Thread(target=self._watchdog, name="deadline", daemon=True).start()
            elif first:
                self._cond.notify_all()  # an idle watchdog looks at the budget again
            return watch

    def end(self, watch: RequestWatch) -> None:
        """The request of ``watch`` is over (idempotent)."""
        with self._cond:
            if watch not in self._watches:
                return
            self._watches.discard(watch)
            if not self._watches and self._since is not None and self._left is not None:
                self._left -= self._clock() - self._since
                self._since = None

    def pause(
        self, seconds: float, method: str, url: str, sleep: Callable[[float], None] | None
    ) -> None:
        """Back off ``seconds`` before the next attempt, as network time; refused at once when
        the budget ends first. ``sleep`` None: a wait that ``cancel`` ends."""
        left = self.left()
        if left is not None and seconds >= left:
            raise DeadlineError(
                f"{method} {redact(url)} failed, and the network deadline of this command "
                f"({self.describe()}) ends before its next attempt",
                hint=DEADLINE_HINT,
            )
        watch = self.begin(method, url)
        try:
            if sleep is not None:
                sleep(seconds)
            else:
                with self._cond:
                    self._cond.wait_for(lambda: bool(self._state), timeout=seconds)
            self.check(None, method, url)
        finally:
            self.end(watch)

    def cut_off(self, watch: RequestWatch | None, method: str, url: str) -> BuildImageError | None:
        """Why ``watch``'s request was cut off (a cancel, the budget, a stall), else None: a
        shut-down socket can read as a clean end or as any failure."""
        with self._cond:
            state = (watch.fired if watch is not None else "") or self._state
            left = self._left_now()
        if state == "cancelled":
            return cancelled(method, url)
        if state == "expired" or (left is not None and left <= 0):
            return self.error(method, url)
        if state == "stalled" and watch is not None:
            return TransportError(
                f"{method} {redact(url)}: {watch.stall}",
                kind="timeout",
                name="Stalled",
                detail=watch.stall,
            )
        return None

    def check(self, watch: RequestWatch | None, method: str, url: str) -> None:
        """Raise what ``cut_off`` finds, if anything."""
        error = self.cut_off(watch, method, url)
        if error is not None:
            raise error

    # -- internals (under self._cond)

    def _left_now(self) -> float | None:
        if self._left is None:
            return None
        if self._since is None:
            return self._left
        return self._left - (self._clock() - self._since)

    def _watchdog(self) -> None:
        with self._cond:
            idle_since: float | None = None
            while not self._state:
                now = self._clock()
                if not self._watches:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= _IDLE_EXIT:
                        break
                    self._cond.wait(_IDLE_EXIT)
                    continue
                idle_since = None
                left = self._left_now()
                if left is not None and left <= 0:
                    self._state = "expired"
                    for watch in list(self._watches):
                        watch.fire(self._state)
                    break
                wake = _TICK if left is None else min(_TICK, left)
                for watch in list(self._watches):
                    due = watch.overdue(now)
                    if due is None:
                        continue
                    if due <= 0:
                        watch.fire("stalled")
                    else:
                        wake = min(wake, due)
                self._cond.wait(max(wake, 0.01))
            self._watching = False


class RequestWatch:
    """One request in flight: the connection it uses, whether it was cut off, and its
    progress. ``expect_head(seconds)``: its head must arrive within twice ``seconds``;
    ``expect_body(seconds, min_rate)``: each stretch of ``seconds`` must bring at least
    ``min_rate * seconds`` bytes (``received`` reports them)."""

    __slots__ = ("_clock", "_due", "_floor", "_got", "_span", "conn", "fired", "sock", "stall")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.conn: object | None = None
        # The socket last seen on ``conn``: http.client hands the socket of an answer that
        # ends where the connection does (no Content-Length) to the answer and clears
        # ``conn.sock``, and a stalled read of that body must still be cut.
        self.sock: object | None = None
        self.fired = ""  # "" | "expired" | "cancelled" | "stalled"
        self.stall = ""  # what stalled, for the message
        self._due: float | None = None  # when the current stretch ends
        self._span = 0.0
        self._floor = 0  # bytes the current stretch must bring (0: the head, any byte)
        self._got = 0

    def attach(self, conn: object) -> None:
        """The request uses ``conn`` (its socket, once connected, is kept: ``hold``)."""
        self.conn = conn
        self.hold(conn)

    def hold(self, conn: object) -> None:
        """Keep ``conn``'s socket, if it has one, to shut down when the request is cut off."""
        sock = getattr(conn, "sock", None)
        if sock is not None:
            self.sock = sock
        if self.fired:
            self._shutdown()

    def fire(self, state: str) -> None:
        if not self.fired:
            self.fired = state
        self._shutdown()

    def _shutdown(self) -> None:
        conn = self.conn
        sock = getattr(conn, "sock", None) if conn is not None else None
        shutdown_socket(sock if sock is not None else self.sock)

    def expect_head(self, seconds: float) -> None:
        """The head must arrive within twice ``seconds``: a connect and a first byte may each
        take ``seconds`` (a socket's own timeouts catch a silent server first)."""
        self._span, self._floor, self._got = seconds, 0, 0
        self.stall = f"no answer within {2 * seconds:g} s (twice --timeout)"
        self._due = self._clock() + 2 * seconds

    def expect_body(self, seconds: float, min_rate: float | None) -> None:
        if min_rate is None:
            self._due = None
            return
        self._span, self._floor, self._got = seconds, max(1, int(min_rate * seconds)), 0
        self.stall = (
            f"the transfer stalled: less than {self._floor} bytes in {seconds:g} s "
            f"(at least {min_rate:g} bytes a second over --timeout)"
        )
        self._due = self._clock() + seconds

    def received(self, n: int) -> None:
        """``n`` more bytes arrived: a stretch that brought its floor starts the next one."""
        if self._due is None or not self._floor:
            return
        self._got += n
        if self._got >= self._floor:
            self._got = 0
            self._due = self._clock() + self._span

    def overdue(self, now: float) -> float | None:
        """Seconds until this request's stretch ends (<= 0: it stalled); None: no stretch."""
        due = self._due
        return None if due is None else due - now


def shutdown_socket(sock: object) -> None:
    """End every blocking read on ``sock`` (a socket, a TLS socket or urllib3's TLS-in-TLS
    transport), from any thread."""
    raw = sock if isinstance(sock, socket.socket) else getattr(sock, "socket", None)
    if isinstance(raw, socket.socket):
        with contextlib.suppress(OSError):
            socket.socket.shutdown(raw, socket.SHUT_RDWR)


def cancelled(method: str, url: str) -> TransportError:
    return TransportError(
        f"{method} {redact(url)}: cancelled", kind="cancelled", name="Cancelled", detail="cancelled"
    )
