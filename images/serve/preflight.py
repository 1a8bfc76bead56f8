"""What must hold before any server of an A/B starts (pure checks over the engine's facts).

- The control is pinned: given by digest (``REPO@sha256:...``, or the local image ID
  ``sha256:...``, as immutable), or a tag whose digest on the
  Docker host is the one its release record pins (``releases/<stack name>.json``). A tag the
  record does not know, or whose image has another digest, is refused: the comparison would
  be against something no one released.
- Both images are on the Docker host.
- The devices are free: no running container that this run did not start holds one of the
  profile's devices (the same ``--device`` host path, or the same GPU runtime with
  overlapping visible devices), and the profile's probe (``mthreads-gmi`` on MUSA hosts)
  exits 0 and shows no process line.

Every problem is collected, so one refusal names them all; nothing is ever stopped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from images.engine.port import ContainerFacts, LocalImage
from images.serve.launch import RUN_LABEL
from manifest.serving import Probe, ServingProfile

VISIBLE_VARS = ("MTHREADS_VISIBLE_DEVICES", "MUSA_VISIBLE_DEVICES")


def repository_of(ref: str) -> str:
    """``registry:5000/a/b`` of ``registry:5000/a/b:tag`` or ``...@sha256:...``."""
    name = ref.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name.rsplit(":", 1)[0] if ":" in last else name


def control_problem(
    ref: str, facts: LocalImage | None, pinned: Mapping[str, str], record: str
) -> str | None:
    """Why the control ``ref`` is not a pinned release, or None. ``pinned``: tag -> digest
    from the release record named ``record``."""
    if facts is None:
        return f"the control {ref} is not on the Docker host (pull it first)"
    if "@sha256:" in ref or ref == facts.id:  # a registry digest, or the image ID itself
        return None
    digest = pinned.get(ref)
    if digest is None:
        return (
            f"the control {ref} is given by tag, and {record} pins no digest for that tag: "
            "give the control by digest (REPO@sha256:...), or a tag of that record"
        )
    repository = repository_of(ref)
    if f"{repository}@{digest}" in facts.repo_digests:
        return None
    local = [d.split("@", 1)[1] for d in facts.repo_digests if d.startswith(repository + "@")]
    shown = ", ".join(local) if local else "no registry digest"
    return (
        f"the control {ref} is {shown} on the Docker host, but {record} pins {digest} for it: "
        f"pull {repository}@{digest} and give the control by that digest"
    )


def _visible(env: Mapping[str, str]) -> frozenset[str] | None:
    """The visible devices a container asks for; None: all of them."""
    for name in VISIBLE_VARS:
        value = env.get(name)
        if value is not None:
            value = value.strip()
            if value in ("", "none", "void"):
                return frozenset()
            if value == "all":
                return None
            return frozenset(v.strip() for v in value.split(",") if v.strip())
    return None


def _overlap(a: frozenset[str] | None, b: frozenset[str] | None) -> bool:
    if a is None:
        return b is None or bool(b)
    if b is None:
        return bool(a)
    return bool(a & b)


def device_holders(
    running: Sequence[ContainerFacts], profile: ServingProfile, run_id: str
) -> list[str]:
    """Each running container, not of this run, that holds one of the profile's devices."""
    launch = profile.launch
    wanted = set(launch.devices)
    ours = _visible(launch.env)
    found: list[str] = []
    for c in sorted(running, key=lambda c: c.name):
        if c.labels.get(RUN_LABEL) == run_id:
            continue
        held = sorted(wanted & set(c.devices))
        what = f"container {c.name} ({c.id[:12]}, image {c.image})"
        if held:
            found.append(f"{what} holds {', '.join(held)}")
        elif launch.runtime and c.runtime == launch.runtime and _overlap(ours, _visible(c.env)):
            found.append(f"{what} runs on the {launch.runtime} runtime with overlapping devices")
    return found


def probe_problems(probe: Probe, code: int, output: str) -> list[str]:
    """The probe must exit 0, and no line of its output may match ``probe.busy``."""
    command = " ".join(probe.command)
    if code != 0:
        last = output.strip().splitlines()[-5:]
        return [f"the device probe `{command}` exited {code}: {' | '.join(last) or 'no output'}"]
    busy = re.compile(probe.busy)
    return [
        f"the device probe `{command}` shows a process on the device: {line.strip()}"
        for line in output.splitlines()
        if busy.search(line)
    ]
