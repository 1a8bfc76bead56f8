"""What the image's SBOM writer (``in_image/sbom.py``) is told about the lock.

The writer runs with the image's Python and the standard library only, so it cannot read
``pylock.toml`` (no ``tomllib`` before 3.11): ``render_sbom_facts`` hands it the runtime
packages as JSON, each with its version, its index URL when not the ``default_index`` (its
purl's ``repository_url``), the packages and sources that required it, and whether the
manifest did. Build requirements are no runtime edge. Pure and byte-identical run to run.
"""

from __future__ import annotations

import json

from core.urls import split_credentials
from manifest import Manifest
from resolver.lockfile import Lock, LockedPackage

SBOM_FACTS = "sbom-facts.json"  # under the context's sbom/ (LAYOUT.sbom)


def _edges(manifest: Manifest, p: LockedPackage) -> tuple[list[str], bool]:
    """(the installed packages and sources that required ``p``, whether the manifest did)."""
    parents: set[str] = set()
    root = False
    for requirer in p.required_by:
        if not requirer.startswith("("):
            parents.add(requirer)
            continue
        inner = requirer.strip("()")
        if inner == "build.requirements":
            continue  # the build stage's, not the image's
        if not inner.startswith("sources."):
            root = True  # packages, requirements, overrides
            continue
        name, _, file = inner.removeprefix("sources.").partition(":")
        source = manifest.source(name)
        if source is not None and file and file in source.build_requirements_files:
            continue
        parents.add(name)
    return sorted(parents), root


def render_sbom_facts(manifest: Manifest, lock: Lock) -> str:
    """The JSON of ``sbom/sbom-facts.json`` for ``manifest``'s image, from its ``lock``."""
    packages = []
    for p in lock.runtime():
        required_by, root = _edges(manifest, p)
        vendor = p.index != manifest.default_index
        packages.append(
            {
                "name": p.name,
                "version": p.version,
                "repository_url": split_credentials(p.index_url)[0] if vendor else "",
                "required_by": required_by,
                "root": root,
            }
        )
    return json.dumps({"packages": packages}, indent=1, sort_keys=True) + "\n"
