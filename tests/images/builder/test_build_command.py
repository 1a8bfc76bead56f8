"""``build`` as a command, without Docker: the pipeline and the engine are stand-ins, so what
is proved is the wiring (the summary on stdout, or with ``--json`` the one document on stdout
and the summary on stderr, the document of failed gates too). The pipeline itself runs against
a real daemon in test_build_docker.py."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import build_image
import images.builder.commands
import images.builder.pipeline
from core.errors import GateError
from images.builder.pipeline import ImageBuildRequest
from images.builder.report import BuildReport, build_document, render_build_summary
from tests.images.builder.test_report import IMAGE, report
from tests.support.images import stage_ready


class StandInEngine:
    closed = False

    def close(self) -> None:
        self.closed = True


def _run(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    result: BuildReport | GateError,
    *extra: str,
) -> tuple[int, str, str, list[ImageBuildRequest]]:
    m, _, lock_dir, cache = stage_ready(tmp_path)
    engine = StandInEngine()
    seen: list[ImageBuildRequest] = []

    def build(
        request: ImageBuildRequest,
        *,
        engine: StandInEngine,
        fetcher: object,
        progress: Callable[[str], None],
        reported: Callable[[BuildReport], None],
    ) -> BuildReport:
        assert fetcher is None  # the stack's base is not pinned by digest
        seen.append(request)
        progress("building (stand-in)")
        if isinstance(result, GateError):
            reported(report(gates={"imports": False}, tags=()))
            raise result
        reported(result)
        return result

    monkeypatch.setattr(images.builder.pipeline, "build", build)
    monkeypatch.setattr(images.builder.commands, "_engine", lambda _console=None, **_: engine)
    out, err = io.StringIO(), io.StringIO()
    argv = ["build", str(m.path), "--target", "final", "--lock", str(lock_dir)]
    argv += ["--cache-dir", str(cache.root), "--build-report", str(tmp_path / "r.json"), *extra]
    code = build_image.main(argv, out=out, err=err)
    assert engine.closed
    return code, out.getvalue(), err.getvalue(), seen


SUMMARY = render_build_summary(report())  # its text is asserted in test_report.py


def test_build_prints_its_summary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, out, err, seen = _run(monkeypatch, tmp_path, report())
    assert code == 0, err
    report_path = tmp_path / "r.json"
    assert out.splitlines() == [*SUMMARY, "tagged vllm-musa-demo:final", f"report: {report_path}"]
    assert err == "building (stand-in)\n"
    assert [r.report_path for r in seen] == [report_path]


def test_build_json_prints_one_document(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    code, out, err, _ = _run(monkeypatch, tmp_path, report(), "--json")
    assert code == 0, err
    report_path = str(tmp_path / "r.json")
    assert json.loads(out) == build_document(report(), report_path=report_path)
    assert err.splitlines() == [
        "building (stand-in)",
        *SUMMARY,
        "tagged vllm-musa-demo:final",
        f"report: {report_path}",
    ]


def test_failed_gates_under_json_print_the_build_document(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    failure = GateError("gate imports failed in " + IMAGE, hint="fix the image")
    code, out, err, _ = _run(monkeypatch, tmp_path, failure, "--json")
    assert code == 1
    doc = json.loads(out)  # the build's document, not an error document
    assert doc == build_document(
        replace(report(), gates={"imports": False}, tags=()),
        report_path=str(tmp_path / "r.json"),
    )
    assert doc["gates_passed"] is False
    assert err.endswith(f"error[gate]: gate imports failed in {IMAGE}\nhint: fix the image\n")


@pytest.mark.parametrize("command", ["build", "publish"])
def test_the_build_report_has_one_flag_on_build_and_publish(command: str) -> None:
    parser = build_image.build_parser()
    args = parser.parse_args([command, "s.yaml", "--target", "final", "--build-report", "r.json"])
    assert args.build_report == Path("r.json")


def test_build_has_no_report_flag_but_build_report() -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = ["build", "s.yaml", "--target", "final", "--report", "r.json"]
    assert build_image.main(argv, out=out, err=err) == 2
    assert (out.getvalue(), err.getvalue()) == (
        "",
        "error[usage]: build_image.py: unrecognized arguments: --report r.json\n"
        "hint: `build_image.py --help` lists the options\n",
    )
