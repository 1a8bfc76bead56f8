"""``SkopeoArtifacts``: ``Skopeo`` plus what attaching documents to an image digest asks of a
registry, through skopeo only (layouts written by ``images.attest.artifacts``).

- ``push_manifest``: an artifact or a cosign manifest, byte for byte (``push_layout``: skopeo
  copies an OCI 1.1 artifact with ``--preserve-digests`` unchanged); to a tag, or to
  ``REPO@sha256:...`` (no tag: an attached artifact needs none);
- ``push_index``: an image index (a referrers index). skopeo 1.9 cannot copy an index with its
  digest preserved: ``--multi-arch index-only`` writes it re-serialized (without the
  descriptors' ``artifactType``, which its image-spec predates; skopeo 1.18 writes it as it
  is), so the digest returned is the one the registry serves, read back;
- ``read_raw``: a manifest or index as served (None: the registry has none);
- ``fetch_blobs``: the config and layers of a manifest pinned by digest (a copy to ``dir:``),
  each one re-hashed against its digest before it is returned, sizes bounded.

Every call is bounded as ``Skopeo``'s are (``--timeout`` per attempt, ``--retries``, what is
left of ``--deadline``); credentials go in its private auth file, never on a command line.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from core.digests import is_digest
from core.errors import ManifestNotFoundError, RegistryError
from images.engine.port import Credentials, RegistryTarget
from images.engine.skopeo import Skopeo, _colon_free, _private, _verify

MAX_MANIFEST_BYTES = 4 * 1024 * 1024  # distribution's own limit for a manifest
MAX_BLOB_BYTES = 64 * 1024 * 1024  # one document fetched (an SBOM, a provenance, a signature)
MAX_BLOBS = 1024
_MISMATCH = re.compile(
    r"Digest did not match, expected (sha256:[0-9a-f]{64}), got (sha256:[0-9a-f]{64})"
)
HINT_ALTERED = "the registry or a proxy in between alters what it serves; do not trust it"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class SkopeoArtifacts(Skopeo):
    """``Skopeo`` (constructed the same way, a drop-in for it) that also pushes and reads the
    manifests, indexes and blobs of documents attached to an image."""

    def push_manifest(
        self, layout: Path, tag: str, dest: RegistryTarget, credentials: Credentials | None
    ) -> str:
        """Copy the manifest ``tag`` of ``layout`` (and its blobs) to ``dest``, bytes
        unchanged: its digest, as skopeo wrote it."""
        return self.push_layout(layout, tag, dest, credentials).digest

    def push_index(
        self, layout: Path, tag: str, dest: RegistryTarget, credentials: Credentials | None
    ) -> str:
        """Copy the index ``tag`` of ``layout`` to the tag ``dest`` (its manifests must be in
        the repository already; they are not copied): the digest of the index the registry
        serves at ``dest`` now, read back. Refused when that is not the one skopeo wrote
        (another client moved the tag in between)."""
        with _private(dest.registry, credentials) as (private, auth):
            digestfile = private / "digest"
            argv = [
                "copy",
                "--quiet",
                "--multi-arch",
                "index-only",
                f"--retry-times={self._retries}",
                "--digestfile",
                str(digestfile),
                f"--dest-tls-verify={_verify(dest)}",
                *auth,
                f"oci:{_colon_free(layout, private)}:{tag}",
                f"docker://{dest.reference}",
            ]
            self._run(argv, f"skopeo copy to {dest.reference}", dest, credentials, query=True)
            wrote = digestfile.read_text(encoding="utf-8").strip()
        served = self.read_raw(dest, credentials)
        digest = "nothing" if served is None else _sha256(served)
        if digest != wrote or not is_digest(wrote):
            raise RegistryError(
                f"{dest.reference}: skopeo wrote the index {wrote or '(no digest)'}, and the "
                f"registry now serves {digest} there",
                hint="another client changed the tag at the same time; attach again",
            )
        return digest

    def read_raw(self, target: RegistryTarget, credentials: Credentials | None) -> bytes | None:
        """The manifest or index ``target`` (a tag or a digest) names, as its registry serves
        it (``skopeo inspect --raw``); None when it has none (``manifest unknown``). A digest
        reference is checked against the sha256 of the bytes; the size is bounded."""
        raw = self._inspect(target, credentials, absent=True)
        if raw is None:
            return None
        if len(raw) > MAX_MANIFEST_BYTES:
            raise RegistryError(
                f"{target.reference}: the registry sent a manifest of {len(raw)} bytes, more "
                f"than {MAX_MANIFEST_BYTES}",
                hint=HINT_ALTERED,
            )
        _, at, pinned = target.reference.rpartition("@")
        if at and pinned != _sha256(raw):
            raise RegistryError(
                f"{target.reference}: the registry sent a manifest whose sha256 is {_sha256(raw)}",
                hint=HINT_ALTERED,
            )
        return raw

    def fetch_blobs(
        self,
        target: RegistryTarget,
        credentials: Credentials | None,
        directory: Path,
        *,
        max_bytes: int = MAX_BLOB_BYTES,
    ) -> dict[str, bytes]:
        """The config and layers (digest -> bytes) of the manifest ``target`` names by digest,
        copied into ``directory`` (absent or empty; the caller removes it). The manifest is
        read first and its blobs' sizes bounded by ``max_bytes`` each; then every blob is
        read back from the copy and re-hashed: bytes that are not what their digest says are
        refused, naming the blob."""
        _, at, pinned = target.reference.rpartition("@")
        if not (at and is_digest(pinned)):
            raise RegistryError(f"{target.reference}: blobs are fetched by digest only")
        raw = self.read_raw(target, credentials)
        if raw is None:
            raise ManifestNotFoundError(
                f"{target.reference}: the registry has no such digest",
                hint="the referrers index names an artifact the repository no longer has; "
                "attach it again",
            )
        wanted = _blob_sizes(raw, target.reference, max_bytes)
        directory.parent.mkdir(parents=True, exist_ok=True)
        with _private(target.registry, credentials) as (_, auth):
            argv = [
                "copy",
                "--quiet",
                f"--retry-times={self._retries}",
                f"--src-tls-verify={_verify(target)}",
                *auth,
                f"docker://{target.reference}",
                f"dir:{directory}",
            ]
            try:
                self._run(argv, f"skopeo copy from {target.reference}", target, credentials)
            except RegistryError as exc:
                found = _MISMATCH.search(exc.message)
                if found is None:
                    raise
                raise _altered(target, found[1], found[2]) from None
        blobs = {}
        for digest, size in wanted.items():
            data = _read_bounded(directory / digest.removeprefix("sha256:"), size, target, digest)
            if len(data) != size or _sha256(data) != digest:
                raise _altered(target, digest, f"{_sha256(data)} ({len(data)} bytes)")
            blobs[digest] = data
        return blobs


def _altered(target: RegistryTarget, digest: str, got: str) -> RegistryError:
    return RegistryError(
        f"{target.reference}: the registry sent other bytes for the blob {digest} "
        f"(their sha256 is {got}); they are refused",
        hint=HINT_ALTERED,
    )


def _blob_sizes(raw: bytes, reference: str, max_bytes: int) -> dict[str, int]:
    """The config and layer digests of the manifest ``raw`` and their declared sizes, each
    at most ``max_bytes``."""
    try:
        doc: Any = json.loads(raw)
        descriptors = [doc["config"], *doc["layers"]]
        sizes = {str(d["digest"]): d["size"] for d in descriptors}
    except (ValueError, RecursionError, TypeError, KeyError):
        raise RegistryError(
            f"{reference}: the manifest is not an image manifest (no config and layers)",
            hint="fetch_blobs copies the blobs of an image or artifact manifest only",
        ) from None
    if len(sizes) > MAX_BLOBS:
        raise RegistryError(f"{reference}: the manifest names {len(sizes)} blobs ({MAX_BLOBS})")
    for digest, size in sizes.items():
        if not is_digest(digest) or type(size) is not int or not 0 <= size <= max_bytes:
            raise RegistryError(
                f"{reference}: the blob {digest[:80]} of {repr(size)[:40]} bytes is refused "
                f"(a sha256 digest, at most {max_bytes} bytes)",
                hint="raise the limit only for a document known to be that large",
            )
    return sizes


def _read_bounded(path: Path, size: int, target: RegistryTarget, digest: str) -> bytes:
    """The file skopeo wrote for a blob of ``size`` bytes, read up to one byte more."""
    try:
        with path.open("rb") as fh:
            return fh.read(size + 1)
    except FileNotFoundError:
        raise RegistryError(f"{target.reference}: skopeo copied no blob {digest}") from None
