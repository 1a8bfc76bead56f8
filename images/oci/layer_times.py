"""Each layer's time, read from the image's history (docs/design.md, "At the real image's
scale": a layer's time comes from its inputs).

Each stage of the rendered Dockerfile declares ``ARG SOURCE_DATE_EPOCH=<its time>`` first, and
BuildKit records that declaration, and the value in every RUN of the stage, in the history. So,
walking the history in order, a layer takes the last ``SOURCE_DATE_EPOCH`` recorded at or
before it, never later than ``epoch``; a layer with none before it, and every layer of an image
whose history does not match its layers one to one, takes ``epoch``.
"""

from __future__ import annotations

import re

_RECORDED = re.compile(r"(?:^ARG |^RUN \|\d+ (?:\S+=\S* )*?)SOURCE_DATE_EPOCH=(\d{1,12})(?:\s|$)")


def recorded_time(created_by: str) -> int | None:
    """The ``SOURCE_DATE_EPOCH`` a history entry records: its ``ARG`` declaration, or the
    build args BuildKit lists before a RUN's command; None when it records none."""
    match = _RECORDED.search(created_by)
    return int(match.group(1)) if match else None


def layer_clamps(history: object, layers: int, epoch: int) -> tuple[int, ...]:
    """The time each of ``layers`` layers is clamped to (see the module docstring)."""
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        return (epoch,) * layers
    clamps: list[int] = []
    current = epoch
    for entry in history:
        recorded = recorded_time(str(entry.get("created_by", "")))
        if recorded is not None:
            current = min(recorded, epoch)
        if not entry.get("empty_layer", False):
            clamps.append(current)
    if len(clamps) != layers:
        return (epoch,) * layers
    return tuple(clamps)


def layer_steps(history: object, layers: int, *, limit: int = 200) -> tuple[str, ...]:
    """What each layer holds, as the history says: the step that wrote it (its first
    ``limit`` characters); "" for every layer when the history does not match the layers."""
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        return ("",) * layers
    steps = [
        " ".join(str(h.get("created_by", "")).split())[:limit]
        for h in history
        if not h.get("empty_layer", False)
    ]
    return tuple(steps) if len(steps) == layers else ("",) * layers
