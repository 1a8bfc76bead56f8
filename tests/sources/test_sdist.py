"""Sdists: which filename is a project's sdist, and reading files out of a verified one."""

from __future__ import annotations

import hashlib
import tarfile
import zlib
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from packaging.version import Version

import sources.sdist
from core.errors import HashMismatchError, SourceError
from sources.sdist import SdistArchive, is_sdist_of, sdist_filename
from tests.sources.sdistgen import write_sdist

VLLM = canonicalize_name("vllm")


def archive(path: Path, where: str = "sources.vllm.sdist") -> SdistArchive:
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return SdistArchive(path, filename=path.name, sha256=sha, where=where)


def test_pep625_filename() -> None:
    assert sdist_filename(canonicalize_name("Flash.Attn"), Version("2.0")) == (
        "flash_attn-2.0.tar.gz"
    )
    assert sdist_filename(VLLM, Version("0.28.0")) == "vllm-0.28.0.tar.gz"


@pytest.mark.parametrize(
    ("filename", "project", "version", "expected"),
    [
        ("vllm-0.28.0.tar.gz", "vllm", "0.28.0", True),
        ("vLLM-0.28.0.tar.gz", "vllm", "0.28.0", True),  # legacy: unnormalized
        ("flash-attn-2.0.tar.gz", "flash-attn", "2.0", True),  # legacy: a dash in the name
        ("flash_attn-2.0.tar.gz", "flash-attn", "2.0", True),
        ("vllm-0.28.0.post1.tar.gz", "vllm", "0.28.0", False),
        ("vllm-0.28.0+cpu.tar.gz", "vllm", "0.28.0", False),
        ("vllm-0.28.0.zip", "vllm", "0.28.0", False),
        ("vllm-0.28.0-cp38-abi3-manylinux1_x86_64.whl", "vllm", "0.28.0", False),
        ("vllm-tools-0.28.0.tar.gz", "vllm", "0.28.0", False),
        ("vllm-latest.tar.gz", "vllm", "0.28.0", False),
        # a name that could be read as a path is nobody's sdist (a Version strips whitespace)
        ("x/../vllm-0.28.0.tar.gz", "vllm", "0.28.0", False),
        ("vllm-0.28.0\n.tar.gz", "vllm", "0.28.0", False),
        ("vllm-0.28.0 .tar.gz", "vllm", "0.28.0", False),
    ],
)
def test_is_sdist_of(filename: str, project: str, version: str, expected: bool) -> None:
    assert is_sdist_of(filename, canonicalize_name(project), Version(version)) is expected


def test_reads_members_by_path_inside_the_project(tmp_path: Path) -> None:
    path = write_sdist(
        tmp_path,
        "vllm-0.28.0.tar.gz",
        {
            "requirements/common.txt": "numpy\n",
            "requirements/build/cuda.txt": "cmake\n",
            "setup.py": "",
        },
    )
    sdist = archive(path)
    sdist.prime(["requirements/common.txt", "requirements/build/cuda.txt"])
    assert sdist.read("requirements/common.txt") == b"numpy\n"
    assert sdist.read("requirements/build/cuda.txt") == b"cmake\n"
    assert sdist.read("setup.py") == b""  # another directory: one more pass
    assert sdist.read("requirements/missing.txt") is None


def test_a_link_is_refused(tmp_path: Path) -> None:
    path = write_sdist(
        tmp_path,
        "vllm-0.28.0.tar.gz",
        {"requirements/real.txt": "numpy\n"},
        symlinks={"requirements/common.txt": "/etc/passwd"},
    )
    with pytest.raises(SourceError) as info:
        archive(path).read("requirements/common.txt")
    assert info.value.message == (
        "sources.vllm.sdist: vllm-0.28.0/requirements/common.txt in vllm-0.28.0.tar.gz is a "
        "link, not a regular file"
    )
    assert info.value.hint == "files are read from an sdist only when they are regular files"


def test_members_outside_the_top_directory_are_not_the_project(tmp_path: Path) -> None:
    path = write_sdist(
        tmp_path, "vllm-0.28.0.tar.gz", {"requirements/common.txt": "numpy\n"}, top="other-1.0"
    )
    assert archive(path).read("requirements/common.txt") is None


def test_bytes_that_differ_from_the_locked_hash_are_refused(tmp_path: Path) -> None:
    path = write_sdist(tmp_path, "vllm-0.28.0.tar.gz", {"requirements/common.txt": "numpy\n"})
    sdist = SdistArchive(path, filename=path.name, sha256="ab" * 32, where="sources.vllm.sdist")
    got = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(HashMismatchError) as info:
        sdist.read("requirements/common.txt")
    assert info.value.message == (
        f"sources.vllm.sdist: the cached copy of vllm-0.28.0.tar.gz ({path}) hashes to {got}, "
        f"but the lock has sha256 {'ab' * 32}"
    )


def test_every_pass_rehashes_the_file(tmp_path: Path) -> None:
    path = write_sdist(tmp_path, "vllm-0.28.0.tar.gz", {"a/x.txt": "numpy\n", "b/y.txt": "six\n"})
    sdist = archive(path)
    assert sdist.read("a/x.txt") == b"numpy\n"
    write_sdist(tmp_path, "vllm-0.28.0.tar.gz", {"a/x.txt": "numpy\n", "b/y.txt": "evil\n"})
    with pytest.raises(HashMismatchError):
        sdist.read("b/y.txt")


def test_a_file_that_is_not_a_tarball(tmp_path: Path) -> None:
    path = tmp_path / "vllm-0.28.0.tar.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(SourceError) as info:
        archive(path).read("requirements/common.txt")
    assert info.value.message.startswith(
        "sources.vllm.sdist: vllm-0.28.0.tar.gz is not a readable .tar.gz: "
    )


def test_sizes_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_sdist(tmp_path, "vllm-0.28.0.tar.gz", {"requirements/common.txt": "numpy\n" * 100})
    monkeypatch.setattr(sources.sdist, "MAX_MEMBER_BYTES", 100)
    with pytest.raises(SourceError) as info:
        archive(path).read("requirements/common.txt")
    assert info.value.message == (
        "sources.vllm.sdist: vllm-0.28.0/requirements/common.txt in vllm-0.28.0.tar.gz has 600 "
        "bytes, more than 100"
    )
    monkeypatch.setattr(sources.sdist, "MAX_SDIST_BYTES", 50)
    with pytest.raises(SourceError) as info:
        archive(path).read("requirements/common.txt")
    assert info.value.message == (
        f"sources.vllm.sdist: vllm-0.28.0.tar.gz has {path.stat().st_size} bytes, more than an "
        "sdist may have (50)"
    )


def test_a_tar_header_that_claims_gigabytes_is_refused_before_it_is_read(tmp_path: Path) -> None:
    # a pax header is read whole by tarfile: 200 MB of one, in under a megabyte of gzip
    size = 200 << 20
    record = b"comment=" + b"x" * (size - 20) + b"\n"
    record = f"{len(record) + 10} ".encode().rjust(10, b"0") + record  # "<len> key=value\n"
    header = tarfile.TarInfo("././@PaxHeader")
    header.type, header.size = tarfile.XHDTYPE, len(record)
    member = tarfile.TarInfo("vllm-0.28.0/PKG-INFO")
    member.size = 11
    path = tmp_path / "vllm-0.28.0.tar.gz"
    comp = zlib.compressobj(1, zlib.DEFLATED, 31)
    with path.open("wb") as out:
        out.write(comp.compress(header.tobuf(format=tarfile.USTAR_FORMAT)))
        for i in range(0, len(record), 1 << 20):
            out.write(comp.compress(record[i : i + (1 << 20)]))
        out.write(comp.compress(bytes(-len(record) % 512)))
        out.write(comp.compress(member.tobuf(format=tarfile.USTAR_FORMAT)))
        out.write(comp.compress(b"Name: vllm\n".ljust(512, b"\0") + bytes(1024)))
        out.write(comp.flush())
    assert path.stat().st_size < 1 << 20
    with pytest.raises(SourceError) as info:
        archive(path).read("PKG-INFO")
    assert info.value.message == (
        f"sources.vllm.sdist: vllm-0.28.0.tar.gz has a tar header of {len(record)} bytes, more "
        "than the 1048576 a header may have"
    )
