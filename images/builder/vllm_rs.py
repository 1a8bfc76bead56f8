"""``components.vllm-rs`` in the render: vLLM's Rust frontend, built as vLLM builds it.

Pure. vLLM's tree builds ``vllm/vllm-rs`` and the PyO3 modules ``vllm/_rust_*.so`` with its
own entry (``build_rust.sh``, or ``tools/build_rust.py --release``); upstream's image installs
them into the package directory, where vLLM's "auto" lookup of the binary looks. Here the stage
``vllm-rs`` starts from the build stage (the tree as the build left it, patched), installs the
toolchain and protoc, runs the tree's entry, refuses a Cargo.lock the build changed, and keeps
the artifacts in ``/out``; final installs them into the installed ``vllm`` package.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import RenderError
from manifest import RUST_BUILD_REQUIREMENT, RUST_WORKSPACE, Manifest, PinnedFile
from resolver.lockfile import Lock

CRATES_MOUNT = "/tmp/crates"  # noqa: S108  where an offline build mounts the vendored crates
VLLM_PACKAGE = "vllm"  # the package directory the artifacts land in (build_rust.py's)
VLLM_RS_BINARY = "vllm-rs"
RUST_MODULES = "_rust_*.so"  # vLLM setup.py: vllm/_rust_[^/]*\.so
ARTIFACTS_DIR = "/out"  # in the vllm-rs stage


@dataclass(frozen=True, kw_only=True)
class VllmRsStep:
    """What the render needs to build vllm-rs and install it."""

    tree: str  # the source that is vLLM's tree
    tree_dir: str  # where the stage builds it
    bind: str  # the staged source to bind-mount at tree_dir ("" when the build stage has it)
    provider: str  # rustup | distro
    toolchain: str  # distro: the rustc version required ("" = any)
    rustup_init: PinnedFile | None
    command: str  # the tree's own build entry
    workspace: str = RUST_WORKSPACE  # in the tree (its Cargo.lock files must not change)
    package: str = VLLM_PACKAGE
    binary: str = VLLM_RS_BINARY
    modules: str = RUST_MODULES
    artifacts: str = ARTIFACTS_DIR
    crates: str  # offline: where the vendored crates are mounted ("" online)


def vllm_rs_step(
    manifest: Manifest, lock: Lock, *, workspace_dir: str | None, offline: bool
) -> VllmRsStep | None:
    """The vllm-rs build of ``manifest``, or None when the component is off;
    ``workspace_dir``: where the driving source is built in place (None without one)."""
    rs = manifest.components.vllm_rs
    if rs is None:
        return None
    where = f"{manifest.path}: components.vllm-rs"
    if offline and rs.provider == "rustup":
        raise RenderError(
            f"{where}: the rustup provider downloads the toolchain during the build, which an "
            "--offline build cannot do",
            hint="use provider: distro with rustc and cargo in the base image, or build "
            "without --offline",
        )
    installed = {s.name for s in manifest.installed_sources()}
    if rs.tree not in installed:
        raise RenderError(
            f"{where}: sources.{rs.tree} is not installed in the image, so there is no vllm "
            "package to install vllm-rs into",
            hint=f"install sources.{rs.tree} (a third_party entry without installed: false)",
        )
    if not any(p.name == RUST_BUILD_REQUIREMENT for p in lock.build_only()):
        raise RenderError(
            f"{where}: the lock's build requirements have no {RUST_BUILD_REQUIREMENT}, which "
            "vLLM's tools/build_rust.py builds with",
            hint=f"add {RUST_BUILD_REQUIREMENT} to build.requirements (vLLM's "
            "requirements/build/cuda.txt has it), then lock again",
        )
    driver = next((s for s in manifest.sources if s.third_party), None)
    tree_dir, bind = f"/src/{rs.tree}", rs.tree
    if driver is not None and workspace_dir is not None:
        for t in driver.third_party:
            if t.source == rs.tree:
                tree_dir, bind = f"{workspace_dir}/third_party/{t.dir}", ""
    python = manifest.target.python_str
    return VllmRsStep(
        tree=rs.tree,
        tree_dir=tree_dir,
        bind=bind,
        provider=rs.provider,
        toolchain=rs.toolchain or "",
        rustup_init=rs.rustup_init,
        # build_rust.sh needs rustup (without, it pipes sh.rustup.rs to sh): distro runs the
        # script's own last step
        command=(
            "bash build_rust.sh"
            if rs.provider == "rustup"
            else f"python{python} tools/build_rust.py --release"
        ),
        crates=CRATES_MOUNT if offline else "",
    )


def vllm_rs_marker(manifest: Manifest) -> dict[str, object]:
    """The vllm-rs entry of the image's components marker."""
    rs = manifest.components.vllm_rs
    if rs is None:
        return {"built": False}
    return {"built": True, "tree": rs.tree, "package": VLLM_PACKAGE, "binary": VLLM_RS_BINARY}
