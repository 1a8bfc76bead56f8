"""The block-parallel gzip writer: valid gzip, the same bytes whatever the executor and the
write chunking, blocks cut by offset, the digest of what it wrote, abandon, bounded work in
flight; the compressor's ident and validation."""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import struct
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import zlib_ng as zlib_ng_package
from zlib_ng import zlib_ng

from core.errors import ImageLayoutError
from images.oci.compress import (
    DEFAULT_COMPRESSOR,
    GZIP_HEADER,
    WINDOW,
    Compressor,
    GzipBlockWriter,
)

BLOCK = 64 * 1024
SMALL = Compressor(backend="zlib", level=6, block_size=BLOCK)
_T = TypeVar("_T")


def _data(size: int, seed: int = 0) -> bytes:
    """Text-like runs mixed with random bytes: compressible, with matches across blocks."""
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    words = [rng.randbytes(rng.randint(3, 12)) for _ in range(300)]
    out = bytearray()
    while len(out) < size:
        if rng.random() < 0.2:
            out += rng.randbytes(rng.randint(1, 4000))
        else:
            out += b" ".join(rng.choices(words, k=rng.randint(1, 50)))
    return bytes(out[:size])


def _chunks(data: bytes, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)  # noqa: S311 (test data, not secrets)
    at = 0
    while at < len(data):
        n = rng.choice([1, 7, 512, 4096, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5])
        yield data[at : at + n]
        at += n


def _gzip(
    data: bytes,
    compressor: Compressor = SMALL,
    *,
    executor: Executor | None = None,
    chunk_seed: int | None = None,
    max_in_flight: int | None = None,
) -> bytes:
    sink = io.BytesIO()
    writer = GzipBlockWriter(sink, compressor, executor=executor, max_in_flight=max_in_flight)
    for chunk in [data] if chunk_seed is None else _chunks(data, chunk_seed):
        writer.write(chunk)
    digest, size = writer.close()
    out = sink.getvalue()
    assert digest == "sha256:" + hashlib.sha256(out).hexdigest()
    assert size == len(out)
    return out


def _reference(data: bytes, compressor: Compressor, module: Any) -> bytes:
    """pigz's layout spelled out with ``module`` (zlib's API): header, blocks by offset (each
    primed with the last 32 KiB of the one before, sync-flushed, the last finished), CRC32
    and ISIZE."""
    size = compressor.block_size
    blocks = [data[i : i + size] for i in range(0, len(data), size)]
    if not blocks or len(blocks[-1]) == size:
        blocks.append(b"")
    out = bytearray(GZIP_HEADER)
    previous = b""
    for n, block in enumerate(blocks):
        extra = {"zdict": previous[-WINDOW:]} if previous else {}
        deflate = module.compressobj(compressor.level, zlib.DEFLATED, -15, 8, 0, **extra)
        last = n == len(blocks) - 1
        out += deflate.compress(block) + deflate.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)
        previous = block
    return bytes(out + struct.pack("<II", zlib.crc32(data), len(data) & 0xFFFFFFFF))


@pytest.fixture(scope="module")
def pool4() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


SIZES = [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 3 * BLOCK + 17, 5 * BLOCK - 1]


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_through_gzip_and_zlib(size: int, pool4: ThreadPoolExecutor) -> None:
    data = _data(size)
    out = _gzip(data, executor=pool4, chunk_seed=size)
    assert gzip.decompress(out) == data
    inflate = zlib.decompressobj(31)
    assert inflate.decompress(out) == data
    assert inflate.eof
    assert inflate.unused_data == b""


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize(("backend", "module"), [("zlib", zlib), ("zlib-ng", zlib_ng)])
def test_blocks_are_cut_by_offset_as_pigz_does(size: int, backend: str, module: Any) -> None:
    compressor = Compressor(backend=backend, level=6, block_size=BLOCK)
    data = _data(size, seed=1)
    assert _gzip(data, compressor) == _reference(data, compressor, module)


@pytest.mark.parametrize("seed", range(6))
def test_same_bytes_whatever_the_executor_and_the_chunking(
    seed: int, pool4: ThreadPoolExecutor
) -> None:
    size = random.Random(seed).randint(0, 7 * BLOCK)  # noqa: S311 (test data, not secrets)
    data = _data(size, seed=seed)
    expected = _gzip(data)
    with ThreadPoolExecutor(max_workers=1) as pool1:
        assert _gzip(data, executor=pool1, chunk_seed=seed) == expected
    assert _gzip(data, executor=pool4, chunk_seed=seed + 100) == expected
    assert _gzip(data, executor=pool4, chunk_seed=seed, max_in_flight=1) == expected
    assert _gzip(data, chunk_seed=seed + 200) == expected


def test_an_empty_stream_is_a_valid_gzip_of_nothing(pool4: ThreadPoolExecutor) -> None:
    out = _gzip(b"", DEFAULT_COMPRESSOR)
    assert out.startswith(GZIP_HEADER)
    assert gzip.decompress(out) == b""
    assert _gzip(b"", DEFAULT_COMPRESSOR, executor=pool4) == out


def test_close_gives_the_sha256_and_size_of_the_files_bytes(
    tmp_path: Path, pool4: ThreadPoolExecutor
) -> None:
    data = _data(6 * BLOCK + 321, seed=8)
    path = tmp_path / "layer.tar.gz"
    with path.open("wb") as fh:
        writer = GzipBlockWriter(fh, executor=pool4)
        for chunk in _chunks(data, 8):
            writer.write(chunk)
        digest, size = writer.close()
    out = path.read_bytes()
    assert (digest, size) == ("sha256:" + hashlib.sha256(out).hexdigest(), len(out))
    assert gzip.decompress(out) == data
    trailer = struct.unpack("<II", out[-8:])
    assert trailer == (zlib.crc32(data), len(data))


def test_header_matches_gzipfile_at_level_6() -> None:
    plain = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=plain, mtime=0, compresslevel=6) as gz:
        gz.write(b"x")
    assert plain.getvalue()[: len(GZIP_HEADER)] == GZIP_HEADER


def test_memoryview_writes_give_the_same_bytes() -> None:
    data = _data(3 * BLOCK + 5, seed=3)
    sink = io.BytesIO()
    writer = GzipBlockWriter(sink, SMALL)
    view = memoryview(data)
    for at in range(0, len(data), 10_000):
        writer.write(view[at : at + 10_000])
    writer.close()
    assert sink.getvalue() == _gzip(data)


class _LazyFuture(Future[Any]):
    """Runs its call only when its result is asked for: never done before that."""

    def __init__(self, call: Callable[[], Any], pending: list[_LazyFuture]) -> None:
        super().__init__()
        self._call = call
        self._pending = pending

    def result(self, timeout: float | None = None) -> Any:
        if not self.done():
            self._pending.remove(self)
            self.set_result(self._call())
        return super().result(timeout)


class _LazyExecutor(Executor):
    """Holds every submitted call until its result is asked for; records the most held."""

    def __init__(self) -> None:
        self.pending: list[_LazyFuture] = []
        self.most = 0

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]:
        future = _LazyFuture(lambda: fn(*args, **kwargs), self.pending)
        self.pending.append(future)
        self.most = max(self.most, len(self.pending))
        return future


@pytest.mark.parametrize("bound", [1, 2, 5])
def test_blocks_in_flight_are_bounded(bound: int) -> None:
    data = _data(20 * BLOCK + 3, seed=4)
    executor = _LazyExecutor()
    assert _gzip(data, executor=executor, max_in_flight=bound) == _gzip(data)
    assert executor.most == bound
    assert not executor.pending


def test_abandon_writes_nothing_more() -> None:
    executor = _LazyExecutor()
    sink = io.BytesIO()
    writer = GzipBlockWriter(sink, SMALL, executor=executor, max_in_flight=4)
    writer.write(_data(3 * BLOCK + 100, seed=5))
    held = list(executor.pending)
    assert len(held) == 3
    before = sink.getvalue()
    assert before == GZIP_HEADER  # nothing compressed yet: every block is held
    writer.abandon()
    assert sink.getvalue() == before
    assert all(future.cancelled() for future in held)
    with pytest.raises(ValueError, match="closed"):
        writer.write(b"more")
    with pytest.raises(ValueError, match="closed"):
        writer.close()
    assert sink.getvalue() == before


def test_abandon_with_a_real_pool_writes_nothing_more(pool4: ThreadPoolExecutor) -> None:
    sink = io.BytesIO()
    writer = GzipBlockWriter(sink, SMALL, executor=pool4)
    writer.write(_data(9 * BLOCK, seed=6))
    before = sink.getvalue()
    writer.abandon()
    pool4.submit(int).result()  # let the pool run what it had
    assert sink.getvalue() == before


def test_ident_names_the_zlib_run_time_version() -> None:
    compressor = Compressor(backend="zlib", level=6)
    assert compressor.block_size == 1024 * 1024
    assert compressor.ident == f"gzip/zlib-{zlib.ZLIB_RUNTIME_VERSION}/level-6/block-1048576"
    assert Compressor(backend="zlib", level=1).ident != compressor.ident


def test_the_default_is_zlib_ng_level_6_and_its_ident_names_both_versions() -> None:
    assert Compressor(backend="zlib-ng", level=6) == DEFAULT_COMPRESSOR
    versions = f"{zlib_ng_package.__version__}+{zlib_ng.ZLIBNG_VERSION}"
    assert DEFAULT_COMPRESSOR.ident == f"gzip/zlib-ng-{versions}/level-6/block-1048576"


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"backend": "zlib", "level": 10}, "level 10"),
        ({"backend": "zlib", "level": -1}, "level -1"),
        ({"backend": "zlib", "level": 6, "block_size": 65535}, "65535"),
        ({"backend": "zlib", "level": 6, "block_size": 0}, "block size 0"),
        ({"backend": "brotli", "level": 6}, "'brotli'"),
    ],
)
def test_compressor_refuses_bad_values(kwargs: dict[str, Any], named: str) -> None:
    with pytest.raises(ImageLayoutError) as caught:
        Compressor(**kwargs)
    assert named in caught.value.message
    assert caught.value.hint


def test_smallest_block_size_is_accepted() -> None:
    assert Compressor(backend="zlib", level=0, block_size=64 * 1024).block_size == 65536


def test_isal_when_installed(pool4: ThreadPoolExecutor) -> None:
    """Measured by bench.compressors only (its bytes depend on the CPU), but it must work."""
    pytest.importorskip("isal")
    compressor = Compressor(backend="isal", level=2, block_size=BLOCK)
    assert compressor.ident.startswith("gzip/isal-")
    data = _data(4 * BLOCK + 9, seed=7)
    out = _gzip(data, compressor)
    assert gzip.decompress(out) == data
    assert _gzip(data, compressor, executor=pool4, chunk_seed=7) == out
    with pytest.raises(ImageLayoutError, match="level 4"):
        Compressor(backend="isal", level=4)
