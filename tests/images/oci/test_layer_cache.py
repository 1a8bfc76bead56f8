"""The layer cache: a blob put is taken back byte for byte; a damaged entry is refused at use,
removed and reported; the least recently used entries are evicted; bad keys and blobs that
are not their record's are refused."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from core.errors import ImageLayoutError
from images.oci.layer_cache import CachedLayer, LayerCache, layer_key

KEY_A, KEY_B, KEY_C, KEY_D = ("a" * 64, "b" * 64, "c" * 64, "d" * 64)


def _layer(data: bytes, *, dropped: tuple[str, ...] = ()) -> CachedLayer:
    return CachedLayer(
        digest="sha256:" + hashlib.sha256(data).hexdigest(),
        diff_id="sha256:" + "1" * 64,
        size=len(data),
        entries=3,
        dropped=dropped,
    )


def _blob(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / "spool" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


class Cache:
    """A cache under ``tmp_path``, what it noted, and helpers to put and take."""

    def __init__(self, tmp_path: Path, *, max_bytes: int = 1 << 20) -> None:
        self.tmp = tmp_path
        self.notes: list[str] = []
        self.cache = LayerCache(tmp_path / "layers", max_bytes=max_bytes, note=self.notes.append)

    def put(self, key: str, data: bytes) -> CachedLayer:
        layer = _layer(data)
        self.cache.put(key, layer, _blob(self.tmp, f"{key}-{layer.digest[7:]}", data))
        return layer

    def take(self, key: str) -> tuple[CachedLayer | None, Path]:
        dest = self.tmp / "out" / key
        dest.parent.mkdir(exist_ok=True)
        return self.cache.take(key, dest), dest

    def entry(self, key: str) -> Path:
        return self.tmp / "layers" / key[:2] / key

    def total_bytes(self) -> int:
        """The size of the blobs of the entries, together."""
        return sum(p.stat().st_size for p in (self.tmp / "layers").glob("??/*/blob"))


@pytest.fixture
def cache(tmp_path: Path) -> Cache:
    return Cache(tmp_path)


def test_put_then_take_gives_the_same_bytes_and_record(cache: Cache) -> None:
    data = b"gzip bytes" * 1000
    layer = _layer(data, dropped=("var/log/apt/term.log", "var/log/dpkg.log"))
    cache.cache.put(KEY_A, layer, _blob(cache.tmp, "a", data))
    got, dest = cache.take(KEY_A)
    assert got == layer
    assert dest.read_bytes() == data
    entry = cache.entry(KEY_A)
    assert sorted(p.name for p in entry.iterdir()) == ["blob", "layer.json"]
    assert json.loads((entry / "layer.json").read_bytes()) == {
        "diff_id": layer.diff_id,
        "digest": layer.digest,
        "dropped": ["var/log/apt/term.log", "var/log/dpkg.log"],
        "entries": 3,
        "schema": "build-image/layer-record/1",
        "size": len(data),
    }
    assert (entry / "blob").stat().st_mode & 0o777 == 0o444
    assert cache.total_bytes() == len(data)
    assert cache.notes == []
    assert sorted(p.name for p in (cache.tmp / "layers").iterdir()) == ["aa", "tmp"]
    assert list((cache.tmp / "layers" / "tmp").iterdir()) == []


def test_a_key_not_there_is_a_miss(cache: Cache) -> None:
    assert cache.take(KEY_A) == (None, cache.tmp / "out" / KEY_A)
    assert not (cache.tmp / "out" / KEY_A).exists()
    assert cache.notes == []


def test_take_copies_where_a_hard_link_cannot_be_made(
    cache: Cache, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache.put(KEY_A, b"x" * 5000)

    def no_link(*_args: object, **_kw: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    layer, dest = cache.take(KEY_A)
    assert layer is not None
    assert dest.read_bytes() == b"x" * 5000
    assert dest.stat().st_ino != (cache.entry(KEY_A) / "blob").stat().st_ino


def test_take_refuses_a_destination_that_exists(cache: Cache) -> None:
    cache.put(KEY_A, b"x")
    dest = cache.tmp / "taken"
    dest.write_bytes(b"mine")
    with pytest.raises(FileExistsError):
        cache.cache.take(KEY_A, dest)
    assert dest.read_bytes() == b"mine"
    assert cache.entry(KEY_A).is_dir()


def test_layer_key_is_the_sha256_of_the_canonical_parts() -> None:
    parts: dict[str, str | int | list[str]] = {
        "chain": ["sha256:" + "1" * 64, "sha256:" + "2" * 64],
        "clamp": 1700000000,
        "drop": "rules-1",
        "compressor": "gzip-6",
    }
    key = layer_key(**parts)
    canonical = (
        b'{"chain":["sha256:' + b"1" * 64 + b'","sha256:' + b"2" * 64 + b'"],'
        b'"clamp":1700000000,"compressor":"gzip-6","drop":"rules-1"}'
    )
    assert key == hashlib.sha256(canonical).hexdigest()
    assert layer_key(**dict(reversed(parts.items()))) == key
    assert layer_key(**{**parts, "chain": ("sha256:" + "1" * 64, "sha256:" + "2" * 64)}) == key
    others = [
        {**parts, "chain": ["sha256:" + "2" * 64, "sha256:" + "1" * 64]},
        {**parts, "chain": ["sha256:" + "1" * 64]},
        {**parts, "clamp": 1700000001},
        {**parts, "clamp": "1700000000"},
        {**parts, "drop": "rules-2"},
        {**parts, "compressor": "zstd"},
        {**parts, "extra": "x"},
    ]
    keys = {layer_key(**other) for other in others}
    assert len(keys) == len(others)
    assert key not in keys


def _flip_one_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.chmod(0o644)
    path.write_bytes(b"x" * 100)


def _symlink(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent.parent.parent / "good")


def _directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(
            _flip_one_byte,
            "its blob hashes to {flipped}, its record says {digest}",
            id="one-byte-flipped",
        ),
        pytest.param(_truncate, "its blob has 100 bytes, its record says 4000", id="truncated"),
        pytest.param(Path.unlink, "it has no blob", id="missing"),
        pytest.param(_symlink, "its blob cannot be read: it is a symbolic link", id="symlink"),
        pytest.param(_directory, "its blob is not a regular file", id="directory"),
        pytest.param(_fifo, "its blob is not a regular file", id="fifo"),
    ],
)
def test_a_damaged_blob_is_refused_removed_and_reported(
    cache: Cache, damage: Callable[[Path], object], reason: str
) -> None:
    data = bytes(range(250)) * 16
    layer = cache.put(KEY_A, data)
    (cache.tmp / "layers" / "good").write_bytes(data)  # what a symbolic link points to
    blob = cache.entry(KEY_A) / "blob"
    damage(blob)
    flipped = "sha256:" + hashlib.sha256(blob.read_bytes()).hexdigest() if blob.is_file() else ""
    got, dest = cache.take(KEY_A)
    assert got is None
    assert not os.path.lexists(dest)
    assert not os.path.lexists(cache.entry(KEY_A))
    shown = reason.format(flipped=flipped, digest=layer.digest)
    assert cache.notes == [
        f"note: layer cache entry {cache.entry(KEY_A)}: {shown}; removed it from the cache"
    ]
    assert list((cache.tmp / "layers" / "tmp").iterdir()) == []
    cache.put(KEY_A, data)  # made again, and taken again
    assert cache.take(KEY_A)[0] == layer


def test_a_damaged_record_is_refused_removed_and_reported(cache: Cache) -> None:
    layer = cache.put(KEY_A, b"x" * 10)
    record = cache.entry(KEY_A) / "layer.json"
    cases = [
        (b"{", f"layer record {record} is not valid JSON: Expecting property name enclosed "
         "in double quotes: line 1 column 2 (char 1)"),
        (json.dumps({**layer.to_json(), "size": "10"}).encode(),
         f"layer record {record}: its size '10' is not a count"),
        (json.dumps({**layer.to_json(), "schema": "x/2"}).encode(),
         f"layer record {record}: its schema is 'x/2', not 'build-image/layer-record/1'"),
        (json.dumps({**layer.to_json(), "digest": "sha256:" + "A" * 64}).encode(),
         f"layer record {record}: its digest 'sha256:{'A' * 64}' is not a sha256 digest"),
        (json.dumps({**layer.to_json(), "more": 1}).encode(),
         f"layer record {record}: its keys are ['diff_id', 'digest', 'dropped', 'entries', "
         "'more', 'schema', 'size'], not ['diff_id', 'digest', 'dropped', 'entries', "
         "'schema', 'size']"),
        (b"[]", f"layer record {record}: it is not a JSON object"),
    ]  # fmt: skip
    for data, message in cases:
        cache.notes.clear()
        cache.put(KEY_A, b"x" * 10)
        record.write_bytes(data)
        assert cache.take(KEY_A)[0] is None
        assert not cache.entry(KEY_A).exists()
        assert cache.notes == [
            f"note: layer cache entry {cache.entry(KEY_A)}: {message}; removed it from the cache"
        ]


def test_a_record_that_is_a_symbolic_link_is_not_followed(cache: Cache) -> None:
    layer = cache.put(KEY_A, b"x" * 10)
    record = cache.entry(KEY_A) / "layer.json"
    good = cache.tmp / "good.json"
    good.write_bytes(record.read_bytes())
    record.unlink()
    record.symlink_to(good)
    assert cache.take(KEY_A)[0] is None
    assert cache.notes == [
        f"note: layer cache entry {cache.entry(KEY_A)}: its record is not a regular file; "
        "removed it from the cache"
    ]
    assert json.loads(good.read_bytes()) == layer.to_json()


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        pytest.param(Path.unlink, "it has no record", id="missing"),
        pytest.param(_fifo, "its record is not a regular file", id="fifo"),
        pytest.param(_directory, "its record is not a regular file", id="directory"),
    ],
)
def test_a_missing_record_or_a_fifo_is_refused(
    cache: Cache, damage: Callable[[Path], object], reason: str
) -> None:
    cache.put(KEY_A, b"x" * 10)
    damage(cache.entry(KEY_A) / "layer.json")
    assert cache.take(KEY_A)[0] is None
    assert cache.notes == [
        f"note: layer cache entry {cache.entry(KEY_A)}: {reason}; removed it from the cache"
    ]


def test_an_entry_that_is_a_symbolic_link_is_not_followed(cache: Cache) -> None:
    cache.put(KEY_A, b"x" * 10)
    elsewhere = cache.tmp / "elsewhere"
    cache.entry(KEY_A).rename(elsewhere)
    cache.entry(KEY_A).symlink_to(elsewhere)
    assert cache.take(KEY_A)[0] is None
    assert cache.notes == [
        f"note: layer cache entry {cache.entry(KEY_A)}: it is not a directory; removed it "
        "from the cache"
    ]
    assert (elsewhere / "blob").read_bytes() == b"x" * 10


def test_the_least_recently_used_entries_are_evicted_first(tmp_path: Path) -> None:
    cache = Cache(tmp_path, max_bytes=300)
    for key in (KEY_A, KEY_B, KEY_C):
        cache.put(key, key[0].encode() * 100)
    assert cache.total_bytes() == 300
    assert cache.take(KEY_A)[0] is not None  # now B is the least recently used
    cache.put(KEY_D, b"d" * 100)
    root = tmp_path / "layers"
    assert sorted(p.name for p in root.iterdir()) == ["aa", "bb", "cc", "dd", "tmp"]
    assert [k for k in (KEY_A, KEY_B, KEY_C, KEY_D) if cache.entry(k).exists()] == [
        KEY_A,
        KEY_C,
        KEY_D,
    ]
    assert cache.notes == [
        f"note: layer cache {root}: removed the 1 entry used least recently (100 bytes) to "
        "keep it within 300 bytes"
    ]
    cache.put(KEY_B, b"b" * 250)  # C, then A go; D stays: 100 + 250 > 300, so does A
    assert [k for k in (KEY_A, KEY_B, KEY_C, KEY_D) if cache.entry(k).exists()] == [KEY_B]
    assert cache.notes[1:] == [
        f"note: layer cache {root}: removed the 3 entries used least recently (300 bytes) to "
        "keep it within 300 bytes"
    ]
    assert cache.total_bytes() == 250


def test_an_entry_larger_than_the_bound_is_not_kept(tmp_path: Path) -> None:
    cache = Cache(tmp_path, max_bytes=99)
    layer = cache.put(KEY_A, b"a" * 100)
    assert not cache.entry(KEY_A).exists()
    assert cache.total_bytes() == 0
    assert cache.notes == [
        f"note: layer {layer.digest} (100 bytes) is larger than the layer cache "
        f"{tmp_path / 'layers'} keeps (99 bytes); not kept"
    ]


def test_the_first_entry_added_for_a_key_is_kept(cache: Cache) -> None:
    first = cache.put(KEY_A, b"first")
    cache.put(KEY_A, b"second")
    got, dest = cache.take(KEY_A)
    assert got == first
    assert dest.read_bytes() == b"first"


def test_put_refuses_a_blob_that_is_not_its_records_size(cache: Cache) -> None:
    blob = _blob(cache.tmp, "a", b"12345")
    with pytest.raises(ImageLayoutError) as caught:
        cache.cache.put(KEY_A, _layer(b"1234"), blob)
    assert caught.value.message == (
        f"layer {blob} is not cached: its blob has 5 bytes, its record says 4"
    )
    assert not cache.entry(KEY_A).exists()
    assert list((cache.tmp / "layers" / "tmp").iterdir()) == []


def test_put_refuses_a_malformed_record(cache: Cache) -> None:
    blob = _blob(cache.tmp, "a", b"1234")
    layer = CachedLayer(digest="sha256:x", diff_id="sha256:" + "1" * 64, size=4, entries=0,
                        dropped=())  # fmt: skip
    with pytest.raises(ImageLayoutError) as caught:
        cache.cache.put(KEY_A, layer, blob)
    assert caught.value.message == (
        f"layer {blob} is not cached: its record: its digest 'sha256:x' is not a sha256 digest"
    )


@pytest.mark.parametrize("key", ["../" + "a" * 61, "A" * 64, "a" * 63, "a" * 64 + "\n", ""])
def test_a_bad_key_is_refused(cache: Cache, key: str) -> None:
    message = f"{key!r} is not a layer cache key (64 lowercase hex digits)"
    calls: list[Callable[[], object]] = [
        lambda: cache.cache.take(key, cache.tmp / "x"),
        lambda: cache.cache.put(key, _layer(b"x"), _blob(cache.tmp, "x", b"x")),
    ]
    for call in calls:
        with pytest.raises(ImageLayoutError) as caught:
            call()
        assert caught.value.message == message
    assert not (cache.tmp / "layers").exists()


def test_from_json_reads_what_to_json_writes() -> None:
    layer = _layer(b"abc", dropped=("a", "b"))
    assert CachedLayer.from_json(layer.to_json(), path=Path("r.json")) == layer
    with pytest.raises(ImageLayoutError) as caught:
        CachedLayer.from_json({**layer.to_json(), "dropped": [1]}, path=Path("r.json"))
    assert caught.value.message == "layer record r.json: its dropped is not a list of strings"


def test_eviction_removes_damaged_entries_and_what_a_stopped_run_left(cache: Cache) -> None:
    cache.put(KEY_A, b"a" * 10)
    (cache.entry(KEY_A) / "blob").unlink()
    stale = cache.tmp / "layers" / "tmp" / f"{KEY_C}.x.new"
    stale.mkdir()
    (stale / "blob").write_bytes(b"c")
    os.utime(stale, (0, 0))
    fresh = cache.tmp / "layers" / "tmp" / f"{KEY_D}.x.new"
    fresh.mkdir()
    cache.put(KEY_B, b"b" * 10)
    assert not cache.entry(KEY_A).exists()
    assert cache.notes == [
        f"note: layer cache entry {cache.entry(KEY_A)}: it is not a whole entry (a blob and a "
        "record); removed it from the cache"
    ]
    assert sorted(p.name for p in (cache.tmp / "layers" / "tmp").iterdir()) == [fresh.name]
