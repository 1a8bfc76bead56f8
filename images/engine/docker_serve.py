"""``DockerServingEngine``: the serve stage's engine (``ServingEngine``) on Docker.

Server containers, their logs and state, the running containers (for the preflight), image
identities and the device probe. Everything goes through the Docker API of ``DOCKER_HOST``, so
the same calls drive a remote GPU host. Only containers this run started are ever stopped; every
failure is one ``DockerError`` naming the image or the container.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

from core.errors import DockerError
from images.engine.docker_sdk import (
    DEFAULT_DOCKER_HOST,
    LazyClient,
    failing,
    image_file,
    local_image,
    run_once,
    short,
    volumes,
)
from images.engine.port import (
    ContainerFacts,
    ContainerSpec,
    LocalImage,
    ServerSpec,
    ServingEngine,
)


class DockerServingEngine(ServingEngine):
    """Docker for the serving stage, through the daemon ``DOCKER_HOST`` of ``env`` names."""

    def __init__(self, *, env: Mapping[str, str] | None = None, timeout: float = 120.0) -> None:
        self._env = dict(env if env is not None else os.environ)
        self._client = LazyClient(
            self._env,
            timeout,
            hint="start it, or point DOCKER_HOST at the GPU host's daemon "
            "(ssh://user@host or tcp://host:2376)",
        )

    @property
    def docker_host(self) -> str:
        return self._env.get("DOCKER_HOST", DEFAULT_DOCKER_HOST)

    def client(self) -> Any:
        return self._client.get()

    def close(self) -> None:
        self._client.close()

    def host(self) -> dict[str, str]:
        """What the daemon says of its host: name, OS, kernel, CPUs, memory, Docker version,
        the runtimes it offers."""
        with failing("cannot ask the Docker daemon about its host"):
            info = self.client().info()
        return {
            "name": str(info.get("Name", "")),
            "os": str(info.get("OperatingSystem", "")),
            "kernel": str(info.get("KernelVersion", "")),
            "cpus": str(info.get("NCPU", "")),
            "memory_bytes": str(info.get("MemTotal", "")),
            "docker": str(info.get("ServerVersion", "")),
            "runtimes": ",".join(sorted(info.get("Runtimes") or {})),
        }

    def image(self, ref: str) -> LocalImage | None:
        """The image ``ref`` (a tag, an id, or ``repository@sha256:...``), or None."""
        import docker.errors

        with (
            failing(f"cannot inspect image {ref}"),
            contextlib.suppress(docker.errors.ImageNotFound),
        ):
            return local_image(self.client().images.get(ref).attrs)
        return None

    def start(self, spec: ServerSpec) -> ContainerFacts:
        import docker.errors

        container = None
        try:
            container = self.client().containers.create(spec.image, **_create_arguments(spec))
            container.start()
        except docker.errors.DockerException as exc:
            if container is not None:  # created, not started: it goes, nothing is left behind
                with contextlib.suppress(docker.errors.DockerException):
                    container.remove(force=True)
            raise DockerError(
                f"cannot start a server container from {spec.image}: {short(exc)}",
                hint="check the profile's launch section (runtime, devices, model path)",
            ) from None
        return self.container(str(container.id))

    def container(self, container_id: str) -> ContainerFacts:
        with failing(f"cannot inspect container {container_id[:12]}"):
            return _facts(self.client().containers.get(container_id).attrs)

    def logs(self, container_id: str, *, tail: int | None = None) -> str:
        with failing(f"cannot read the log of {container_id[:12]}"):
            container = self.client().containers.get(container_id)
            data: bytes = container.logs(
                stdout=True, stderr=True, tail="all" if tail is None else tail
            )
        return data.decode("utf-8", "replace")

    def remove(self, container_id: str) -> None:
        """Stop and remove a container this run started (nothing else is ever stopped)."""
        import docker.errors

        with (
            failing(f"cannot remove container {container_id[:12]}"),
            contextlib.suppress(docker.errors.NotFound),
        ):
            container = self.client().containers.get(container_id)
            container.stop(timeout=10)
            container.remove(force=True)

    def running(self) -> list[ContainerFacts]:
        with failing("cannot list the running containers"):
            return [_facts(c.attrs) for c in self.client().containers.list()]

    def run(self, spec: ContainerSpec, *, what: str) -> tuple[int, str, bytes | None]:
        return run_once(self.client(), spec, what=what)

    def read_file(self, image: str, path: str, *, limit: int = 16 << 20) -> bytes | None:
        """The bytes of ``path`` in ``image`` (None when it has no such file), at most
        ``limit`` bytes."""
        return image_file(self.client(), image, path, limit)


def _create_arguments(spec: ServerSpec) -> dict[str, Any]:
    """The docker SDK's ``containers.create`` arguments of a server container."""
    kwargs: dict[str, Any] = {
        "command": list(spec.command),
        "environment": dict(spec.env),
        "labels": dict(spec.labels),
        "volumes": volumes(spec.mounts),
        "devices": [f"{d}:{d}:rwm" for d in spec.devices],
    }
    if spec.runtime:
        kwargs["runtime"] = spec.runtime
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"
    if spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.network == "host":
        kwargs["network_mode"] = "host"
    else:
        kwargs["network_mode"] = "bridge"
        kwargs["ports"] = {f"{spec.port}/tcp": (spec.publish_address, None)}
    return kwargs


def _facts(attrs: Mapping[str, Any]) -> ContainerFacts:
    """The facts of one container from the daemon's inspect document."""
    config = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    state = attrs.get("State") or {}
    env: dict[str, str] = {}
    for item in config.get("Env") or []:
        name, _, value = str(item).partition("=")
        env[name] = value
    status = str(state.get("Status", ""))
    return ContainerFacts(
        id=str(attrs.get("Id", "")),
        name=str(attrs.get("Name", "")).lstrip("/"),
        image=str(config.get("Image", "")),
        image_id=str(attrs.get("Image", "")),
        labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
        devices=tuple(str(d.get("PathOnHost", "")) for d in host.get("Devices") or []),
        runtime=host.get("Runtime") or None,
        env=env,
        status=status,
        exit_code=int(state["ExitCode"]) if status == "exited" and "ExitCode" in state else None,
        host_port=_host_port(attrs),
    )


def _host_port(attrs: Mapping[str, Any]) -> int | None:
    """The host port a container's published port is bound to (of the last one that has a
    binding, the first binding of it), or None."""
    host_port = None
    for bindings in ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).values():
        ports = [str(b.get("HostPort", "")) for b in bindings or []]
        host_port = next((int(p) for p in ports if p.isdigit()), host_port)
    return host_port
