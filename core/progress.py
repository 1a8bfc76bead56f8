"""Progress bars for downloads: the one module that draws on a terminal (with ``rich``).

A multi-GB wheel takes minutes to download; on a terminal each download in flight gets a bar
(its file name, the bytes so far of how many, the speed, the time left), drawn on the
console's error stream and taken down when it ends, so that what stays on the screen is the
command's own output. Where that stream is not a terminal (a pipe, a CI log), or under ``-q``,
nothing is drawn and nothing else changes: the output stays byte for byte what it was.

Where no bars are drawn, ``log`` (the console's ``-v`` details) gets one line when a download
starts, resumes and ends, so that a CI log under ``-v`` says which file took the time.

``DownloadProgress.bar`` is thread-safe: the downloads of a lock run in a thread pool. While
bars are shown, the console prints its lines through ``write_line``, above the bars. ``rich``
is imported only when a bar is first shown on a terminal, so that a command starts fast.
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Callable, Iterator
from typing import Any, TextIO

__all__ = ["Bar", "DownloadProgress"]


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # a closed or a stand-in stream
        return False


class Bar:
    """The bar of one download (``owner`` None: none is drawn, lines go to ``log``)."""

    def __init__(
        self,
        owner: DownloadProgress | None,
        task: Any = None,
        *,
        name: str = "",
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._owner = owner
        self._task = task
        self._name = name
        self._log = log
        self._done = 0

    def advance(self, count: int) -> None:
        self._done += count
        if self._owner is not None:
            self._owner._advance(self._task, count)

    def restart(self, *, done: int, total: int | None) -> None:
        """The download starts over, or resumes with ``done`` bytes already on disk."""
        self._done = done
        if self._owner is not None:
            self._owner._update(self._task, done=done, total=total)
        elif self._log is not None and done:
            self._log(f"resuming {self._name} after {done} bytes")

    def close(self, *, complete: bool) -> None:
        """The download ended (``complete``: every byte arrived); the bar is taken down."""
        owner, self._owner = self._owner, None
        if owner is not None:
            owner._remove(self._task, complete=complete)
        elif self._log is not None:
            log, self._log = self._log, None
            ended = "downloaded" if complete else "stopped"
            log(f"{ended} {self._name} ({self._done} bytes)")


class DownloadProgress:
    """The bars of the downloads in flight, drawn on ``stream`` when it is a terminal and
    ``enabled`` (not under ``-q``)."""

    def __init__(
        self,
        stream: TextIO,
        *,
        enabled: bool = True,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._stream = stream
        self.shown = enabled and _is_terminal(stream)
        self._log = None if self.shown else log
        self._lock = threading.Lock()
        self._bars: Any = None  # rich.progress.Progress, while at least one bar is shown
        self._count = 0

    @classmethod
    def off(cls) -> DownloadProgress:
        """Progress that draws nothing (a library call without a console)."""
        return cls(io.StringIO(), enabled=False)

    @contextlib.contextmanager
    def bar(self, name: str, *, total: int | None, done: int = 0) -> Iterator[Bar]:
        """A bar named ``name`` (a file name: data, never markup) for ``total`` bytes (None:
        unknown), ``done`` of them already there; taken down when the block ends."""
        bar = self._start(name, total=total, done=done)
        complete = False
        try:
            yield bar
            complete = True
        finally:
            bar.close(complete=complete)

    def write_line(self, line: str) -> bool:
        """Print ``line`` above the bars; False when no bars are shown (print it yourself)."""
        with self._lock:
            if self._bars is None:
                return False
            from rich.text import Text

            self._bars.console.print(Text(line), soft_wrap=True)
            return True

    def close(self) -> None:
        with self._lock:
            self._stop()

    # -- internals

    def _start(self, name: str, *, total: int | None, done: int) -> Bar:
        if not self.shown:
            if self._log is not None:
                self._log(f"downloading {name}" + (f" ({total} bytes)" if total else ""))
            return Bar(None, name=name, log=self._log)
        with self._lock:
            if self._bars is None:
                self._bars = _new_bars(self._stream)
                self._bars.start()
            self._count += 1
            task = self._bars.add_task(name, total=total, completed=done)
        return Bar(self, task)

    def _advance(self, task: Any, count: int) -> None:
        with self._lock:
            if self._bars is not None:
                self._bars.advance(task, count)

    def _update(self, task: Any, *, done: int, total: int | None) -> None:
        with self._lock:
            if self._bars is not None:
                self._bars.update(task, completed=done, total=total)

    def _remove(self, task: Any, *, complete: bool) -> None:
        with self._lock:
            if self._bars is None:
                return
            if complete:  # its last picture, full, before it is taken down
                got = self._bars.tasks[self._bars.task_ids.index(task)].completed
                self._bars.update(task, total=got, completed=got)
                self._bars.refresh()
            self._bars.remove_task(task)
            self._count -= 1
            if self._count == 0:
                self._stop()

    def _stop(self) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
            self._count = 0


def _new_bars(stream: TextIO) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        TaskProgressColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=Console(file=stream, highlight=False, emoji=False, markup=False),
        transient=True,  # what stays on the screen is the command's own output
        redirect_stdout=False,
        redirect_stderr=False,
    )
