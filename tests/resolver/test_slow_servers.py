"""Servers that answer too slowly to ever end, against the real command line: a head or a
body trickled a byte at a time is a stall (no per-read timeout fires for it), cut off after
``--timeout`` seconds, tried again, then refused as ``error[index]`` naming the URL; and
Ctrl-C ends a lock at once whatever the server does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case

ROOT = Path(__file__).resolve().parents[2]
STALL_HINT = "check that the index is up and reachable; nothing was written"


def _torch(case: Case) -> Path:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    return case.stack(PIN_TORCH)


@pytest.mark.parametrize("head", [False, True])
def test_a_page_trickled_a_byte_a_second_is_a_stall_retried_then_refused(
    case: Case, head: bool
) -> None:
    stack = _torch(case)
    case.vendor.trickle("/simple/torch/", 4, times=5, head=head)
    result = case.run("lock", stack, "--timeout", "1", "--retries", "1")
    url = f"{case.vendor.simple_url}torch/"
    stalled = (
        "Stalled: no answer within 2 s (twice --timeout)"
        if head
        else "Stalled: the transfer stalled: less than 1024 bytes in 1 s (at least 1024 bytes "
        "a second over --timeout)"
    )
    assert (result.code, result.err) == (
        1,
        f"error[index]: index mthreads: GET {url} failed after 2 attempts ({stalled})\n"
        f"hint: {STALL_HINT}\n",
    )
    assert case.vendor.paths() == ["/simple/torch/", "/simple/torch/"]
    assert not case.lock_dir().exists()


def test_a_wheel_trickled_a_few_bytes_a_second_is_a_stall_refused_naming_it(
    case: Case,
) -> None:
    stack = _torch(case)
    filename = f"torch-{TORCH}-{NATIVE}.whl"
    case.vendor.trickle("/files/", 4, times=10)
    result = case.run("lock", stack, "--timeout", "1", "--retries", "1")
    url = f"{case.vendor.url}/files/{filename.replace('+', '%2B')}"
    assert (result.code, result.err) == (  # the range read of its METADATA is cut off
        1,
        f"error[index]: torch: index mthreads: a range read of {filename} ({url}) broke off "
        "(the transfer stalled: less than 1024 bytes in 1 s (at least 1024 bytes a second "
        "over --timeout))\n"
        "hint: run the command again; nothing was written\n",
    )


def test_a_page_without_a_length_trickled_a_few_bytes_a_second_is_a_stall_retried_then_refused(
    case: Case,
) -> None:
    stack = _torch(case)
    case.vendor.trickle("/simple/torch/", 4, times=5, unframed=True)  # no read times out
    result = case.run("lock", stack, "--timeout", "1", "--retries", "1")
    url = f"{case.vendor.simple_url}torch/"
    assert (result.code, result.err) == (
        1,
        f"error[index]: index mthreads: GET {url} failed after 2 attempts (Stalled: the "
        "transfer stalled: less than 1024 bytes in 1 s (at least 1024 bytes a second over "
        f"--timeout))\nhint: {STALL_HINT}\n",
    )
    assert case.vendor.paths() == ["/simple/torch/", "/simple/torch/"]
    assert not case.lock_dir().exists()


@pytest.mark.parametrize("ranges", [True, False])
def test_a_wheel_without_a_length_trickled_a_few_bytes_a_second_is_a_stall_refused_naming_it(
    case: Case, ranges: bool
) -> None:
    stack = _torch(case)
    case.vendor.ranges = ranges  # False: a 200 with the whole file, read until the hang-up
    filename = f"torch-{TORCH}-{NATIVE}.whl"
    url = f"{case.vendor.url}/files/{filename.replace('+', '%2B')}"
    case.vendor.trickle("/files/", 4, times=10, unframed=True)
    result = case.run("lock", stack, "--timeout", "1", "--retries", "1")
    what = (
        f"a range read of {filename} ({url}) broke off"
        if ranges
        else f"download of {filename} broke off after N bytes"
    )
    err = re.sub(r"after \d+ bytes? \(", "after N bytes (", result.err)  # a few by then
    assert (result.code, err) == (
        1,
        f"error[index]: torch: index mthreads: {what} (the transfer stalled: less than 1024 "
        "bytes in 1 s (at least 1024 bytes a second over --timeout))\n"
        "hint: run the command again; nothing was written\n",
    )


def test_ctrl_c_ends_a_lock_at_once_while_a_server_trickles(case: Case, tmp_path: Path) -> None:
    stack = _torch(case)
    case.vendor.trickle("/simple/", 1, times=50, head=True)
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "build_image.py"), "lock", str(stack),
         "--cache-dir", str(tmp_path / "cache")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        while not case.vendor.paths():  # the lock is waiting on the server
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        # a bound for a hung test only: the server would trickle for minutes
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (130, "", "interrupted; nothing was written\n")
    assert not case.lock_dir().exists()
