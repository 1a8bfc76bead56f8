"""Demo stand-in for vLLM: loads ``vllm.platform_plugins`` entry points like the real one."""

from __future__ import annotations

import os
from importlib import metadata

__version__ = "0.28.0+demo"
PLUGIN_GROUP = "vllm.platform_plugins"


def load_platform_plugins() -> dict[str, str]:
    """Call every registered platform plugin; return name -> the platform class path it names."""
    found: dict[str, str] = {}
    for ep in metadata.entry_points(group=PLUGIN_GROUP):
        result = ep.load()()
        if result:
            found[ep.name] = str(result)
    return found


def target_device() -> str:
    return os.environ.get("VLLM_TARGET_DEVICE", "cuda")
