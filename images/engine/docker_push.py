"""``DockerPusher``: the daemon side of publishing (``ImagePusher``) on Docker.

It says what the daemon has of an image (its id, labels and digests) and reads a file out of
it; the push itself copies the image's OCI layout (``images.engine.skopeo``), not the daemon's
copy. Narrow on purpose: every call names its arguments (no ``**kwargs`` pass-through to the
SDK). Reading a file out of an image creates a container and never starts it.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from typing import Any

from core.closing import Closing
from core.errors import DockerError
from images.engine.docker_sdk import DAEMON_HINT, explained
from images.engine.port import ImagePusher, LocalImage


class DockerPusher(Closing, ImagePusher):
    """The daemon side of publishing, through the docker SDK's low-level API."""

    def __init__(self, *, timeout: float = 600.0) -> None:
        import docker
        import docker.errors

        client = None
        try:
            client = docker.from_env(timeout=int(timeout))
            client.ping()
        except docker.errors.DockerException as exc:
            if client is not None:
                client.close()
            raise DockerError(
                f"cannot reach the Docker daemon: {explained(exc)}", hint=DAEMON_HINT
            ) from None
        self._client = client

    def close(self) -> None:
        self._client.close()

    def inspect(self, ref: str) -> LocalImage | None:
        import docker.errors

        try:
            data: dict[str, Any] = self._client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.DockerException as exc:
            raise DockerError(f"docker inspect {ref}: {explained(exc)}", hint=DAEMON_HINT) from None
        config = data.get("Config") or {}
        return LocalImage(
            id=str(data["Id"]),
            labels=dict(config.get("Labels") or {}),
            repo_digests=tuple(data.get("RepoDigests") or ()),
            repo_tags=tuple(data.get("RepoTags") or ()),
        )

    def read_file(self, ref: str, path: str) -> bytes:
        """The bytes of ``path`` inside image ``ref`` (a container is created, never started)."""
        import docker.errors

        try:
            container = self._client.api.create_container(
                ref, command=["/nonexistent-never-started"], entrypoint=""
            )
        except docker.errors.ImageNotFound:
            raise DockerError(
                f"{ref}: no such image in the Docker daemon",
                hint=f"pull it first (`docker pull {ref}`) or check the name",
            ) from None
        except docker.errors.DockerException as exc:
            raise DockerError(f"{ref}: cannot create a container: {explained(exc)}") from None
        cid = container["Id"]
        try:
            try:
                chunks, _stat = self._client.api.get_archive(cid, path)
                archive = b"".join(chunks)
            except docker.errors.NotFound:
                raise DockerError(
                    f"{ref}: has no {path}",
                    hint="an image built by `build_image.py build` carries its lock there; "
                    "was this image built by another tool?",
                ) from None
            except docker.errors.DockerException as exc:
                raise DockerError(f"{ref}: cannot read {path}: {explained(exc)}") from None
        finally:
            with contextlib.suppress(docker.errors.DockerException):
                self._client.api.remove_container(cid, force=True)
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            for member in tar:
                if member.isfile():
                    fh = tar.extractfile(member)
                    if fh is not None:
                        return fh.read()
        raise DockerError(f"{ref}: {path} is not a regular file")
