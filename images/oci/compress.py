"""Layer compression: one gzip member, compressed block by block on every core, with the
same bytes whatever the number of cores (docs/design.md, "At the real image's scale").

``Compressor`` is what decides a layer's gzip bytes: the backend library (and its version,
read at run time), the level and the block size; ``ident`` spells it for cache keys and build
reports. ``GzipBlockWriter`` writes the way pigz does: blocks of exactly ``block_size`` bytes by
offset, each raw-deflated with the previous block's last 32 KiB as its dictionary and ended
with a sync flush, so each block can be compressed on its own thread (the backends release the
GIL). The backends: ``zlib-ng`` (the default, a dependency), ``zlib`` (its bytes follow the
host's libz) and ``isal``, for ``bench.compressors`` only: its bytes depend on the CPU.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import os
import struct
import zlib
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from core.errors import ImageLayoutError

MIN_BLOCK_SIZE = 64 * 1024
WINDOW = 32 * 1024  # deflate's window: the dictionary each block gets from the one before
# ID1 ID2, CM=deflate, FLG=0, MTIME=0, XFL=0, OS=255: what gzip.GzipFile(filename="",
# mtime=0) writes at level 6
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
_MEM_LEVEL = 8  # zlib's default, as gzip.GzipFile and pigz use


class BinarySink(Protocol):
    """Where the gzip bytes go: a binary file, or anything with its ``write``."""

    def write(self, data: bytes, /) -> object: ...


@dataclass(frozen=True)
class _Backend:
    module: str  # imported when first used
    levels: range
    version: Callable[[ModuleType], str]  # the library's run-time version(s), for ident
    install: str  # the hint when the module is missing


def _isal_version(mod: ModuleType) -> str:
    isal = importlib.import_module("isal")
    return f"{isal.__version__}+isa-l-{isal.ISAL_VERSION}"


_BACKENDS: dict[str, _Backend] = {
    "zlib": _Backend("zlib", range(10), lambda m: str(m.ZLIB_RUNTIME_VERSION), "(stdlib)"),
    # not a dependency, not for layers: its bytes depend on the CPU (module docstring)
    "isal": _Backend("isal.isal_zlib", range(4), _isal_version, "pip install isal"),
    "zlib-ng": _Backend(
        "zlib_ng.zlib_ng",
        range(10),
        lambda m: f"{importlib.import_module('zlib_ng').__version__}+{m.ZLIBNG_VERSION}",
        "reinstall the tool: zlib-ng is one of its dependencies",
    ),
}


def _module(backend: str) -> ModuleType:
    return importlib.import_module(_BACKENDS[backend].module)


@dataclass(frozen=True, kw_only=True)
class Compressor:
    """How layers are gzipped: ``backend`` (a key of the backend table), ``level`` (in the
    backend's range) and ``block_size`` (bytes of uncompressed input per block, at least
    64 KiB). Refused with an ``ImageLayoutError`` naming the bad value."""

    backend: str
    level: int
    block_size: int = 1024 * 1024

    def __post_init__(self) -> None:
        table = _BACKENDS.get(self.backend)
        if table is None:
            raise ImageLayoutError(
                f"unknown gzip backend {self.backend!r}",
                hint=f"use one of {', '.join(sorted(_BACKENDS))}",
            )
        if self.level not in table.levels:
            raise ImageLayoutError(
                f"gzip level {self.level} is outside {self.backend}'s range "
                f"{table.levels.start}-{table.levels.stop - 1}",
                hint=f"choose a level from {table.levels.start} to {table.levels.stop - 1}",
            )
        if self.block_size < MIN_BLOCK_SIZE:
            raise ImageLayoutError(
                f"gzip block size {self.block_size} is below {MIN_BLOCK_SIZE} bytes (64 KiB)",
                hint="blocks must be larger than deflate's 32 KiB window; 1 MiB is the default",
            )
        try:
            _module(self.backend)
        except ImportError:
            raise ImageLayoutError(
                f"gzip backend {self.backend!r} is not installed", hint=table.install
            ) from None

    @property
    def ident(self) -> str:
        """Everything that decides the output bytes, e.g.
        ``gzip/zlib-1.2.13/level-6/block-1048576``."""
        version = _BACKENDS[self.backend].version(_module(self.backend))
        return f"gzip/{self.backend}-{version}/level-{self.level}/block-{self.block_size}"

    def deflate_block(self, block: bytes, zdict: bytes, *, last: bool) -> bytes:
        """One block as raw deflate: primed with ``zdict`` (the previous block's last 32
        KiB, empty for the first), ended with a sync flush, or finished when ``last``."""
        mod = _module(self.backend)
        args = (self.level, mod.DEFLATED, -15, _MEM_LEVEL, mod.Z_DEFAULT_STRATEGY)
        deflater = mod.compressobj(*args, zdict) if zdict else mod.compressobj(*args)
        end = mod.Z_FINISH if last else mod.Z_SYNC_FLUSH
        data: bytes = deflater.compress(block) + deflater.flush(end)
        return data


DEFAULT_COMPRESSOR = Compressor(backend="zlib-ng", level=6)


class GzipBlockWriter:
    """One gzip member written into ``sink`` pigz-style (see the module's docstring), its
    blocks compressed on ``executor`` (inline when None) and written in order, with at most
    ``max_in_flight`` blocks submitted and not yet written (default: 2 x cores + 2 with an
    executor). Hashes and counts what it writes; ``close`` gives (``sha256:<hex>``, size)."""

    def __init__(
        self,
        sink: BinarySink,
        compressor: Compressor = DEFAULT_COMPRESSOR,
        *,
        executor: Executor | None = None,
        max_in_flight: int | None = None,
    ) -> None:
        self._sink: BinarySink | None = sink
        self._compressor = compressor
        self._executor = executor
        if max_in_flight is None:
            max_in_flight = 1 if executor is None else 2 * (os.cpu_count() or 1) + 2
        self._max_in_flight = max(1, max_in_flight)
        self._pending: collections.deque[Future[bytes]] = collections.deque()
        self._buffer = bytearray()
        self._zdict = b""
        self._crc = 0
        self._length = 0
        self._hash = hashlib.sha256()
        self._size = 0
        self._emit(GZIP_HEADER)

    def write(self, data: bytes | memoryview) -> None:
        """Add ``data`` to the stream; each block filled is submitted."""
        if self._sink is None:
            raise ValueError("write to a closed GzipBlockWriter")
        self._crc = zlib.crc32(data, self._crc)
        self._length += len(data)
        self._buffer += data
        size = self._compressor.block_size
        while len(self._buffer) >= size:
            block = bytes(self._buffer[:size])
            del self._buffer[:size]
            self._submit(block, last=False)

    def close(self) -> tuple[str, int]:
        """Finish the stream (the last block, then CRC32 and ISIZE): the sha256 of the gzip
        bytes written (``sha256:<hex>``) and their number."""
        if self._sink is None:
            raise ValueError("close of a closed GzipBlockWriter")
        self._submit(bytes(self._buffer), last=True)
        self._buffer = bytearray()
        while self._pending:
            self._emit(self._pending.popleft().result())
        self._emit(struct.pack("<II", self._crc, self._length & 0xFFFFFFFF))
        self._sink = None
        return "sha256:" + self._hash.hexdigest(), self._size

    def abandon(self) -> None:
        """Give the stream up after a failure: pending blocks are cancelled or ignored and
        nothing more is written to the sink."""
        self._sink = None
        for future in self._pending:
            future.cancel()
        self._pending.clear()
        self._buffer = bytearray()

    def _submit(self, block: bytes, *, last: bool) -> None:
        zdict, self._zdict = self._zdict, block[-WINDOW:]
        if self._executor is None:
            self._emit(self._compressor.deflate_block(block, zdict, last=last))
            return
        while len(self._pending) >= self._max_in_flight:
            self._emit(self._pending.popleft().result())
        deflate = self._compressor.deflate_block
        self._pending.append(self._executor.submit(deflate, block, zdict, last=last))
        while self._pending and self._pending[0].done():  # write what is ready, in order
            self._emit(self._pending.popleft().result())

    def _emit(self, data: bytes) -> None:
        assert self._sink is not None
        self._hash.update(data)
        self._size += len(data)
        self._sink.write(data)
