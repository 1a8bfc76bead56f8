"""The labels an image carries: their keys, and the values a render states from the manifest
alone (``image_labels``); ``publish`` reads them back, ``diff`` compares them, and the release
record keeps ``DIFF_LABELS``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from core.digests import is_digest
from core.urls import split_credentials
from manifest import Manifest, Source
from manifest.model import DEFAULT_IMAGE_LICENSES, DEFAULT_PRODUCT_SOURCE, VLLM_SOURCE

LOCK_LABEL = "io.vllm-musa.lock.sha256"
LOCK_INPUTS_LABEL = "io.vllm-musa.lock-inputs.sha256"
TITLE_LABEL = "org.opencontainers.image.title"
REVISION_LABEL = "org.opencontainers.image.revision"  # the product source's commit
SOURCE_LABEL = "org.opencontainers.image.source"  # the product source's https git URL
VERSION_LABEL = "org.opencontainers.image.version"  # v{release} (image_version)
LICENSES_LABEL = "org.opencontainers.image.licenses"  # image.licenses
BASE_NAME_LABEL = "org.opencontainers.image.base.name"
BASE_DIGEST_LABEL = "org.opencontainers.image.base.digest"
VLLM_REVISION_LABEL = "io.vllm-musa.vllm.revision"  # the vLLM source's commit
VLLM_VERSION_LABEL = "io.vllm-musa.vllm.version"
TOOLING_REVISION_LABEL = "io.vllm-musa.tooling.revision"  # this tool's commit
# upstream's label of the vLLM tag (MooreThreads/vllm_musa@e43a01bfbbcd27ed165b862325ec6b015dab3a9c
# docker/musa.Dockerfile, final stage)
VLLM_TAG_LABEL = "com.mthreads.vllm.version"
UNKNOWN_REVISION = "unknown"  # the tooling revision outside a git checkout
TOOLING_KEY = "(tooling)"  # source_revisions: the commit of the tool that built the image
# the labels a release record keeps and ``diff`` compares
DIFF_LABELS = (
    BASE_NAME_LABEL,
    BASE_DIGEST_LABEL,
    REVISION_LABEL,
    SOURCE_LABEL,
    VERSION_LABEL,
    VLLM_REVISION_LABEL,
    VLLM_VERSION_LABEL,
    TOOLING_REVISION_LABEL,
    LOCK_LABEL,
    LOCK_INPUTS_LABEL,
)

_SCP_GIT_RE = re.compile(r"^git@(?P<host>[A-Za-z0-9.-]+):(?P<path>.+)$")


@dataclass(frozen=True, kw_only=True)
class ImageLabels:
    """The labels a render states from the manifest alone ("" = the label is left out).

    ``source`` and ``revision`` name the product source (``product_source``): its https git URL
    and its pinned commit; a path source or a ``file://`` URL gives none (no place anyone else
    can fetch from). The tooling revision and the creation time are build args.
    """

    source: str
    revision: str
    version: str
    vllm_revision: str
    vllm_version: str
    mooncake_version: str
    licenses: str
    description: str


def product_source(manifest: Manifest) -> Source | None:
    """The source the image is the product of: the one with ``product: true``, else the one
    named ``vllm-musa``, else none."""
    marked = [s for s in manifest.sources if s.product]
    if marked:
        return marked[0]
    return next((s for s in manifest.sources if s.name == DEFAULT_PRODUCT_SOURCE), None)


def vllm_source(manifest: Manifest) -> Source | None:
    """The source named ``vllm``, if the manifest builds one."""
    return next((s for s in manifest.sources if s.name == VLLM_SOURCE), None)


def public_git_url(url: str) -> str:
    """The https URL of a git remote's repository page, for a label, as upstream labels its
    image: ``git@host:path`` and ``ssh://host/path`` become ``https://host/path``, without
    credentials or a trailing ``.git``; a ``file://`` URL (a path of this machine) gives ""."""
    scp = _SCP_GIT_RE.match(url)
    if scp:
        return f"https://{scp.group('host')}/{scp.group('path').removesuffix('.git')}"
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in ("https", "ssh"):
        return ""
    host, slash, path = split_credentials(url)[0].partition("://")[2].partition("/")
    if scheme == "ssh":
        host = host.rsplit(":", 1)[0]  # an ssh port is no https port
    return f"https://{host}{slash}{path.removesuffix('.git')}" if host else ""


def image_version(release: str) -> str:
    """The value of ``org.opencontainers.image.version``: ``v{release}`` (``v0.28.0``).

    Upstream labels the release tag its checkout is at; a manifest pins a commit, not a ref,
    so the label is the release in the form of a release tag."""
    return f"v{release}"


def image_labels(manifest: Manifest) -> ImageLabels:
    """The labels of ``manifest``'s image that the render states (``ImageLabels``)."""
    product, vllm = product_source(manifest), vllm_source(manifest)
    vllm_version = ""
    if vllm is not None and vllm.sdist is not None:
        vllm_version = vllm.sdist.version_text
    elif vllm is not None and vllm.git is not None:
        driver_env = next((s.env for s in manifest.sources if s.third_party), {})
        vllm_version = driver_env.get("VLLM_VERSION_OVERRIDE", manifest.release)
    settings = manifest.image
    mooncake = manifest.components.mooncake
    return ImageLabels(
        source=public_git_url(product.git) if product and product.git else "",
        revision=(product.rev or "") if product else "",
        version=image_version(manifest.release),
        vllm_revision=(vllm.rev or "") if vllm else "",
        vllm_version=vllm_version,
        mooncake_version=mooncake.pin.version_text if mooncake else "",
        licenses=settings.licenses if settings else DEFAULT_IMAGE_LICENSES,
        description=(settings and settings.description) or image_description(manifest),
    )


def vllm_tag_of(labels: ImageLabels, product_pins: Mapping[str, str] | None) -> str:
    """The value of ``com.mthreads.vllm.version``: the ``VLLM_TAG`` of the product source's
    ``third_party/PINS`` (``product_pins``), as upstream's build_image.sh reads it into the
    label; else the vLLM version the stack builds; "" (no label) when neither is known."""
    tag = (product_pins or {}).get("VLLM_TAG", "")
    return tag or labels.vllm_version


def image_description(manifest: Manifest) -> str:
    """The description of an image whose manifest gives none (``image.description``)."""
    return f"vLLM {manifest.release} for Moore Threads GPUs (vLLM-MUSA), stack {manifest.name}"


def base_digest_of(ref: str) -> str:
    """The ``sha256:...`` digest pinned in an image reference, or ""."""
    _, sep, digest = ref.partition("@")
    return digest if sep and is_digest(digest) else ""
