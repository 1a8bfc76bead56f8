"""``DockerInspector``: what the Docker daemon has of an image (``ImageInspector``).

It says what the daemon has of an image (its id, labels and digests) and reads a file out of
it, for ``publish`` (which pushes the image's OCI layout with ``images.engine.skopeo``, not the
daemon's copy) and ``diff``. Narrow on purpose: every call names its arguments (no
``**kwargs`` pass-through to the SDK). Reading a file out of an image creates a container and
never starts it.
"""

from __future__ import annotations

import contextlib

from core.closing import Closing
from core.errors import DockerError
from images.engine.docker_sdk import DAEMON_HINT, failing, image_file, local_image, short
from images.engine.port import ImageInspector, LocalImage


class DockerInspector(Closing, ImageInspector):
    """Images of the Docker daemon, through the docker SDK's low-level API."""

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
                f"cannot reach the Docker daemon: {short(exc)}", hint=DAEMON_HINT
            ) from None
        self._client = client

    def close(self) -> None:
        self._client.close()

    def inspect(self, ref: str) -> LocalImage | None:
        import docker.errors

        with (
            failing(f"docker inspect {ref}", hint=DAEMON_HINT),
            contextlib.suppress(docker.errors.ImageNotFound),
        ):
            return local_image(self._client.api.inspect_image(ref))
        return None

    def read_file(self, ref: str, path: str) -> bytes:
        """The bytes of ``path`` inside image ``ref`` (at most 64 MiB)."""
        data = image_file(self._client, ref, path, 64 << 20)
        if data is None:
            raise DockerError(
                f"{ref}: has no {path}",
                hint="an image built by `build_image.py build` carries its lock there; "
                "was this image built by another tool?",
            )
        return data
