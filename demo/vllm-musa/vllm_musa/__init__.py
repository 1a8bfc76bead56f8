"""Demo stand-in for the vLLM MUSA platform plugin."""

from __future__ import annotations

import os

from vllm_musa import _C

__version__ = "0.1.28+demo"


def musa_platform_plugin() -> str | None:
    """The ``vllm.platform_plugins`` hook: the platform class path, as the real plugin returns."""
    return "vllm_musa.platform.MusaPlatform" if _C.available() else None


def register_custom_ops() -> None:
    """The ``vllm.general_plugins`` hook; the real plugin registers its MUSA custom ops here.

    The stand-in has none to register: it changes nothing and returns nothing.
    """


def mtgpu_target() -> str:
    return os.environ.get("MTGPU_TARGET", "mp_31")
