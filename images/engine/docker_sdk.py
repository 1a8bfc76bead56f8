"""The docker SDK as the Docker adapters share it: a client of ``DOCKER_HOST``, throwaway
containers, a file out of a container, and the SDK's failures as messages.

``connect`` pings before it returns, so a daemon that is down is one ``DockerError`` naming
the host and what to do. ``short`` and ``explained`` reduce an SDK error to its first line
(the daemon's explanation when it gave one); ``redact`` takes secrets out of a message.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from core.errors import DockerError
from images.engine.port import Mount

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


def volumes(mounts: Sequence[Mount]) -> dict[str, dict[str, str]]:
    """The SDK's ``volumes`` argument for bind ``mounts``."""
    return {
        str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in mounts
    }


def run_once(
    client: Any,
    image: str,
    create: Mapping[str, Any],
    *,
    what: str,
    timeout: float,
    read: str | None = None,
    limit: int = 64 << 20,
) -> tuple[int, str, bytes | None]:
    """Create a container of ``image`` (the docker SDK's ``create`` arguments, named by the
    caller), run it to its end, and remove it: its exit code, its combined output, and the
    file ``read`` it left (None: not asked, or none). ``what`` names it in errors."""
    import docker.errors

    try:
        container = client.containers.create(image, detach=True, **create)
    except docker.errors.DockerException as exc:
        raise DockerError(f"cannot start {what} from {image}: {short(exc)}") from None
    try:
        container.start()
        status = container.wait(timeout=timeout)
        out: str = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        data = archive_file(container, read, limit) if read is not None else None
    except (docker.errors.DockerException, OSError) as exc:  # requests' timeouts are OSError
        raise DockerError(f"{what} in {image} failed to run: {short(exc)}") from None
    finally:
        container.remove(force=True)
    return int(status.get("StatusCode", -1)), out, data


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


def short(exc: BaseException) -> str:
    """The first line of an error, else its type's name."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def explained(exc: BaseException) -> str:
    """The first line of the daemon's explanation of an API error, else of the error."""
    import docker.errors

    text = str(exc.explanation or exc) if isinstance(exc, docker.errors.APIError) else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every non-empty secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
