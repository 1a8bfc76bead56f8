"""The engine port: what the stages ask of a container engine, and the values that cross it.

``BuildEngine`` is what the build pipeline needs (build, inspect, run, tag), ``ServingEngine``
what the serve stage needs (server containers, their logs and state, image identities, the
device probe), ``ImageInspector`` what the publish stage needs (what the daemon has of an
image, a file out of it); each says what it has of an image as one ``LocalImage``. The values
are plain frozen data, free of any SDK type, so stand-ins in tests and pure checks (the
preflight, the launch spec) use them as they are.

Every failure of an engine is one ``core.errors`` error (``DockerError``,
``BuildFailedError``, ``GateError``, ``PushError``) that says what failed and how to fix it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol


@dataclass(frozen=True, kw_only=True)
class LocalImage:
    """What the daemon has of one image."""

    id: str  # sha256:... (its config's digest)
    labels: Mapping[str, str] = field(default_factory=dict)
    repo_digests: tuple[str, ...] = ()  # "repository@sha256:..." known to the daemon, sorted
    size: int = 0  # bytes, as the daemon counts them
    diff_ids: tuple[str, ...] = ()  # its layers' diff_ids, bottom first


# --------------------------------------------------------------------------- building

PROGRESS_MODES = ("auto", "plain", "tty", "quiet")  # docker build --progress


def progress_mode(asked: str, *, terminal: bool, quiet: bool) -> str:
    """The BuildKit display for ``--progress asked``: ``auto`` is ``tty`` on a terminal and
    ``plain`` otherwise, as ``docker build`` decides it (and ``quiet`` under ``-q``)."""
    if asked != "auto":
        return asked
    if quiet:
        return "quiet"
    return "tty" if terminal else "plain"


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    context: Path
    dockerfile: Path
    target: str
    build_args: Mapping[str, str] = field(default_factory=dict)
    iidfile: Path
    network: str | None = None  # e.g. "host" when a step must reach 127.0.0.1
    no_cache: bool = False
    on_output: Callable[[str], None] | None = None  # also sees each progress line (counting)
    progress: str = "plain"  # BuildKit's display: plain | tty | quiet (see progress_mode)


@dataclass(frozen=True, kw_only=True)
class Builder:
    """The command a build runs, found once per engine."""

    argv: tuple[str, ...]  # the command up to its options: docker buildx build / docker build
    env: Mapping[str, str]
    description: str


@dataclass(frozen=True, kw_only=True)
class Mount:
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True, kw_only=True)
class ContainerSpec:
    """A throwaway container, run to its end and removed: ``command`` in ``image`` (its
    entrypoint cleared) with bind ``mounts``, ``devices``, ``runtime``, ``env`` and ``labels``,
    on ``network`` (None: the default bridge; ``host``; ``none``), in the host's PID namespace
    when ``pid_host`` (the device probe sees every process on the host), for at most
    ``timeout`` seconds; ``read`` is a file it writes, read back when it ends."""

    image: str
    command: tuple[str, ...]
    mounts: tuple[Mount, ...] = ()
    devices: tuple[str, ...] = ()
    runtime: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    network: str | None = None
    pid_host: bool = False
    read: str | None = None
    timeout: float = 1800.0


class BuildEngine(Protocol):
    """The image side: build a target, inspect and tag images, run throwaway containers."""

    def builder(self) -> Builder: ...

    def build(self, req: BuildRequest) -> str:
        """Build ``req.target``; the image id (no tag is given at build time)."""
        ...

    def inspect(self, ref: str) -> LocalImage:
        """The image ``ref``; a ``DockerError`` when the daemon does not have it."""
        ...

    def history(self, ref: str) -> list[dict[str, Any]]: ...

    def repo_digest(self, ref: str) -> str: ...

    def ensure_base_image(self, ref: str, *, pull: bool = True) -> None: ...

    def tag(self, image_id: str, tag: str) -> None: ...

    def run_python(self, image: str, python: str, script: str, args: Sequence[str]) -> str: ...

    def save_stream(self, ref: str) -> AbstractContextManager[BinaryIO]:
        """Image ``ref`` as the ``docker save`` archive the engine streams: a binary file to
        read in order, once; the stream is closed when the block ends. A failure of the engine
        while it is read is a ``DockerError``."""
        ...

    def load(self, archive: Iterable[bytes]) -> str:
        """Load the ``docker load`` archive streamed as ``archive``; the id of the image."""
        ...

    def remove_image(self, ref: str) -> None:
        """Remove the image ``ref`` (not its layers that other images use); absent is fine."""
        ...

    def run_container(self, spec: ContainerSpec) -> tuple[int, str]:
        """Run the container ``spec`` to its end and remove it; its exit code and its
        combined output."""
        ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- serving


@dataclass(frozen=True, kw_only=True)
class ServerSpec:
    """A server container: ``image``'s entrypoint with ``command``, detached. ``network``
    ``bridge`` publishes ``port`` on ``publish_address`` (a free host port); ``host`` uses
    the host's network, and the server listens on ``port`` there."""

    image: str
    command: tuple[str, ...]
    env: Mapping[str, str]
    labels: Mapping[str, str]
    mounts: tuple[Mount, ...]
    devices: tuple[str, ...]
    runtime: str | None
    ipc_host: bool
    network: str  # "bridge" | "host"
    port: int
    publish_address: str
    shm_size: str | None


@dataclass(frozen=True, kw_only=True)
class ContainerFacts:
    """What the daemon says of one container."""

    id: str
    name: str
    image: str  # the image reference it was started from
    image_id: str
    labels: Mapping[str, str]
    devices: tuple[str, ...]  # host paths of its --device entries
    runtime: str | None
    env: Mapping[str, str]
    status: str  # created | running | exited | ...
    exit_code: int | None
    host_port: int | None  # the published port of a bridge server


class ServingEngine(Protocol):
    """The serving side: server containers, their logs and state, the running containers (for
    the preflight), image identities and throwaway containers (the device probe, the client),
    on the host ``docker_host`` names."""

    @property
    def docker_host(self) -> str: ...

    def host(self) -> dict[str, str]: ...

    def image(self, ref: str) -> LocalImage | None: ...

    def start(self, spec: ServerSpec) -> ContainerFacts: ...

    def container(self, container_id: str) -> ContainerFacts: ...

    def logs(self, container_id: str, *, tail: int | None = None) -> str: ...

    def remove(self, container_id: str) -> None: ...

    def running(self) -> list[ContainerFacts]: ...

    def run(self, spec: ContainerSpec, *, what: str) -> tuple[int, str, bytes | None]:
        """Run ``spec`` (``what`` names it in errors: the client, the probe); its exit code,
        its output, and the file ``spec.read`` it wrote (None: none)."""
        ...

    def read_file(self, image: str, path: str, *, limit: int = 16 << 20) -> bytes | None: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- publishing


@dataclass(frozen=True, kw_only=True)
class Credentials:
    """A registry login: from the environment, a Docker config ``auths`` entry, or the answer
    of a credential helper."""

    username: str
    password: str = field(repr=False)
    source: str  # for messages: the variables, the config file, or the helper and its config

    @property
    def auth(self) -> str:
        """``USER:PASSWORD`` in base64, as a Docker config's ``auths`` holds it."""
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode()

    def secrets(self) -> tuple[str, ...]:
        return tuple(s for s in (self.password, self.auth) if s)


class ImageInspector(Protocol):
    """What the daemon has of an image (None: no such image), and a file out of it. The
    image is pushed from its OCI layout, by skopeo (``images.engine.skopeo``)."""

    def inspect(self, ref: str) -> LocalImage | None: ...

    def read_file(self, ref: str, path: str) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class RegistryTarget:
    """An image in a registry: ``registry`` (host[:port]) and ``reference``
    (``registry/repository:tag`` or ``...@sha256:...``), and whether it is plain http (a
    loopback registry only)."""

    registry: str
    reference: str
    plain_http: bool


class BaseImageFetcher(Protocol):
    """Copies a base image from its registry with its manifest and blobs unchanged."""

    def copy_to_dir(self, source: RegistryTarget, directory: Path) -> None:
        """Copy the image ``source`` (pinned by digest) into ``directory`` (``dir:`` form:
        ``manifest.json`` as the registry serves it, one file per blob named by its hex)."""
        ...

    def raw_manifest(self, source: RegistryTarget) -> bytes:
        """The manifest or index ``source`` (a tag or a digest) names, byte for byte as its
        registry serves it."""
        ...
