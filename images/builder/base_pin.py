"""The base image's tag resolved to its digest, and written into the stack manifest.

``build_image.py pin-base STACK`` asks the base's registry what the tag names now (``skopeo
inspect --raw``) and rewrites the manifest's ``base_image: "TAG"`` line to
``base_image: "TAG@sha256:<hex>"``, the form Renovate keeps current: the base moves only in a
reviewed commit, like the lock. A tag that names an index (a multi-platform image) is pinned to
the manifest of the stack's platform (``linux/amd64`` for ``target.arch: x86_64``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from core.digests import is_digest
from core.errors import ManifestError, RegistryError
from core.fsutil import atomic_write_text
from core.network import is_loopback
from images.builder.tags import parse_reference
from images.engine.port import BaseImageFetcher, RegistryTarget
from manifest import Manifest, parse_manifest

# the OCI platform of each manifest target.arch
PLATFORM_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}
_INDEX_TYPES = (
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.index.v1+json",
)
# the line pin-base rewrites: a top-level base_image with a double-quoted value
_LINE_RE = re.compile(r'^base_image:[ \t]*"(?P<ref>[^"\n]*)"', re.MULTILINE)


def platform_digest(raw: bytes, *, reference: str, arch: str) -> str:
    """The digest that pins ``reference`` for ``arch``: the sha256 of ``raw`` (what the
    registry served), or, for an index, the digest of its entry for the platform."""
    digest = "sha256:" + hashlib.sha256(raw).hexdigest()
    try:
        doc = json.loads(raw)
    except ValueError:
        raise RegistryError(f"{reference}: the registry served no JSON manifest") from None
    if not isinstance(doc, dict) or doc.get("mediaType") not in _INDEX_TYPES:
        return digest
    os_arch = PLATFORM_ARCH.get(arch, arch)
    entries = doc.get("manifests")
    seen: list[str] = []
    for entry in entries if isinstance(entries, list) else []:
        platform = entry.get("platform") if isinstance(entry, dict) else None
        if not isinstance(platform, dict):
            continue
        seen.append(f"{platform.get('os')}/{platform.get('architecture')}")
        if platform.get("os") == "linux" and platform.get("architecture") == os_arch:
            found = entry.get("digest")
            if isinstance(found, str) and is_digest(found):
                return found
    raise RegistryError(
        f"{reference} ({digest}) is an index with no linux/{os_arch} image "
        f"(it has: {', '.join(seen) or 'none'})",
        hint="name a base image built for the stack's target.arch",
    )


def repin_text(text: str, *, path: Path, base: str, pinned: str) -> str:
    """``text`` with its ``base_image: "BASE"`` line naming ``pinned`` instead. Pure."""
    lines = [m for m in _LINE_RE.finditer(text) if m.group("ref") == base]
    if len(lines) != 1:
        raise ManifestError(
            f'{path}: no line base_image: "{base}" to pin (pin-base rewrites one top-level line '
            "with a double-quoted value)",
            hint=f'write base_image: "{base}" on a line of its own, then run pin-base again',
        )
    m = lines[0]
    return text[: m.start("ref")] + pinned + text[m.end("ref") :]


def pin_base(manifest: Manifest, fetcher: BaseImageFetcher) -> tuple[str, bool]:
    """Pin the manifest file's base to the digest its tag names now (written once the new
    text reads back with that base); the pinned reference and whether the file changed."""
    base = manifest.base_image
    if base is None:
        raise ManifestError(
            f"{manifest.path}: no base_image to pin",
            hint='add base_image: "<registry>/<image>:<tag>" to the manifest',
        )
    ref = parse_reference(base)
    if ref.tag is None:
        raise ManifestError(
            f"{manifest.path}: base_image {base} has no tag to resolve",
            hint='write base_image: "<registry>/<image>:<tag>", then run pin-base again',
        )
    tagged = base.partition("@")[0]
    raw = fetcher.raw_manifest(
        RegistryTarget(
            registry=ref.registry, reference=tagged, plain_http=is_loopback(ref.registry)
        )
    )
    pinned = f"{tagged}@{platform_digest(raw, reference=tagged, arch=manifest.target.arch)}"
    if pinned == base:
        return pinned, False
    text = manifest.path.read_text(encoding="utf-8")
    new = repin_text(text, path=manifest.path, base=base, pinned=pinned)
    if parse_manifest(new, path=manifest.path).base_image != pinned:
        raise ManifestError(f"{manifest.path}: the pinned base_image line does not read back")
    atomic_write_text(manifest.path, new)
    return pinned, True
