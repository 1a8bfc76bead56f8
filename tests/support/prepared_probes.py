"""The in-image probes of the gates run in a changed copy of a built image: what the docker
tests that break an image on purpose (a library removed, a marker rewritten) hand to
``probe_facts``."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from tests.support.environment import DOCKER_CLI as DOCKER


class PreparedProbes:
    """Runs each probe in a throwaway container of the image, after the shell line ``prepare``
    (a ``ProbeRunner`` for ``probe_facts``), with the network off as the build's gates."""

    def __init__(self, prepare: str) -> None:
        self.prepare = prepare

    def run_python(self, image: str, python: str, script: str, args: Sequence[str]) -> str:
        line = f'{self.prepare} && exec {python} -c "$0" "$@"'
        argv = [DOCKER, "run", "--rm", "--network", "none", "--entrypoint", "sh", image, "-c"]
        run = subprocess.run(
            [*argv, line, script, *args], capture_output=True, text=True, check=False, timeout=300
        )
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stdout
