"""The manifest's fixed names that command lines offer as choices: plain constants with no
imports, so a command's parser is built without loading the model or the YAML reader."""

from __future__ import annotations

# the names of mirrors.NAME, each optional; a command line --mirror NAME=URL replaces one
MIRROR_NAMES = ("deadsnakes", "apt", "sdk-apt", "rustup", "rustup-update-root", "cargo", "proxy")
# the build targets of Dockerfile.j2, in build order
TARGETS = ("final", "vllm-openai")
