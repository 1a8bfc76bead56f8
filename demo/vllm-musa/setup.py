"""The C extension of the demo plugin; metadata lives in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "vllm_musa._C",
            sources=["csrc/module.c", "csrc/attention.c", "csrc/gemm.c"],
            extra_compile_args=["-O2"],
        )
    ]
)
