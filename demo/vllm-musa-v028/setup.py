"""vllm-musa (demo stand-in): builds the pinned vLLM for MUSA, the way upstream's setup.py does.

``pip install -e . --no-build-isolation`` runs ``MusaBuildExt``, which in order:

1. stages third_party/: upstream clones vLLM and FlashInfer at the third_party/PINS commits and
   overlays FlashInfer's Mamba provider onto the installed flashinfer, both only when
   SKIP_THIRD_PARTY != 1. This tree does neither (it has no network): the build tool stages
   third_party/vllm and third_party/flashinfer, sets SKIP_THIRD_PARTY=1, and runs the overlay
   itself with upstream's rules once the install is done (images/builder/in_image/
   flashinfer_overlay.py), since upstream's setup.py cannot overlay without cloning;
2. applies vllm_musa/patches/series/*.patch to third_party/vllm with ``git apply``, strictly,
   as upstream's vllm_musa/patches/build_apply.py does (VLLM_MUSA_NO_BUILD_PATCH=1 skips it);
3. installs the patched vLLM editable: use_existing_torch.py, vLLM's build requirements, then
   ``pip install -e third_party/vllm`` with VLLM_TARGET_DEVICE=empty and VLLM_VERSION_OVERRIDE;
4. compiles vllm._C (from the csrc the series adds to vLLM) and vllm_musa._C (csrc/) with mcc,
   and links them with the host toolchain; vllm._C goes into the editable vLLM tree (upstream
   copies it there), and is no extension of this package, so only vLLM provides ``vllm``;
5. (the demo's own) builds the stand-in MUSA runtime, tools/musa-standin/lib/libmusart.so.5:
   the demo image's MUSA_HOME is tools/musa-standin, where the run-time JIT finds bin/mcc,
   include/musa_runtime.h and -lmusart, as it finds the MUSA SDK's in upstream's image.

Upstream has more, which needs the MUSA SDK and torch_musa: torch's CUDAExtension and
BuildExtension machinery under torch_musa/torchada (ninja, ``force_mcc`` host C++), the
extensions vllm._C_stable_libtorch and vllm._moe_C, FlashInfer's norm/renorm/sampling kernels
in vllm_musa._C, and linking musart, mublasLt and libtorch. None of that is here.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NoReturn

import torchada  # noqa: F401 - imported before torch, as upstream: it patches torch for MUSA

# isort: split
import torch
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).parent.resolve()
VLLM_DIR = Path("third_party", "vllm")  # relative to ROOT, as upstream's paths are
FLASHINFER_DIR = Path("third_party", "flashinfer")
SERIES_DIR = ROOT / "vllm_musa" / "patches" / "series"
STAND_IN_MCC = ROOT / "tools" / "mcc"
# the demo image's MUSA_HOME (stack/demo-v028.yaml, musa.home): bin/mcc, include/, and the
# runtime library built here into lib/
STAND_IN_MUSA_HOME = ROOT / "tools" / "musa-standin"
STAND_IN_MUSART = "libmusart.so.5"
VLLM_VERSION = "0.28.0"  # VLLM_VERSION_OVERRIDE unless the environment sets it
SUPPORTED_MTGPU_TARGETS = ("mp_22", "mp_31")


def log(message: str) -> None:
    sys.stderr.write(f"vllm-musa: {message}\n")
    sys.stderr.flush()


def fail(message: str) -> NoReturn:
    raise SystemExit(f"vllm-musa: error: {message}")


def read_pins() -> dict[str, str]:
    """third_party/PINS: KEY=VALUE lines, ``#`` comments."""
    pins: dict[str, str] = {}
    for raw in (ROOT / "third_party" / "PINS").read_text("utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line and "=" in line:
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def read_requirements(filename: str, seen: set[Path] | None = None) -> list[str]:
    """A requirements/ file's requirements, following ``-r`` includes."""
    path = ROOT / "requirements" / filename
    seen = set() if seen is None else seen
    if path in seen:
        return []
    seen.add(path)
    found: list[str] = []
    for raw in path.read_text("utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            found.extend(read_requirements(line.split(maxsplit=1)[1], seen))
        elif not line.startswith("-"):
            found.append(line)
    return found


def configure_compiler_cache() -> None:
    """VLLM_MUSA_CCACHE_DIR is the ccache directory, as upstream's build_utils/ccache.py reads."""
    cache_dir = os.environ.get("VLLM_MUSA_CCACHE_DIR")
    if cache_dir and not os.environ.get("CCACHE_DIR"):
        os.environ["CCACHE_DIR"] = cache_dir


PINS = read_pins()
MTGPU_TARGET = os.environ.get("MTGPU_TARGET") or "mp_31"
if MTGPU_TARGET not in SUPPORTED_MTGPU_TARGETS:
    fail(f"MTGPU_TARGET={MTGPU_TARGET} is not one of {', '.join(SUPPORTED_MTGPU_TARGETS)}")

# upstream's mcc flags, less the C++ ones (the stand-in sources are C)
MCC_FLAGS = [
    "-x",
    "musa",
    "-mtgpu",
    f"--offload-arch={MTGPU_TARGET}",
    "-DNDEBUG",
    "-DUSE_MUSA",
    "-fPIC",
    "-O2",
]
if MTGPU_TARGET == "mp_31":
    MCC_FLAGS.append("-DENABLE_FP8")

# vLLM's extensions, built straight into the editable vLLM tree. They are not ext_modules of
# this package: setuptools would then count `vllm` among vllm-musa's packages (its metadata,
# its editable finder), and two distributions would provide `vllm`.
VLLM_EXTENSIONS = [
    # from the patched vLLM: 0003-MUSA-csrc-musa-musa_ops.mu.patch adds the source
    Extension(
        "vllm._C",
        sources=[str(VLLM_DIR / "csrc" / "musa" / "musa_ops.mu")],
        include_dirs=[str(VLLM_DIR / "csrc")],
    ),
]
EXT_MODULES = [
    Extension(
        "vllm_musa._C",
        sources=["csrc/module.mu", "csrc/gemm.mu", "csrc/norm.mu"],
        include_dirs=["csrc"],
    ),
]


def run_step(
    name: str, cmd: list[str], cwd: Path = ROOT, env: dict[str, str] | None = None
) -> None:
    log(f"{name}: {' '.join(cmd)}")
    result = subprocess.run(cmd, cwd=cwd, env=env, check=False)
    if result.returncode != 0:
        fail(f"{name} failed (exit status {result.returncode}): {' '.join(cmd)}")


class MusaBuildExt(build_ext):
    """build_ext that first stages, patches and installs vLLM, then compiles with mcc."""

    # 1. third_party/ -----------------------------------------------------------------------

    @staticmethod
    def clone_and_checkout(repo: Path, url: str, commit: str) -> None:
        """Upstream: git clone + checkout + reset --hard + clean -fdx, with retries."""
        fail(
            f"{repo} would be cloned from {url} at {commit}, but this stand-in tree has no "
            "network: the build tool stages third_party/vllm (the vLLM sdist at PINS "
            "VLLM_COMMIT) and runs the build with SKIP_THIRD_PARTY=1"
        )

    @staticmethod
    def install_flashinfer_mamba(repo: Path) -> None:
        """Upstream: copies FlashInfer's pure-Python mamba provider (and a few sibling
        packages) from the checkout into the installed flashinfer, with MUSA_PROVIDER_COMMIT.
        Only reached after a clone, which this stand-in never makes; with SKIP_THIRD_PARTY=1
        the build tool runs that overlay from the staged third_party/flashinfer."""
        fail(
            f"the FlashInfer Mamba overlay needs a FlashInfer checkout at {repo}, which this "
            "stand-in tree never clones: build with SKIP_THIRD_PARTY=1 (the build tool "
            "overlays the staged third_party/flashinfer)"
        )

    def stage_third_party(self) -> None:
        if os.environ.get("SKIP_THIRD_PARTY", "0") == "1":
            log(
                "1. third_party: SKIP_THIRD_PARTY=1, no clone and no FlashInfer overlay (as "
                "upstream; the build tool overlays the staged third_party/flashinfer)"
            )
            if not (ROOT / VLLM_DIR / "setup.py").is_file():
                fail(
                    f"SKIP_THIRD_PARTY=1 but {VLLM_DIR}/setup.py does not exist: stage vLLM's "
                    f"source (PINS VLLM_COMMIT {PINS['VLLM_COMMIT']}) at {VLLM_DIR} first"
                )
            return
        log("1. third_party: cloning vLLM and FlashInfer")
        self.clone_and_checkout(
            VLLM_DIR, "https://github.com/vllm-project/vllm.git", PINS["VLLM_COMMIT"]
        )
        self.clone_and_checkout(
            FLASHINFER_DIR, PINS["FLASHINFER_REPOSITORY"], PINS["FLASHINFER_COMMIT"]
        )
        self.install_flashinfer_mamba(FLASHINFER_DIR)

    # 2. the patch series -------------------------------------------------------------------

    @staticmethod
    def apply_musa_patch_series() -> None:
        if os.environ.get("VLLM_MUSA_NO_BUILD_PATCH", "0") == "1":
            log("2. patch series: VLLM_MUSA_NO_BUILD_PATCH=1, not applied")
            return
        log(f"2. patch series: {SERIES_DIR.relative_to(ROOT)} -> {VLLM_DIR}")
        path = ROOT / "vllm_musa" / "patches" / "build_apply.py"
        spec = importlib.util.spec_from_file_location("_musa_build_apply", path)
        if spec is None or spec.loader is None:
            fail(f"cannot load {path}")
        applier = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(applier)
        try:
            results = applier.apply_patch_series(ROOT / VLLM_DIR, SERIES_DIR, strict=True)
        except applier.PatchError as exc:
            fail(f"the patch series does not apply: {exc}")
        for name, status in results:
            log(f"MUSA build patch: {status:16} {name}")

    # 3. the patched vLLM, installed editable -----------------------------------------------

    @staticmethod
    def install_vllm() -> None:
        source = ROOT / VLLM_DIR
        env = dict(os.environ, VLLM_TARGET_DEVICE="empty")
        env.setdefault("VLLM_VERSION_OVERRIDE", VLLM_VERSION)
        pip = [sys.executable, "-m", "pip", "install"]
        run_step("3. use the installed torch", [sys.executable, "use_existing_torch.py"], source)
        build_reqs = str(source / "requirements" / "build" / "cuda.txt")
        run_step("3. vLLM build requirements", [*pip, "-r", build_reqs])
        editable = ["-e", str(source), "--config-settings", "editable_mode=compat"]
        run_step(
            f"3. vLLM {env['VLLM_VERSION_OVERRIDE']} (editable, VLLM_TARGET_DEVICE=empty)",
            [*pip, *editable, "--no-build-isolation", "--no-deps"],
            env=env,
        )

    # 4. the extensions ---------------------------------------------------------------------

    @staticmethod
    def find_mcc() -> list[str]:
        found = shutil.which("mcc")
        if found:
            return [found]
        log(f"no mcc on PATH (no MUSA SDK): using the stand-in {STAND_IN_MCC.relative_to(ROOT)}")
        return ["sh", str(STAND_IN_MCC)]  # run by sh: a copy that lost its mode bits still works

    def build_extension(self, ext: Extension) -> None:
        """Compile each source with mcc (one object per source), link with ``cc -shared``."""
        sources = [ROOT / s for s in ext.sources]
        missing = [str(s.relative_to(ROOT)) for s in sources if not s.is_file()]
        if missing:
            fail(
                f"{ext.name}: no source {', '.join(missing)} (the patch series adds vLLM's; "
                "was it skipped with VLLM_MUSA_NO_BUILD_PATCH=1?)"
            )
        python_include = sysconfig.get_paths()["include"]
        if not (Path(python_include) / "Python.h").is_file():
            fail(f"no Python.h in {python_include}: install the interpreter's -dev package")
        includes = [f"-I{ROOT / d}" for d in ext.include_dirs] + [f"-I{python_include}"]
        obj_dir = Path(self.build_temp) / ext.name
        obj_dir.mkdir(parents=True, exist_ok=True)
        objects = []
        for source in sources:
            obj = obj_dir / f"{source.name}.o"
            cmd = [*self.mcc, *MCC_FLAGS, *includes, "-c", str(source), "-o", str(obj)]
            run_step(f"4. {ext.name}: compile {source.relative_to(ROOT)}", cmd)
            objects.append(str(obj))
        if ext.name.startswith("vllm."):  # into the editable vLLM tree, as upstream copies it
            suffix = sysconfig.get_config_var("EXT_SUFFIX")
            output = ROOT / VLLM_DIR / Path(*ext.name.split(".")).with_suffix(suffix)
        else:
            output = Path(self.get_ext_fullpath(ext.name))
        output.parent.mkdir(parents=True, exist_ok=True)
        run_step(f"4. {ext.name}: link", ["cc", "-shared", *objects, "-o", str(output)])
        self.built[ext.name] = output

    # 5. the stand-in MUSA runtime --------------------------------------------------------

    @staticmethod
    def build_stand_in_musart() -> None:
        """lib/libmusart.so.5 (and the link name lib/libmusart.so) of the stand-in MUSA_HOME,
        from its musart.c: what the image's run-time JIT links with -lmusart. The real one
        comes with the MUSA SDK."""
        lib = STAND_IN_MUSA_HOME / "lib"
        lib.mkdir(exist_ok=True)
        run_step(
            f"5. stand-in MUSA runtime: {(lib / STAND_IN_MUSART).relative_to(ROOT)}",
            [
                "cc",
                "-shared",
                "-fPIC",
                "-O2",
                f"-Wl,-soname,{STAND_IN_MUSART}",
                f"-I{STAND_IN_MUSA_HOME / 'include'}",
                str(STAND_IN_MUSA_HOME / "musart.c"),
                "-o",
                str(lib / STAND_IN_MUSART),
            ],
        )
        link = lib / "libmusart.so"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(STAND_IN_MUSART)

    def run(self) -> None:
        log(f"torch {torch.__version__} (MUSA {getattr(torch.version, 'musa', None)})")
        self.stage_third_party()
        # patch the tree BEFORE installing it, so the installed vLLM is the patched one
        self.apply_musa_patch_series()
        self.install_vllm()
        configure_compiler_cache()
        self.mcc = self.find_mcc()
        self.built: dict[str, Path] = {}
        for ext in VLLM_EXTENSIONS:
            self.build_extension(ext)
            log(f"4. {ext.name}: {self.built[ext.name].relative_to(ROOT)}")
        super().run()
        self.build_stand_in_musart()


setup(
    ext_modules=EXT_MODULES,
    cmdclass={"build_ext": MusaBuildExt},
    # requirements/musa.txt is the one list: the image build and the package metadata share it
    install_requires=read_requirements("musa.txt"),
)
