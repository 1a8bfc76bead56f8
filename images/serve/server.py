"""One server lifetime: start the container, wait until it serves, keep its log, stop it.

``ServerLifetime`` is a context manager. Entering starts the container (through the serving
engine) and waits, up to the profile's health deadline, until ``/health`` answers 200 and
``/v1/models`` lists the served model; a container that exits first, or a deadline that
passes, is a ``ServeError`` with the tail of the server's log. Leaving stops and removes the
container, after keeping its whole log. Only containers this lifetime started are stopped.
"""

from __future__ import annotations

import contextlib
import time

from core.errors import BuildImageError, ServeError
from core.transport import Transport
from images.engine.port import ContainerFacts, ServingEngine
from images.serve.client import get_json
from images.serve.launch import server_spec
from manifest.serving import ServingProfile

LOG_TAIL = 40
POLL = 0.5


def tail(log: str, lines: int = LOG_TAIL) -> str:
    return "\n".join(log.rstrip("\n").splitlines()[-lines:])


class ServerLifetime:
    """The lifetime of ``image_id``'s server as ``profile`` launches it, in the role ``role``
    (``check``, ``A1``, ``B1``, ...); ``what`` names it in messages ("the control (A1)")."""

    def __init__(
        self,
        engine: ServingEngine,
        profile: ServingProfile,
        image_id: str,
        *,
        run_id: str,
        role: str,
        host: str,
        transport: Transport,
        what: str,
    ) -> None:
        self.engine = engine
        self.spec = server_spec(
            profile, image_id, run_id=run_id, role=role, docker_host=engine.docker_host
        )
        self.host = host
        self.model = profile.model.name
        self.health_deadline = profile.health_deadline
        self.transport = transport
        self.what = what
        self.container: ContainerFacts | None = None
        self.log = ""
        self.ready_after: float | None = None  # seconds from start to healthy

    @property
    def port(self) -> int:
        """The server's port on the Docker host."""
        assert self.container is not None
        port = self.spec.port if self.spec.network == "host" else self.container.host_port
        assert port is not None
        return port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ServerLifetime:
        self.container = self.engine.start(self.spec)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.container is None:
            return
        container_id = self.container.id
        with contextlib.suppress(BuildImageError):  # the log is evidence, not a condition
            self.log = self.engine.logs(container_id)
        self.engine.remove(container_id)
        self.container = None

    def _wait_ready(self) -> None:
        assert self.container is not None
        start = time.monotonic()
        last = "no answer yet"
        while True:
            facts = self.engine.container(self.container.id)
            if facts.status not in ("created", "running"):
                log = self.engine.logs(facts.id, tail=LOG_TAIL)
                raise ServeError(
                    f"{self.what}: the server container {facts.id[:12]} of {self.spec.image} "
                    f"{facts.status} (exit code {facts.exit_code}) before it served; "
                    f"the last lines of its log:\n{tail(log)}",
                    hint="read the log; run the image by hand with the launch arguments "
                    "of the evidence bundle",
                )
            if self.spec.network == "bridge" and facts.host_port is None:
                last = "its port is not published yet"
            else:
                self.container = facts
                last = self._probe()
                if not last:
                    self.ready_after = time.monotonic() - start
                    return
            if time.monotonic() - start >= self.health_deadline:
                log = self.engine.logs(facts.id, tail=LOG_TAIL)
                raise ServeError(
                    f"{self.what}: the server of {self.spec.image} was not healthy within "
                    f"{self.health_deadline:g} s ({last}); the last lines of its log:\n{tail(log)}",
                    hint="raise serving.health.deadline if the model loads slowly, or read "
                    "the log for the reason it does not come up",
                )
            time.sleep(POLL)

    def _probe(self) -> str:
        """ "" when healthy, else what is missing."""
        try:
            with self.transport.request("GET", f"{self.url}/health", timeout=5.0) as resp:
                if resp.status != 200:
                    return f"/health answers HTTP {resp.status}"
            status, body = get_json(self.transport, f"{self.url}/v1/models", timeout=5.0)
        except BuildImageError as exc:
            return f"no connection: {exc.message}"
        if status != 200:
            return f"/v1/models answers HTTP {status}"
        ids = []
        if isinstance(body, dict) and isinstance(body.get("data"), list):
            ids = [str(m.get("id")) for m in body["data"] if isinstance(m, dict)]
        if self.model not in ids:
            return f"/v1/models lists {ids}, not {self.model}"
        return ""
