"""``DockerEngine``: the build pipeline's engine (``BuildEngine``) on Docker.

Builds go through the docker CLI with BuildKit (``docker_cli.find_builder``); progress streams
line by line, or is drawn on a terminal; the image id comes from ``--iidfile``; no tag is given
at build time. Inspect, pull, run, tag, save and load go through the docker SDK of
``DOCKER_HOST``; ``save_stream`` hands on the daemon's ``docker save`` archive as it arrives,
as a file to read in order, never written whole. Every failure is one ``DockerError`` /
``BuildFailedError`` / ``GateError`` that says what failed and how to fix it: the daemon down,
BuildKit missing, a base image absent, a step that failed.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO

from core.errors import BuildFailedError, DockerError, GateError
from images.engine.docker_cli import build_argv, check_cli, find_builder, run_on_pty, run_piped
from images.engine.docker_sdk import LazyClient, failing, local_image, run_once, short
from images.engine.port import BuildEngine, Builder, BuildRequest, ContainerSpec, LocalImage

_TAIL_LINES = 40
_CHUNK = 1 << 20  # what docker save is read in


class _ChunkReader(io.RawIOBase):
    """The chunks of a daemon's stream (the SDK's iterator) as a binary file read in order;
    a failure of the daemon or of the connection while it is read is a ``DockerError``
    naming ``what``."""

    def __init__(self, chunks: Iterator[bytes], what: str) -> None:
        import docker.errors

        super().__init__()
        self._chunks = chunks
        self._what = what
        self._left = memoryview(b"")
        self._failures = (docker.errors.DockerException, OSError)  # requests' are OSError

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                chunk = next(self._chunks, None)
            except self._failures as exc:
                raise DockerError(f"{self._what}: {short(exc)}") from None
            if chunk is None:
                return 0
            self._left = memoryview(chunk)
        view = memoryview(buffer).cast("B")
        count = min(len(view), len(self._left))
        view[:count] = self._left[:count]
        self._left = self._left[count:]
        return count


class DockerEngine(BuildEngine):
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
        self._client = LazyClient(
            self._env,
            timeout,
            hint="start it (ci/start-docker.sh on CI, or `systemctl start docker`), "
            "or point DOCKER_HOST at it",
        )
        self._builder: Builder | None = None

    # ----------------------------------------------------------------- the SDK

    def client(self) -> Any:
        return self._client.get()

    def close(self) -> None:
        self._client.close()

    def inspect(self, ref: str) -> LocalImage:
        import docker.errors

        try:
            return local_image(self.client().images.get(ref).attrs)
        except docker.errors.ImageNotFound:
            raise DockerError(f"image {ref} not found", hint="build it first") from None

    def history(self, ref: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.client().images.get(ref).history()
        return result

    def repo_digest(self, ref: str) -> str:
        """The registry digest of the local image ``ref`` when docker knows one, else ""."""
        if "@" in ref:
            return ref.split("@", 1)[1]
        name = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref
        for entry in self.inspect(ref).repo_digests:
            repo, _, digest = entry.partition("@")
            if repo == name or repo.endswith("/" + name):
                return digest
        return ""

    def ensure_base_image(self, ref: str, *, pull: bool = True) -> None:
        """The base image is present locally, or pulled now; else one clear error."""
        import docker.errors

        with contextlib.suppress(docker.errors.ImageNotFound):
            self.client().images.get(ref)
            return
        if not pull:
            raise DockerError(
                f"offline build: the base image {ref} is not present locally",
                hint="load it first (docker load / docker pull with network), or pass "
                "--base-image REF of an image that is",
            )
        with failing(
            f"base image {ref} is not present locally and cannot be pulled",
            hint="pull or load it first (docker pull / docker load / ci/make-base-image.sh), "
            "or pass --base-image REF",
        ):
            self.client().images.pull(ref)

    def tag(self, image_id: str, tag: str) -> None:
        from docker.utils import parse_repository_tag

        repository, name = parse_repository_tag(tag)
        with failing(f"docker refused to tag {image_id} as {tag}"):
            tagged = self.client().images.get(image_id).tag(repository, name or "latest")
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
            raise GateError(f"cannot start a container from {image}: {short(exc)}") from None
        try:
            container.start()
            status = container.wait(timeout=600)
            out: str = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
            err: str = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
        except (docker.errors.DockerException, OSError) as exc:  # requests' timeouts are OSError
            raise GateError(f"the gate probe in {image} failed to run: {short(exc)}") from None
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

    @contextlib.contextmanager
    def save_stream(self, ref: str) -> Iterator[BinaryIO]:
        what = f"docker save {ref}"
        with failing(what):
            chunks = self.client().api.get_image(ref, chunk_size=_CHUNK)
        try:
            yield io.BufferedReader(_ChunkReader(chunks, what), _CHUNK)
        finally:
            chunks.close()

    def load(self, archive: Iterable[bytes]) -> str:
        loaded = ""
        with failing("docker load"):
            for event in self.client().api.load_image(archive):
                if "error" in event:
                    raise DockerError(f"docker load: {str(event['error'])[:500]}")
                text = str(event.get("stream", ""))
                if text.startswith("Loaded image ID: "):
                    loaded = text.removeprefix("Loaded image ID: ").strip()
                elif text.startswith("Loaded image: ") and not loaded:
                    loaded = self.inspect(text.removeprefix("Loaded image: ").strip()).id
        if not loaded:
            raise DockerError("docker load: the daemon named no image it loaded")
        return loaded

    def remove_image(self, ref: str) -> None:
        import docker.errors

        with failing(f"docker rmi {ref}"), contextlib.suppress(docker.errors.ImageNotFound):
            self.client().api.remove_image(ref, noprune=False)

    def run_container(self, spec: ContainerSpec) -> tuple[int, str]:
        code, out, _ = run_once(self.client(), spec, what="a container")
        return code, out

    # ----------------------------------------------------------------- the CLI

    def builder(self) -> Builder:
        if self._builder is None:
            self._builder = find_builder(self._cli, self._env)
        return self._builder

    def build(self, req: BuildRequest) -> str:
        """Build ``req.target``; return the image id. Progress goes to ``on_output`` line by
        line (``plain``), to ``on_terminal`` as the bytes BuildKit draws (``tty``: the build
        runs on a pseudo-terminal), or nowhere (``quiet``); the last lines are kept for the
        error either way."""
        argv = build_argv(self.builder(), req)
        if req.iidfile.exists():
            req.iidfile.unlink()
        tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
        env = dict(self.builder().env)
        if req.progress == "tty":
            code = run_on_pty(argv, env, self._on_terminal, tail, req.on_output)
        else:
            show = self._on_output if req.progress == "plain" else None
            code = run_piped(argv, env, show, tail, req.on_output)
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
