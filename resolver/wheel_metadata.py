"""Read a wheel's core metadata out of its zip, parse it and check it against the filename.

``metadata_from_zip`` takes a zip the caller opened (a file in the cache, or range reads of a
remote wheel) and reads its one ``*.dist-info/METADATA`` incrementally: never more than
``MAX_METADATA_BYTES``, whatever the zip claims, so a small wheel whose METADATA inflates to
gigabytes costs no memory. The rest is pure.
"""

from __future__ import annotations

import zipfile
import zlib
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from core.errors import MetadataError


@dataclass(frozen=True)
class CoreMetadata:
    name: NormalizedName
    version: Version
    requires_dist: tuple[Requirement, ...]
    requires_python: str | None


_WANTED = ("name", "version", "requires-dist", "requires-python")
MAX_METADATA_BYTES = 16 << 20  # a METADATA (the biggest real ones, long READMEs, are ~1 MB)


def metadata_from_zip(zf: zipfile.ZipFile, filename: str, *, label: str) -> bytes:
    """The bytes of the one ``<name>.dist-info/METADATA`` of the wheel ``filename`` open as
    ``zf``; ``label`` names the package in messages."""
    names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if len(names) != 1:
        found = "none" if not names else ", ".join(names)
        raise MetadataError(
            f"{label}: {filename} has no single .dist-info/METADATA (found {found})"
        )
    info = zf.getinfo(names[0])
    hint = "no real wheel has a METADATA this big; do not use this file"
    if info.file_size > MAX_METADATA_BYTES:
        raise MetadataError(
            f"{label}: {filename}: {names[0]} has {info.file_size} bytes, more than the "
            f"{MAX_METADATA_BYTES} a METADATA may have",
            hint=hint,
        )
    try:
        with zf.open(info) as fh:
            data = fh.read(MAX_METADATA_BYTES + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError) as exc:
        raise MetadataError(f"{label}: {filename}: {names[0]} cannot be read: {exc}") from None
    if len(data) > MAX_METADATA_BYTES:
        raise MetadataError(
            f"{label}: {filename}: {names[0]} inflates to more than the {MAX_METADATA_BYTES} "
            "bytes a METADATA may have",
            hint=hint,
        )
    return data


def _header_fields(data: bytes) -> dict[str, list[str]]:
    """The header fields we read, from the part before the first blank line (RFC 822 style,
    continuation lines folded). Several times faster than ``email.parser`` on big METADATA
    files whose long description follows the headers."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
    head = text.split("\n\n", 1)[0]
    fields: dict[str, list[str]] = {}
    last: list[str] | None = None
    for line in head.split("\n"):
        if line[:1] in (" ", "\t"):
            if last:
                last[-1] += " " + line.strip()
            continue
        key, sep, value = line.partition(":")
        if not sep:
            last = None
            continue
        key = key.strip().lower()
        if key in _WANTED:
            last = fields.setdefault(key, [])
            last.append(value.strip())
        else:
            last = None
    return fields


def parse_core_metadata(data: bytes, *, where: str) -> CoreMetadata:
    """``where`` names the file and index for messages."""
    if len(data) > MAX_METADATA_BYTES:
        raise MetadataError(
            f"{where}: METADATA has {len(data)} bytes, more than the {MAX_METADATA_BYTES} a "
            "METADATA may have"
        )
    fields = _header_fields(data)
    names, versions = fields.get("name", []), fields.get("version", [])
    name = names[0] if len(names) == 1 else None
    version_text = versions[0] if len(versions) == 1 else None
    if not name or not version_text:
        raise MetadataError(f"{where}: METADATA has no Name or Version")
    try:
        version = Version(version_text)
    except InvalidVersion:
        raise MetadataError(f"{where}: METADATA Version {version_text!r} is not PEP 440") from None
    reqs: list[Requirement] = []
    for text in fields.get("requires-dist", []):
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise MetadataError(
                f"{where}: METADATA Requires-Dist {text!r} is invalid: {exc}"
            ) from None
        if req.url:
            raise MetadataError(
                f"{where}: METADATA Requires-Dist {text!r} is a direct URL; only packages from "
                "an index are locked",
                hint=f"pin {req.name} in the manifest from an index, or do not use this file",
            )
        reqs.append(req)
    requires_python = next(iter(fields.get("requires-python", [])), None)
    if requires_python is not None:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise MetadataError(
                f"{where}: METADATA Requires-Python {requires_python!r} is not a valid specifier",
                hint="an invalid Requires-Python cannot be checked, so the file is refused",
            ) from None
    return CoreMetadata(
        name=canonicalize_name(name),
        version=version,
        requires_dist=tuple(reqs),
        requires_python=requires_python,
    )


def check_matches_filename(
    meta: CoreMetadata, *, name: NormalizedName, version: Version, where: str
) -> None:
    """METADATA must name the same project and the same full version (local label included)."""
    if meta.name != name:
        raise MetadataError(
            f"{where}: METADATA says Name {meta.name}, the filename says {name}",
            hint="the wheel was renamed or built wrong; ask its publisher for a consistent file",
        )
    if str(meta.version) != str(version):
        raise MetadataError(
            f"{where}: METADATA says Version {meta.version}, the filename says {version}",
            hint="a renamed wheel is not the build its name claims; do not use it",
        )
