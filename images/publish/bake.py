"""``docker-bake.json`` for ``docker buildx bake``: one target per stack x build target, so
builds run on BuildKit builders (remote ones too) instead of one machine. Pure: the plan of
each target in, deterministic JSON text out (sorted keys, a trailing newline).

Each bake target builds the context ``build_image.py build`` stages for that stack and target
(``build/context/<stem>-<target>/``, with its rendered ``Dockerfile``, the lock and the
wheelhouse), with every build arg the render declares. Contexts are absolute paths: buildx reads
a relative one against its working directory, not against the bake file (unless
``BUILDX_BAKE_FILE_RELATIVE_PATHS=1``), so the file is for the machine that wrote it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.errors import PublishError
from images.builder.labels import VERSION_LABEL, image_version

BAKE_PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}


@dataclass(frozen=True, kw_only=True)
class BakeTarget:
    stack: str  # the manifest stem, e.g. vllm-musa-0.28.0-py312
    target: str  # final | vllm-openai
    context: str  # an absolute path of this machine
    arch: str
    release: str
    args: Mapping[str, str] = field(default_factory=dict)
    tags: Sequence[str] = ()  # full references
    contexts: Mapping[str, str] = field(default_factory=dict)  # named contexts

    @property
    def name(self) -> str:
        # bake target names: letters, digits, '_' and '-'
        return re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.stack}-{self.target}")


def render_bake(targets: Sequence[BakeTarget]) -> str:
    out: dict[str, Any] = {}
    for t in targets:
        if t.name in out:
            raise PublishError(
                f"two bake targets are named {t.name!r}",
                hint="give the stacks different file names",
            )
        out[t.name] = {
            "args": dict(sorted(t.args.items())),
            "context": t.context,
            "contexts": dict(sorted(t.contexts.items())),
            "dockerfile": "Dockerfile",
            "labels": {VERSION_LABEL: image_version(t.release)},
            "platforms": [BAKE_PLATFORMS[t.arch]],
            "tags": sorted(t.tags),
            "target": t.target,
        }
    doc = {"group": {"default": {"targets": sorted(out)}}, "target": dict(sorted(out.items()))}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
