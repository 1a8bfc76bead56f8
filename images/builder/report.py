"""The build report: what ``build`` hands to ``publish``, read and written here only; and
what ``build`` prints of it (``render_build_summary``, ``build_document`` for ``--json``).

``build`` writes one per target, when the gates have run and again after tagging; ``publish``
reads it back to find the gated image and the inputs it was built from.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.digests import is_digest
from core.errors import BuildReportError
from core.fsutil import atomic_write_text
from core.json_output import document
from core.tables import human_size, render_table

# the stages of a build, in order, as ``durations_s`` names them (seconds, time.monotonic)
STAGES: tuple[str, ...] = ("base_image", "context", "build", "base_fetch", "save", "normalize")
STAGES += ("load", "gates", "tag")
# what was reused: wheels from the cache (and fetched), BuildKit steps cached (and run)
CACHE_KEYS = ("wheels_cached", "wheels_fetched", "steps_cached", "steps_run")


LAYER_ORIGINS = ("base", "cached", "normalized")


@dataclass(frozen=True, kw_only=True)
class ReportLayer:
    """One layer of the built image: where its blob came from (``LAYER_ORIGINS``), the time
    its mtimes are clamped to (None for the base's) and the build step that wrote it."""

    digest: str
    size: int
    diff_id: str
    origin: str
    clamp: int | None
    step: str

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, path: Path, doc: object) -> ReportLayer:
        ok = (
            isinstance(doc, dict)
            and is_digest(str(doc.get("digest")))
            and is_digest(str(doc.get("diff_id")))
            and _is_count(doc.get("size"))
            and doc.get("origin") in LAYER_ORIGINS
            and (doc.get("clamp") is None or _is_count(doc.get("clamp")))
            and isinstance(doc.get("step"), str)
        )
        if not ok or not isinstance(doc, dict):
            raise _fail(
                path,
                "the build report's layers are not {digest, diff_id, size, origin, clamp, step}",
            )
        values: dict[str, Any] = {f.name: doc.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    target: str
    image_id: str  # sha256:... (the normalized image's config digest)
    stack: str = ""  # "" (here and below): the report does not say
    base_image: str = ""
    lock_sha256: str = ""
    lock_inputs_sha256: str = ""
    dockerfile_sha256: str = ""
    offline: bool = False
    network: str = "default"
    tags: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    fetched: tuple[str, ...] = ()
    gates: Mapping[str, bool] = field(default_factory=dict)  # gate name -> passed
    # the Python distributions the base image had, "name version (location)" (installed.py base)
    base_distributions: tuple[str, ...] = ()
    durations_s: Mapping[str, float] = field(default_factory=dict)  # STAGES and "total"
    size_bytes: int | None = None  # the image's size as Docker reports it; None: not known
    cache: Mapping[str, int] = field(default_factory=dict)  # CACHE_KEYS -> count
    # BuildKit's seconds per Dockerfile stage (BuildSteps.stage_seconds)
    stages_s: Mapping[str, float] = field(default_factory=dict)
    digest: str = ""  # sha256:... of the normalized image's manifest: what a registry serves
    oci_layout: str = ""  # where the normalized image is, an OCI layout (under the repository)
    source_date_epoch: int | None = None  # the build's time: every mtime is at most this
    # what compressed the image's own layers, with its library's version (Compressor.ident):
    # the same content compressed by another compressor has other digests, the same image id
    compressor: str = ""
    layers: tuple[ReportLayer, ...] = ()  # bottom first

    @property
    def failed_gates(self) -> list[str]:
        return sorted(name for name, ok in self.gates.items() if not ok)

    def to_json(self) -> dict[str, Any]:
        """Every field; tuples as the JSON lists the file holds."""
        doc: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(self)))
        return doc


def write_build_report(path: Path, report: BuildReport) -> None:
    atomic_write_text(path, json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")


def _fail(path: Path, message: str) -> BuildReportError:
    return BuildReportError(
        f"{path}: {message}",
        hint="build and gate the image again: `build_image.py build STACK --target TARGET`",
    )


def _is_seconds(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class _Fields:
    """The fields of a build report's JSON object, each read and checked by its shape; a
    field of the wrong shape is a ``BuildReportError`` naming it."""

    path: Path
    doc: Mapping[str, Any]

    def value(self, key: str, default: Any, valid: Callable[[Any], bool], message: str) -> Any:
        """The value at ``key`` (``default`` when absent) if ``valid``, else ``message``."""
        value = self.doc.get(key, default)
        if not valid(value):
            raise _fail(self.path, message)
        return value

    def text(self, key: str, *, required: bool = True) -> str:
        value = self.doc.get(key, None if required else "")
        if not isinstance(value, str) or (required and not value):
            raise _fail(self.path, f"the build report has no {key}")
        return value

    def strings(self, key: str) -> tuple[str, ...]:
        def valid(v: Any) -> bool:
            return isinstance(v, list) and all(isinstance(x, str) for x in v)

        message = f"the build report's {key} is not a list of strings"
        return tuple(self.value(key, [], valid, message))

    def mapping(self, key: str, valid: Callable[[object], bool], message: str) -> dict[str, Any]:
        """The object at ``key`` (default empty) whose every value is ``valid``."""

        def ok(v: Any) -> bool:
            return isinstance(v, dict) and all(valid(x) for x in v.values())

        return dict(self.value(key, {}, ok, message))

    def count(self, key: str, what: str) -> int | None:
        """The whole number (0 or more) at ``key``, or None when it is absent or null."""
        message = f"the build report's {key} is not {what}"
        count: int | None = self.value(key, None, lambda v: v is None or _is_count(v), message)
        return count


def read_build_report(path: Path) -> BuildReport:
    """Read and check a build report; a missing file or a wrong shape is a ``BuildReportError``."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(path, "no build report") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(path, f"cannot read the build report: {exc}") from None
    if not isinstance(doc, dict):
        raise _fail(path, "the build report is not a JSON object")
    fields = _Fields(path, doc)
    image_id = fields.text("image_id")
    if not image_id.startswith("sha256:"):
        raise _fail(path, "the build report has no image_id (sha256:...)")
    gates = fields.mapping(
        "gates",
        lambda v: isinstance(v, bool),
        "the build report's gates are not {name: true|false}",
    )
    durations = fields.mapping(
        "durations_s", _is_seconds, "the build report's durations_s are not {step: seconds}"
    )
    size = fields.count("size_bytes", "a number of bytes")
    cache = fields.mapping("cache", _is_count, "the build report's cache is not {what: count}")
    stages = fields.mapping(
        "stages_s", _is_seconds, "the build report's stages_s are not {stage: seconds}"
    )
    offline = fields.value(
        "offline",
        False,
        lambda v: isinstance(v, bool),
        "the build report's offline is not true or false",
    )
    layers = fields.value(
        "layers", [], lambda v: isinstance(v, list), "the build report's layers are not a list"
    )
    digest = fields.text("digest", required=False)
    if digest and not is_digest(digest):
        raise _fail(path, "the build report's digest is not sha256:<64 hex digits>")
    return BuildReport(
        stack=fields.text("stack", required=False),
        target=fields.text("target"),
        image_id=image_id,
        base_image=fields.text("base_image", required=False),
        lock_sha256=fields.text("lock_sha256", required=False),
        lock_inputs_sha256=fields.text("lock_inputs_sha256", required=False),
        dockerfile_sha256=fields.text("dockerfile_sha256", required=False),
        offline=offline,
        network=fields.text("network", required=False) or "default",
        tags=fields.strings("tags"),
        components=fields.strings("components"),
        fetched=fields.strings("fetched"),
        gates=gates,
        base_distributions=fields.strings("base_distributions"),
        durations_s={k: float(v) for k, v in durations.items()},
        size_bytes=size,
        cache=cache,
        stages_s={k: float(v) for k, v in stages.items()},
        digest=digest,
        oci_layout=fields.text("oci_layout", required=False),
        source_date_epoch=fields.count("source_date_epoch", "a number of seconds"),
        compressor=fields.text("compressor", required=False),
        layers=tuple(ReportLayer.from_json(path, item) for item in layers),
    )


# ------------------------------------------------------------------------------ what is shown


def render_build_summary(report: BuildReport) -> list[str]:
    """The lines printed after ``build``: the image, its size, each stage's time, the cache."""
    lines = [
        f"built {report.target}: {report.image_id}",
        *(
            [f"digest: {report.digest} (the normalized image: {report.oci_layout})"]
            if report.digest
            else []
        ),
        f"size: {human_size(report.size_bytes)}"
        + (f" ({report.size_bytes} bytes)" if report.size_bytes is not None else ""),
    ]
    durations = report.durations_s
    rows = [(s, durations[s]) for s in STAGES if s in durations]
    rows += sorted((k, v) for k, v in durations.items() if k not in STAGES and k != "total")
    rows += [("total", durations["total"])] if "total" in durations else []
    if rows:
        lines.append("time:")
        lines += render_table([(name, f"{seconds:.1f} s") for name, seconds in rows], right=(1,))
    if report.stages_s:
        lines.append("Dockerfile stages (BuildKit's seconds; parallel stages overlap):")
        lines += render_table(
            [(name, f"{seconds:.1f} s") for name, seconds in report.stages_s.items()],
            right=(1,),
        )
    c = report.cache
    if c:
        wheels = c.get("wheels_cached", 0) + c.get("wheels_fetched", 0)
        steps = c.get("steps_cached", 0) + c.get("steps_run", 0)
        lines.append(
            f"cache: {c.get('wheels_cached', 0)} of {wheels} wheels from the cache, "
            f"{c.get('steps_cached', 0)} of {steps} build steps cached"
        )
    if report.layers:
        lines.append(f"layers ({report.compressor or 'compressor not recorded'}):")
        lines += render_table(
            [
                (str(n), layer.origin, human_size(layer.size), layer.step[:60])
                for n, layer in enumerate(report.layers, 1)
            ],
            right=(2,),
        )
    return lines


def build_document(report: BuildReport, *, report_path: str) -> dict[str, Any]:
    """``build-image/build/1`` (docs/json.md): the image, its size, the gates, the stages'
    times and the cache hits, and where the build report is."""
    body = report.to_json()
    del body["lock_inputs_sha256"]
    return document(
        "build",
        body
        | {
            "cache": {k: int(report.cache.get(k, 0)) for k in CACHE_KEYS},
            "durations_s": {k: float(v) for k, v in report.durations_s.items()},
            "stages_s": {k: float(v) for k, v in report.stages_s.items()},
            "gates_passed": not report.failed_gates,
            "report": report_path,
        },
    )


_STAGE_STEP = re.compile(r"\[([A-Za-z0-9_.-]+) \d+/\d+\]")  # "[deps 2/4]"; not "[internal]"
_DONE = re.compile(r"DONE (\d+(?:\.\d+)?)s$")


@dataclass
class BuildSteps:
    """Reads BuildKit's plain progress as it streams: the steps taken from its cache (``#7
    CACHED``) and run (``#8 DONE 1.2s``), each once, and the seconds of each Dockerfile stage
    (``#8 [deps 2/4] RUN ...`` names it; parallel stages overlap)."""

    cached: set[str] = field(default_factory=set)
    done: dict[str, float] = field(default_factory=dict)  # step -> seconds
    stage_of: dict[str, str] = field(default_factory=dict)  # step -> Dockerfile stage

    def __call__(self, line: str) -> None:
        step, _, rest = line.partition(" ")
        if not (step.startswith("#") and step[1:].isdigit()):
            return
        word = rest.split(" ", 1)[0]
        if word == "CACHED":
            self.cached.add(step)
        elif word == "DONE":
            done = _DONE.match(rest)
            self.done[step] = float(done.group(1)) if done else 0.0
        elif step not in self.stage_of and (stage := _STAGE_STEP.match(rest)):
            self.stage_of[step] = stage.group(1)

    def counts(self) -> dict[str, int]:
        """The Dockerfile's steps taken from the cache and run (not BuildKit's own steps)."""
        ours = set(self.stage_of)
        cached = self.cached & ours
        run = (set(self.done) & ours) - cached
        return {"steps_cached": len(cached), "steps_run": len(run)}

    def stage_seconds(self) -> dict[str, float]:
        """Dockerfile stage -> the seconds of its steps that ran (cached steps count 0)."""
        out: dict[str, float] = {}
        for step, stage in self.stage_of.items():
            seconds = 0.0 if step in self.cached else self.done.get(step, 0.0)
            out[stage] = round(out.get(stage, 0.0) + seconds, 3)
        return dict(sorted(out.items()))
