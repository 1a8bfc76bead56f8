"""What an image built by this tool says about itself: its labels (``Dockerfile.j2`` writes
them) and where it carries its lock and SBOM. Publishing and diffing read them; nothing here
does I/O."""

from __future__ import annotations

from images.build.render import IMAGE_LOCK_DIR, IMAGE_SBOM

LOCK_LABEL = "io.vllm-musa.lock.sha256"
LOCK_INPUTS_LABEL = "io.vllm-musa.lock-inputs.sha256"
TITLE_LABEL = "org.opencontainers.image.title"
REVISION_LABEL = "org.opencontainers.image.revision"
SOURCE_LABEL = "org.opencontainers.image.source"
VERSION_LABEL = "org.opencontainers.image.version"
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
DIFF_LABELS = (
    BASE_NAME_LABEL,
    BASE_DIGEST_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    VERSION_LABEL,
    LOCK_LABEL,
    LOCK_INPUTS_LABEL,
)


def image_lock_path() -> str:
    """Where an image built by this tool carries its pylock.toml."""
    return f"{IMAGE_LOCK_DIR}/pylock.toml"


def image_sbom_path() -> str:
    """Where an image built by this tool carries its SBOM."""
    return IMAGE_SBOM
