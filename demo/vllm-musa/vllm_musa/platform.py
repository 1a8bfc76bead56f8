"""The platform class the plugin names (demo)."""

from __future__ import annotations

from vllm_musa import _C


class MusaPlatform:
    device_name = "musa"

    @staticmethod
    def dot(a: list[float], b: list[float]) -> float:
        return float(_C.dot(a, b))
