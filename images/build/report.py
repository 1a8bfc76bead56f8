"""The build report: what ``build`` hands to ``publish``, read and written here only.

``build`` writes one per target (``Workspace.report_path``), first when the gates have run
(tags empty) and again after tagging; ``publish`` reads it back to find the gated image and
the inputs it was built from. The JSON is sorted and indented, so the same build writes the
same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import BuildReportError
from core.fsutil import atomic_write_text


@dataclass(frozen=True, kw_only=True)
class BuildReport:
    stack: str
    target: str
    image_id: str  # sha256:...
    base_image: str
    lock_sha256: str
    lock_inputs_sha256: str
    dockerfile_sha256: str
    offline: bool = False
    network: str = "default"
    tags: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    fetched: tuple[str, ...] = ()
    gates: Mapping[str, bool] = field(default_factory=dict)  # gate name -> passed
    durations_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def failed_gates(self) -> list[str]:
        return sorted(name for name, ok in self.gates.items() if not ok)

    def to_json(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "target": self.target,
            "image_id": self.image_id,
            "tags": list(self.tags),
            "base_image": self.base_image,
            "lock_sha256": self.lock_sha256,
            "lock_inputs_sha256": self.lock_inputs_sha256,
            "dockerfile_sha256": self.dockerfile_sha256,
            "offline": self.offline,
            "network": self.network,
            "components": list(self.components),
            "fetched": list(self.fetched),
            "gates": dict(self.gates),
            "durations_s": dict(self.durations_s),
        }


def write_build_report(path: Path, report: BuildReport) -> None:
    atomic_write_text(path, json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")


def _fail(path: Path, message: str) -> BuildReportError:
    return BuildReportError(
        f"{path}: {message}",
        hint="build and gate the image again: `build_image.py build STACK --target TARGET`",
    )


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

    def text(key: str, *, required: bool = True) -> str:
        value = doc.get(key, None if required else "")
        if not isinstance(value, str) or (required and not value):
            raise _fail(path, f"the build report has no {key}")
        return value

    def strings(key: str) -> tuple[str, ...]:
        value = doc.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise _fail(path, f"the build report's {key} is not a list of strings")
        return tuple(value)

    image_id = text("image_id")
    if not image_id.startswith("sha256:"):
        raise _fail(path, "the build report has no image_id (sha256:...)")
    gates = doc.get("gates", {})
    if not isinstance(gates, dict) or not all(isinstance(v, bool) for v in gates.values()):
        raise _fail(path, "the build report's gates are not {name: true|false}")
    durations = doc.get("durations_s", {})
    if not isinstance(durations, dict) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in durations.values()
    ):
        raise _fail(path, "the build report's durations_s are not {step: seconds}")
    offline = doc.get("offline", False)
    if not isinstance(offline, bool):
        raise _fail(path, "the build report's offline is not true or false")
    return BuildReport(
        stack=text("stack", required=False),
        target=text("target"),
        image_id=image_id,
        base_image=text("base_image", required=False),
        lock_sha256=text("lock_sha256", required=False),
        lock_inputs_sha256=text("lock_inputs_sha256", required=False),
        dockerfile_sha256=text("dockerfile_sha256", required=False),
        offline=offline,
        network=text("network", required=False) or "default",
        tags=strings("tags"),
        components=strings("components"),
        fetched=strings("fetched"),
        gates=dict(gates),
        durations_s={k: float(v) for k, v in durations.items()},
    )
