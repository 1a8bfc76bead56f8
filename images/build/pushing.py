"""The docker SDK adapter for publishing: inspect, tag, push, and read a file out of an image.

Narrow on purpose: every call names its arguments (no ``**kwargs`` pass-through to the SDK),
the push stream is read to the end and its errors and digest are extracted, and credentials
are handed to the daemon per push and redacted from every message.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import docker
import docker.errors

from core.errors import DockerError, PushError
from images.build.tags import is_digest
from images.publish.registry import Credentials, redact

DAEMON_HINT = "start the Docker daemon (or set DOCKER_HOST), then check with `docker version`"


@dataclass(frozen=True, kw_only=True)
class LocalImage:
    id: str  # sha256:...
    labels: Mapping[str, str] = field(default_factory=dict)
    repo_digests: tuple[str, ...] = ()  # "repo@sha256:..." known to the daemon
    repo_tags: tuple[str, ...] = ()


class DockerPusher:
    """The daemon side of publishing."""

    def __init__(self, *, timeout: float = 600.0) -> None:
        client = None
        try:
            client = docker.from_env(timeout=int(timeout))
            client.ping()
        except docker.errors.DockerException as exc:
            if client is not None:
                client.close()
            raise DockerError(
                f"cannot reach the Docker daemon: {_short(exc)}", hint=DAEMON_HINT
            ) from None
        self._client = client

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> DockerPusher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inspect(self, ref: str) -> LocalImage | None:
        try:
            data: dict[str, Any] = self._client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.DockerException as exc:
            raise DockerError(f"docker inspect {ref}: {_short(exc)}", hint=DAEMON_HINT) from None
        config = data.get("Config") or {}
        return LocalImage(
            id=str(data["Id"]),
            labels=dict(config.get("Labels") or {}),
            repo_digests=tuple(data.get("RepoDigests") or ()),
            repo_tags=tuple(data.get("RepoTags") or ()),
        )

    def tag(self, image_id: str, name: str, tag: str) -> None:
        try:
            ok = self._client.api.tag(image_id, name, tag=tag, force=True)
        except docker.errors.DockerException as exc:
            raise DockerError(f"docker tag {image_id} {name}:{tag}: {_short(exc)}") from None
        if not ok:
            raise DockerError(f"docker tag {image_id} {name}:{tag}: the daemon refused")

    def push(self, name: str, tag: str, credentials: Credentials | None) -> str:
        """Push ``name:tag``; returns the manifest digest the daemon reports."""
        auth = (
            {"username": credentials.username, "password": credentials.password}
            if credentials
            else None
        )
        secrets = credentials.secrets() if credentials else ()
        digest = None
        try:
            stream: Iterator[dict[str, Any]] = self._client.api.push(
                name, tag=tag, stream=True, decode=True, auth_config=auth
            )
            for event in stream:
                if "error" in event or "errorDetail" in event:
                    detail = event.get("errorDetail") or {}
                    message = str(detail.get("message") or event.get("error"))
                    raise PushError(
                        redact(f"docker push {name}:{tag}: {message}", secrets),
                        hint="nothing was recorded; fix the cause and publish again",
                    )
                aux = event.get("aux")
                if isinstance(aux, dict) and is_digest(str(aux.get("Digest", ""))):
                    digest = str(aux["Digest"])
        except docker.errors.DockerException as exc:
            raise PushError(
                redact(f"docker push {name}:{tag}: {_short(exc)}", secrets), hint=DAEMON_HINT
            ) from None
        if digest is None:
            raise PushError(f"docker push {name}:{tag}: the daemon reported no digest")
        return digest

    def read_file(self, ref: str, path: str) -> bytes:
        """The bytes of ``path`` inside image ``ref`` (a container is created, never started)."""
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
            raise DockerError(f"{ref}: cannot create a container: {_short(exc)}") from None
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
                raise DockerError(f"{ref}: cannot read {path}: {_short(exc)}") from None
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


def _short(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc)
    return text.splitlines()[0] if text else type(exc).__name__
