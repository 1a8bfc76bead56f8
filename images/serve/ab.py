"""``ab CONTROL CANDIDATE``: the candidate image against the pinned control, fail-closed.

1. The preflight (``images.serve.preflight``): every problem is collected and refused at
   once, before any server starts.
2. The server lifetimes in the profile's order (A is the control, B the candidate: ``A1 B1``,
   or ``A1 B1 B2 A2``). In each lifetime, for each concurrency level: ``warmups`` runs, then
   ``runs`` measured runs of ``requests_per_run`` requests, ``concurrency`` in flight at a
   time, each a streaming ``/v1/completions`` of ``input_len`` prompt tokens (random token
   ids, the same prompts for both images) for exactly ``output_len`` tokens (``ignore_eos``).
3. The rows (``images.serve.stats``), the verdict against the profile's thresholds, and the
   caveats the tool can see (the two locks' different wheels, the order of the lifetimes).

The whole run is returned as an ``AbResult``; ``images.serve.report`` writes it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import PreflightError, ServeError
from core.transport import Deadline, Transport
from images.engine.port import ContainerSpec, LocalImage, ServingEngine
from images.serve.bench_client import (
    RESULT_DIR,
    RESULT_FILE,
    bench_serve_command,
    results_from_bench,
)
from images.serve.client import RequestResult, completion_body, stream_request
from images.serve.launch import ROLE_LABEL, RUN_LABEL, docker_run_words
from images.serve.preflight import control_problem, device_holders, probe_problems
from images.serve.server import ServerLifetime, tail
from images.serve.stats import LevelComparison, Run, Verdict, compare, verdict
from manifest.serving import ServingProfile

LOCK_IN_IMAGE = "/opt/vllm-musa/lock/requirements.txt"


@dataclass(frozen=True, kw_only=True)
class AbImage:
    role: str  # control | candidate
    ref: str
    facts: LocalImage


@dataclass(frozen=True, kw_only=True)
class Lifetime:
    name: str  # A1, B1, ...
    image: str  # the reference
    launch: tuple[str, ...]
    ready_after: float | None
    log_tail: str


@dataclass(frozen=True, kw_only=True)
class AbResult:
    run_id: str
    docker_host: str
    host: Mapping[str, str]  # what the daemon says of its host
    server_host: str
    control: AbImage
    candidate: AbImage
    probe_output: str | None
    lifetimes: tuple[Lifetime, ...]
    runs: tuple[Run, ...]
    rows: tuple[LevelComparison, ...]
    verdict: Verdict
    caveats: tuple[str, ...]
    profile: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class Preflight:
    control: AbImage
    candidate: AbImage
    probe_output: str | None


def preflight(
    engine: ServingEngine,
    profile: ServingProfile,
    control: str,
    candidate: str,
    *,
    pinned: Mapping[str, str],
    record: str,
    run_id: str,
) -> Preflight:
    """Check everything; refuse with every problem at once. Starts no server."""
    problems: list[str] = []
    control_facts = engine.image(control)
    candidate_facts = engine.image(candidate)
    problem = control_problem(control, control_facts, pinned, record)
    if problem:
        problems.append(problem)
    if candidate_facts is None:
        problems.append(f"the candidate {candidate} is not on the Docker host (build or pull it)")
    problems += device_holders(engine.running(), profile, run_id)
    probe_output = None
    if profile.probe is not None and candidate_facts is not None and not problems:
        probe = ContainerSpec(
            image=candidate_facts.id,
            command=tuple(profile.probe.command),
            devices=tuple(profile.launch.devices),
            runtime=profile.launch.runtime,
            env=profile.launch.env,
            labels={RUN_LABEL: run_id, ROLE_LABEL: "probe"},
            network="none",
            pid_host=True,
            timeout=120.0,
        )
        code, probe_output, _ = engine.run(probe, what="the probe")
        problems += probe_problems(profile.probe, code, probe_output)
    if problems or control_facts is None or candidate_facts is None:
        raise PreflightError(
            f"the A/B of {candidate} against {control} did not start, on {engine.docker_host}:\n"
            + "\n".join(f"  - {p}" for p in problems),
            hint="nothing was started or stopped; fix each line above and run again",
        )
    return Preflight(
        control=AbImage(role="control", ref=control, facts=control_facts),
        candidate=AbImage(role="candidate", ref=candidate, facts=candidate_facts),
        probe_output=probe_output,
    )


def prompts(count: int, length: int, seed: int) -> list[list[int]]:
    """``count`` prompts of ``length`` random token ids (the same for both images)."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible workload, not a secret
    return [[rng.randrange(100, 20000) for _ in range(length)] for _ in range(count)]


def drive(
    transport: Transport,
    url: str,
    model: str,
    batch: Sequence[Sequence[int]],
    *,
    concurrency: int,
    output_len: int,
    timeout: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, tuple[RequestResult, ...]]:
    """Send every prompt of ``batch``, ``concurrency`` in flight; the run's duration (first
    request sent to last done) and the results in prompt order."""
    endpoint = f"{url}/v1/completions"
    origin = clock()

    def one(prompt: Sequence[int]) -> RequestResult:
        body = completion_body(model, prompt, output_len, ignore_eos=True)
        return stream_request(transport, endpoint, body, timeout=timeout, origin=origin)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = tuple(pool.map(one, batch))
    return clock() - origin, results


def run_ab(
    engine: ServingEngine,
    profile: ServingProfile,
    checked: Preflight,
    *,
    run_id: str,
    server_host: str,
    lock_texts: Mapping[str, str | None],
    on_progress: Callable[[str], None] = lambda _line: None,
    root: Path,
    profile_doc: Mapping[str, Any],
    client: str,
) -> AbResult:
    """Run the lifetimes; ``client``: ``builtin`` (this module's streaming client) or
    ``vllm-bench`` (``vllm bench serve`` from the candidate image: ``bench_client``)."""
    ab = profile.ab
    workload = prompts(ab.requests_per_run, ab.input_len, ab.seed)
    runs: list[Run] = []
    lifetimes: list[Lifetime] = []
    # no network budget for the whole command: an A/B is hours of requests in flight; each
    # request has ab.request_timeout and each lifetime its health deadline; a stream of
    # tokens may pause, so no floor on its rate
    transport = Transport(
        timeout=ab.request_timeout,
        connections=max(ab.concurrency),
        deadline=Deadline(None),
        min_rate=None,
    )
    try:
        for name in ab.order:
            image = checked.control if name.startswith("A") else checked.candidate
            server = ServerLifetime(
                engine,
                profile,
                image.facts.id,
                run_id=run_id,
                role=name,
                host=server_host,
                transport=transport,
                what=f"the {image.role} {image.ref} ({name})",
            )
            with server:
                on_progress(f"{name}: {image.role} {image.ref} serves at {server.url}")
                run = _driver(engine, transport, profile, checked, server, workload, client, run_id)
                for level in ab.concurrency:
                    for _ in range(ab.warmups):
                        run(level)
                    for index in range(ab.runs):
                        duration, results = run(level)
                        runs.append(
                            Run(
                                lifetime=name,
                                concurrency=level,
                                index=index,
                                duration=duration,
                                results=results,
                            )
                        )
                        failed = sum(not r.ok for r in results)
                        on_progress(
                            f"{name}: concurrency {level}, run {index + 1}/{ab.runs}: "
                            f"{duration:.2f} s, {failed} failed"
                        )
            lifetimes.append(
                Lifetime(
                    name=name,
                    image=image.ref,
                    launch=tuple(docker_run_words(server.spec, root)),
                    ready_after=server.ready_after,
                    log_tail=tail(server.log),
                )
            )
    finally:
        transport.close()
    rows = tuple(
        compare(
            level,
            [r for r in runs if r.concurrency == level and r.lifetime.startswith("A")],
            [r for r in runs if r.concurrency == level and r.lifetime.startswith("B")],
            resamples=ab.resamples,
            confidence=ab.confidence,
            seed=ab.seed,
        )
        for level in ab.concurrency
    )
    return AbResult(
        run_id=run_id,
        docker_host=engine.docker_host,
        host=engine.host(),
        server_host=server_host,
        control=checked.control,
        candidate=checked.candidate,
        probe_output=checked.probe_output,
        lifetimes=tuple(lifetimes),
        runs=tuple(runs),
        rows=rows,
        verdict=verdict(rows, ab.thresholds),
        caveats=tuple(caveats(checked, ab.order, lock_texts)),
        profile=profile_doc,
    )


def _driver(  # noqa: PLR0917 - one private call site, in run order
    engine: ServingEngine,
    transport: Transport,
    profile: ServingProfile,
    checked: Preflight,
    server: ServerLifetime,
    workload: Sequence[Sequence[int]],
    client: str,
    run_id: str,
) -> Callable[[int], tuple[float, tuple[RequestResult, ...]]]:
    """One run at a concurrency level, by the chosen client: its duration and requests."""
    ab = profile.ab
    if client == "builtin":
        return lambda level: drive(
            transport,
            server.url,
            profile.model.name,
            workload,
            concurrency=level,
            output_len=ab.output_len,
            timeout=ab.request_timeout,
        )

    def bench(level: int) -> tuple[float, tuple[RequestResult, ...]]:
        command = bench_serve_command(
            profile, f"http://127.0.0.1:{server.port}", concurrency=level, requests=len(workload)
        )
        client = ContainerSpec(
            image=checked.candidate.facts.id,
            command=tuple(command),
            mounts=server.spec.mounts,
            labels={RUN_LABEL: run_id, ROLE_LABEL: "client"},
            network="host",
            read=f"{RESULT_DIR}/{RESULT_FILE}",
            timeout=ab.request_timeout * max(1, len(workload) // level + 1),
        )
        code, output, data = engine.run(client, what="the client")
        if code != 0 or data is None:
            raise ServeError(
                f"`vllm bench serve` in {checked.candidate.ref} exited {code} without a result; "
                f"its last lines:\n{tail(output)}",
                hint="does the candidate have vLLM's benchmark (vllm bench serve)? "
                "else use --client builtin",
            )
        try:
            return results_from_bench(json.loads(data))
        except ValueError as exc:
            raise ServeError(f"`vllm bench serve` in {checked.candidate.ref}: {exc}") from None

    return bench


def locked_versions(text: str) -> dict[str, str]:
    """``name -> version`` of a ``requirements.txt`` lock (``name==version \\``) (pure)."""
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip().rstrip("\\").strip()
        if not line or line.startswith(("#", "--")) or "==" not in line:
            continue
        name, _, version = line.partition("==")
        found[name.strip().lower()] = version.split(";", 1)[0].split()[0]
    return found


def caveats(
    checked: Preflight, order: Sequence[str], lock_texts: Mapping[str, str | None]
) -> list[str]:
    """What makes the comparison weaker than it looks, as far as the tool can see (pure)."""
    notes: list[str] = []
    a_text = lock_texts.get("control")
    b_text = lock_texts.get("candidate")
    for role, text in (("control", a_text), ("candidate", b_text)):
        if text is None:
            notes.append(f"the {role} has no lock at {LOCK_IN_IMAGE}: its wheels are unknown")
    if a_text is not None and b_text is not None:
        a, b = locked_versions(a_text), locked_versions(b_text)
        differ = [n for n in sorted(set(a) & set(b)) if a[n] != b[n]]
        same_public = {n for n in differ if a[n].split("+", 1)[0] == b[n].split("+", 1)[0]}
        for what, names in (
            ("wheel labels", [n for n in differ if n in same_public]),
            ("versions", [n for n in differ if n not in same_public]),
        ):
            if names:
                pairs = [f"{n} {a[n]} (control) vs {b[n]} (candidate)" for n in names]
                notes.append(
                    f"whole-image comparison: the locks differ in {what}: {'; '.join(pairs)}"
                )
        only = sorted(set(a) ^ set(b))
        if only:
            notes.append("whole-image comparison: only one lock has " + ", ".join(only))
    if checked.control.facts.id == checked.candidate.facts.id:
        notes.append("the control and the candidate are the same image")
    if list(order) == ["A1", "B1"]:
        notes.append("one lifetime per image, the control first (order A1 B1): no reversed pair")
    return notes
