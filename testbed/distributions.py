"""Real wheels and sdists, written deterministically: the same arguments give byte-identical
files, so a test can compare hashes and a bench can rebuild its fixtures without invalidating
a cache.

- ``build_wheel(WheelSpec(...), out_dir)`` writes a valid wheel (pip installs it): entries
  sorted, ``.dist-info`` last with ``RECORD`` at the end, timestamps 1980-01-01, mode 0644;
- ``build_sdist(name, version, out_dir)`` writes a tiny valid ``.tar.gz`` (PKG-INFO and a
  setuptools pyproject.toml);
- ``read_wheel_metadata`` reads a wheel's METADATA back (what a PEP 658 file holds);
- ``WheelFactory`` builds both into one directory (the ``wheel_factory`` test fixture).

Stdlib only, plus ``packaging``.
"""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import random
import re
import tarfile
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from packaging.tags import parse_tag

from testbed.files import atomic_output

__all__ = [
    "WheelFactory",
    "WheelSpec",
    "build_sdist",
    "build_wheel",
    "dist_name",
    "read_wheel_metadata",
    "render_metadata",
]

ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
TAR_EPOCH = 315532800  # 1980-01-01T00:00:00Z, the same instant as the zip timestamps
# The generator each wheel names in its METADATA and WHEEL files. The name is part of every
# wheel's bytes, so of its sha256, and the committed lock stack/demo-v028.lock pins the demo's
# wheels (python -m demo.make_index) by those hashes: a new name means a new lock.
GENERATOR = "tests.support.indexgen"

_CHUNK = 1 << 20
_EXTRA_RE = re.compile(r"""\bextra\s*==\s*['"]([^'"]+)['"]""")
_EMPTY: Mapping[str, str] = MappingProxyType({})
_EMPTY_BYTES: Mapping[str, bytes] = MappingProxyType({})
_EMPTY_EP: Mapping[str, Mapping[str, str]] = MappingProxyType({})


def dist_name(name: str) -> str:
    """The name as a wheel or sdist filename spells it (``Deep-GEMM`` -> ``deep_gemm``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


# ----------------------------------------------------------------------------- wheels


@dataclass(frozen=True, kw_only=True)
class WheelSpec:
    """What ``build_wheel`` writes.

    ``tags`` is a compressed tag set as in a filename (``cp38-abi3-manylinux_2_17_x86_64.
    manylinux2014_x86_64``). ``metadata_name`` / ``metadata_version`` make METADATA (and the
    ``.dist-info`` directory) disagree with the filename, like a renamed wheel. ``modules``
    maps paths inside the wheel to text; by default a package named after the project whose
    ``__init__.py`` holds ``__version__``. ``binaries`` maps paths inside the wheel to bytes
    (a native library, e.g. ``testbed.elf.render_shared_object``), written beside the modules.
    ``payload_bytes`` adds ``<package>/payload.bin`` of incompressible deterministic bytes
    (written in chunks) for benchmarks.
    """

    name: str
    version: str
    tags: str = "py3-none-any"
    build: str | None = None
    requires_dist: tuple[str, ...] = ()
    requires_python: str | None = None
    metadata_name: str | None = None
    metadata_version: str | None = None
    modules: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    binaries: Mapping[str, bytes] = field(default_factory=lambda: _EMPTY_BYTES)
    entry_points: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: _EMPTY_EP)
    payload_bytes: int = 0

    @property
    def filename(self) -> str:
        build = f"-{self.build}" if self.build else ""
        return f"{dist_name(self.name)}-{self.version}{build}-{self.tags}.whl"

    @property
    def package(self) -> str:
        """The import package of the default module and of the payload."""
        return dist_name(self.name)

    @property
    def dist_info(self) -> str:
        name = dist_name(self.metadata_name or self.name)
        return f"{name}-{self.metadata_version or self.version}.dist-info"

    @property
    def purelib(self) -> bool:
        return all(t.abi == "none" and t.platform == "any" for t in parse_tag(self.tags))


def render_metadata(spec: WheelSpec) -> bytes:
    """The core metadata (``METADATA``) of the wheel ``spec`` describes."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {spec.metadata_name or spec.name}",
        f"Version: {spec.metadata_version or spec.version}",
        f"Summary: {spec.name} {spec.version}, a test wheel written by {GENERATOR}",
    ]
    if spec.requires_python is not None:
        lines.append(f"Requires-Python: {spec.requires_python}")
    extras = sorted({m for req in spec.requires_dist for m in _EXTRA_RE.findall(req)})
    lines.extend(f"Provides-Extra: {extra}" for extra in extras)
    lines.extend(f"Requires-Dist: {req}" for req in spec.requires_dist)
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def _render_wheel_file(spec: WheelSpec) -> bytes:
    lines = [
        "Wheel-Version: 1.0",
        f"Generator: {GENERATOR}",
        f"Root-Is-Purelib: {'true' if spec.purelib else 'false'}",
    ]
    lines.extend(f"Tag: {tag}" for tag in sorted(str(t) for t in parse_tag(spec.tags)))
    if spec.build:
        lines.append(f"Build: {spec.build}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def _render_entry_points(entry_points: Mapping[str, Mapping[str, str]]) -> bytes:
    out: list[str] = []
    for group in sorted(entry_points):
        out.append(f"[{group}]")
        out.extend(f"{name} = {entry_points[group][name]}" for name in sorted(entry_points[group]))
        out.append("")
    return "\n".join(out).encode("utf-8")


def _zip_info(arcname: str, *, compress: int = zipfile.ZIP_DEFLATED) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(arcname, date_time=ZIP_EPOCH)
    info.create_system = 3  # unix, so the permission bits below mean the same everywhere
    info.external_attr = 0o100644 << 16
    info.compress_type = compress
    return info


def _record_hash(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _payload_chunks(seed: str, size: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    left = size
    while left > 0:
        n = min(_CHUNK, left)
        yield rng.randbytes(n)
        left -= n


def _check_member_path(path: str) -> None:
    parts = path.split("/")
    if not path or path.startswith("/") or ".." in parts or "" in parts:
        raise ValueError(f"module path {path!r} must be relative, without '..' or empty parts")
    if parts[0].endswith(".dist-info"):
        raise ValueError(f"module path {path!r} is inside a .dist-info directory")


def build_wheel(spec: WheelSpec, out_dir: Path) -> Path:
    """Write the wheel ``spec`` describes into ``out_dir``; return its path.

    Byte-identical for equal specs: entries sorted (``.dist-info`` last, ``RECORD`` at the
    end), timestamps 1980-01-01, mode 0644.
    """
    if spec.payload_bytes < 0:
        raise ValueError(f"payload_bytes must be >= 0, not {spec.payload_bytes}")
    modules = dict(spec.modules) or {
        f"{spec.package}/__init__.py": f'__version__ = "{spec.version}"\n'
    }
    payload_path = f"{spec.package}/payload.bin" if spec.payload_bytes else None
    for path in [*modules, *spec.binaries]:
        _check_member_path(path)
    if set(modules) & set(spec.binaries):
        raise ValueError(
            f"paths both a module and a binary: {sorted(set(modules) & set(spec.binaries))}"
        )
    if payload_path is not None and payload_path in modules:
        raise ValueError(f"module path {payload_path!r} is taken by the payload")

    dist_info = spec.dist_info
    meta_files: dict[str, bytes] = {
        f"{dist_info}/METADATA": render_metadata(spec),
        f"{dist_info}/WHEEL": _render_wheel_file(spec),
    }
    if spec.entry_points:
        meta_files[f"{dist_info}/entry_points.txt"] = _render_entry_points(spec.entry_points)
    body = {path: text.encode("utf-8") for path, text in modules.items()}
    body.update(spec.binaries)

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / spec.filename
    records: list[tuple[str, str, str]] = []
    with atomic_output(target) as tmp, zipfile.ZipFile(tmp, "w") as zf:
        for arcname in sorted([*body, *([payload_path] if payload_path else [])]):
            if arcname == payload_path:
                digest = hashlib.sha256()
                info = _zip_info(arcname, compress=zipfile.ZIP_STORED)
                big = spec.payload_bytes >= zipfile.ZIP64_LIMIT
                with zf.open(info, "w", force_zip64=big) as member:
                    for chunk in _payload_chunks(spec.filename, spec.payload_bytes):
                        member.write(chunk)
                        digest.update(chunk)
                records.append((arcname, _record_hash(digest.digest()), str(spec.payload_bytes)))
            else:
                data = body[arcname]
                zf.writestr(_zip_info(arcname), data)
                records.append(
                    (arcname, _record_hash(hashlib.sha256(data).digest()), str(len(data)))
                )
        for arcname in sorted(meta_files):
            data = meta_files[arcname]
            zf.writestr(_zip_info(arcname), data)
            records.append((arcname, _record_hash(hashlib.sha256(data).digest()), str(len(data))))
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerows(records)
        writer.writerow((f"{dist_info}/RECORD", "", ""))
        zf.writestr(_zip_info(f"{dist_info}/RECORD"), buf.getvalue().encode("utf-8"))
    return target


def read_wheel_metadata(path: Path) -> bytes:
    """The ``*.dist-info/METADATA`` of a wheel (what a PEP 658 metadata file holds)."""
    with zipfile.ZipFile(path) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise ValueError(f"{path.name}: expected one .dist-info/METADATA, found {names}")
        return zf.read(names[0])


# ----------------------------------------------------------------------------- sdists


def build_sdist(
    name: str, version: str, out_dir: Path, *, extra: Mapping[str, str] | None = None
) -> Path:
    """A tiny valid sdist ``<name>-<version>.tar.gz`` (PKG-INFO + pyproject.toml, and the
    ``extra`` files, path under the top directory -> text); deterministic."""
    stem = f"{dist_name(name)}-{version}"
    package = dist_name(name)
    files = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n",
        "pyproject.toml": (
            "[build-system]\n"
            'requires = ["setuptools>=61"]\n'
            'build-backend = "setuptools.build_meta"\n\n'
            "[project]\n"
            f'name = "{name}"\n'
            f'version = "{version}"\n'
        ),
        f"{package}/__init__.py": f'__version__ = "{version}"\n',
        **(extra or {}),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{stem}.tar.gz"
    with (
        atomic_output(target) as tmp,
        tmp.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for relpath in sorted(files):
            data = files[relpath].encode("utf-8")
            info = tarfile.TarInfo(f"{stem}/{relpath}")
            info.size = len(data)
            info.mtime = TAR_EPOCH
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return target


# ----------------------------------------------------------------------------- the fixture


class WheelFactory:
    """Builds wheels and sdists into one directory (the ``wheel_factory`` test fixture)."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir

    def __call__(
        self,
        spec_or_name: WheelSpec | str,
        version: str | None = None,
        /,
        *,
        out_dir: Path | None = None,
        **fields: Any,
    ) -> Path:
        """``factory(WheelSpec(...))`` or ``factory(name, version, **WheelSpec fields)``."""
        if isinstance(spec_or_name, WheelSpec):
            if version is not None or fields:
                raise TypeError("give either a WheelSpec, or a name, a version and fields")
            spec = spec_or_name
        else:
            if version is None:
                raise TypeError("wheel_factory(name, version, ...) needs a version")
            spec = WheelSpec(name=spec_or_name, version=version, **fields)
        return build_wheel(spec, out_dir or self.out_dir)

    def sdist(self, name: str, version: str, *, out_dir: Path | None = None) -> Path:
        return build_sdist(name, version, out_dir or self.out_dir)
