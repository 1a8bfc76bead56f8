"""The docker SDK as the Docker adapters share it: a client of ``DOCKER_HOST``, an image as
a ``LocalImage``, throwaway containers, a file out of a container, and the SDK's failures as
messages.

``connect`` pings before it returns, so a daemon that is down is one ``DockerError`` naming
the host and what to do. ``failing`` makes any failure of the SDK in a block one
``DockerError``, said by ``short``: its first line (the daemon's explanation when it gave one);
``redact`` takes secrets out of a message.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from core.errors import DockerError
from images.engine.port import ContainerSpec, LocalImage, Mount

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"  # the SDK's default without DOCKER_HOST
DAEMON_HINT = "start the Docker daemon (or set DOCKER_HOST), then check with `docker version`"


def connect(env: Mapping[str, str], timeout: float, *, hint: str) -> Any:
    """A docker SDK client of ``env``'s ``DOCKER_HOST`` (an ``ssh://`` host through the ssh
    command), checked with a ping; else one error naming the host and ``hint``."""
    import docker
    import docker.errors

    host = env.get("DOCKER_HOST", DEFAULT_DOCKER_HOST)
    try:
        client = docker.from_env(
            version="auto",
            timeout=int(timeout),
            environment=dict(env),
            use_ssh_client=host.startswith("ssh://"),
        )
        client.ping()
    except docker.errors.DockerException as exc:
        raise DockerError(
            f"the Docker daemon does not answer at {host}: {short(exc)}", hint=hint
        ) from None
    return client


class LazyClient:
    """The docker SDK client of ``env``'s daemon, connected (``connect``) on first use and
    closed by ``close``; an engine that is never asked for the daemon never reaches it."""

    def __init__(self, env: Mapping[str, str], timeout: float, *, hint: str) -> None:
        self._env = env
        self._timeout = timeout
        self._hint = hint
        self._client: Any = None

    def get(self) -> Any:
        if self._client is None:
            self._client = connect(self._env, self._timeout, hint=self._hint)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def local_image(attrs: Mapping[str, Any]) -> LocalImage:
    """An image as the daemon's inspect ``attrs`` describe it."""
    config, rootfs = attrs.get("Config") or {}, attrs.get("RootFS") or {}
    return LocalImage(
        id=str(attrs["Id"]),
        labels=dict(config.get("Labels") or {}),
        repo_digests=tuple(sorted(str(d) for d in attrs.get("RepoDigests") or [])),
        size=int(attrs.get("Size") or 0),
        diff_ids=tuple(str(layer) for layer in rootfs.get("Layers") or []),
    )


def volumes(mounts: Sequence[Mount]) -> dict[str, dict[str, str]]:
    """The SDK's ``volumes`` argument for bind ``mounts``."""
    return {
        str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in mounts
    }


def run_once(
    client: Any, spec: ContainerSpec, *, what: str, limit: int = 64 << 20
) -> tuple[int, str, bytes | None]:
    """Create the container ``spec``, run it to its end, and remove it: its exit code, its
    combined output, and the file ``spec.read`` it left (None: not asked, or none, or more
    than ``limit`` bytes). ``what`` names it in errors."""
    import docker.errors

    create: dict[str, Any] = {
        "entrypoint": [],
        "command": list(spec.command),
        "environment": dict(spec.env),
        "labels": dict(spec.labels),
        "volumes": volumes(spec.mounts),
        "devices": [f"{d}:{d}:rwm" for d in spec.devices],
        "network_mode": spec.network or "bridge",
    }
    if spec.runtime:
        create["runtime"] = spec.runtime
    if spec.pid_host:
        create["pid_mode"] = "host"
    image = spec.image
    try:
        container = client.containers.create(image, detach=True, **create)
    except docker.errors.DockerException as exc:
        raise DockerError(f"cannot start {what} from {image}: {short(exc)}") from None
    try:
        container.start()
        status = container.wait(timeout=spec.timeout)
        out: str = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        data = archive_file(container, spec.read, limit) if spec.read is not None else None
    except (docker.errors.DockerException, OSError) as exc:  # requests' timeouts are OSError
        raise DockerError(f"{what} in {image} failed to run: {short(exc)}") from None
    finally:
        container.remove(force=True)
    return int(status.get("StatusCode", -1)), out, data


def image_file(client: Any, image: str, path: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` in ``image`` (at most ``limit``), or None; the
    container it is read from is created, never started."""
    import docker.errors

    try:
        container = client.containers.create(image, entrypoint=["true"], command=[])
    except docker.errors.ImageNotFound:
        raise DockerError(
            f"{image}: no such image in the Docker daemon",
            hint=f"pull it first (`docker pull {image}`) or check the name",
        ) from None
    except docker.errors.DockerException as exc:
        raise DockerError(f"cannot create a container of {image}: {short(exc)}") from None
    try:
        return archive_file(container, path, limit)
    except docker.errors.DockerException as exc:
        raise DockerError(f"cannot read {path} from {image}: {short(exc)}") from None
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(force=True)


def archive_file(container: Any, path: str, limit: int) -> bytes | None:
    """The bytes of the regular file ``path`` in ``container`` (at most ``limit``), or None."""
    import docker.errors

    try:
        stream, stat = container.get_archive(path)
    except docker.errors.NotFound:
        return None
    if int(stat.get("size", 0)) > limit:
        return None
    data = b"".join(stream)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = next((m for m in tar.getmembers() if m.isfile()), None)
        if member is None or member.size > limit:
            return None
        extracted = tar.extractfile(member)
        return extracted.read() if extracted is not None else None


@contextlib.contextmanager
def failing(what: str, *, hint: str | None = None) -> Iterator[None]:
    """A failure of the docker SDK or of its connection (requests' are ``OSError``) in the
    block as one ``DockerError``: ``what``, then the failure's first line."""
    import docker.errors

    try:
        yield
    except (docker.errors.DockerException, OSError) as exc:
        raise DockerError(f"{what}: {short(exc)}", hint=hint) from None


def short(exc: BaseException) -> str:
    """The first line of an error (of the daemon's explanation of an API error), else its
    type's name."""
    import docker.errors

    said = exc.explanation if isinstance(exc, docker.errors.APIError) else None
    text = str(said or exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
