"""The console's one verbosity level: ``-q`` leaves errors and the result, the default adds
notes, ``-v`` adds details; credentials are masked in every line it prints."""

from __future__ import annotations

import io

import pytest

from core.console import NORMAL, QUIET, VERBOSE, Console
from core.errors import IndexReadError


def _say_everything(level: int) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    console = Console(out, err, level=level)
    console.print("the result")
    console.note("note: a note")
    console.detail("a detail")
    console.error(IndexReadError("index x: down", hint="try later"))
    console.say("interrupted; nothing was written")
    console.close()
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("level", "shown"),
    [
        (QUIET, ""),
        (NORMAL, "note: a note\n"),
        (VERBOSE, "note: a note\na detail\n"),
    ],
)
def test_each_level_shows_what_it_promises(level: int, shown: str) -> None:
    assert _say_everything(level) == (
        "the result\n",
        shown + "error[index]: index x: down\nhint: try later\ninterrupted; nothing was written\n",
    )


def test_every_line_is_masked() -> None:
    err = io.StringIO()
    console = Console(io.StringIO(), err, level=VERBOSE)
    console.note("GET https://robot:s3cret@index.example/simple/")
    console.detail("from https://robot:s3cret@index.example/")
    assert err.getvalue() == (
        "GET https://***@index.example/simple/\nfrom https://***@index.example/\n"
    )


def test_drawn_bytes_reach_a_text_stream_as_text() -> None:
    err = io.StringIO()
    Console(io.StringIO(), err).draw(b"#1 [final 1/2] RUN true\r\n")
    assert err.getvalue() == "#1 [final 1/2] RUN true\r\n"
