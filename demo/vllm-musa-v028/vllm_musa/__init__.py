"""vllm-musa (demo stand-in): the vLLM platform plugin for Moore Threads (MUSA) GPUs.

The two entry points vLLM loads: ``vllm.platform_plugins`` (``musa_platform_plugin``) and
``vllm.general_plugins`` (``register_custom_ops``). Importing this package imports neither
vLLM nor torch: vLLM imports the plugin while it starts, and importing vLLM needs a real torch.
"""

from __future__ import annotations

__version__ = "0.1.28+demo"

PLATFORM = "vllm_musa.platform.MusaPlatform"

_custom_ops_registered = False


def musa_platform_plugin() -> str:
    """The ``vllm.platform_plugins`` hook: the class path of the MUSA platform."""
    return PLATFORM


def register_custom_ops() -> None:
    """The ``vllm.general_plugins`` hook; upstream registers its MUSA custom ops here.

    The stand-in has no ops to register; it records that vLLM called it.
    """
    global _custom_ops_registered  # noqa: PLW0603 - the hook's whole effect
    _custom_ops_registered = True


def custom_ops_registered() -> bool:
    """Whether ``register_custom_ops`` ran in this process."""
    return _custom_ops_registered
