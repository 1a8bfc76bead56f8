"""Shared builders for the image tests: manifest texts, a matching in-memory lock, a render."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from packaging.utils import canonicalize_name

from core.file_store import FileStore
from manifest import Manifest, parse_manifest
from resolver.lockfile import Lock, LockedPackage, write_lock

SHA = {
    name: f"{i:x}" * 64
    for i, name in enumerate(["pip", "torch", "mate", "setuptools", "wheel", "setuptools-rust"], 1)
}

MANIFEST = """\
schema: 1
name: demo
release: "0.1.0"
target: {python: "3.11", arch: x86_64, glibc: "2.36"}
indexes:
  vendor: {url: "http://127.0.0.1:8000/simple/"}
default_index: vendor
requirements: [pip, torch, mate]
base_image: "debian:bookworm-slim"
python_install:
  provider: distro
sources:
  vllm: {path: demo/vllm, env: {VLLM_TARGET_DEVICE: empty}}
  vllm-musa: {path: demo/vllm-musa}
build:
  requirements: [setuptools, wheel]
  args: {MTGPU_TARGET: mp_31}
  apt_packages: [gcc, libc6-dev]
gates:
  imports: [torch, mate, vllm_musa]
"""

DEADSNAKES_FPR = "F23C5A6CF475977595C89F51BA6932366A755776"
DEADSNAKES = f"""\
python_install:
  provider: deadsnakes
  mirror: "http://127.0.0.1:8765/repo"
  key_fingerprint: "{DEADSNAKES_FPR}"
  key_url: "http://127.0.0.1:8765/key.asc"
"""


RENDER_LOCK_SHA = "cd" * 32
RUSTUP_SHA = "0123456789abcdef" * 4
RUSTUP_URL = (
    "https://static.rust-lang.org/rustup/archive/1.28.2/x86_64-unknown-linux-gnu/rustup-init"
)

# blocks of components: (components_text adds the key)
VLLM_RS_RUSTUP = f"""\
  vllm-rs:
    enabled: true
    rustup_init: {{url: "{RUSTUP_URL}", sha256: "{RUSTUP_SHA}"}}
"""
VLLM_RS_DISTRO = """\
  vllm-rs:
    enabled: true
    provider: distro
    toolchain: "1.63"
"""
MOONCAKE = """\
  mooncake:
    enabled: true
    version: "0.3.12.post1"
    index: vendor
"""
SDK_FPR = "0123456789ABCDEF0123456789ABCDEF01234567"
SDK_APT = f"""\
sdk_apt:
  url: "https://vendor.example/musa/apt"
  suite: jammy
  component: main
  key_fingerprint: "{SDK_FPR}"
  key_url: "https://vendor.example/musa/apt/key.asc"
  packages: [musa-sdk]
"""


def components_text(*blocks: str, mirrors: str = "", base: str = MANIFEST) -> str:
    """``base`` with ``components:`` made of ``blocks`` and ``mirrors:`` (when given)."""
    text = base
    if blocks:
        text += "components:\n" + "".join(blocks)
    if mirrors:
        text += "mirrors:\n" + mirrors
    return text


def render_text(m: Manifest, *, offline: bool = False) -> str:
    """The Dockerfile of ``m`` with ``lock_for(m)``."""
    from images.builder.render import build_render_context, render_dockerfile

    ctx = build_render_context(m, lock_for(m), lock_sha256=RENDER_LOCK_SHA, offline=offline)
    return render_dockerfile(ctx)


def manifest(tmp: Path, text: str = MANIFEST, name: str = "demo.yaml") -> Manifest:
    path = tmp / "stack" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return parse_manifest(text, path=path)


def deadsnakes_text() -> str:
    return MANIFEST.replace("python_install:\n  provider: distro\n", DEADSNAKES)


def _pkg(name: str, version: str, group: str = "runtime", kind: str = "pure") -> LockedPackage:
    tag = "py3-none-any" if kind == "pure" else "cp311-cp311-linux_x86_64"
    filename = f"{name.replace('-', '_')}-{version}-{tag}.whl"
    return LockedPackage(
        name=canonicalize_name(name),
        version=version,
        index="vendor",
        index_url="http://127.0.0.1:8000/simple/",
        filename=filename,
        url=f"http://127.0.0.1:8000/files/{filename}",
        sha256=SHA[name],
        size=10,
        kind=kind,
        origin="requirement",
        required_by=(),
        group=group,
    )


def lock_for(m: Manifest, *, with_pip: bool = True) -> Lock:
    packages = [
        _pkg("mate", "0.2.7"),
        _pkg("setuptools", "66.1.1", group="build"),
        _pkg("torch", "2.11.0.post2+musa5.2.0", kind="native"),
        _pkg("wheel", "0.45.1", group="build"),
    ]
    if with_pip:
        packages.insert(1, _pkg("pip", "23.0.1"))
    if m.components.vllm_rs is not None:  # vLLM's tools/build_rust.py builds with it
        packages.append(_pkg("setuptools-rust", "1.13.0", group="build"))
    return Lock(
        stack=m.name,
        target=m.target,
        lock_inputs_sha256=m.lock_inputs_sha256,
        packages=tuple(packages),
    )


def stage_ready(tmp: Path) -> tuple[Manifest, Lock, Path, FileStore]:
    """A repository in ``tmp`` that ``stage`` can stage without a network: the demo manifest,
    its lock written next to it, its path sources, and a cache holding every locked file (a
    stand-in whose bytes are its filename, locked by their sha256)."""
    m = manifest(tmp)
    lock = lock_for(m)
    packages = tuple(
        dataclasses.replace(
            p,
            sha256=hashlib.sha256(p.filename.encode()).hexdigest(),
            size=len(p.filename.encode()),
        )
        for p in lock.packages
    )
    lock = dataclasses.replace(lock, packages=packages)
    lock_dir = tmp / "stack" / "demo.lock"
    write_lock(lock_dir, lock)
    for name in ("vllm", "vllm-musa"):
        src = tmp / "demo" / name
        src.mkdir(parents=True)
        (src / "pyproject.toml").write_text(f'[project]\nname = "{name}"\n', encoding="utf-8")
    cache = FileStore(tmp / "cache")
    for p in lock.packages:
        path = cache.file_path(p.sha256)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(p.filename.encode())
    return m, lock, lock_dir, cache
