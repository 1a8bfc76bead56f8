"""The demo index: stand-in vendor wheels plus real pip/setuptools/wheel, as a PEP 503 tree.

The stand-ins (torch, torch-musa, torchada, triton, mate, flashinfer-python, numpy,
mooncake-transfer-engine-musa) are tiny real wheels written by ``testbed.distributions``
(deterministic bytes), tagged like the vendor's: ``cp311-cp311-linux_x86_64`` for the native
ones, ``py3-none-any`` for the pure ones (which fit any CPython 3), with the vendor's local
version labels.
The torch stand-in carries what vLLM 0.28.0's own setup.py reads from torch (``torch.version``
with ``cuda``/``hip``/``xpu`` None and ``musa`` set, ``torch.utils.cpp_extension.CUDA_HOME`` and
``ROCM_HOME`` None), so the real vLLM source installs against it with
``VLLM_TARGET_DEVICE=empty``; torchada (imported by vllm-musa's setup.py before torch) is used by
the v0.28.0 demo tree (``demo/vllm-musa-v028``) only.
The FlashInfer source upstream clones into third_party/flashinfer (the fork at PINS
``FLASHINFER_COMMIT``) is stood in for by the sdist ``flashinfer-0.2.7.tar.gz`` (``FLASHINFER_SRC``:
a ``flashinfer/mamba`` provider, sibling packages and top-level modules, deterministic bytes),
which stack/demo-v028.yaml stages there as ``sources.flashinfer``, cut from that commit; the
build overlays it into the stand-in flashinfer-python wheel's package as upstream's setup.py does.
pip and setuptools are the real wheels of the host interpreter's ensurepip bundle; ``wheel``,
and setuptools-rust with its one dependency (the build requirement of vLLM's Rust frontend,
which stack/demo-components.yaml builds), are not in that bundle: they are downloaded once
with ``pip download`` into the bootstrap cache (``build/demo/bootstrap/``) and reused from there.

    python -m demo.make_index OUT_DIR      # writes OUT_DIR/simple/... and OUT_DIR/files/...
"""

from __future__ import annotations

import ensurepip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.distributions import WheelSpec, build_sdist, build_wheel
from testbed.elf import SharedObject, render_shared_object
from testbed.simple_index import write_simple_index

ROOT = Path(__file__).resolve().parent.parent

WHEEL_VERSION = "0.45.1"  # the last `wheel` with no dependencies
# downloaded as they are, pinned by version (name, version, wheel file name)
DOWNLOADED = (
    ("wheel", WHEEL_VERSION, f"wheel-{WHEEL_VERSION}-py3-none-any.whl"),
    ("setuptools-rust", "1.13.0", "setuptools_rust-1.13.0-py3-none-any.whl"),
    ("semantic-version", "2.10.0", "semantic_version-2.10.0-py2.py3-none-any.whl"),
)
NATIVE = "cp311-cp311-linux_x86_64"
TORCH = "2.11.0.post2+musa5.2.0"

TORCH_MODULES = {
    "torch/__init__.py": (
        '"""Stand-in for the MUSA build of torch (vllm-musa image demo)."""\n\n'
        "from torch import utils, version\n"
        "from torch.version import __version__\n\n"
        '__all__ = ["__version__", "utils", "version"]\n'
    ),
    "torch/version.py": (
        f'__version__ = "{TORCH}"\ncuda = None\nhip = None\nxpu = None\nmusa = "5.2.0"\n'
    ),
    "torch/utils/__init__.py": "",
    # what vLLM's setup.py imports: no CUDA or ROCm toolkit
    "torch/utils/cpp_extension.py": "CUDA_HOME = None\nROCM_HOME = None\n",
}

# the stand-in's native library: hand-written ELF bytes (testbed/elf.py), no compiler's output
MOONCAKE_LIBRARY = render_shared_object(
    SharedObject(
        needed=("libcurl.so.4", "libc.so.6"), soname="libtransfer_engine.so", runpath="$ORIGIN"
    )
)

STAND_INS = (
    WheelSpec(name="torch", version=TORCH, tags=NATIVE, modules=TORCH_MODULES),
    WheelSpec(
        name="torch-musa",
        version=TORCH,
        tags=NATIVE,
        requires_dist=(f"torch=={TORCH}",),
        modules={"torch_musa/__init__.py": f'__version__ = "{TORCH}"\nimport torch  # noqa\n'},
    ),
    WheelSpec(name="triton", version="3.2.0", tags=NATIVE),
    WheelSpec(name="numpy", version="1.26.4", tags=NATIVE),
    WheelSpec(name="mate", version="0.2.7", requires_dist=("torch",)),
    # like the real torchada 0.1.95: pure, an unpinned torch requirement, imports torch
    WheelSpec(
        name="torchada",
        version="0.1.95",
        requires_dist=("torch",),
        modules={"torchada/__init__.py": '__version__ = "0.1.95"\nimport torch  # noqa\n'},
    ),
    # like the vendor's flashinfer-python 0.2.7+musa: pure here, with its own jit package (which
    # the overlay replaces wholesale) and a sampling module (which the overlay leaves alone)
    WheelSpec(
        name="flashinfer-python",
        version="0.2.7+musa",
        modules={
            "flashinfer/__init__.py": '__version__ = "0.2.7+musa"\n',
            "flashinfer/sampling.py": 'SOURCE = "the flashinfer-python wheel"\n',
            "flashinfer/jit/__init__.py": 'SOURCE = "the flashinfer-python wheel"\n',
            "flashinfer/jit/wheel_only.py": 'SOURCE = "the flashinfer-python wheel"\n',
        },
    ),
    # components.mooncake of stack/demo-components.yaml and stack/demo-v028.yaml: upstream's
    # package and version, with the module upstream's image imports after installing it, and a
    # native library that needs libcurl.so.4 as the real mooncake/engine.so does (the real
    # wheel bundles no libcurl: the image's runtime.apt_packages must give it, which the
    # linkage gate checks). Its name does not shadow the mooncake.engine module.
    WheelSpec(
        name="mooncake-transfer-engine-musa",
        version="0.3.12.post1",
        tags=NATIVE,
        modules={
            "mooncake/__init__.py": '__version__ = "0.3.12.post1"\n',
            "mooncake/engine.py": (
                'class TransferEngine:\n    """Stand-in for Mooncake\'s transfer engine."""\n'
            ),
        },
        binaries={"mooncake/libtransfer_engine.so": MOONCAKE_LIBRARY},
    ),
)


# The FlashInfer checkout at PINS FLASHINFER_COMMIT, as an sdist (stack/demo-v028.yaml stages it
# at third_party/flashinfer): upstream's overlay copies flashinfer/mamba, replaces the sibling
# packages it has (jit, autotuner here), and adds the top-level modules the wheel lacks
# (api_logging.py, not sampling.py, which the wheel has).
FLASHINFER_SRC = ("flashinfer", "0.2.7")
_CHECKOUT = 'SOURCE = "the FlashInfer checkout"\n'
FLASHINFER_SRC_FILES = {
    "flashinfer/mamba/__init__.py": (
        '"""Stand-in for FlashInfer\'s pure-Python Mamba2/SSD provider."""\n\n'
        "from flashinfer.mamba.ssd_combined import mamba_chunk_scan_combined\n\n"
        '__all__ = ["mamba_chunk_scan_combined"]\n'
    ),
    # the functions upstream's image imports after its install and checks are callable
    "flashinfer/mamba/ssd_combined.py": (
        "def mamba_chunk_scan_combined(*args, **kwargs):\n"
        '    raise NotImplementedError("stand-in")\n'
        "\n\n"
        "def ssd_combined_fwd_varlen(*args, **kwargs):\n"
        '    raise NotImplementedError("stand-in")\n'
    ),
    "flashinfer/mamba/selective_state_update.py": (
        'def selective_state_update(*args, **kwargs):\n    raise NotImplementedError("stand-in")\n'
    ),
    "flashinfer/jit/__init__.py": _CHECKOUT,
    "flashinfer/autotuner/__init__.py": _CHECKOUT,
    "flashinfer/api_logging.py": _CHECKOUT,
    "flashinfer/sampling.py": _CHECKOUT,
    "csrc/norm.cu": "// stand-in: upstream compiles FlashInfer's kernels into vllm_musa._C\n",
}


def bootstrap_wheels(cache: Path) -> list[Path]:
    """Real pip, setuptools (ensurepip bundle) and the DOWNLOADED ones (``pip download``,
    cached)."""
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    found = sorted(bundled.glob("pip-*.whl")) + sorted(bundled.glob("setuptools-*.whl"))
    if len(found) < 2:
        debian = Path("/usr/share/python-wheels")
        found = sorted(debian.glob("pip-*.whl")) + sorted(debian.glob("setuptools-*.whl"))
    if len(found) < 2:
        raise SystemExit(
            f"error: no pip and setuptools wheels in {bundled} or /usr/share/python-wheels; "
            "install python3-pip-whl python3-setuptools-whl"
        )
    cache.mkdir(parents=True, exist_ok=True)
    downloaded = []
    for name, version, filename in DOWNLOADED:
        wheel = cache / filename
        if not wheel.is_file():
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--only-binary",
                    ":all:",
                    "--dest",
                    str(cache),
                    f"{name}=={version}",
                ],
                check=True,
                # the machine's pip configuration (extra indexes, constraints) is not ours
                env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
            )
        downloaded.append(wheel)
    return [*found, *downloaded]


def write_demo_index(out: Path, bootstrap_cache: Path) -> Path:
    """Write the demo index tree into ``out``; returns ``out``."""
    with tempfile.TemporaryDirectory() as tmp:
        files = Path(tmp)
        wheels = [build_wheel(spec, files) for spec in STAND_INS]
        wheels.append(build_sdist(*FLASHINFER_SRC, files, extra=FLASHINFER_SRC_FILES))
        for src in bootstrap_wheels(bootstrap_cache):
            shutil.copyfile(src, files / src.name)
            wheels.append(files / src.name)
        write_simple_index(out, wheels)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m demo.make_index OUT_DIR")
    target = Path(sys.argv[1])
    write_demo_index(target, ROOT / "build" / "demo" / "bootstrap")
    sys.stdout.write(f"demo index written to {target}\n")
