"""The build report and what ``build`` shows of it: the summary (size, each stage's time, the
cache hits), the ``--json`` document, the BuildKit step count, and the round trip on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import BuildReportError
from images.builder.report import (
    BuildReport,
    BuildSteps,
    build_document,
    read_build_report,
    render_build_summary,
    write_build_report,
)

IMAGE = "sha256:" + "e" * 64


def report(**changes: object) -> BuildReport:
    fields: dict[str, object] = {
        "stack": "stack/demo.yaml",
        "target": "final",
        "image_id": IMAGE,
        "base_image": "debian:bookworm-slim",
        "lock_sha256": "1" * 64,
        "lock_inputs_sha256": "2" * 64,
        "dockerfile_sha256": "3" * 64,
        "tags": ("vllm-musa-demo:final",),
        "components": ("vllm-rs",),
        "fetched": ("numpy-1.26.4-py3-none-any.whl",),
        "gates": {"imports": True, "pip-check": True},
        "base_distributions": ("six 1.16.0 (/usr/lib/python3/dist-packages)",),
        "durations_s": {
            "base_image": 0.25,
            "context": 1.5,
            "build": 62.125,
            "gates": 4.0,
            "tag": 0.01,
            "total": 67.9,
        },
        "size_bytes": 1_234_567_890,
        "cache": {"wheels_cached": 11, "wheels_fetched": 1, "steps_cached": 20, "steps_run": 3},
        "stages_s": {"build": 48.25, "deps": 12.0, "final": 0.5},
    }
    fields.update(changes)
    return BuildReport(**fields)  # type: ignore[arg-type]


def test_the_summary_shows_the_size_and_each_stage_in_order() -> None:
    assert render_build_summary(report()) == [
        f"built final: {IMAGE}",
        "size: 1.23 GB (1234567890 bytes)",
        "time:",
        "  base_image   0.2 s",
        "  context      1.5 s",
        "  build       62.1 s",
        "  gates        4.0 s",
        "  tag          0.0 s",
        "  total       67.9 s",
        "Dockerfile stages (BuildKit's seconds; parallel stages overlap):",
        "  build  48.2 s",
        "  deps   12.0 s",
        "  final   0.5 s",
        "cache: 11 of 12 wheels from the cache, 20 of 23 build steps cached",
    ]


def test_a_report_without_size_or_cache_says_so() -> None:
    old = report(size_bytes=None, cache={}, stages_s={}, durations_s={"build": 2.0, "total": 2.5})
    assert render_build_summary(old) == [
        f"built final: {IMAGE}",
        "size: ?",
        "time:",
        "  build  2.0 s",
        "  total  2.5 s",
    ]


def test_the_build_document() -> None:
    doc = build_document(report(), report_path="build/reports/demo-final.json")
    assert doc == {
        "base_distributions": ["six 1.16.0 (/usr/lib/python3/dist-packages)"],
        "base_image": "debian:bookworm-slim",
        "cache": {"steps_cached": 20, "steps_run": 3, "wheels_cached": 11, "wheels_fetched": 1},
        "components": ["vllm-rs"],
        "dockerfile_sha256": "3" * 64,
        "durations_s": {
            "base_image": 0.25,
            "build": 62.125,
            "context": 1.5,
            "gates": 4.0,
            "tag": 0.01,
            "total": 67.9,
        },
        "fetched": ["numpy-1.26.4-py3-none-any.whl"],
        "gates": {"imports": True, "pip-check": True},
        "gates_passed": True,
        "image_id": IMAGE,
        "digest": "",
        "oci_layout": "",
        "source_date_epoch": None,
        "compressor": "",
        "layers": [],
        "lock_sha256": "1" * 64,
        "network": "default",
        "offline": False,
        "report": "build/reports/demo-final.json",
        "schema": "build-image/build/1",
        "size_bytes": 1234567890,
        "stack": "stack/demo.yaml",
        "stages_s": {"build": 48.25, "deps": 12.0, "final": 0.5},
        "tags": ["vllm-musa-demo:final"],
        "target": "final",
    }
    failed = build_document(report(gates={"imports": False}, tags=()), report_path="r.json")
    assert (failed["gates"], failed["gates_passed"], failed["tags"]) == (
        {"imports": False},
        False,
        [],
    )
    unknown = build_document(report(size_bytes=None, cache={}), report_path="r.json")
    assert unknown["size_bytes"] is None
    assert unknown["cache"] == dict.fromkeys(
        ("steps_cached", "steps_run", "wheels_cached", "wheels_fetched"), 0
    )


def test_the_dockerfiles_steps_are_counted_once_each() -> None:
    steps = BuildSteps()
    for line in [
        '#0 building with "default" instance using docker driver',
        "#1 [internal] load build definition from Dockerfile",
        "#1 transferring dockerfile: 2.1kB done",
        "#1 DONE 0.0s",
        "#5 [base 1/3] FROM docker.io/library/debian:bookworm-slim",
        "#5 DONE 0.1s",
        "#6 [deps 2/4] RUN pip install",
        "#6 CACHED",
        "#7 [deps 3/4] COPY wheelhouse",
        "#7 CACHED",
        "#8 [final 1/2] RUN check",
        "#8 0.412 DONE is printed by the step itself",
        "#8 DONE 1.2s",
        "#9 [final 2/2] RUN other",
        "#9 [final 2/2] RUN other (the step named again)",
        "#9 DONE 2.35s",
        "#12 ERROR: something",
        "DONE",
        "#x DONE",
    ]:
        steps(line)
    assert steps.counts() == {"steps_cached": 2, "steps_run": 3}  # not [internal] #1
    assert steps.stage_seconds() == {"base": 0.1, "deps": 0.0, "final": 3.55}


def test_size_and_cache_survive_the_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_build_report(path, report())
    assert read_build_report(path) == report()
    doc = json.loads(path.read_text())
    assert (doc["size_bytes"], doc["cache"]["steps_run"]) == (1234567890, 3)


def test_the_normalized_image_survives_the_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    normalized = report(
        digest="sha256:" + "d" * 64, oci_layout="build/images/demo-final", source_date_epoch=7
    )
    write_build_report(path, normalized)
    assert read_build_report(path) == normalized


def test_a_report_written_before_size_and_cache_reads(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    doc = report().to_json()
    del doc["size_bytes"], doc["cache"], doc["stages_s"]
    path.write_text(json.dumps(doc))
    assert read_build_report(path) == report(size_bytes=None, cache={}, stages_s={})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("size_bytes", "12", "the build report's size_bytes is not a number of bytes"),
        ("size_bytes", -1, "the build report's size_bytes is not a number of bytes"),
        ("size_bytes", True, "the build report's size_bytes is not a number of bytes"),
        ("cache", {"steps_run": "3"}, "the build report's cache is not {what: count}"),
        ("cache", [], "the build report's cache is not {what: count}"),
        ("stages_s", {"deps": "1"}, "the build report's stages_s are not {stage: seconds}"),
        ("digest", "sha256:xyz", "the build report's digest is not sha256:<64 hex digits>"),
        (
            "source_date_epoch",
            "0",
            "the build report's source_date_epoch is not a number of seconds",
        ),
    ],
)
def test_a_bad_size_or_cache_is_refused(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report().to_json() | {key: value}))
    with pytest.raises(BuildReportError) as info:
        read_build_report(path)
    assert info.value.message == f"{path}: {message}"
