"""``make ab``: the serving gate and the A/B on the demo images, end to end.

    python -m demo.ab_demo [--slowdown PERCENT] [--control REF]

1. the control is ``vllm-musa-demo:vllm-openai`` as ``make demo`` built it, given to ``ab`` by
   its image ID (immutable, so pinned);
2. the candidate is that image with one ``ENV`` more: the stand-in server's pace
   (``VLLM_DEMO_TOKEN_DELAY_MS``, ``VLLM_DEMO_TTFT_MS``) slowed by ``--slowdown`` percent
   (0: the same pace), built with BuildKit and tagged ``vllm-musa-demo:candidate``;
3. ``serve-check`` of both, then ``ab CONTROL CANDIDATE --stack stack/demo.yaml``, whose report
   lands in ``build/ab/demo-slowdown-<PERCENT>/``.

The exit code is the A/B's: 0 when the candidate passes, 1 when it is refused. With the
demo profile's thresholds (-5% throughput, +10% p99 E2E), ``--slowdown 0`` passes and
``--slowdown 20`` is refused.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import build_image
from images.builder.workspace import Workspace
from images.engine.docker_build import DockerEngine
from images.engine.docker_serve import DockerServingEngine
from images.engine.port import BuildRequest

ROOT = Path(__file__).resolve().parent.parent
STACK = ROOT / "stack" / "demo.yaml"
CONTROL = "vllm-musa-demo:vllm-openai"
CANDIDATE = "vllm-musa-demo:candidate"
TOKEN_DELAY_MS = 10.0  # the stand-in server's defaults (demo/vllm/vllm/server.py)
TTFT_MS = 20.0


def candidate_dockerfile(control: str, slowdown: float) -> str:
    factor = 1.0 + slowdown / 100.0
    return (
        f"# the control with the stand-in server slowed by {slowdown:g}%\n"
        f"FROM {control} AS candidate\n"
        f"ENV VLLM_DEMO_TOKEN_DELAY_MS={TOKEN_DELAY_MS * factor:g} "
        f"VLLM_DEMO_TTFT_MS={TTFT_MS * factor:g}\n"
    )


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")


def build_candidate(control: str, slowdown: float, *, tag: str = CANDIDATE) -> str:
    """Build and tag the candidate; returns its image ID."""
    context = ROOT / "build" / "demo" / "ab-candidate"
    context.mkdir(parents=True, exist_ok=True)
    dockerfile = context / "Dockerfile"
    dockerfile.write_text(candidate_dockerfile(control, slowdown), encoding="utf-8")
    engine = DockerEngine(on_output=_progress)
    try:
        image_id = engine.build(
            BuildRequest(
                context=context,
                dockerfile=dockerfile,
                target="candidate",
                iidfile=context / "iid",
            )
        )
        engine.tag(image_id, tag)
    finally:
        engine.close()
    return image_id


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.ab_demo", description=__doc__)
    parser.add_argument("--slowdown", type=float, default=0.0, metavar="PERCENT")
    parser.add_argument("--control", default=CONTROL)
    args = parser.parse_args(argv)
    serving = DockerServingEngine()
    try:
        facts = serving.image(args.control)
    finally:
        serving.close()
    if facts is None:
        sys.stderr.write(f"error: {args.control} is not built: run `make demo` first\n")
        return 2
    build_candidate(args.control, args.slowdown)
    for image in (facts.id, CANDIDATE):
        code = build_image.main(["serve-check", image, "--stack", str(STACK)])
        if code != 0:
            return code
    out = Workspace(ROOT).root / "build" / "ab" / f"demo-slowdown-{args.slowdown:g}"
    return build_image.main(["ab", facts.id, CANDIDATE, "--stack", str(STACK), "--out", str(out)])


if __name__ == "__main__":
    sys.exit(main())
