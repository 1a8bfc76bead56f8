"""From a serving profile and an image to the container to start, and back to words (pure).

The server runs the image's entrypoint (``vllm serve``) with ``<model.mount> --host 0.0.0.0
--port <port> --served-model-name <name>`` and the profile's ``launch.args``; the model is
mounted read-only; the devices, runtime, IPC mode, shared memory and environment are the
profile's, the same for both sides of an A/B. Every container the serving stage starts carries
the labels ``io.vllm-musa.serve.run`` (this run) and ``io.vllm-musa.serve.role``, so the
preflight knows which containers are its own and nothing else is ever stopped.

Where the server is reached: on this machine for a local daemon (``unix://``), else on the
host ``DOCKER_HOST`` names (``tcp://gpu-host:2376``, ``ssh://user@gpu-host``), unless
``--server-host`` says otherwise. A bridge server's port is published on 127.0.0.1 for a local
daemon and on every interface of a remote one (the client is not on that host).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from images.engine.port import Mount, ServerSpec
from manifest.serving import ServingProfile

RUN_LABEL = "io.vllm-musa.serve.run"
ROLE_LABEL = "io.vllm-musa.serve.role"


def is_local(docker_host: str) -> bool:
    return docker_host.startswith(("unix://", "npipe://")) or not docker_host


def server_host(docker_host: str, override: str | None = None) -> str:
    """The host name or address the client reaches the server on."""
    if override:
        return override
    if is_local(docker_host):
        return "127.0.0.1"
    host = urlsplit(docker_host).hostname
    return host or "127.0.0.1"


def server_spec(
    profile: ServingProfile, image: str, *, run_id: str, role: str, docker_host: str
) -> ServerSpec:
    launch = profile.launch
    command = (
        profile.model.mount,
        "--host",
        "0.0.0.0",  # noqa: S104 - the server inside its container
        "--port",
        str(launch.port),
        "--served-model-name",
        profile.model.name,
        *launch.args,
    )
    return ServerSpec(
        image=image,
        command=command,
        env=dict(sorted(launch.env.items())),
        labels={RUN_LABEL: run_id, ROLE_LABEL: role},
        mounts=(Mount(source=Path(profile.model.path), target=profile.model.mount),),  # on the host
        devices=launch.devices,
        runtime=launch.runtime,
        ipc_host=launch.ipc == "host",
        network=launch.network,
        port=launch.port,
        publish_address="127.0.0.1" if is_local(docker_host) else "0.0.0.0",  # noqa: S104
        shm_size=launch.shm_size,
    )


def docker_run_words(spec: ServerSpec, root: Path | None = None) -> list[str]:
    """The ``docker run`` command line that starts the same container: the evidence of how
    the server was launched. A mount source under ``root`` (the repository, for the demo's
    model) is written ``<repository>/...``: no path of the build machine in the evidence."""
    words = ["docker", "run", "--detach"]
    for name, value in sorted(spec.labels.items()):
        words += ["--label", f"{name}={value}"]
    if spec.runtime:
        words += ["--runtime", spec.runtime]
    for device in spec.devices:
        words += ["--device", device]
    if spec.ipc_host:
        words += ["--ipc", "host"]
    if spec.shm_size:
        words += ["--shm-size", spec.shm_size]
    if spec.network == "host":
        words += ["--network", "host"]
    else:
        words += ["--publish", f"{spec.publish_address}::{spec.port}"]
    for mount in spec.mounts:
        source = str(mount.source)
        if root is not None and mount.source.is_relative_to(root):
            source = "<repository>/" + mount.source.relative_to(root).as_posix()
        words += ["--volume", f"{source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"]
    for name, value in spec.env.items():
        words += ["--env", f"{name}={value}"]
    return [*words, spec.image, *spec.command]
