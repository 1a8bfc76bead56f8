"""Docker: the one module that owns the docker SDK and the docker CLI.

``Engine`` is the build side (build, inspect, run, tag); ``DockerPusher`` is the publish side
(inspect, tag, push, read a file out of an image). Nothing else imports ``docker`` or runs the
docker CLI.

Builds go through the docker CLI with BuildKit (``docker buildx build`` when the buildx plugin
answers, else ``docker build`` with ``DOCKER_BUILDKIT=1`` on a CLI that has BuildKit built in,
such as Debian's ``/usr/bin/docker``); progress streams line by line; the image id comes from
``--iidfile``; no tag is given at build time. Inspect, run, tag and size go through the docker
SDK (``docker.from_env``). Every failure becomes one ``DockerError`` / ``BuildFailedError``
that says what and how to fix: the daemon down, BuildKit missing, a base image absent.

``DockerPusher`` is narrow on purpose: every call names its arguments (no ``**kwargs``
pass-through to the SDK), the push stream is read to the end and its errors and digest are
extracted, and credentials are handed to the daemon per push and redacted from every message.

``find_docker_login`` is where a registry login is read from the Docker config, the SDK's way
(``docker.auth``: ``credHelpers``, ``credsStore``, ``auths``), with each credential helper run
here within a timeout and an output bound.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import io
import json
import os
import re
import selectors
import shutil
import signal
import struct
import subprocess
import tarfile
import termios
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from core.errors import (
    BuildFailedError,
    CredentialHelperError,
    DockerCliError,
    DockerError,
    GateError,
    PushError,
    RegistryCredentialsError,
)
from images.builder.tags import is_digest

DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"  # the SDK's default without DOCKER_HOST
FALLBACK_CLI = "/usr/bin/docker"  # Debian's docker.io: BuildKit built in, no buildx needed
CLI_SETTING = "BUILD_IMAGE_DOCKER"  # the environment variable that picks the docker CLI
_CLI_HINT = (
    f"point {CLI_SETTING} at a docker CLI that builds with BuildKit (one with the buildx "
    f"plugin, or Debian's {FALLBACK_CLI}), or unset it to use `docker` on PATH"
)
_TAIL_LINES = 40


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
class Mount:
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True, kw_only=True)
class Builder:
    argv: tuple[str, ...]  # the command up to its options: docker buildx build / docker build
    env: Mapping[str, str]
    description: str


def _probe(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, env=dict(env), check=False, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(argv), 127, "", str(exc))


def check_cli(value: str, env: Mapping[str, str]) -> str:
    """The docker CLI that ``BUILD_IMAGE_DOCKER`` names: a path, or a name looked up on the
    ``PATH`` of ``env``; refused when it is missing or not an executable file."""
    shown = f"{CLI_SETTING}={value}"
    if os.sep not in value:
        found = shutil.which(value, path=env.get("PATH", os.defpath))
        if found is None:
            raise DockerCliError(f"{shown}: no {value} on PATH", hint=_CLI_HINT)
        return found
    path = Path(value)
    if not path.exists():
        raise DockerCliError(f"{shown}: no such file", hint=_CLI_HINT)
    if not path.is_file() or not os.access(path, os.X_OK):
        raise DockerCliError(f"{shown}: not an executable file", hint=_CLI_HINT)
    return value


def find_builder(cli: str | None, env: Mapping[str, str]) -> Builder:
    """The first docker CLI that builds with BuildKit: buildx, else DOCKER_BUILDKIT=1.

    ``cli`` is the one ``BUILD_IMAGE_DOCKER`` chose (checked by ``check_cli``): it is the only
    one tried, and one without BuildKit is refused. Without it, ``docker`` on PATH is tried,
    then Debian's ``/usr/bin/docker``."""
    candidates = [cli] if cli else ["docker", FALLBACK_CLI]
    seen: list[str] = []
    for c in candidates:
        if c in seen:
            continue
        seen.append(c)
        if _probe([c, "buildx", "version"], env).returncode == 0:
            return Builder(
                argv=(c, "buildx", "build", "--load"),
                env=dict(env),
                description=f"{c} buildx build",
            )
    for c in seen:
        bk_env = {**env, "DOCKER_BUILDKIT": "1"}
        res = _probe([c, "build", "--help"], bk_env)
        text = res.stdout + res.stderr
        if res.returncode == 0 and "--secret" in text and "buildx component is missing" not in text:
            return Builder(
                argv=(c, "build"), env=bk_env, description=f"DOCKER_BUILDKIT=1 {c} build"
            )
    if cli:
        raise DockerCliError(
            f"{CLI_SETTING}={cli} does not build with BuildKit: `{cli} buildx version` fails, "
            f"and `DOCKER_BUILDKIT=1 {cli} build --help` has no --secret",
            hint=_CLI_HINT,
        )
    raise DockerError(
        f"no docker CLI here builds with BuildKit (tried: {', '.join(seen)}): none has the "
        "buildx plugin, and none builds with DOCKER_BUILDKIT=1",
        hint="install the buildx plugin (docker-buildx), or Debian's docker.io whose "
        f"{FALLBACK_CLI} has BuildKit built in; BUILD_IMAGE_DOCKER=/path/to/docker picks a CLI",
    )


def _connect(env: Mapping[str, str], timeout: float, *, hint: str) -> Any:
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
            f"the Docker daemon does not answer at {host}: {_short(exc)}", hint=hint
        ) from None
    return client


def _volumes(mounts: Sequence[Mount]) -> dict[str, dict[str, str]]:
    return {
        str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in mounts
    }


def _run_once(
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
        raise DockerError(f"cannot start {what} from {image}: {_short(exc)}") from None
    try:
        container.start()
        status = container.wait(timeout=timeout)
        out: str = container.logs(stdout=True, stderr=True).decode("utf-8", "replace")
        data = _archive_file(container, read, limit) if read is not None else None
    except (docker.errors.DockerException, OSError) as exc:  # requests' timeouts are OSError
        raise DockerError(f"{what} in {image} failed to run: {_short(exc)}") from None
    finally:
        container.remove(force=True)
    return int(status.get("StatusCode", -1)), out, data


class Engine:
    """Docker for the image side. ``on_output`` receives each line of build progress (plain),
    ``on_terminal`` the bytes BuildKit draws on a terminal (tty)."""

    def __init__(
        self,
        *,
        cli: str | None = None,
        env: Mapping[str, str] | None = None,
        on_output: Callable[[str], None] = lambda _line: None,
        on_terminal: Callable[[bytes], None] = lambda _data: None,
        timeout: float = 120.0,
    ) -> None:
        self._env = dict(env if env is not None else os.environ)
        self._cli = check_cli(cli, self._env) if cli else None
        self._on_output = on_output
        self._on_terminal = on_terminal
        self._timeout = timeout
        self._client: Any = None
        self._builder: Builder | None = None

    # ----------------------------------------------------------------- the SDK

    def client(self) -> Any:
        if self._client is None:
            self._client = _connect(
                self._env,
                self._timeout,
                hint="start it (ci/start-docker.sh on CI, or `systemctl start docker`), "
                "or point DOCKER_HOST at it",
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def image_exists(self, ref: str) -> bool:
        import docker.errors

        try:
            self.client().images.get(ref)
        except docker.errors.ImageNotFound:
            return False
        return True

    def inspect(self, ref: str) -> dict[str, Any]:
        import docker.errors

        try:
            attrs: dict[str, Any] = self.client().images.get(ref).attrs
        except docker.errors.ImageNotFound:
            raise DockerError(f"image {ref} not found", hint="build it first") from None
        return attrs

    def history(self, ref: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.client().images.get(ref).history()
        return result

    def repo_digest(self, ref: str) -> str:
        """The registry digest of the local image ``ref`` when docker knows one, else ""."""
        if "@" in ref:
            return ref.split("@", 1)[1]
        attrs = self.inspect(ref)
        name = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
        for entry in attrs.get("RepoDigests") or []:
            repo, _, digest = str(entry).partition("@")
            if repo == name or repo.endswith("/" + name):
                return digest
        return ""

    def ensure_base_image(self, ref: str, *, pull: bool = True) -> None:
        """The base image is present locally, or pulled now; else one clear error."""
        import docker.errors

        if self.image_exists(ref):
            return
        if not pull:
            raise DockerError(
                f"offline build: the base image {ref} is not present locally",
                hint="load it first (docker load / docker pull with network), or pass "
                "--base-image REF of an image that is",
            )
        try:
            self.client().images.pull(ref)
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"base image {ref} is not present locally and cannot be pulled: {_short(exc)}",
                hint="pull or load it first (docker pull / docker load / ci/make-base-image.sh), "
                "or pass --base-image REF",
            ) from None

    def tag(self, image_id: str, tag: str) -> None:
        import docker.errors
        from docker.utils import parse_repository_tag

        repository, name = parse_repository_tag(tag)
        try:
            tagged = self.client().images.get(image_id).tag(repository, name or "latest")
        except docker.errors.DockerException as exc:
            raise DockerError(f"docker refused to tag {image_id} as {tag}: {_short(exc)}") from None
        if not tagged:
            raise DockerError(f"docker refused to tag {image_id} as {tag}")

    def run_python(self, image: str, python: str, script: str, args: Sequence[str]) -> str:
        """Run ``python -c script args...`` in a throwaway container without network."""
        import docker.errors

        client = self.client()
        try:
            container = client.containers.create(
                image,
                entrypoint=[python],
                command=["-c", script, *args],
                network_disabled=True,
                detach=True,
            )
        except docker.errors.DockerException as exc:
            raise GateError(f"cannot start a container from {image}: {_short(exc)}") from None
        try:
            container.start()
            status = container.wait(timeout=600)
            out: str = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            err: str = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        except (docker.errors.DockerException, OSError) as exc:  # requests' timeouts are OSError
            raise GateError(f"the gate probe in {image} failed to run: {_short(exc)}") from None
        finally:
            container.remove(force=True)
        code = int(status.get("StatusCode", -1))
        if code != 0:
            raise GateError(
                f"the gate probe exited {code} in {image} ({python} -c ...):\n"
                + (out + err)[-3000:],
                hint=f"does the image have {python}? run it by hand with --entrypoint {python}",
            )
        return out

    def run_container(
        self,
        image: str,
        command: Sequence[str],
        *,
        mounts: Sequence[Mount],
        network: str | None = None,
        timeout: float = 1800.0,
    ) -> tuple[int, str]:
        """Run ``command`` in a throwaway container of ``image`` with bind ``mounts``;
        return the exit code and the combined output. ``network`` None: the default bridge."""
        create = {
            "entrypoint": [],
            "command": list(command),
            "volumes": _volumes(mounts),
            "network_mode": network or "bridge",
        }
        code, out, _ = _run_once(self.client(), image, create, what="a container", timeout=timeout)
        return code, out

    # ----------------------------------------------------------------- the CLI

    def builder(self) -> Builder:
        if self._builder is None:
            self._builder = find_builder(self._cli, self._env)
        return self._builder

    def build_command(self, req: BuildRequest) -> list[str]:
        return build_argv(self.builder(), req)

    def build(self, req: BuildRequest) -> str:
        """Build ``req.target``; return the image id. Progress goes to ``on_output`` line by
        line (``plain``), to ``on_terminal`` as the bytes BuildKit draws (``tty``: the build
        runs on a pseudo-terminal), or nowhere (``quiet``); the last lines are kept for the
        error either way."""
        argv = self.build_command(req)
        if req.iidfile.exists():
            req.iidfile.unlink()
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        env = dict(self.builder().env)
        if req.progress == "tty":
            code = _run_on_pty(argv, env, self._on_terminal, tail, req.on_output)
        else:
            show = self._on_output if req.progress == "plain" else None
            code = _run_piped(argv, env, show, tail, req.on_output)
        if code != 0:
            text = "\n".join(tail)
            hint = "the lines above show the failing step; fix it and build again"
            marker = next((t for t in tail if "error[" in t), None)
            if marker is not None:
                hint = marker.split("error[", 1)[1].split("]", 1)[1].strip(": ")
            raise BuildFailedError(
                f"docker build of target {req.target} failed (exit {code}); last lines:\n{text}",
                hint=hint,
            )
        try:
            return req.iidfile.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise BuildFailedError(
                f"docker build of target {req.target} succeeded but wrote no --iidfile"
            ) from None

    def image_size(self, ref: str) -> int:
        return int(self.inspect(ref)["Size"])


PROGRESS_MODES = ("auto", "plain", "tty", "quiet")  # docker build --progress


def progress_mode(asked: str, *, terminal: bool, quiet: bool) -> str:
    """The BuildKit display for ``--progress asked``: ``auto`` is ``tty`` on a terminal and
    ``plain`` otherwise, as ``docker build`` decides it (and ``quiet`` under ``-q``)."""
    if asked != "auto":
        return asked
    if quiet:
        return "quiet"
    return "tty" if terminal else "plain"


def build_argv(builder: Builder, req: BuildRequest) -> list[str]:
    """The command line of one build (pure)."""
    argv = [
        *builder.argv,
        f"--progress={req.progress}",
        "--file",
        str(req.dockerfile),
        "--target",
        req.target,
        "--iidfile",
        str(req.iidfile),
    ]
    for name, value in sorted(req.build_args.items()):
        argv += ["--build-arg", f"{name}={value}"]
    if req.network:
        argv += ["--network", req.network]
    if req.no_cache:
        argv.append("--no-cache")
    argv.append(str(req.context))
    return argv


def _run_piped(
    argv: Sequence[str],
    env: Mapping[str, str],
    show: Callable[[str], None] | None,
    tail: collections.deque[str],
    count: Callable[[str], None] | None = None,
) -> int:
    """Run ``argv`` with its output read line by line (into ``tail``, to ``show``, and to
    ``count``, which reads BuildKit's plain progress)."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise DockerError(f"cannot run {argv[0]}: {exc}") from None
    with proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip("\n")
            tail.append(line)
            if show is not None:
                show(line)
            if count is not None:
                count(line)
        return proc.wait()


_ESCAPE = re.compile(rb"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def _run_on_pty(
    argv: Sequence[str],
    env: Mapping[str, str],
    draw: Callable[[bytes], None],
    tail: collections.deque[str],
    count: Callable[[str], None] | None = None,
) -> int:
    """Run ``argv`` on a pseudo-terminal (of this terminal's size), its bytes to ``draw`` as
    they come; ``tail`` gets its lines without the terminal's escape sequences."""
    master, slave = os.openpty()
    with contextlib.suppress(OSError):
        size = shutil.get_terminal_size()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size.lines, size.columns, 0, 0))
    try:
        proc = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=dict(env)
        )
    except OSError as exc:
        os.close(master)
        raise DockerError(f"cannot run {argv[0]}: {exc}") from None
    finally:
        os.close(slave)
    pending = b""
    try:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            draw(data)
            *lines, pending = re.split(rb"\r\n|\n|\r", pending + data)
            pending = pending[-(1 << 16) :]  # a line without an end is not kept whole
            for line in lines:
                text = _ESCAPE.sub(b"", line).decode("utf-8", errors="replace").rstrip()
                if text:
                    tail.append(text)
                    if count is not None:
                        count(text)
        return proc.wait()
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


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


@dataclass(frozen=True, kw_only=True)
class ImageFacts:
    id: str
    repo_digests: tuple[str, ...]  # repository@sha256:...
    tags: tuple[str, ...]


class ServingEngine:
    """Docker for the serving stage: server containers, their logs and state, the running
    containers (for the preflight), image identities and the device probe. Everything goes
    through the Docker API of ``DOCKER_HOST``, so the same calls drive a remote GPU host."""

    def __init__(self, *, env: Mapping[str, str] | None = None, timeout: float = 120.0) -> None:
        self._env = dict(env if env is not None else os.environ)
        self._timeout = timeout
        self._client: Any = None

    @property
    def docker_host(self) -> str:
        return self._env.get("DOCKER_HOST", DEFAULT_DOCKER_HOST)

    def client(self) -> Any:
        if self._client is None:
            self._client = _connect(
                self._env,
                self._timeout,
                hint="start it, or point DOCKER_HOST at the GPU host's daemon "
                "(ssh://user@host or tcp://host:2376)",
            )
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def host(self) -> dict[str, str]:
        """What the daemon says of its host: name, OS, kernel, CPUs, memory, Docker version,
        the runtimes it offers."""
        import docker.errors

        try:
            info = self.client().info()
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"cannot ask the Docker daemon about its host: {_short(exc)}"
            ) from None
        return {
            "name": str(info.get("Name", "")),
            "os": str(info.get("OperatingSystem", "")),
            "kernel": str(info.get("KernelVersion", "")),
            "cpus": str(info.get("NCPU", "")),
            "memory_bytes": str(info.get("MemTotal", "")),
            "docker": str(info.get("ServerVersion", "")),
            "runtimes": ",".join(sorted(info.get("Runtimes") or {})),
        }

    def image(self, ref: str) -> ImageFacts | None:
        """The image ``ref`` (a tag, an id, or ``repository@sha256:...``), or None."""
        import docker.errors

        try:
            attrs = self.client().images.get(ref).attrs
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.DockerException as exc:
            raise DockerError(f"cannot inspect image {ref}: {_short(exc)}") from None
        return ImageFacts(
            id=str(attrs["Id"]),
            repo_digests=tuple(sorted(str(d) for d in attrs.get("RepoDigests") or [])),
            tags=tuple(sorted(str(t) for t in attrs.get("RepoTags") or [])),
        )

    def start(self, spec: ServerSpec) -> ContainerFacts:
        import docker.errors

        kwargs: dict[str, Any] = {
            "command": list(spec.command),
            "environment": dict(spec.env),
            "labels": dict(spec.labels),
            "volumes": _volumes(spec.mounts),
            "devices": [f"{d}:{d}:rwm" for d in spec.devices],
            "detach": True,
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
        try:
            container = self.client().containers.run(spec.image, **kwargs)
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"cannot start a server container from {spec.image}: {_short(exc)}",
                hint="check the profile's launch section (runtime, devices, model path)",
            ) from None
        return self.container(str(container.id))

    def container(self, container_id: str) -> ContainerFacts:
        import docker.errors

        try:
            container = self.client().containers.get(container_id)
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"cannot inspect container {container_id[:12]}: {_short(exc)}"
            ) from None
        return _facts(container.attrs)

    def logs(self, container_id: str, *, tail: int | None = None) -> str:
        import docker.errors

        try:
            data: bytes = (
                self.client()
                .containers.get(container_id)
                .logs(stdout=True, stderr=True, tail="all" if tail is None else tail)
            )
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"cannot read the log of {container_id[:12]}: {_short(exc)}"
            ) from None
        return data.decode("utf-8", "replace")

    def remove(self, container_id: str) -> None:
        """Stop and remove a container this run started (nothing else is ever stopped)."""
        import docker.errors

        try:
            container = self.client().containers.get(container_id)
            container.stop(timeout=10)
            container.remove(force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"cannot remove container {container_id[:12]}: {_short(exc)}"
            ) from None

    def running(self) -> list[ContainerFacts]:
        import docker.errors

        try:
            listed = self.client().containers.list()
        except docker.errors.DockerException as exc:
            raise DockerError(f"cannot list the running containers: {_short(exc)}") from None
        return [_facts(c.attrs) for c in listed]

    def run_client(
        self,
        image: str,
        command: Sequence[str],
        *,
        mounts: Sequence[Mount],
        labels: Mapping[str, str],
        read: str,
        timeout: float,
    ) -> tuple[int, str, bytes | None]:
        """Run a client ``command`` in a throwaway container of ``image`` on the host's
        network; its exit code, its output, and the file ``read`` it wrote (None: none)."""
        create = {
            "entrypoint": [],
            "command": list(command),
            "labels": dict(labels),
            "volumes": _volumes(mounts),
            "network_mode": "host",
        }
        return _run_once(
            self.client(), image, create, what="the client", timeout=timeout, read=read
        )

    def read_file(self, image: str, path: str, *, limit: int = 16 << 20) -> bytes | None:
        """The bytes of ``path`` in ``image`` (None when it has no such file), at most
        ``limit`` bytes; the container is created, never started."""
        import docker.errors

        client = self.client()
        try:
            container = client.containers.create(image, entrypoint=["true"], command=[])
        except docker.errors.DockerException as exc:
            raise DockerError(f"cannot create a container of {image}: {_short(exc)}") from None
        try:
            return _archive_file(container, path, limit)
        except docker.errors.DockerException as exc:
            raise DockerError(f"cannot read {path} from {image}: {_short(exc)}") from None
        finally:
            container.remove(force=True)

    def probe(
        self,
        image: str,
        command: Sequence[str],
        *,
        devices: Sequence[str],
        runtime: str | None,
        env: Mapping[str, str],
        labels: Mapping[str, str],
        timeout: float = 120.0,
    ) -> tuple[int, str]:
        """Run ``command`` in a throwaway container of ``image`` with the devices and the
        host's PID namespace (so it sees every process on the host); exit code and output."""
        create: dict[str, Any] = {
            "entrypoint": [],
            "command": list(command),
            "environment": dict(env),
            "labels": dict(labels),
            "devices": [f"{d}:{d}:rwm" for d in devices],
            "pid_mode": "host",
            "network_mode": "none",
        }
        if runtime:
            create["runtime"] = runtime
        code, out, _ = _run_once(self.client(), image, create, what="the probe", timeout=timeout)
        return code, out


def _archive_file(container: Any, path: str, limit: int) -> bytes | None:
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


def _facts(attrs: Mapping[str, Any]) -> ContainerFacts:
    config = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    state = attrs.get("State") or {}
    env: dict[str, str] = {}
    for item in config.get("Env") or []:
        name, _, value = str(item).partition("=")
        env[name] = value
    host_port = None
    for bindings in ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).values():
        for binding in bindings or []:
            if str(binding.get("HostPort", "")).isdigit():
                host_port = int(binding["HostPort"])
                break
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
        host_port=host_port,
    )


# --------------------------------------------------------------------------- publishing

DAEMON_HINT = "start the Docker daemon (or set DOCKER_HOST), then check with `docker version`"


class PushCredentials(Protocol):
    """Registry credentials for one push (``images.publish.registry.Credentials``)."""

    @property
    def username(self) -> str: ...

    @property
    def password(self) -> str: ...

    def secrets(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, kw_only=True)
class LocalImage:
    id: str  # sha256:...
    labels: Mapping[str, str] = field(default_factory=dict)
    repo_digests: tuple[str, ...] = ()  # "repo@sha256:..." known to the daemon
    repo_tags: tuple[str, ...] = ()


class DockerPusher:
    """The daemon side of publishing."""

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
                f"cannot reach the Docker daemon: {_explained(exc)}", hint=DAEMON_HINT
            ) from None
        self._client = client

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> DockerPusher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def inspect(self, ref: str) -> LocalImage | None:
        import docker.errors

        try:
            data: dict[str, Any] = self._client.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.DockerException as exc:
            raise DockerError(
                f"docker inspect {ref}: {_explained(exc)}", hint=DAEMON_HINT
            ) from None
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
            raise DockerError(f"docker tag {image_id} {name}:{tag}: {_explained(exc)}") from None
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
                        _redact(f"docker push {name}:{tag}: {message}", secrets),
                        hint="nothing was recorded; fix the cause and publish again",
                    )
                aux = event.get("aux")
                if isinstance(aux, dict) and is_digest(str(aux.get("Digest", ""))):
                    digest = str(aux["Digest"])
        except docker.errors.DockerException as exc:
            raise PushError(
                _redact(f"docker push {name}:{tag}: {_explained(exc)}", secrets), hint=DAEMON_HINT
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
            raise DockerError(f"{ref}: cannot create a container: {_explained(exc)}") from None
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
                raise DockerError(f"{ref}: cannot read {path}: {_explained(exc)}") from None
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


# --------------------------------------------------------------------------- registry logins

HELPER_PREFIX = "docker-credential-"
HELPER_OUTPUT_LIMIT = 1 << 20  # a helper's answer is a few hundred bytes of JSON
_HELPER_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_NOT_FOUND = "credentials not found"  # docker-credential-helpers' ErrCredentialsNotFound


@dataclass(frozen=True, kw_only=True)
class DockerLogin:
    """A registry login found through the Docker config: an ``auths`` entry, or the answer
    of a credential helper."""

    username: str
    password: str = field(repr=False)
    source: str  # for messages: the config file, or the helper and where the config names it


def find_docker_login(
    registry: str, *, config_file: Path, env: Mapping[str, str], timeout: float
) -> DockerLogin | None:
    """The login the Docker config holds for ``registry`` (a host, ``docker.io`` for Docker
    Hub), found as the docker CLI finds it; None when it holds none.

    The docker SDK reads the config (``docker.auth.load_config``) and says which credential
    helper serves the registry (``credHelpers`` for that host, else ``credsStore``); a helper
    that has no login for it, and a config without helpers, leave the ``auths`` entries, matched
    by the SDK (``resolve_authconfig``). The helper itself is run here, not through the SDK's
    ``credentials.Store``, which waits for it without a timeout, reads all it prints, fails
    with a traceback on an answer that is not JSON, and puts the helper's output (which may be
    the secret) in its error message. Here the helper gets ``timeout`` seconds and
    ``HELPER_OUTPUT_LIMIT`` bytes, is asked for ``registry`` only, and every failure is a
    ``CredentialHelperError`` naming the helper and the registry, never showing what it printed
    on success. ``config_file`` is read only from the path given (the SDK would fall back to
    ``$DOCKER_CONFIG`` and the home directory by itself); ``env`` is the helper's environment."""
    import docker.auth
    import docker.errors

    if not config_file.is_file():
        return None
    try:
        doc = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryCredentialsError(f"{config_file}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RegistryCredentialsError(
            f"{config_file}: not valid JSON: {exc.msg} (line {exc.lineno})"
        ) from None
    if not isinstance(doc, dict):
        raise RegistryCredentialsError(f"{config_file}: not a JSON object")
    for key, kind in (("auths", dict), ("credHelpers", dict), ("credsStore", str)):
        if key in doc and not isinstance(doc[key], kind):
            what = "an object" if kind is dict else "a string"
            raise RegistryCredentialsError(f"{config_file}: {key!r} must be {what}")
    # only the login keys: the SDK reads a dict without them as a legacy file of auths alone,
    # and an empty one as "find the config yourself"
    logins = {key: doc[key] for key in ("auths", "credHelpers", "credsStore") if doc.get(key)}
    if not logins:
        return None
    try:
        config = docker.auth.load_config(config_dict=dict(logins))  # it pops the keys
    except (docker.errors.DockerException, ValueError, TypeError):
        raise _unusable_auths(config_file, logins.get("auths", {})) from None
    store = config.get_credential_store(registry)
    if store:
        key = docker.auth.INDEX_URL if registry == docker.auth.INDEX_NAME else registry
        where = "credHelpers" if config.cred_helpers.get(key) else "credsStore"
        login = _helper_login(
            str(store), registry, where=f"the {where} of {config_file}", env=env, timeout=timeout
        )
        if login is not None:
            return login
    # the auths entries, matched as the SDK matches them (https://HOST/v1/ is HOST)
    entry = docker.auth.AuthConfig({"auths": config.auths}).resolve_authconfig(registry)
    if not entry:
        return None
    if entry.get("IdentityToken"):
        raise _identity_token(registry, str(config_file))
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(password, str) and user:
        return DockerLogin(username=user, password=password, source=str(config_file))
    return None


def _unusable_auths(config_file: Path, auths: Mapping[str, Any]) -> RegistryCredentialsError:
    """The error naming the first ``auths`` entry the SDK cannot read."""
    import docker.auth
    import docker.errors

    for key, entry in auths.items():
        try:
            docker.auth.parse_auth({key: entry}, raise_on_error=True)
        except (docker.errors.DockerException, ValueError, TypeError):  # binascii.Error too
            return RegistryCredentialsError(
                f"{config_file}: auths.{key} is not an object whose auth is base64 of "
                "USER:PASSWORD",
                hint=f"run `docker login {key}` again, or fix the file",
            )
    return RegistryCredentialsError(f"{config_file}: the auths are not usable")


def _helper_login(
    name: str, registry: str, *, where: str, env: Mapping[str, str], timeout: float
) -> DockerLogin | None:
    """``docker-credential-NAME get`` for ``registry`` (the docker-credential-helpers
    protocol: the server on stdin, ``{"Username": ..., "Secret": ...}`` on stdout); None when
    the helper has no login for it."""
    import docker.auth

    program = HELPER_PREFIX + name
    about = f"the credential helper {program} ({where}) for the registry {registry}"
    retry = f"try it yourself: `echo {registry} | {program} get`"
    if not _HELPER_NAME_RE.fullmatch(name):
        raise CredentialHelperError(
            f"{where} names the credential helper {name!r}, which is not a helper name",
            hint="a helper is named like desktop, ecr-login or gcloud (docker-credential-NAME)",
        )
    exe = shutil.which(program, path=env.get("PATH", os.defpath))
    if exe is None:
        raise CredentialHelperError(
            f"{about} is not installed: no {program} on PATH",
            hint=f"install {program}, or take {name!r} out of {where}; "
            "or set BUILD_IMAGE_REGISTRY_USER, BUILD_IMAGE_REGISTRY_PASSWORD and "
            "BUILD_IMAGE_REGISTRY_HOST, which win over the Docker config",
        )
    # Docker Hub's logins are stored under the v1 index URL, as the docker CLI stores them
    server = docker.auth.INDEX_URL if registry == docker.auth.INDEX_NAME else registry
    ran = _run_bounded([exe, "get"], server.encode(), env=env, timeout=timeout)
    if ran.timed_out:
        raise CredentialHelperError(
            f"{about} did not answer within {timeout:g}s",
            hint=f"it may wait for a keychain or a browser login; {retry} (--timeout bounds it)",
        )
    if ran.too_large:
        raise CredentialHelperError(
            f"{about} printed more than {HELPER_OUTPUT_LIMIT} bytes",
            hint=f"what it printed is not shown; {retry}",
        )
    if ran.returncode != 0:
        said = _first_line(ran.stdout) or _first_line(ran.stderr)
        if _NOT_FOUND in said.lower():
            return None
        raise CredentialHelperError(
            f"{about} failed (exit status {ran.returncode}" + (f": {said})" if said else ")"),
            hint=f"{retry}; it may need a login first (`docker login {registry}`)",
        )
    answer: object = None
    with contextlib.suppress(ValueError):
        answer = json.loads(ran.stdout.decode("utf-8"))
    user = answer.get("Username") if isinstance(answer, dict) else None
    secret = answer.get("Secret") if isinstance(answer, dict) else None
    if not (isinstance(user, str) and isinstance(secret, str)):
        raise CredentialHelperError(
            f"{about} answered with something that is not a login (the JSON object "
            '{"Username": ..., "Secret": ...} of the credential helper protocol)',
            hint=f"what it printed is not shown, as it may hold a secret; {retry}",
        )
    if not user and not secret:  # docker-credential-pass answers so for an unknown server
        return None
    if user == docker.auth.TOKEN_USERNAME:
        raise _identity_token(registry, program)
    return DockerLogin(username=user, password=secret, source=f"{program}, {where}")


def _identity_token(registry: str, source: str) -> CredentialHelperError:
    return CredentialHelperError(
        f"{source} holds an identity token (an OAuth2 refresh token) for the registry "
        f"{registry}; this tool logs in with a user and a password or token only",
        hint="set BUILD_IMAGE_REGISTRY_USER, BUILD_IMAGE_REGISTRY_PASSWORD and "
        f"BUILD_IMAGE_REGISTRY_HOST={registry} (a user and an access token)",
    )


@dataclass(frozen=True, kw_only=True)
class _Ran:
    returncode: int | None
    stdout: bytes = field(repr=False)
    stderr: bytes = field(repr=False)
    timed_out: bool = False
    too_large: bool = False


def _run_bounded(
    argv: Sequence[str], stdin: bytes, *, env: Mapping[str, str], timeout: float
) -> _Ran:
    """Run ``argv`` with ``stdin``, reading at most ``HELPER_OUTPUT_LIMIT`` bytes of each of
    its outputs for at most ``timeout`` seconds; past either, its process group is killed (a
    shell script's children too, which would keep the pipes open)."""
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        return _Ran(returncode=127, stdout=b"", stderr=str(exc).encode())
    assert proc.stdin is not None
    assert proc.stdout is not None
    assert proc.stderr is not None
    with contextlib.suppress(OSError):  # a helper that does not read its input
        proc.stdin.write(stdin)
    with contextlib.suppress(OSError):
        proc.stdin.close()
    fd_out, fd_err = proc.stdout.fileno(), proc.stderr.fileno()
    out = {fd_out: bytearray(), fd_err: bytearray()}
    end = time.monotonic() + timeout
    timed_out = too_large = False
    with selectors.DefaultSelector() as selector:
        for stream in (proc.stdout, proc.stderr):
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map() and not too_large:
            left = end - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                out[key.fd] += chunk
                too_large = too_large or len(out[key.fd]) > HELPER_OUTPUT_LIMIT
    if not (timed_out or too_large):
        try:
            proc.wait(timeout=max(end - time.monotonic(), 0.001))
        except subprocess.TimeoutExpired:  # closed its outputs, then went on
            timed_out = True
    if timed_out or too_large:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return _Ran(
        returncode=proc.returncode,
        stdout=bytes(out[fd_out]),
        stderr=bytes(out[fd_err]),
        timed_out=timed_out,
        too_large=too_large,
    )


def _first_line(data: bytes) -> str:
    """The first line of a helper's complaint, printable and at most 200 characters."""
    line = data.decode("utf-8", "replace").strip().split("\n", 1)[0].strip()
    line = "".join(c if c.isprintable() else "?" for c in line)
    return line if len(line) <= 200 else line[:200] + "..."


def _explained(exc: BaseException) -> str:
    """The first line of the daemon's explanation of an API error, else of the error."""
    import docker.errors

    text = str(exc.explanation or exc) if isinstance(exc, docker.errors.APIError) else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def _redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text
