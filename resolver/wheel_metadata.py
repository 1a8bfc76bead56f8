"""Parse a wheel's core metadata and check it against the filename (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from resolver.errors import MetadataError


@dataclass(frozen=True)
class CoreMetadata:
    name: NormalizedName
    version: Version
    requires_dist: tuple[Requirement, ...]
    requires_python: str | None


def parse_core_metadata(data: bytes, *, where: str) -> CoreMetadata:
    """``where`` names the file and index for messages."""
    raw, _unparsed = parse_email(data)
    name, version_text = raw.get("name"), raw.get("version")
    if not name or not version_text:
        raise MetadataError(f"{where}: METADATA has no Name or Version")
    try:
        version = Version(version_text)
    except InvalidVersion:
        raise MetadataError(f"{where}: METADATA Version {version_text!r} is not PEP 440") from None
    reqs: list[Requirement] = []
    for text in raw.get("requires_dist", []):
        try:
            reqs.append(Requirement(text))
        except InvalidRequirement as exc:
            raise MetadataError(
                f"{where}: METADATA Requires-Dist {text!r} is invalid: {exc}"
            ) from None
    return CoreMetadata(
        name=canonicalize_name(name),
        version=version,
        requires_dist=tuple(reqs),
        requires_python=raw.get("requires_python"),
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
