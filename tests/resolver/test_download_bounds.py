"""Hostile indexes are refused in bounded memory and time, end to end through the CLI on real
HTTP indexes: gzip and METADATA bombs, bodies past the size the index gives, a server without
range support, a server that trickles, and Ctrl-C.

Where a regression would eat the machine, the CLI runs in a subprocess under an address-space
cap (``RLIMIT_AS``), so that it fails the test instead."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import pytest

from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, Result

REPO = Path(__file__).resolve().parents[2]
MB = 1 << 20
PIN_TORCH_NO_DEPS = f'  torch: {{version: "{TORCH}", index: mthreads, wheel: native, deps: false}}'
DEADLINE_HINT = (
    "hint: --deadline bounds the seconds a command spends on the network in all (default "
    "3600); raise it for a slow link or big files. --timeout bounds each connect and each read\n"
)


def run_capped(case: Case, *argv: str | Path, cap_mb: int = 384) -> Result:
    """The CLI in a subprocess whose address space is capped at ``cap_mb`` MB."""
    code = (
        "import resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({cap_mb} << 20, {cap_mb} << 20))\n"
        "import build_image\n"
        "sys.exit(build_image.main(sys.argv[1:]))\n"
    )
    args = [str(a) for a in argv] + ["--cache-dir", str(case.cache)]
    env = {**os.environ, "MALLOC_ARENA_MAX": "2"}
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel whose METADATA inflates to 512 MB, a gzip page of 512 MB, a wheel of 320 MB."""
    out = tmp_path_factory.mktemp("bombs")
    with zipfile.ZipFile(
        out / "bomb-1.0-py3-none-any.whl", "w", zipfile.ZIP_DEFLATED, True, 1
    ) as zf:
        zf.writestr("bomb/__init__.py", "")
        with zf.open("bomb-1.0.dist-info/METADATA", "w", force_zip64=True) as fh:
            fh.write(b"Metadata-Version: 2.1\nName: bomb\nVersion: 1.0\n\n")
            for _ in range(512):
                fh.write(bytes(MB))
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with (out / "page.gz").open("wb") as fh:
        for _ in range(512):
            fh.write(comp.compress(bytes(MB)))
        fh.write(comp.flush())
    return out


def big_wheel(case: Case, megabytes: int) -> Path:
    """A valid torch wheel of ``megabytes`` MB on the wire (its payload stored, not deflated)."""
    small = case.wheel("torch", TORCH, NATIVE)
    big = case.tmp / "big" / small.name
    big.parent.mkdir()
    with zipfile.ZipFile(small) as src, zipfile.ZipFile(big, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info))
        with dst.open("torch/payload.bin", "w", force_zip64=True) as fh:
            for _ in range(megabytes):
                fh.write(bytes(MB))
    return big


# ----------------------------------------------------------------------------- bombs


def test_a_metadata_that_inflates_to_gigabytes_is_refused(case: Case, bombs: Path) -> None:
    bomb = bombs / "bomb-1.0-py3-none-any.whl"
    case.publish(case.pypi, bomb)
    result = run_capped(case, "lock", case.stack(requirements=["bomb==1.0"]))
    assert (result.code, result.err) == (
        1,
        f"error[metadata]: bomb: {bomb.name}: bomb-1.0.dist-info/METADATA has {512 * MB + 47} "
        f"bytes, more than the {16 * MB} a METADATA may have\n"
        "hint: no real wheel has a METADATA this big; do not use this file\n",
    )


def test_a_gzip_page_that_inflates_to_gigabytes_is_refused(case: Case, bombs: Path) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    headers = {"Content-Encoding": "gzip", "Content-Type": "text/html"}
    case.pypi.answer("/simple/numpy/", (bombs / "page.gz").read_bytes(), headers=headers)
    result = run_capped(case, "lock", case.stack(requirements=["numpy==1.26.4"]), "--retries", "0")
    assert (result.code, result.err) == (
        1,
        f"error[index]: index pypi: the page {case.pypi.simple_url}numpy/ has more than 64 MB "
        f"({64 * MB} bytes, decoded)\n"
        "hint: raise --max-page-mb (default 64) if the index really serves pages this big\n",
    )


def test_the_page_size_is_a_setting(case: Case) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    page = case.pypi.root / "simple" / "numpy" / "index.html"
    page.write_text(page.read_text() + "<!--" + "x" * (2 * MB) + "-->\n")
    stack = case.stack(requirements=["numpy==1.26.4"])
    result = case.run("lock", stack, "--max-page-mb", "1")
    assert (result.code, result.err) == (
        1,
        f"error[index]: index pypi: the page {case.pypi.simple_url}numpy/ has more than 1 MB "
        f"({MB} bytes, decoded)\n"
        "hint: raise --max-page-mb (default 64) if the index really serves pages this big\n",
    )
    assert case.run("lock", stack, "--max-page-mb", "3").code == 0
    bad = case.run("lock", stack, "--max-page-mb", "0")
    assert (bad.code, bad.err) == (
        2,
        "error[usage]: --max-page-mb 0: the size is a positive number of MB\n",
    )


# ----------------------------------------------------------------------------- sizes


def _size_on_page(server: IndexServer, project: str, size: int) -> None:
    page = server.root / "simple" / project / "index.json"
    doc = json.loads(page.read_text())
    for entry in doc["files"]:
        entry["size"] = size
    page.write_text(json.dumps(doc))


def test_a_body_larger_than_the_index_says_is_refused_before_it_is_read(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, payload_bytes=100_000)
    case.publish(case.vendor, Listing(path=torch, hash="none"), json=True)
    _size_on_page(case.vendor, "torch", 950)
    result = case.run("lock", case.stack(PIN_TORCH_NO_DEPS), "--retries", "0")
    assert (result.code, result.err) == (
        1,
        f"error[hash-mismatch]: torch: index mthreads gives size 950 for {torch.name}, but the "
        f"server announces {torch.stat().st_size} bytes (Content-Length)\n"
        "hint: the index serves other bytes than it advertises; do not use them until the index "
        "owner explains the change\n",
    )


def test_a_body_without_a_length_stops_at_the_first_byte_past_the_size(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, payload_bytes=100_000)
    case.publish(case.vendor, Listing(path=torch, hash="none"), json=True)
    _size_on_page(case.vendor, "torch", 950)
    case.vendor.cut("/files/", after=torch.stat().st_size)  # all of it, close-delimited
    result = case.run("lock", case.stack(PIN_TORCH_NO_DEPS), "--retries", "0")
    assert (result.code, result.err) == (
        1,
        f"error[hash-mismatch]: torch: index mthreads gives size 950 for {torch.name}, but the "
        "server sent more (stopped at byte 951)\n"
        "hint: the index serves other bytes than it advertises; do not use them until the index "
        "owner explains the change\n",
    )
    assert not any(p.is_file() for p in (case.cache / "files").rglob("*"))


# ----------------------------------------------------------------------------- no ranges


def test_without_range_support_the_wheel_is_downloaded_once_and_streamed(case: Case) -> None:
    case.vendor.ranges = False
    torch = big_wheel(case, 320)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    result = run_capped(case, "lock", case.stack(PIN_TORCH), cap_mb=256)
    assert result.code == 0, result.err
    size = torch.stat().st_size
    # once: the metadata read and the download share one transfer (a second request for it
    # is hung up on after its headers, or answered 304)
    assert size <= case.vendor.bytes_sent[f"/files/{torch.name}"] < size + 32 * MB
    sha = hashlib.sha256(torch.read_bytes()).hexdigest()
    assert (case.cache / "files" / "sha256" / sha[:2] / sha).stat().st_size == size


# ----------------------------------------------------------------------------- time


def test_a_trickling_page_fails_at_the_deadline(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.vendor.trickle("/simple/torch/", 1, times=5)
    argv = ["--deadline", "1", "--timeout", "2", "--retries", "1"]
    result = case.run("lock", case.stack(PIN_TORCH), *argv)
    assert (result.code, result.err) == (
        1,
        f"error[deadline]: index mthreads: GET {case.vendor.simple_url}torch/ did not finish "
        "within the network deadline of this command (--deadline 1)\n" + DEADLINE_HINT,
    )
    assert not case.lock_dir().exists()


def test_a_trickling_download_fails_at_the_deadline(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    case.vendor.trickle("/files/", 100, times=5)
    argv = ["--deadline", "1", "--timeout", "2", "--retries", "1"]
    result = case.run("lock", case.stack(PIN_TORCH_NO_DEPS), *argv)
    url = f"{case.vendor.url}/files/{torch.name}".replace("+", "%2B")
    assert (result.code, result.err) == (
        1,
        f"error[deadline]: torch: index mthreads: GET {url} did not finish within the network "
        "deadline of this command (--deadline 1)\n" + DEADLINE_HINT,
    )
    assert list((case.cache / "tmp").iterdir()) == []


def test_ctrl_c_cancels_the_downloads_in_flight(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, payload_bytes=1_000_000)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    case.vendor.trickle("/files/", 1000, times=5)  # a download that would take 20 minutes
    stack = case.stack(PIN_TORCH_NO_DEPS)
    proc = subprocess.Popen(
        [sys.executable, "build_image.py", "lock", str(stack), "--cache-dir", str(case.cache)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while proc.poll() is None and not any(
            r.path.startswith("/files/") for r in case.vendor.requests
        ):
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # a hang guard: the trickle lasts 20 minutes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out, err) == (130, "", "interrupted; nothing was written\n")
    assert not case.lock_dir().exists()
    assert list((case.cache / "tmp").iterdir()) == []
