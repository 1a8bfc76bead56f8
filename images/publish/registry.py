"""The registries a publishing command asks, through skopeo (``images.engine.skopeo``, the one
registry client): each host's credentials looked up once (``find_credentials``), an image
reference made a skopeo target (plain http for a loopback registry only), and a reference the
registry does not have refused by name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from core.errors import ManifestNotFoundError
from core.network import is_loopback
from images.builder.tags import ImageReference
from images.engine.port import Credentials, RegistryTarget
from images.engine.skopeo import CopyReport, ManifestInfo, Skopeo, find_credentials
from images.engine.skopeo_artifacts import SkopeoArtifacts


def _target(ref: ImageReference) -> RegistryTarget:
    return RegistryTarget(
        registry=ref.registry, reference=str(ref), plain_http=is_loopback(ref.registry)
    )


class Registry:
    """Every registry of one command, asked through ``skopeo`` with each host's credentials
    (from ``env`` and ``docker_config``; a credential helper gets ``timeout`` seconds)."""

    def __init__(
        self,
        skopeo: Skopeo,
        *,
        env: Mapping[str, str],
        docker_config: Path | None,
        timeout: float,
        artifacts: SkopeoArtifacts | None = None,  # for documents attached to a digest
    ) -> None:
        self._skopeo = skopeo
        self._artifacts = artifacts
        self._env = dict(env)
        self._docker_config = docker_config
        self._timeout = timeout
        self._credentials: dict[str, Credentials | None] = {}

    def credentials(self, registry: str) -> Credentials | None:
        """Looked up once per host (a credential helper runs once)."""
        if registry not in self._credentials:
            self._credentials[registry] = find_credentials(
                registry, env=self._env, docker_config=self._docker_config, timeout=self._timeout
            )
        return self._credentials[registry]

    def lookup(self, ref: ImageReference) -> ManifestInfo | None:
        """The manifest the tag or digest ``ref`` names now; None when the registry has none."""
        return self._skopeo.lookup(_target(ref), self.credentials(ref.registry))

    def require(self, ref: ImageReference) -> ManifestInfo:
        info = self.lookup(ref)
        if info is None:
            what = "digest" if ref.digest else "tag"
            raise ManifestNotFoundError(
                f"{ref}: the registry has no such {what}",
                hint="check the spelling (`skopeo list-tags --tls-verify=false "
                f"docker://{ref.name}` lists the tags)",
            )
        return info

    def retag(self, ref: ImageReference, digest: str) -> None:
        """Point the tag ``ref`` at the manifest ``digest`` of its repository."""
        source = _target(dataclasses.replace(ref, tag=None, digest=digest))
        self._skopeo.retag(source, _target(ref), self.credentials(ref.registry))

    def push(self, layout: Path, tag: str, ref: ImageReference) -> CopyReport:
        """Copy the image ``tag`` of ``layout`` to ``ref``, digests preserved: what it did."""
        return self._skopeo.push_layout(layout, tag, _target(ref), self.credentials(ref.registry))

    def pull(self, ref: ImageReference, layout: Path, tag: str) -> None:
        """Copy the image ``ref`` into ``layout`` as ``tag``, its blobs unchanged."""
        self._skopeo.pull_layout(_target(ref), layout, tag, self.credentials(ref.registry))

    # -- documents attached to a digest (images.publish.attach, images.publish.verify)

    def _attaching(self) -> SkopeoArtifacts:
        assert self._artifacts is not None, "a Registry made without its artifacts client"
        return self._artifacts

    def push_manifest(self, layout: Path, tag: str, ref: ImageReference) -> str:
        """Copy the manifest ``tag`` of ``layout`` to ``ref`` (a tag, or the repository at
        the manifest's own digest), bytes unchanged: its digest."""
        target, creds = _target(ref), self.credentials(ref.registry)
        return self._attaching().push_manifest(layout, tag, target, creds)

    def push_index(self, layout: Path, tag: str, ref: ImageReference) -> str:
        """Copy the index ``tag`` of ``layout`` to the tag ``ref``: the digest served."""
        target, creds = _target(ref), self.credentials(ref.registry)
        return self._attaching().push_index(layout, tag, target, creds)

    def read_raw(self, ref: ImageReference) -> bytes | None:
        """The manifest or index ``ref`` names, as served; None when there is none."""
        return self._attaching().read_raw(_target(ref), self.credentials(ref.registry))

    def fetch_blobs(self, ref: ImageReference, directory: Path) -> dict[str, bytes]:
        """The blobs of the manifest ``ref`` (pinned by digest), each checked: digest -> bytes."""
        target, creds = _target(ref), self.credentials(ref.registry)
        return self._attaching().fetch_blobs(target, creds, directory)
