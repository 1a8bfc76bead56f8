"""Source distributions: which index file is a project's sdist, and reading files out of a
verified one.

``is_sdist_of`` matches ``<name>-<version>.tar.gz`` (PEP 625: the name normalized with ``_``,
the version in normal form), and also a legacy unnormalized name (``vLLM-0.28.0.tar.gz``).

``SdistArchive`` reads members of a downloaded sdist by their path inside the project
(``requirements/common.txt`` is the member ``<top>/requirements/common.txt``, ``<top>`` being
the filename without ``.tar.gz``). Every pass over the archive re-hashes the whole file and
nothing read is returned unless the bytes are the ones locked; the file, the member, each tar
header (a pax or GNU long-name header is read whole into memory by ``tarfile``, so one that
claims a gigabyte is refused before it is read) and the unpacked total are bounded; links and
anything else that is not a regular file are refused. Nothing is ever extracted to disk.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.utils import InvalidSdistFilename, NormalizedName, parse_sdist_filename
from packaging.version import InvalidVersion, Version

from core.errors import HashMismatchError, SourceError
from core.filenames import filename_problem

SDIST_SUFFIX = ".tar.gz"
MAX_SDIST_BYTES = 512 << 20  # a larger file is refused before it is read
MAX_MEMBER_BYTES = 1 << 20  # a file read out of an sdist (a requirements file)
MAX_UNPACKED_BYTES = 4 << 30  # the members together (vLLM 0.28.0's sdist: about 200 MB)
MAX_MEMBERS = 200_000
MAX_HEADER_BYTES = 1 << 20  # a pax or GNU long-name header (real ones are under a kilobyte)
_HEADER_TYPES = (
    *(tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE),
    *(tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK),
)


def sdist_filename(project: str, version: Version) -> str:
    """The PEP 625 filename of ``project``'s sdist of ``version``."""
    return f"{re.sub(r'[-_.]+', '_', project).lower()}-{version}{SDIST_SUFFIX}"


def is_sdist_of(filename: str, project: NormalizedName, version: Version) -> bool:
    """``filename`` is a ``.tar.gz`` sdist of exactly ``project`` ``version`` (the normalized
    PEP 625 name, or a legacy unnormalized spelling of it)."""
    if not filename.endswith(SDIST_SUFFIX) or filename_problem(filename) is not None:
        return False  # a name that could be read as a path is never anyone's sdist
    if filename == sdist_filename(project, version):
        return True
    try:
        name, found = parse_sdist_filename(filename)
    except (InvalidSdistFilename, InvalidVersion):
        return False
    return name == project and found == version


@dataclass(frozen=True)
class _Member:
    kind: str  # file | link | other
    size: int
    count: int  # how many members have this name


class _HashingReader:
    """A read-only file object that hashes and counts every byte read through it."""

    def __init__(self, raw: IO[bytes], limit: int) -> None:
        self.raw = raw
        self.limit = limit
        self.digest = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.size += len(data)
        if self.size > self.limit:
            raise _TooLargeError
        self.digest.update(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass


class _TooLargeError(Exception):
    pass


class _HeaderTooLargeError(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class BoundedTarInfo(tarfile.TarInfo):
    """A ``TarInfo`` that refuses a pax or GNU long-name header bigger than
    ``MAX_HEADER_BYTES`` before ``tarfile`` reads it into memory (``tarinfo=`` of
    ``tarfile.open``)."""

    def _proc_member(self, tar: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _HEADER_TYPES and self.size > MAX_HEADER_BYTES:
            raise _HeaderTooLargeError(self.size)
        member: tarfile.TarInfo = super()._proc_member(tar)  # type: ignore[misc]
        return member


class SdistArchive:
    """The verified sdist at ``path`` (``filename`` as the index named it, ``sha256`` as
    locked); ``where`` names it in messages (``sources.vllm.sdist``)."""

    def __init__(self, path: Path, *, filename: str, sha256: str, where: str) -> None:
        self.path = path
        self.filename = filename
        self.sha256 = sha256
        self.where = where
        self.top = filename.removesuffix(SDIST_SUFFIX)
        self._members: dict[str, _Member] | None = None
        self._contents: dict[str, bytes] = {}
        self._read_dirs: set[str] = set()

    def prime(self, paths: Iterable[str]) -> None:
        """Read the directories of ``paths`` in one pass (the files a caller will ask for)."""
        dirs = {p.rpartition("/")[0] for p in paths} - self._read_dirs
        if dirs or self._members is None:
            self._pass(dirs)

    def read(self, path: str) -> bytes | None:
        """The bytes of the regular file ``path`` of the project; None if there is none."""
        if path in self._contents:
            return self._contents[path]
        directory = path.rpartition("/")[0]
        if self._members is None or directory not in self._read_dirs:
            self._pass({directory})
        assert self._members is not None
        member = self._members.get(path)
        if member is None:
            return None
        name = f"{self.top}/{path}"
        if member.count > 1:
            raise SourceError(
                f"{self.where}: {self.filename} holds {name} {member.count} times",
                hint="a well-formed sdist has each file once; do not build from this one",
            )
        if member.kind != "file":
            raise SourceError(
                f"{self.where}: {name} in {self.filename} is a {member.kind}, not a regular file",
                hint="files are read from an sdist only when they are regular files",
            )
        if member.size > MAX_MEMBER_BYTES:
            raise SourceError(
                f"{self.where}: {name} in {self.filename} has {member.size} bytes, more than "
                f"{MAX_MEMBER_BYTES}"
            )
        return self._contents[path]

    def _pass(self, dirs: set[str]) -> None:
        """One pass over the whole archive, re-hashing it: the member list, and the small
        regular files directly in ``dirs``."""
        size = self.path.stat().st_size
        if size > MAX_SDIST_BYTES:
            raise SourceError(
                f"{self.where}: {self.filename} has {size} bytes, more than an sdist may have "
                f"({MAX_SDIST_BYTES})"
            )
        members: dict[str, _Member] = {}
        contents: dict[str, bytes] = {}
        prefix = self.top + "/"
        unpacked = 0
        with self.path.open("rb") as raw:
            reader = _HashingReader(raw, MAX_SDIST_BYTES)
            try:
                with tarfile.open(  # type: ignore[call-overload]
                    fileobj=reader, mode="r|gz", tarinfo=BoundedTarInfo
                ) as tar:
                    for info in tar:
                        if len(members) >= MAX_MEMBERS:
                            raise SourceError(
                                f"{self.where}: {self.filename} has more than {MAX_MEMBERS} members"
                            )
                        unpacked += max(info.size, 0)
                        if unpacked > MAX_UNPACKED_BYTES:
                            raise SourceError(
                                f"{self.where}: {self.filename} unpacks to more than "
                                f"{MAX_UNPACKED_BYTES} bytes"
                            )
                        name = info.name.removeprefix("./")
                        if not name.startswith(prefix):
                            continue
                        rel = name[len(prefix) :].rstrip("/")
                        kind = (
                            "file"
                            if info.isreg()
                            else "link"
                            if info.issym() or info.islnk()
                            else "directory"
                            if info.isdir()
                            else "special file"
                        )
                        old = members.get(rel)
                        members[rel] = _Member(kind, info.size, (old.count if old else 0) + 1)
                        if (
                            kind == "file"
                            and rel.rpartition("/")[0] in dirs
                            and info.size <= MAX_MEMBER_BYTES
                        ):
                            fh = tar.extractfile(info)
                            assert fh is not None
                            contents[rel] = fh.read()
                reader.drain()
            except _TooLargeError:
                raise SourceError(
                    f"{self.where}: {self.filename} grew past {MAX_SDIST_BYTES} bytes while "
                    "being read"
                ) from None
            except _HeaderTooLargeError as exc:
                self._check_hash(reader, size)  # a corrupted cache file: say so
                raise SourceError(
                    f"{self.where}: {self.filename} has a tar header of {exc.size} bytes, more "
                    f"than the {MAX_HEADER_BYTES} a header may have",
                    hint="no real sdist has headers this big; do not build from this one",
                ) from None
            except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
                self._check_hash(reader, size)  # a corrupted cache file: say so
                raise SourceError(
                    f"{self.where}: {self.filename} is not a readable .tar.gz: {exc}"
                ) from None
            self._check_hash(reader, size)
        self._members = members
        self._contents.update(contents)
        self._read_dirs |= dirs

    def _check_hash(self, reader: _HashingReader, size: int) -> None:
        with contextlib.suppress(_TooLargeError):
            reader.drain()
        got = reader.digest.hexdigest()
        if got != self.sha256 or reader.size != size:
            raise HashMismatchError(
                f"{self.where}: the cached copy of {self.filename} ({self.path}) hashes to "
                f"{got}, but the lock has sha256 {self.sha256}",
                hint="the cache file changed after it was verified; delete it and lock again",
            )
