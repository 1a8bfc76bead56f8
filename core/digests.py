"""Image digests as registries and the Docker daemon write them: ``sha256:`` and 64 lowercase
hex digits."""

from __future__ import annotations

import re

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def is_digest(text: str) -> bool:
    return bool(DIGEST_RE.fullmatch(text))  # $ alone would let a trailing newline through
