"""Stand-in for vLLM's ``tools/build_rust.py`` (0.28.0): its targets, built its way.

setuptools-rust ``build_rust --inplace`` builds the Cargo workspace under ``rust/`` into the
package directory ``vllm/``: the binary ``vllm-rs`` (an executable target) and the tool
parser's Python module, ``_rust_tool_parser.abi3.so`` (stable ABI). The image build runs it as
vLLM's ``build_rust.sh`` does after it has set up the toolchain: ``python3 tools/build_rust.py
--release``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools_rust import Binding, RustExtension

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    os.chdir(ROOT)
    setup(
        name="vllm-rust-frontend-build",
        packages=[],
        rust_extensions=[
            RustExtension(
                "vllm.vllm-rs",
                path="rust/src/cmd/Cargo.toml",
                args=["--bin", "vllm-rs"],
                features=["native-tls-vendored"],
                binding=Binding.Exec,
            ),
            RustExtension(
                "vllm._rust_tool_parser",
                path="rust/src/parser/python/Cargo.toml",
                features=["abi3"],
                # vLLM's is Binding.PyO3, which adds pyo3's features: this module's
                # initialization is written by hand (rust/src/parser/python/src/lib.rs)
                binding=Binding.NoBinding,
                py_limited_api=True,
            ),
        ],
        script_args=["build_rust", "--quiet", "--inplace", *sys.argv[1:]],
    )


if __name__ == "__main__":
    main()
