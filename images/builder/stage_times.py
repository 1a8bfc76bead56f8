"""The time each stage of the image is built at: the newest of its inputs, not the commit.

Every layer is clamped to its stage's time, so a layer whose inputs did not change keeps its
bytes when the tooling commit moves: a nightly that changes nothing uploads no layer. Two
tiers, each a build arg the stages declare as their ``SOURCE_DATE_EPOCH``:

- ``DEPS_TIME`` (up to ``deps``): the newest commit that changed the template or the scripts
  the image runs (``TEMPLATE_PATHS``), or the package lines of the lock's runtime requirements;
- ``SOURCES_TIME`` (``build``, ``vllm-rs``, ``final``): the same, and the newest commit that
  changed the stack manifest, the lock's build requirements, or a path source's tree.

A path with uncommitted changes, or no git, gives the build's time, which bounds every tier.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from images.builder.workspace import Workspace

TEMPLATE_PATHS = ("Dockerfile.j2", "images/builder/in_image")
ARG_DEPS_TIME = "DEPS_TIME"
ARG_SOURCES_TIME = "SOURCES_TIME"
_TOOL_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class StageTimes:
    """The two tiers' times, in seconds since 1970."""

    deps: int
    sources: int

    def build_args(self) -> dict[str, str]:
        return {ARG_DEPS_TIME: str(self.deps), ARG_SOURCES_TIME: str(self.sources)}


def tier_times(
    epoch: int, *, deps_inputs: Iterable[int | None], source_inputs: Iterable[int | None]
) -> StageTimes:
    """The tiers from their inputs' times (None: ``epoch``), each at most ``epoch``; the
    sources tier is never earlier than the deps tier."""
    deps = max((epoch if t is None else t for t in deps_inputs), default=epoch)
    sources = max((epoch if t is None else t for t in source_inputs), default=epoch)
    return StageTimes(deps=min(epoch, deps), sources=min(epoch, max(deps, sources)))


def package_lines(text: bytes) -> bytes:
    """A requirements file without its comment lines (the header names the lock's inputs)."""
    return b"\n".join(
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(b"#")
    )


def _same_packages(a: bytes, b: bytes) -> bool:
    return package_lines(a) == package_lines(b)


def stage_times(
    *,
    epoch: int,
    workspace: Workspace,
    manifest_path: Path,
    lock_requirements: Path,
    build_requirements: Path | None,
    path_sources: Sequence[Path],
    tool: Workspace | None = None,
) -> StageTimes:
    """The tiers of a build of ``manifest_path`` (see the module docstring)."""
    tool = tool or Workspace(_TOOL_ROOT)
    template = tool.paths_time([tool.root / p for p in TEMPLATE_PATHS])
    runtime = workspace.content_time(lock_requirements, same=_same_packages)
    build: int | None = 0  # no build requirements: no input
    if build_requirements is not None and build_requirements.is_file():
        build = workspace.content_time(build_requirements, same=_same_packages)
    manifest = workspace.paths_time([manifest_path])
    trees = workspace.paths_time(list(path_sources)) if path_sources else 0
    return tier_times(
        epoch, deps_inputs=(template, runtime), source_inputs=(manifest, build, trees)
    )
