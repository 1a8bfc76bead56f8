"""``DockerPusher``: the publish stage's engine (``ImagePusher``) on Docker.

Narrow on purpose: every call names its arguments (no ``**kwargs`` pass-through to the SDK),
the push stream is read to the end and its errors and digest are extracted, and credentials
are handed to the daemon per push and redacted from every message. Reading a file out of an
image creates a container and never starts it.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterator
from typing import Any

from core.closing import Closing
from core.digests import is_digest
from core.errors import DockerError, PushError
from images.engine.docker_sdk import DAEMON_HINT, explained, redact
from images.engine.port import ImagePusher, LocalImage, PushCredentials


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

    def tag(self, image_id: str, name: str, tag: str) -> None:
        import docker.errors

        try:
            ok = self._client.api.tag(image_id, name, tag=tag, force=True)
        except docker.errors.DockerException as exc:
            raise DockerError(f"docker tag {image_id} {name}:{tag}: {explained(exc)}") from None
        if not ok:
            raise DockerError(f"docker tag {image_id} {name}:{tag}: the daemon refused")

    def push(self, name: str, tag: str, credentials: PushCredentials | None) -> str:
        """Push ``name:tag``; returns the manifest digest the daemon reports."""
        import docker.errors

        auth = (
            {"username": credentials.username, "password": credentials.password}
            if credentials
            else None
        )
        secrets = credentials.secrets() if credentials else ()
        try:
            stream: Iterator[dict[str, Any]] = self._client.api.push(
                name, tag=tag, stream=True, decode=True, auth_config=auth
            )
            digest = _pushed_digest(stream, f"docker push {name}:{tag}", secrets)
        except docker.errors.DockerException as exc:
            raise PushError(
                redact(f"docker push {name}:{tag}: {explained(exc)}", secrets), hint=DAEMON_HINT
            ) from None
        if digest is None:
            raise PushError(f"docker push {name}:{tag}: the daemon reported no digest")
        return digest

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


def _pushed_digest(
    stream: Iterator[dict[str, Any]], what: str, secrets: tuple[str, ...]
) -> str | None:
    """The manifest digest a push stream reports, read to its end (None: it reported none);
    an error event is a ``PushError`` with ``secrets`` redacted."""
    digest = None
    for event in stream:
        if "error" in event or "errorDetail" in event:
            detail = event.get("errorDetail") or {}
            message = str(detail.get("message") or event.get("error"))
            raise PushError(
                redact(f"{what}: {message}", secrets),
                hint="nothing was recorded; fix the cause and publish again",
            )
        aux = event.get("aux")
        if isinstance(aux, dict) and is_digest(str(aux.get("Digest", ""))):
            digest = str(aux["Digest"])
    return digest
