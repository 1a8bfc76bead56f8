"""testbed.elf: the hand-written shared objects are deterministic, binutils reads their dynamic
section, and glibc's dlopen loads one whose libraries are there (and names the one that is not)."""

from __future__ import annotations

import ctypes
import hashlib
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

from demo.make_index import MOONCAKE_LIBRARY
from testbed.elf import EM_386, SharedObject, render_shared_object
from tests.support.environment import in_ci

SPEC = SharedObject(
    needed=("libcurl.so.4", "libc.so.6"),
    soname="libtransfer_engine.so",
    runpath="$ORIGIN",
)


def _readelf(path: Path) -> list[str]:
    readelf = shutil.which("readelf")
    if readelf is None:
        if in_ci():
            pytest.fail("CI=true: the test machine must have readelf (binutils)")
        pytest.skip("no readelf on this machine")
    run = subprocess.run(
        [readelf, "-d", str(path)], capture_output=True, text=True, check=True, timeout=60
    )
    return [" ".join(line.split()) for line in run.stdout.splitlines() if line.strip()]


def test_the_bytes_are_the_same_every_time() -> None:
    data = render_shared_object(SPEC)
    assert data == render_shared_object(SPEC)
    # the demo's mooncake stand-in carries these bytes: the committed demo locks pin its wheel
    assert (len(data), hashlib.sha256(data).hexdigest()) == (
        488,
        "ece5490fb6457c590447cd92e7c7b8b59eba294ba652af9ae3f2fcd712568841",
    )
    assert data == MOONCAKE_LIBRARY
    assert render_shared_object(SPEC)[:20] == (
        b"\x7fELF\x02\x01\x01\x00" + bytes(8) + b"\x03\x00\x3e\x00"
    )


def test_readelf_lists_the_dynamic_section(tmp_path: Path) -> None:
    path = tmp_path / "libtransfer_engine.so"
    path.write_bytes(render_shared_object(SPEC))
    assert _readelf(path) == [
        "Dynamic section at offset 0x148 contains 10 entries:",
        "Tag Type Name/Value",
        "0x0000000000000001 (NEEDED) Shared library: [libcurl.so.4]",
        "0x0000000000000001 (NEEDED) Shared library: [libc.so.6]",
        "0x000000000000000e (SONAME) Library soname: [libtransfer_engine.so]",
        "0x000000000000001d (RUNPATH) Library runpath: [$ORIGIN]",
        "0x0000000000000004 (HASH) 0xe8",
        "0x0000000000000005 (STRTAB) 0x110",
        "0x0000000000000006 (SYMTAB) 0xf8",
        "0x000000000000000a (STRSZ) 54 (bytes)",
        "0x000000000000000b (SYMENT) 24 (bytes)",
        "0x0000000000000000 (NULL) 0x0",
    ]


def test_readelf_reads_an_elf32_object_with_rpath(tmp_path: Path) -> None:
    path = tmp_path / "lib32.so"
    spec = SharedObject(needed=("libc.so.6",), rpath="/opt/a:$ORIGIN/../lib", machine=EM_386)
    path.write_bytes(render_shared_object(SharedObject(**{**vars(spec), "elf_class": 32})))
    lines = _readelf(path)
    assert lines[2:4] == [
        "0x00000001 (NEEDED) Shared library: [libc.so.6]",
        "0x0000000f (RPATH) Library rpath: [/opt/a:$ORIGIN/../lib]",
    ]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the objects are x86-64 ones")
def test_dlopen_loads_it_when_its_libraries_are_there_and_names_the_one_missing(
    tmp_path: Path,
) -> None:
    good = tmp_path / "libgood.so"
    good.write_bytes(render_shared_object(SharedObject(needed=("libc.so.6",))))
    ctypes.CDLL(str(good))
    bad = tmp_path / "libbad.so"
    bad.write_bytes(render_shared_object(SharedObject(needed=("libvllm_musa_absent.so.7",))))
    with pytest.raises(OSError, match=r"^libvllm_musa_absent\.so\.7: cannot open shared object"):
        ctypes.CDLL(str(bad))


def test_a_class_other_than_32_or_64_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^elf_class must be 32 or 64, not 16$"):
        render_shared_object(SharedObject(elf_class=16))
