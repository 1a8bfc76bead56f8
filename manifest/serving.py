"""The serving profile (``serving:`` of a stack manifest, or ``--profile FILE``): how an image's
server is launched, what its semantic check asks, and the A/B contract. Model and parser.

The profile is data: the model path (mounted read-only), the device flags, the environment of
both sides, the check requests and log patterns, the preflight probe, and the A/B workload
(lengths, concurrency levels, warmups, runs, requests per run, the order of server lifetimes,
thresholds and the bootstrap). ``images/serve/`` turns it into containers and requests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from manifest.fields import KeyReader, describe

NETWORKS: tuple[Literal["bridge", "host"], ...] = ("bridge", "host")
IPC_MODES: tuple[Literal["host", "private"], ...] = ("host", "private")
LIFETIMES = ("A1", "B1", "A2", "B2")
# serving.ab.order: A1 and B1 (either first), then optionally A2 and B2 (either first)
AB_ORDERS = (
    ("A1", "B1"),
    ("B1", "A1"),
    ("A1", "B1", "A2", "B2"),
    ("A1", "B1", "B2", "A2"),
    ("B1", "A1", "A2", "B2"),
    ("B1", "A1", "B2", "A2"),
)
LAUNCH_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ABS_PATH_RE = re.compile(r"^/[^\0]*$")
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:-]*$")
RUNTIME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SIZE_RE = re.compile(r"^[0-9]+[bkmg]?$")


@dataclass(frozen=True, kw_only=True)
class ModelMount:
    """The model on the GPU host, mounted read-only at ``mount`` and served as ``name``."""

    path: str  # on the Docker host; relative: under the repository around the manifest
    mount: str  # in the container
    name: str  # --served-model-name, and the model of every request


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How the server container runs: ``vllm serve <model.mount> --host --port
    --served-model-name <name> <args...>`` (the image's entrypoint is ``vllm serve``)."""

    args: tuple[str, ...] = ()
    port: int = 8000
    env: Mapping[str, str] = field(default_factory=dict)  # both sides, e.g. VLLM_USE_RUST_FRONTEND
    runtime: str | None = None  # e.g. mthreads
    devices: tuple[str, ...] = ()  # host device paths, passed as --device PATH
    ipc: Literal["host", "private"] = "private"
    network: Literal["bridge", "host"] = "bridge"
    shm_size: str | None = None


@dataclass(frozen=True, kw_only=True)
class CheckRequest:
    """One semantic request of ``serve-check``: a chat message (or a completion prompt) whose
    answer must contain ``contains`` and end with ``finish_reason``."""

    name: str
    chat: str | None
    prompt: str | None
    max_tokens: int
    contains: str | None
    finish_reason: str | None


@dataclass(frozen=True, kw_only=True)
class Probe:
    """The preflight's device probe (``mthreads-gmi`` on MUSA hosts): run in a container of
    the candidate image with the device flags and the host's PID namespace; it must exit 0,
    and a line of its output matching ``busy`` is a foreign process on the device."""

    command: tuple[str, ...]
    busy: str


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """In percent, candidate against control, at any concurrency level."""

    throughput_delta: float = -2.0  # refused below this
    p99_e2e_delta: float = 5.0  # refused above this


@dataclass(frozen=True, kw_only=True)
class AbContract:
    input_len: int = 512
    output_len: int = 128
    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    warmups: int = 2
    runs: int = 3
    requests_per_run: int = 64
    order: tuple[str, ...] = ("A1", "B1")
    thresholds: Thresholds = field(default_factory=Thresholds)
    resamples: int = 2000
    confidence: float = 0.95
    seed: int = 0
    request_timeout: float = 600.0


@dataclass(frozen=True, kw_only=True)
class ServingProfile:
    model: ModelMount
    launch: Launch = field(default_factory=Launch)
    health_deadline: float = 900.0  # seconds until /health and /v1/models answer
    checks: tuple[CheckRequest, ...] = ()
    log_patterns: tuple[str, ...] = ()
    probe: Probe | None = None
    ab: AbContract = field(default_factory=AbContract)


def parse_serving(r: KeyReader, value: object, keypath: list[str]) -> ServingProfile:
    """``serving:`` (or the top level of a ``--profile`` file, with ``keypath`` [])."""
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "serving")
    model = _model(r, m["model"], [*keypath, "model"])
    launch = _launch(r, m.get("launch", {}), [*keypath, "launch"])
    health = r.mapping(m.get("health", {}), [*keypath, "health"])
    r.keys(health, [*keypath, "health"], "serving.health")
    deadline = _number(r, health.get("deadline", 900), [*keypath, "health", "deadline"], low=1)
    check = r.mapping(m.get("check", {}), [*keypath, "check"])
    r.keys(check, [*keypath, "check"], "serving.check")
    checks = _checks(r, check.get("requests", []), [*keypath, "check", "requests"])
    patterns = r.string_list(check.get("log_patterns", []), [*keypath, "check", "log_patterns"])
    for i, pattern in enumerate(patterns):
        _regex(r, pattern, [*keypath, "check", "log_patterns", str(i)])
    preflight = r.mapping(m.get("preflight", {}), [*keypath, "preflight"])
    r.keys(preflight, [*keypath, "preflight"], "serving.preflight")
    probe = None
    if "probe" in preflight:
        probe = _probe(r, preflight["probe"], [*keypath, "preflight", "probe"])
    ab = _ab(r, m.get("ab", {}), [*keypath, "ab"])
    return ServingProfile(
        model=model,
        launch=launch,
        health_deadline=deadline,
        checks=tuple(checks),
        log_patterns=tuple(patterns),
        probe=probe,
        ab=ab,
    )


def _model(r: KeyReader, value: object, keypath: list[str]) -> ModelMount:
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "serving.model")
    path = r.string(m["path"], [*keypath, "path"])
    if not path.startswith("/"):  # a demo's: under the repository around the file
        if "mount" not in m:
            raise r.error([*keypath, "mount"], "a relative model.path needs a mount path")
        if ".." in path.split("/") or "\0" in path or ":" in path or "," in path:
            raise r.error([*keypath, "path"], f"{path!r} must stay under the repository")
    else:
        _abs_path(r, path, [*keypath, "path"])
    mount = _abs_path(r, m.get("mount", path), [*keypath, "mount"])
    name = r.string(m["name"], [*keypath, "name"])
    r.matching(MODEL_NAME_RE, name, [*keypath, "name"], "a model name (letters, digits, ._/:-)")
    return ModelMount(path=path, mount=mount, name=name)


def _launch(r: KeyReader, value: object, keypath: list[str]) -> Launch:
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "serving.launch")
    args = r.string_list(m.get("args", []), [*keypath, "args"])
    for i, arg in enumerate(args):
        if arg in ("--host", "--port", "--served-model-name") or arg.startswith(
            ("--host=", "--port=", "--served-model-name=")
        ):
            raise r.error(
                [*keypath, "args", str(i)],
                f"{arg} is set by the tool (from launch.port and model.name)",
                hint="remove it; set launch.port or model.name instead",
            )
    port = _integer(r, m.get("port", 8000), [*keypath, "port"], low=1, high=65535)
    env = r.string_map(m.get("env", {}), [*keypath, "env"])
    for name in env:
        if not LAUNCH_ENV_RE.fullmatch(name):
            raise r.error([*keypath, "env", name], "is not an environment variable name")
    runtime = None
    if "runtime" in m:
        runtime = r.string(m["runtime"], [*keypath, "runtime"])
        r.matching(RUNTIME_RE, runtime, [*keypath, "runtime"], "a runtime name")
    devices = r.string_list(m.get("devices", []), [*keypath, "devices"])
    for i, device in enumerate(devices):
        _abs_path(r, device, [*keypath, "devices", str(i)])
    ipc = r.choice(m.get("ipc", "private"), [*keypath, "ipc"], IPC_MODES)
    network = r.choice(m.get("network", "bridge"), [*keypath, "network"], NETWORKS)
    shm_size = None
    if "shm_size" in m:
        shm_size = r.string(m["shm_size"], [*keypath, "shm_size"]).lower()
        r.matching(SIZE_RE, shm_size, [*keypath, "shm_size"], "a size such as 16g")
    return Launch(
        args=tuple(args),
        port=port,
        env=env,
        runtime=runtime,
        devices=tuple(devices),
        ipc=ipc,
        network=network,
        shm_size=shm_size,
    )


def _checks(r: KeyReader, value: object, keypath: list[str]) -> list[CheckRequest]:
    if not isinstance(value, list):
        raise r.error(keypath, f"must be a list, got {describe(value)}")
    checks: list[CheckRequest] = []
    for i, item in enumerate(value):
        where = [*keypath, str(i)]
        m = r.mapping(item, where)
        r.keys(m, where, "serving.check.requests.<n>")
        if ("chat" in m) == ("prompt" in m):
            raise r.error(where, "give exactly one of chat (a user message) or prompt")
        checks.append(
            CheckRequest(
                name=r.string(m["name"], [*where, "name"]),
                chat=r.string(m["chat"], [*where, "chat"]) if "chat" in m else None,
                prompt=r.string(m["prompt"], [*where, "prompt"]) if "prompt" in m else None,
                max_tokens=_integer(r, m.get("max_tokens", 64), [*where, "max_tokens"], low=1),
                contains=r.string(m["contains"], [*where, "contains"]) if "contains" in m else None,
                finish_reason=(
                    r.string(m["finish_reason"], [*where, "finish_reason"])
                    if "finish_reason" in m
                    else None
                ),
            )
        )
    names = [c.name for c in checks]
    for name in names:
        if names.count(name) > 1:
            raise r.error(keypath, f"two requests are named {name!r}")
    return checks


def _probe(r: KeyReader, value: object, keypath: list[str]) -> Probe:
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "serving.preflight.probe")
    command = r.string_list(m["command"], [*keypath, "command"])
    if not command:
        raise r.error([*keypath, "command"], "must not be empty")
    busy = r.string(m["busy"], [*keypath, "busy"])
    _regex(r, busy, [*keypath, "busy"])
    return Probe(command=tuple(command), busy=busy)


def _ab(r: KeyReader, value: object, keypath: list[str]) -> AbContract:
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "serving.ab")
    levels = m.get("concurrency", [1, 4, 16, 64])
    if not isinstance(levels, list) or not levels:
        raise r.error([*keypath, "concurrency"], "must be a non-empty list of integers")
    concurrency = [
        _integer(r, v, [*keypath, "concurrency", str(i)], low=1, high=4096)
        for i, v in enumerate(levels)
    ]
    if len(set(concurrency)) != len(concurrency):
        raise r.error([*keypath, "concurrency"], "lists a level twice")
    order = r.string_list(m.get("order", ["A1", "B1"]), [*keypath, "order"])
    _check_order(r, order, [*keypath, "order"])
    t = r.mapping(m.get("thresholds", {}), [*keypath, "thresholds"])
    r.keys(t, [*keypath, "thresholds"], "serving.ab.thresholds")
    thresholds = Thresholds(
        throughput_delta=_number(
            r, t.get("throughput_delta", -2.0), [*keypath, "thresholds", "throughput_delta"]
        ),
        p99_e2e_delta=_number(
            r, t.get("p99_e2e_delta", 5.0), [*keypath, "thresholds", "p99_e2e_delta"]
        ),
    )
    b = r.mapping(m.get("bootstrap", {}), [*keypath, "bootstrap"])
    r.keys(b, [*keypath, "bootstrap"], "serving.ab.bootstrap")
    confidence = _number(r, b.get("confidence", 0.95), [*keypath, "bootstrap", "confidence"])
    if not 0.5 <= confidence < 1:
        raise r.error([*keypath, "bootstrap", "confidence"], "must be in [0.5, 1), e.g. 0.95")
    requests_per_run = _integer(
        r, m.get("requests_per_run", 64), [*keypath, "requests_per_run"], low=1
    )
    return AbContract(
        input_len=_integer(r, m.get("input_len", 512), [*keypath, "input_len"], low=1),
        output_len=_integer(r, m.get("output_len", 128), [*keypath, "output_len"], low=2),
        concurrency=tuple(concurrency),
        warmups=_integer(r, m.get("warmups", 2), [*keypath, "warmups"], low=0),
        runs=_integer(r, m.get("runs", 3), [*keypath, "runs"], low=1),
        requests_per_run=requests_per_run,
        order=tuple(order),
        thresholds=thresholds,
        resamples=_integer(
            r, b.get("resamples", 2000), [*keypath, "bootstrap", "resamples"], low=100
        ),
        confidence=confidence,
        seed=_integer(r, b.get("seed", 0), [*keypath, "bootstrap", "seed"], low=0),
        request_timeout=_number(
            r, m.get("request_timeout", 600), [*keypath, "request_timeout"], low=1
        ),
    )


def _check_order(r: KeyReader, order: list[str], keypath: list[str]) -> None:
    """One of ``AB_ORDERS``: lifetimes A1 B1, optionally then B2 A2 (or A2 B2), each once."""
    for i, name in enumerate(order):
        if name not in LIFETIMES:
            raise r.error(
                [*keypath, str(i)], f"{name!r} is not a lifetime", hint="use A1, B1, A2, B2"
            )
    if len(set(order)) != len(order):
        raise r.error(keypath, "names a lifetime twice")
    if tuple(order) not in AB_ORDERS:
        raise r.error(
            keypath,
            f"{' '.join(order)} is not a supported order",
            hint="A1 B1 (one lifetime each), or A1 B1 B2 A2 (the second pair reversed)",
        )


def _abs_path(r: KeyReader, value: object, keypath: list[str]) -> str:
    text = r.string(value, keypath)
    if not _ABS_PATH_RE.fullmatch(text) or ":" in text or "," in text:
        raise r.error(keypath, f"{text!r} is not an absolute path (no ':' or ',')")
    return text


def _integer(
    r: KeyReader, value: object, keypath: list[str], *, low: int, high: int | None = None
) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise r.error(keypath, f"must be an integer, got {describe(value)}")
    if value < low or (high is not None and value > high):
        span = f"at least {low}" if high is None else f"from {low} to {high}"
        raise r.error(keypath, f"must be {span}, got {value}")
    return value


def _number(r: KeyReader, value: object, keypath: list[str], *, low: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise r.error(keypath, f"must be a number, got {describe(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise r.error(keypath, "must be a finite number")
    if low is not None and number < low:
        raise r.error(keypath, f"must be at least {low:g}, got {number:g}")
    return number


def _regex(r: KeyReader, pattern: str, keypath: list[str]) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise r.error(keypath, f"is not a regular expression: {exc}") from None


def profile_to_json(profile: ServingProfile) -> dict[str, Any]:
    """The profile as plain data, for evidence bundles (sorted, stable)."""
    launch = profile.launch
    ab = profile.ab
    return {
        "model": asdict(profile.model),
        "launch": {
            **asdict(launch),
            "args": list(launch.args),
            "env": dict(sorted(launch.env.items())),
            "devices": list(launch.devices),
        },
        "health_deadline": profile.health_deadline,
        "checks": [asdict(c) for c in profile.checks],
        "log_patterns": list(profile.log_patterns),
        "probe": (
            None
            if profile.probe is None
            else {"command": list(profile.probe.command), "busy": profile.probe.busy}
        ),
        "ab": {
            "input_len": ab.input_len,
            "output_len": ab.output_len,
            "concurrency": list(ab.concurrency),
            "warmups": ab.warmups,
            "runs": ab.runs,
            "requests_per_run": ab.requests_per_run,
            "order": list(ab.order),
            "thresholds": {
                "throughput_delta": ab.thresholds.throughput_delta,
                "p99_e2e_delta": ab.thresholds.p99_e2e_delta,
            },
            "bootstrap": {"resamples": ab.resamples, "confidence": ab.confidence, "seed": ab.seed},
            "request_timeout": ab.request_timeout,
        },
    }
