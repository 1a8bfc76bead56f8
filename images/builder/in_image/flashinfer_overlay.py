"""FlashInfer's pure-Python provider, overlaid into the installed ``flashinfer`` package.

Standalone: standard library only, any CPython >= 3.8; the final stage runs it once the
driving source's install is carried over, from the staged checkout in the workspace:

    python3.X flashinfer_overlay.py /vllm-workspace/third_party/flashinfer COMMIT

It mirrors ``_CustomBuildExt._install_flashinfer_mamba`` of upstream's setup.py
(MooreThreads/vllm-musa@04aa296d4af4dcf15450cdc3c6bfc1076d4919bc : setup.py), which upstream
runs after its git clone of third_party/flashinfer when SKIP_THIRD_PARTY != "1" (the release's
build_image.sh defaults it to 0). Our stacks set SKIP_THIRD_PARTY=1, because the build has no
network and the tool stages third_party/ itself; upstream's setup.py gates the overlay on the
same flag as the clone (and with SKIP_THIRD_PARTY=0 it runs ``git fetch --all`` on a staged
tree), so it cannot overlay without cloning: this script does that one step, with its rules
(``overlay``): the checkout's ``flashinfer/mamba/`` replaces the installed package's, with
``MUSA_PROVIDER_COMMIT`` holding the pinned commit (PINS ``FLASHINFER_COMMIT``); the sibling
packages the checkout has replace the installed ones; top-level modules the installed package
lacks are copied. Every path it writes is printed; a failure exits 1 with
``error[flashinfer-overlay]``.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

# upstream's dependency_packages, replaced wholesale when the checkout has them
DEPENDENCY_PACKAGES = ("autotuner", "fused_moe", "jit", "trace", "triton")
PROVIDER = "mamba"
MARKER = "MUSA_PROVIDER_COMMIT"


class OverlayError(Exception):
    pass


def installed_root(package: str = "flashinfer") -> Path | None:
    """The installed package's root (its first search location), or None."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return Path(locations[0]).resolve() if locations else None


def overlay(checkout: Path, target_root: Path, commit: str) -> list[str]:
    """Upstream's overlay of ``checkout/flashinfer`` onto ``target_root`` (refused when it is
    the checkout itself; no module is copied over another, nor ``__init__.py``); returns the
    paths written (relative to ``target_root``), sorted."""
    source_root = (checkout / "flashinfer").resolve()
    source = source_root / PROVIDER
    if not source.is_dir():
        raise OverlayError(f"the pinned FlashInfer checkout has no Mamba provider: {source}")
    target_root = target_root.resolve()
    if target_root == source_root:
        raise OverlayError(
            f"the FlashInfer checkout and the installed package are the same path "
            f"({target_root}); refusing to overwrite the checkout"
        )
    written = []
    for package in DEPENDENCY_PACKAGES:
        package_source = source_root / package
        if package_source.is_dir():
            package_target = target_root / package
            if package_target.exists():
                shutil.rmtree(package_target)
            shutil.copytree(package_source, package_target)
            written.append(package)
    for module_source in sorted(source_root.glob("*.py")):
        module_target = target_root / module_source.name
        if not module_target.exists() and module_source.name != "__init__.py":
            shutil.copy2(module_source, module_target)
            written.append(module_source.name)
    target = target_root / PROVIDER
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    (target / MARKER).write_text(f"{commit}\n", encoding="utf-8")
    written += [PROVIDER, f"{PROVIDER}/{MARKER}"]
    return sorted(written)


def main(args: list[str]) -> int:
    if len(args) != 2:
        sys.stderr.write("usage: flashinfer_overlay.py CHECKOUT COMMIT\n")
        return 2
    checkout, commit = Path(args[0]), args[1]
    root = installed_root()
    if root is None:
        sys.stderr.write(
            "error[flashinfer-overlay]: flashinfer is not installed: the Mamba provider is "
            "overlaid into the installed package (flashinfer-python must be in the lock)\n"
        )
        return 1
    try:
        written = overlay(checkout, root, commit)
    except (OverlayError, OSError) as exc:
        sys.stderr.write(f"error[flashinfer-overlay]: {exc}\n")
        return 1
    for rel in written:
        sys.stdout.write(f"flashinfer overlay: {root / rel}\n")
    sys.stdout.write(f"flashinfer overlay: Mamba provider {commit} from {checkout}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
