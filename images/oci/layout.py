"""OCI image layouts on disk: ``oci-layout``, ``index.json`` and ``blobs/sha256/<hex>``.

Reading refuses a layout that is not of version 1.0.0, a digest that is not ``sha256:`` and
64 lowercase hex digits (so no digest names a path outside ``blobs/sha256``), JSON larger
than ``MAX_JSON_BYTES``, a blob that is a symbolic link, and a blob whose size or sha256 is not
what its descriptor and name say: blobs are hashed as they are read (``open_blob``). Writing
builds the layout next to its directory and swaps it in whole (``write_layout``); all JSON is
canonical (``canonical_json``). Every refusal is an ``ImageLayoutError`` naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import itertools
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from core.digests import is_digest
from core.errors import ImageLayoutError
from core.fsutil import swap_directory
from images.oci.tarstream import CHUNK

MAX_JSON_BYTES = 4 * 1024 * 1024  # a manifest, a config, index.json: far below this

LAYOUT_VERSION = "1.0.0"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
REF_NAME = "org.opencontainers.image.ref.name"

HINT_DAMAGED = (
    "the layout is damaged: write it again (normalize the image again), or copy it again "
    "from where it came from"
)


@dataclass(frozen=True, kw_only=True)
class Descriptor:
    """An OCI content descriptor: what a blob is, its digest and its size in bytes."""

    media_type: str
    digest: str  # sha256:<64 hex>
    size: int
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def ref_name(self) -> str | None:
        return self.annotations.get(REF_NAME)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"digest": self.digest, "mediaType": self.media_type}
        if self.annotations:
            doc["annotations"] = dict(sorted(self.annotations.items()))
        return {**doc, "size": self.size}


def canonical_json(obj: Any) -> bytes:
    """The one serialization of a JSON document: sorted keys, no whitespace, UTF-8."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def shown_value(value: object) -> str:
    """``value`` as ``repr`` shows it, cut to 80 characters for a message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_digest(digest: object, *, where: str) -> str:
    """The hex part of ``digest``, which must be ``sha256:`` and 64 lowercase hex digits."""
    if not isinstance(digest, str) or not is_digest(digest):
        raise ImageLayoutError(
            f"{where}: {shown_value(digest)} is not a sha256 digest (sha256: and 64 lowercase hex "
            "digits)",
            hint=HINT_DAMAGED,
        )
    return digest.removeprefix("sha256:")


def blob_path(layout: Path, digest: str) -> Path:
    """Where the blob ``digest`` lives in ``layout`` (always inside ``blobs/sha256``)."""
    return layout / "blobs" / "sha256" / check_digest(digest, where=f"{layout}: a blob")


def parse_json(data: bytes, *, where: str) -> Any:
    """``data`` parsed as strict JSON (no NaN or Infinity); refused with ``where`` named."""

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        return json.loads(data.decode("utf-8"), parse_constant=refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ImageLayoutError(f"{where} is not valid JSON: {reason}", hint=HINT_DAMAGED) from None


def _open_regular(path: Path, *, what: str) -> int:
    """A read-only descriptor of the regular file ``path``, never through a symbolic link."""
    try:
        # O_NONBLOCK: a FIFO put where a file belongs is refused below, not waited on
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ImageLayoutError(f"{what} {path} is missing", hint=HINT_DAMAGED) from None
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise ImageLayoutError(
            f"{what} {path} cannot be read: {reason}", hint=HINT_DAMAGED
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ImageLayoutError(f"{what} {path} is not a regular file", hint=HINT_DAMAGED)
    return fd


def read_json_file(path: Path, *, what: str) -> Any:
    """The JSON document in the small file ``path`` (at most ``MAX_JSON_BYTES``)."""
    with os.fdopen(_open_regular(path, what=what), "rb") as fh:
        data = fh.read(MAX_JSON_BYTES + 1)
    if len(data) > MAX_JSON_BYTES:
        raise ImageLayoutError(
            f"{what} {path} is larger than {MAX_JSON_BYTES} bytes", hint=HINT_DAMAGED
        )
    return parse_json(data, where=f"{what} {path}")


class BlobReader(io.RawIOBase):
    """One blob of a layout, read in order; every byte read is hashed and counted. When the
    end is reached (a read returns nothing, or ``finish``), the sha256 must be the blob's
    digest and the size the descriptor's, else ``ImageLayoutError``; reading more bytes than
    the descriptor's size is refused as it happens."""

    def __init__(self, path: Path, fh: BinaryIO, digest: str, size: int | None) -> None:
        super().__init__()
        self.path = path
        self._fh = fh
        self._digest = digest
        self._size = size
        self._hash = hashlib.sha256()
        self._seen = 0
        self._checked = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self._fh.read(len(view))
        view[: len(data)] = data
        self._seen += len(data)
        self._hash.update(data)
        if self._size is not None and self._seen > self._size:
            raise ImageLayoutError(
                f"blob {self.path} has more than the {self._size} bytes its descriptor says",
                hint=HINT_DAMAGED,
            )
        if not data and len(view):
            self._check()
        return len(data)

    def finish(self) -> None:
        """Read what is left and check the whole blob."""
        while self.read(CHUNK):
            pass

    def _check(self) -> None:
        if self._checked:
            return
        actual = "sha256:" + self._hash.hexdigest()
        if actual != self._digest:
            raise ImageLayoutError(
                f"blob {self.path}: its bytes hash to {actual}, not to its name {self._digest}",
                hint=HINT_DAMAGED,
            )
        if self._size is not None and self._seen != self._size:
            raise ImageLayoutError(
                f"blob {self.path} has {self._seen} bytes, its descriptor says {self._size}",
                hint=HINT_DAMAGED,
            )
        self._checked = True

    def close(self) -> None:
        self._fh.close()
        super().close()


def open_blob(layout: Path, digest: str, *, size: int | None = None) -> BlobReader:
    """The blob ``digest`` of ``layout``, to be read in order and checked as it is read;
    refused at once when it is missing, not a regular file, or not ``size`` bytes long."""
    path = blob_path(layout, digest)
    fh = os.fdopen(_open_regular(path, what="blob"), "rb")
    actual = os.fstat(fh.fileno()).st_size
    if size is not None and actual != size:
        fh.close()
        raise ImageLayoutError(
            f"blob {path} has {actual} bytes, its descriptor says {size}", hint=HINT_DAMAGED
        )
    return BlobReader(path, fh, digest, size)


def read_json_blob(layout: Path, desc: Descriptor, *, what: str) -> Any:
    """The JSON document in the blob ``desc`` (at most ``MAX_JSON_BYTES``), checked."""
    path = blob_path(layout, desc.digest)
    if desc.size > MAX_JSON_BYTES:
        raise ImageLayoutError(
            f"{what} {path} is larger than {MAX_JSON_BYTES} bytes", hint=HINT_DAMAGED
        )
    with open_blob(layout, desc.digest, size=desc.size) as blob:
        data = blob.readall()
    return parse_json(data, where=f"{what} {path}")


def parse_descriptor(obj: object, *, where: str) -> Descriptor:
    """A descriptor from its JSON form; refused unless it has a media type, a sha256
    digest and a size, and its annotations (if any) map strings to strings."""
    if not isinstance(obj, dict) or not isinstance(obj.get("mediaType"), str):
        raise ImageLayoutError(f"{where} is not a descriptor with a mediaType", hint=HINT_DAMAGED)
    check_digest(obj.get("digest"), where=where)
    size, annotations = obj.get("size"), obj.get("annotations", {})
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise ImageLayoutError(
            f"{where}: size {shown_value(size)} is not a number of bytes", hint=HINT_DAMAGED
        )
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        raise ImageLayoutError(
            f"{where}: annotations are not a map of strings to strings", hint=HINT_DAMAGED
        )
    return Descriptor(
        media_type=obj["mediaType"], digest=obj["digest"], size=size, annotations=annotations
    )


def config_diff_ids(config: Any, layers: int, *, where: str, hint: str) -> tuple[str, ...]:
    """The diff_ids of the image config ``config`` (parsed, read from ``where``); refused
    unless it is a JSON object listing one sha256 digest for each of ``layers`` layers."""
    rootfs = config.get("rootfs") if isinstance(config, dict) else None
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not isinstance(diff_ids, list) or len(diff_ids) != layers:
        listed = len(diff_ids) if isinstance(diff_ids, list) else "no"
        raise ImageLayoutError(
            f"{where} lists {listed} layer diff_ids for {layers} layers", hint=hint
        )
    for i, diff_id in enumerate(diff_ids):
        check_digest(diff_id, where=f"{where}: rootfs.diff_ids[{i}]")
    return tuple(diff_ids)


def check_layout(layout: Path) -> None:
    """Refuse ``layout`` unless its ``oci-layout`` file says version 1.0.0."""
    marker = layout / "oci-layout"
    if not marker.is_file() or marker.is_symlink():
        raise ImageLayoutError(
            f"{layout} is not an OCI image layout: it has no oci-layout file",
            hint="point at a directory written by `skopeo copy ... oci:DIR:TAG` or by the "
            "normalizer",
        )
    doc = read_json_file(marker, what="layout marker")
    version = doc.get("imageLayoutVersion") if isinstance(doc, dict) else None
    if version != LAYOUT_VERSION:
        raise ImageLayoutError(
            f"layout marker {marker}: imageLayoutVersion is {shown_value(version)}, not "
            f"{LAYOUT_VERSION!r}",
            hint="only OCI image layouts of version 1.0.0 are read",
        )


def read_index(layout: Path) -> tuple[Descriptor, ...]:
    check_layout(layout)
    path = layout / "index.json"
    doc = read_json_file(path, what="index")
    manifests = doc.get("manifests") if isinstance(doc, dict) else None
    if not isinstance(manifests, list):
        raise ImageLayoutError(f"index {path} has no list of manifests", hint=HINT_DAMAGED)
    return tuple(
        parse_descriptor(item, where=f"index {path}: manifests[{i}]")
        for i, item in enumerate(manifests)
    )


def find_manifest(layout: Path, tag: str) -> tuple[str, dict[str, Any]]:
    """The digest and the (checked) content of the image manifest tagged ``tag`` in
    ``layout``; refused when no manifest, or manifests of different digests, have that tag."""
    descriptors = read_index(layout)
    found = {d.digest: d for d in descriptors if d.ref_name == tag}
    if not found:
        tags = sorted({d.ref_name for d in descriptors if d.ref_name is not None})
        listed = ", ".join(tags) if tags else "none"
        raise ImageLayoutError(
            f"{layout}/index.json has no image tagged {tag!r} (its tags: {listed})",
            hint="name one of its tags",
        )
    if len(found) > 1:
        raise ImageLayoutError(
            f"{layout}/index.json gives the tag {tag!r} to {len(found)} different manifests",
            hint=HINT_DAMAGED,
        )
    [desc] = found.values()
    if desc.media_type != MANIFEST_MEDIA_TYPE:
        raise ImageLayoutError(
            f"{layout}/index.json: {tag!r} is a {desc.media_type}, not an OCI image manifest",
            hint="only single-platform OCI image manifests are read",
        )
    manifest = read_json_blob(layout, desc, what="manifest")
    if not isinstance(manifest, dict) or manifest.get("schemaVersion") != 2:
        raise ImageLayoutError(
            f"manifest {blob_path(layout, desc.digest)} is not an image manifest of schema "
            "version 2",
            hint=HINT_DAMAGED,
        )
    manifest_parts(manifest, where=f"manifest {blob_path(layout, desc.digest)}")
    return desc.digest, manifest


def manifest_parts(
    manifest: Mapping[str, Any], *, where: str
) -> tuple[Descriptor, tuple[Descriptor, ...]]:
    config = parse_descriptor(manifest.get("config"), where=f"{where}: config")
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        raise ImageLayoutError(f"{where} has no list of layers", hint=HINT_DAMAGED)
    return config, tuple(
        parse_descriptor(item, where=f"{where}: layers[{i}]") for i, item in enumerate(layers)
    )


class LayoutWriter:
    """A layout being written in a staging directory next to its target; nothing is visible
    at the target before ``commit``, which swaps the whole directory in."""

    def __init__(self, out: Path, staging: Path) -> None:
        self.out = out
        self._staging = staging
        self._blobs = staging / "blobs" / "sha256"
        self._spool = staging / ".spool"
        self._blobs.mkdir(parents=True)
        self._spool.mkdir()
        self._names = itertools.count()

    def spool(self) -> Path:
        """A new path for a temporary file on the layout's filesystem (not yet made)."""
        return self._spool / f"{next(self._names)}.tmp"

    def add_blob_file(self, path: Path, digest: str) -> None:
        """Move the finished file ``path`` in as the blob ``digest`` (the caller hashed it)."""
        dest = self._blobs / check_digest(digest, where="a new blob")
        if dest.exists():  # the same bytes twice, e.g. two identical layers
            path.unlink()
        else:
            path.replace(dest)

    def add_blob_link(self, store: Path, digest: str, *, size: int) -> None:
        """The blob ``digest`` of ``store`` (a directory with ``blobs/sha256/``, such as a
        base image's, checked when it was stored) in the layout as it is: a hard link, or
        where the two are on different filesystems a copy checked as it is read. Refused when
        it is not ``size`` bytes."""
        dest = self._blobs / check_digest(digest, where="a base blob")
        if dest.exists():
            return
        source = blob_path(store, digest)
        try:
            os.link(source, dest, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise ImageLayoutError(
                    f"blob {source} cannot be linked into {self.out}: {exc.strerror}",
                    hint=HINT_DAMAGED,
                ) from None
            spool = self.spool()
            with open_blob(store, digest, size=size) as blob, spool.open("xb") as fh:
                while chunk := blob.read(CHUNK):
                    fh.write(chunk)
            spool.replace(dest)
        actual = dest.lstat().st_size
        if actual != size:
            dest.unlink()
            raise ImageLayoutError(
                f"blob {source} has {actual} bytes, the base image's manifest says {size}",
                hint="the host's store of base images is damaged: remove that directory, the "
                "next build fetches the base again",
            )

    def add_json(self, obj: Any, media_type: str) -> Descriptor:
        data = canonical_json(obj)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        dest = self._blobs / digest.removeprefix("sha256:")
        if not dest.exists():
            dest.write_bytes(data)
        return Descriptor(media_type=media_type, digest=digest, size=len(data))

    def commit(self, manifests: Sequence[Descriptor]) -> None:
        """Write ``oci-layout`` and ``index.json`` (listing ``manifests``) and swap the
        layout in at the target, replacing the layout that was there."""
        shutil.rmtree(self._spool)
        index = {
            "manifests": [d.to_json() for d in manifests],
            "mediaType": INDEX_MEDIA_TYPE,
            "schemaVersion": 2,
        }
        (self._staging / "index.json").write_bytes(canonical_json(index))
        (self._staging / "oci-layout").write_bytes(
            canonical_json({"imageLayoutVersion": LAYOUT_VERSION})
        )
        swap_directory(self._staging, self.out, check=lambda: _check_replaceable(self.out))


def _check_replaceable(out: Path) -> None:
    """Refuse to replace anything at ``out`` but an empty directory or an OCI layout."""
    if not os.path.lexists(out):
        return
    is_dir = out.is_dir() and not out.is_symlink()
    if is_dir and (not any(out.iterdir()) or (out / "oci-layout").is_file()):
        return
    raise ImageLayoutError(
        f"{out} exists and is not an OCI image layout (no oci-layout file); it is not replaced",
        hint="choose another output directory, or remove it",
    )


@contextlib.contextmanager
def write_layout(out: Path) -> Iterator[LayoutWriter]:
    """A ``LayoutWriter`` for ``out``. Refused at once when ``out`` is something else than an
    empty directory or an OCI layout. When the block fails, or ends without ``commit``,
    nothing is left behind and ``out`` is as it was."""
    _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".new"))
    try:
        yield LayoutWriter(out, staging)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
