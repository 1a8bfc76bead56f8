"""The transport's bounds against a real HTTP server on 127.0.0.1 (``IndexServer`` with its
faults): a deadline no trickling server outlasts, cancellation from another thread, bodies
read whole only up to a limit, content encodings decoded a bounded piece at a time, and
redirect bodies never read."""

from __future__ import annotations

import gzip
import threading
import zlib
from pathlib import Path

import pytest

import build_image
from core.errors import DeadlineError, TransportError, UsageError
from core.transport import DEADLINE_HINT, DEFAULT_DEADLINE, Deadline, RetryPolicy, Transport
from testbed.index_server import IndexServer

BODY = bytes(range(256)) * 400  # 100 kB


def _file(server: IndexServer, name: str = "x.bin", data: bytes = BODY) -> str:
    path = server.root / "files" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return f"{server.url}/files/{name}"


def test_a_trickling_body_ends_at_the_deadline(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.trickle("/files/", 20)
    deadline = Deadline(1.0)
    with Transport(timeout=2, deadline=deadline) as http:
        resp = http.request("GET", url, stream=True, retry=RetryPolicy(attempts=2))
        with resp, pytest.raises(DeadlineError) as info:
            resp.read_all(1 << 20)
        assert info.value.message == (
            f"GET {url} did not finish within the network deadline of this command (--deadline 1)"
        )
        assert info.value.hint == DEADLINE_HINT
        with pytest.raises(DeadlineError):  # and nothing more is sent once it is spent
            http.request("GET", url)
    assert len(index_server.requests) == 1


def test_a_trickling_page_read_whole_ends_at_the_deadline(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.trickle("/files/", 20, times=5)
    with Transport(timeout=2, deadline=Deadline(1.0)) as http, pytest.raises(DeadlineError):
        http.request("GET", url, retry=RetryPolicy(attempts=3))
    assert len(index_server.requests) == 1  # never retried: the budget is spent


def test_the_backoff_is_spent_inside_the_deadline(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.fail("/files/", status=503, times=5)
    with Transport(timeout=2, deadline=Deadline(2.0)) as http, pytest.raises(DeadlineError) as info:
        http.request("GET", url, retry=RetryPolicy(attempts=5, backoff=10.0))
    assert info.value.message == (
        f"GET {url} failed, and the network deadline of this command (--deadline 2) ends "
        "before its next attempt"
    )
    assert len(index_server.requests) == 1


def test_cancel_ends_a_request_in_flight_in_another_thread(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.trickle("/files/", 10)
    http = Transport(timeout=30, deadline=Deadline(None))
    failures: list[BaseException] = []

    def worker() -> None:
        try:
            with http.request("GET", url, stream=True) as resp:
                while resp.read(1 << 20):
                    pass
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failures.append(exc)

    thread = threading.Thread(target=worker)
    thread.start()
    while not index_server.requests:
        thread.join(0.01)
    http.cancel()
    thread.join(30)  # a hang guard, not a timing: without the cancel it reads for hours
    assert not thread.is_alive()
    assert len(failures) == 1
    assert isinstance(failures[0], TransportError)
    assert (failures[0].kind, failures[0].message) == ("cancelled", f"GET {url}: cancelled")
    with pytest.raises(TransportError) as info:
        http.request("GET", url)
    assert info.value.kind == "cancelled"
    http.close()


def test_a_deadline_is_a_positive_number_of_seconds() -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(UsageError) as info:
            Deadline(bad)
        assert (
            info.value.message == f"--deadline {bad:g}: a deadline is a positive number of seconds"
        )


def test_every_command_on_the_network_takes_a_deadline(tmp_path: Path) -> None:
    parser = build_image.build_parser()
    stack = str(tmp_path / "s.yaml")
    for argv in (
        ["lock", stack],
        ["explain", stack, "torch"],
        ["fetch", stack],
        ["stage", stack, "--target", "final"],
        ["build", stack, "--target", "final"],
        ["publish", stack, "--target", "final"],
        ["pin", "r.example/app:1"],
        ["verify-pins", stack],
        ["rollback", stack],
    ):
        assert parser.parse_args(argv).deadline == DEFAULT_DEADLINE, argv
        assert parser.parse_args([*argv, "--deadline", "5"]).deadline == 5.0, argv


def test_a_body_read_whole_stops_past_its_limit(index_server: IndexServer) -> None:
    url = _file(index_server)
    with Transport(timeout=5) as http:
        with pytest.raises(TransportError) as info:
            http.request("GET", url, max_body=1000)
        assert (info.value.kind, info.value.message) == (
            "too-large",
            f"GET {url}: the body has more than 1000 bytes",
        )
        index_server.cut("/files/", after=len(BODY))  # no Content-Length to refuse it by
        with pytest.raises(TransportError) as info:
            http.request("GET", url, max_body=1000)
        assert info.value.kind == "too-large"
        assert http.request("GET", url, max_body=len(BODY)).content == BODY


def test_an_answer_to_head_has_no_body_whatever_its_length_says(
    index_server: IndexServer,
) -> None:
    """A registry's HEAD on a blob of GBs says its Content-Length: that is what GET would
    send, not a body to refuse."""
    url = _file(index_server)
    with Transport(timeout=5) as http:
        head = http.request("HEAD", url, max_body=10)
        assert (head.status, head.content) == (200, b"")
        assert int(head.headers["Content-Length"]) == len(BODY) > 10


def test_a_gzip_body_is_decoded(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.answer("/files/", gzip.compress(BODY), headers={"Content-Encoding": "gzip"})
    index_server.answer("/files/", zlib.compress(BODY), headers={"Content-Encoding": "deflate"})
    with Transport(timeout=5) as http:
        assert http.request("GET", url).content == BODY
        assert http.request("GET", url).content == BODY


def test_a_gzip_bomb_inflates_a_bounded_piece_at_a_time(
    index_server: IndexServer, tmp_path: Path
) -> None:
    bomb = _gzip_zeros(256 << 20)  # 256 MB in a few hundred kB
    url = _file(index_server)
    index_server.answer("/files/", bomb, headers={"Content-Encoding": "gzip"}, times=2)
    with Transport(timeout=5) as http:
        with pytest.raises(TransportError) as info:
            http.request("GET", url, max_body=1 << 20)
        assert info.value.message == f"GET {url}: the body has more than {1 << 20} bytes"
        with http.request("GET", url, stream=True) as resp:
            sizes = [len(resp.read(4096)) for _ in range(1000)]
        assert 0 < min(sizes) <= max(sizes) == 4096  # never more than asked, however it inflates


def test_a_body_in_another_encoding_is_refused(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.answer("/files/", b"...", headers={"Content-Encoding": "br"})
    with Transport(timeout=5) as http, pytest.raises(TransportError) as info:
        http.request("GET", url)
    assert info.value.message == (
        f"reading {url}: the server sent Content-Encoding br, which this tool does not decode "
        "(it asks for gzip or deflate only)"
    )


def test_a_gzip_body_cut_short_is_an_error(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.answer("/files/", gzip.compress(BODY)[:-100], headers={"Content-Encoding": "gzip"})
    with Transport(timeout=5) as http, pytest.raises(TransportError) as info:
        http.request("GET", url)
    assert info.value.message == f"reading {url}: the gzip body ends before its end"


def test_a_redirect_body_is_never_read(index_server: IndexServer) -> None:
    url = _file(index_server)
    index_server.redirect("/away/", "/files/x.bin", body_bytes=1 << 30)
    with Transport(timeout=5) as http:
        resp = http.request("GET", f"{index_server.url}/away/x")
        assert (resp.status, resp.url, resp.content) == (200, url, BODY)
    # the socket buffers hold a few MB at most; a client that drained it would read 1 GB
    assert index_server.bytes_sent["/away/x"] < 64 << 20


def _gzip_zeros(size: int) -> bytes:
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    block = bytes(1 << 20)
    parts = [comp.compress(block) for _ in range(size >> 20)]
    return b"".join([*parts, comp.flush()])
