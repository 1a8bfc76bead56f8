"""Where the image's base layers come from, so that they stay byte for byte the base's.

- A base pinned by digest: its registry's blobs, copied once into the host's store
  (``<cache>/base-images/<hex>``) by ``skopeo copy``, or by ``fetch`` for an ``--offline``
  build. The image's manifest then lists the very blobs the registry holds: a publish uploads
  none of them, and a node that has the base pulls none of them.
- A base known only to the local daemon, or a pinned base neither stored nor reachable: its
  layers as the daemon has them, each compressed once and kept in the layer cache.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from core.errors import ImageLayoutError, UsageError
from core.network import is_loopback
from images.builder.reproducible import daemon_diff_ids
from images.builder.tags import parse_reference
from images.engine.port import BaseImageFetcher, BuildEngine, RegistryTarget
from images.oci.base_layers import BaseLayers, adopt_copied_dir, read_base_store, store_path
from images.oci.layer_cache import DEFAULT_MAX_BYTES, LayerCache
from images.oci.normalize import Normalizing

LAYER_CACHE_MAX_ENV = "VLLM_MUSA_LAYER_CACHE_MAX_BYTES"
BASE_STORE = "base-images"
LAYER_CACHE = "layers"


def layer_cache_max(env: Mapping[str, str]) -> int:
    """The layer cache's bound in bytes: ``LAYER_CACHE_MAX_ENV``, else ``DEFAULT_MAX_BYTES``."""
    text = env.get(LAYER_CACHE_MAX_ENV, "")
    if not text:
        return DEFAULT_MAX_BYTES
    if not text.isdigit() or len(text) > 18:
        raise UsageError(
            f"{LAYER_CACHE_MAX_ENV}={text[:40]!r} is not a number of bytes",
            hint=f"set {LAYER_CACHE_MAX_ENV} to a whole number of bytes, e.g. 68719476736 "
            "(64 GiB), or unset it",
        )
    return int(text)


def pinned_base(reference: str) -> str | None:
    """The digest ``reference`` is pinned to, else None."""
    return parse_reference(reference).digest


def stored_base(
    reference: str,
    *,
    store_root: Path,
    fetcher: BaseImageFetcher | None,
    progress: Callable[[str], None] = lambda _line: None,
) -> BaseLayers | None:
    """The pinned base ``reference`` from the host's store, copied there first with
    ``fetcher`` when given; None when it is not pinned, or neither stored nor fetchable."""
    digest = pinned_base(reference)
    if digest is None:
        return None
    store = store_path(store_root, digest)
    if (store / "manifest.json").is_file():
        try:
            return read_base_store(store, reference=reference, digest=digest)
        except ImageLayoutError as exc:
            if fetcher is None:
                raise
            progress(f"note: {exc.message}; fetching the base again")
    if fetcher is None:
        return None
    ref = parse_reference(reference)
    progress(f"fetching the base image's blobs from {ref.registry} ({digest[:19]})")
    store_root.mkdir(parents=True, exist_ok=True)
    copied = Path(tempfile.mkdtemp(dir=store_root, prefix=".copy-"))
    try:
        fetcher.copy_to_dir(
            RegistryTarget(
                registry=ref.registry,
                reference=f"{ref.name}@{digest}",
                plain_http=is_loopback(ref.registry),
            ),
            copied,
        )
        return adopt_copied_dir(copied, store, reference=reference, digest=digest)
    finally:
        shutil.rmtree(copied, ignore_errors=True)


def normalizing_for(
    reference: str,
    *,
    engine: BuildEngine,
    cache_root: Path,
    env: Mapping[str, str],
    fetcher: BaseImageFetcher | None,
    progress: Callable[[str], None] = lambda _line: None,
) -> Normalizing:
    """The normalizer's settings for an image built on ``reference``: its base kept verbatim,
    the host's layer cache (bounded by ``LAYER_CACHE_MAX_ENV`` bytes)."""
    cache = LayerCache(cache_root / LAYER_CACHE, max_bytes=layer_cache_max(env), note=progress)
    base = stored_base(
        reference, store_root=cache_root / BASE_STORE, fetcher=fetcher, progress=progress
    )
    if base is not None:
        progress(f"base layers: {len(base.descriptors)} kept as {base.reference} serves them")
        return Normalizing(cache=cache, base=base)
    diff_ids = daemon_diff_ids(
        engine, reference, what="the base image", hint="pull or import the base image again"
    )
    progress(f"base layers: {len(diff_ids)} kept as the local daemon has them")
    return Normalizing(cache=cache, base_diff_ids=diff_ids)
