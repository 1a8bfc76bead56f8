"""The command line's changes to a manifest, applied once: ``--mirror NAME=URL`` and
``--base-image REF``. Everything downstream reads the effective manifest; neither changes the
lock inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from core.console import name_and_url
from core.errors import UsageError
from core.urls import redact
from manifest import MIRROR_NAMES, PLAIN_URL_RE, Manifest


def parse_mirror_overrides(values: Sequence[str]) -> dict[str, str]:
    """``--mirror NAME=URL`` values, checked like the manifest's ``mirrors:``."""
    out: dict[str, str] = {}
    for value in values:
        name, url = name_and_url(value, flag="--mirror")
        if name not in MIRROR_NAMES:
            raise UsageError(
                f"--mirror {name}=...: no mirror named {name!r}",
                hint=f"mirrors are: {', '.join(MIRROR_NAMES)}",
            )
        # fullmatch: the rule's "$" would let a trailing newline through. The value reaches
        # apt-get.sh's sed script and the build's shell: no metacharacter may pass.
        if not PLAIN_URL_RE.fullmatch(url):
            raise UsageError(
                f"--mirror {name}={redact(url)}: not an http(s) URL without credentials",
                hint="a mirror is a plain http(s) URL (letters, digits and ._~/%+=,:- only)",
            )
        out[name] = url
    return out


def apply_overrides(
    manifest: Manifest, *, mirrors: Mapping[str, str], base_image: str | None
) -> Manifest:
    """The manifest with ``mirrors`` (checked by ``parse_mirror_overrides``) and
    ``base_image`` applied."""
    changes: dict[str, Any] = {}
    if mirrors:
        changes["mirrors"] = manifest.mirrors.replace(mirrors)
    if base_image:
        changes["base_image"] = base_image
    return dataclasses.replace(manifest, **changes) if changes else manifest
