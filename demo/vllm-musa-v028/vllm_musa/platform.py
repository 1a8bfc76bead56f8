"""The platform class ``musa_platform_plugin`` names (demo stand-in: no vLLM base class)."""

from __future__ import annotations

import os


class MusaPlatform:
    device_name = "musa"
    device_type = "musa"
    dispatch_key = "PrivateUse1"  # torch_musa's dispatch key
    ray_device_key = "GPU"

    @staticmethod
    def mtgpu_target() -> str:
        """The GPU architecture the extensions were built for (``MTGPU_TARGET``)."""
        return os.environ.get("MTGPU_TARGET", "mp_31")
