"""Sdists with chosen members, for the tests of reading files out of them."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Mapping
from pathlib import Path

TAR_EPOCH = 315532800


def write_sdist(
    out: Path,
    filename: str,
    files: Mapping[str, str],
    *,
    top: str | None = None,
    symlinks: Mapping[str, str] | None = None,
) -> Path:
    """``out/filename``: a .tar.gz whose members are ``<top>/<path>`` for each of ``files``
    (``top``: the filename without .tar.gz), plus ``symlinks`` (path -> link target)."""
    top = top if top is not None else filename.removesuffix(".tar.gz")
    out.mkdir(parents=True, exist_ok=True)
    raw = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for relpath in sorted(files):
            data = files[relpath].encode("utf-8")
            info = tarfile.TarInfo(f"{top}/{relpath}")
            info.size = len(data)
            info.mtime = TAR_EPOCH
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        for relpath, target in sorted((symlinks or {}).items()):
            info = tarfile.TarInfo(f"{top}/{relpath}")
            info.type = tarfile.SYMTYPE
            info.linkname = target
            info.mtime = TAR_EPOCH
            tar.addfile(info)
    path = out / filename
    path.write_bytes(raw.getvalue())
    return path
