"""The shipped v0.28.0 stacks resolve against indexes shaped like the real ones.

The vendor index serves linux_x86_64 wheels without hash fragments and mirrors public names at
unrelated old versions; the public index carries the squats (mate, deep-gemm, flash-mla
placeholders, the CUDA triton 3.2.0 and torch) that must never be chosen.

GitHub is out of reach here, so the two sources the resolver reads (vLLM and vllm-musa, for
their requirements files) are local in these tests: vLLM is an sdist of the same commit on the
public index, vllm-musa a directory holding upstream's real requirements files (the fixtures
of tests/sources/fixtures/vllm-musa-1df06c8/: musa.txt and the three files it includes);
everything else is the shipped manifest as it is. The public index has a stand-in wheel for
each name those files ask for that the list below does not shape (``upstream_public``).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from images.builder.apt_plan import apt_plan
from manifest import load_manifest
from sources.requirements_files import read_requirements
from testbed.distributions import WheelSpec, build_wheel
from testbed.pypi_server import PypiServer, find_pypi_server
from testbed.simple_index import Listing
from tests.sources.sdistgen import write_sdist
from tests.support.lockcase import Case, read_toml
from tests.support.upstream_requirements import COMMITS, fixture_reader, upstream_file

REPO = Path(__file__).resolve().parents[2]
VLLM_REV = "2cf0a6915ce544dc493a0990f2ea38d81601128a"
# the git sources the resolver reads, and their local stand-ins
GIT_VLLM = (
    "  vllm:\n"
    '    git: "https://github.com/vllm-project/vllm.git"\n'
    f'    rev: "{VLLM_REV}"      # PINS VLLM_COMMIT (v0.28.0)\n'
)
LOCAL_VLLM = f'  vllm:\n    sdist: {{index: pypi, version: "0.28.0"}}\n    rev: "{VLLM_REV}"\n'
GIT_VLLM_MUSA = (
    "  vllm-musa:\n"
    '    git: "https://github.com/MooreThreads/vllm-musa.git"\n'
    '    rev: "070c0ea09ec266972fd6097937fde97d400d70ed"\n'
)
LOCAL_VLLM_MUSA = "  vllm-musa:\n    path: vllm-musa\n"
# the KEY=VALUE lines of MooreThreads/vllm-musa@0227a5c748d9672b1a354712b75f315fda774eb8
# third_party/PINS (its comments left out): the revisions the stacks pin, and VLLM_TAG, which
# labels the image com.mthreads.vllm.version in a render as in a build
UPSTREAM_PINS = (
    "VLLM_TAG=v0.28.0\n"
    f"VLLM_COMMIT={VLLM_REV}\n"
    "FLASHINFER_REPOSITORY=https://github.com/yeahdongcn/flashinfer.git\n"
    "FLASHINFER_COMMIT=5e4b43c411a5280329d8b1fd362b2656d389f3ef\n"
)
# a trimmed requirements/common.txt of vLLM with the conflict the override settles
VLLM_COMMON = (
    "numpy\ntransformers >= 5.5.3\ncompressed-tensors == 0.17.0\n"
    "opencv-python-headless >= 4.13.0    # required for video IO\n"
)
VLLM_BUILD = "setuptools>=77.0.3,<81.0.0\nsetuptools-rust>=1.9.0\ntorch==2.13.0\nwheel\nninja\n"

PUBLIC = [
    # the closure of the public roots, with a realistic shape (several versions each)
    ("numpy", "1.26.4", "cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64", ()),
    ("numpy", "2.3.1", "cp312-cp312-manylinux_2_28_x86_64", ()),
    (
        "transformers",
        "5.5.3",
        "py3-none-any",
        ("huggingface-hub>=1.0", "numpy>=1.17", "filelock", "tokenizers>=0.22"),
    ),
    ("transformers", "5.24.0", "py3-none-any", ("huggingface-hub>=1.2", "numpy>=1.17")),
    ("huggingface-hub", "1.1.0", "py3-none-any", ("filelock", "fsspec>=2023.5.0")),
    ("huggingface-hub", "1.3.0", "py3-none-any", ("filelock", "fsspec>=2023.5.0")),
    (
        "tokenizers",
        "0.22.1",
        "cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64",
        ("huggingface-hub>=0.16",),
    ),
    ("filelock", "3.20.0", "py3-none-any", ()),
    ("fsspec", "2025.10.0", "py3-none-any", ()),
    ("mthreads-ml-py", "2.4.3", "py3-none-any", ()),
    ("mthreads-ml-py", "2.2.11", "py3-none-any", ()),
    ("compressed-tensors", "0.15.0", "py3-none-any", ("torch>=2.7",)),
    ("compressed-tensors", "0.17.0", "py3-none-any", ("torch>=2.10", "transformers")),
    ("compressed-tensors", "0.18.0", "py3-none-any", ("torch>=2.12",)),
    ("torchada", "0.1.90", "py3-none-any", ("torch",)),  # unpinned torch: deps: false
    ("torchada", "0.1.81", "py3-none-any", ("torch",)),  # upstream's common.txt (overridden)
    ("numpy", "1.26.0", "cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64", ()),
    ("pip", "26.3", "py3-none-any", ()),
    # build.requirements (build stage only)
    ("setuptools", "80.10.2", "py3-none-any", ()),
    ("setuptools", "80.9.0", "py3-none-any", ()),
    ("setuptools", "76.0.0", "py3-none-any", ()),
    ("wheel", "0.45.1", "py3-none-any", ()),
    ("setuptools-scm", "9.2.0", "py3-none-any", ("packaging>=20", "setuptools")),
    ("packaging", "25.0", "py3-none-any", ()),
    ("ninja", "1.13.0", "py3-none-manylinux_2_12_x86_64.manylinux2010_x86_64", ()),
    # vLLM's Rust build entry (components.vllm-rs)
    (
        "setuptools-rust",
        "1.13.0",
        "py3-none-any",
        ("setuptools>=62.4", "semantic-version<3,>=2.8.2"),
    ),
    ("semantic-version", "2.10.0", "py2.py3-none-any", ()),
    # components.mooncake (py310): upstream's wheel is cp310 only, manylinux_2_35; the stack
    # pins 0.3.13, the version upstream pairs with torch 2.11, over the older 0.3.12.post1
    ("mooncake-transfer-engine-musa", "0.3.12.post1", "cp310-cp310-manylinux_2_35_x86_64", ()),
    ("mooncake-transfer-engine-musa", "0.3.13", "cp310-cp310-manylinux_2_35_x86_64", ()),
    # squats and CUDA builds under vendor names
    ("mate", "1.4.0", "py3-none-any", ()),
    ("deep-gemm", "0.0.1", "py3-none-any", ()),
    ("flash-mla", "0.0.1", "py3-none-any", ()),
    ("triton", "3.2.0", "cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64", ()),
    (
        "torch",
        "2.11.0",
        "cp312-cp312-manylinux_2_28_x86_64",
        ("nvidia-cublas-cu12", "triton==3.2.0"),
    ),
    ("nvidia-cublas-cu12", "12.8.4.1", "py3-none-manylinux_2_27_x86_64", ()),
    ("apache-tvm-ffi", "0.1.11", "cp312-abi3-manylinux_2_28_x86_64", ()),
    ("flashinfer-python", "0.5.0", "py3-none-any", ("torch",)),
    # vLLM's opencv-python-headless>=4.13 needs numpy 2; the override keeps 4.11.0.86
    ("opencv-python-headless", "4.13.0.90", "cp37-abi3-manylinux_2_28_x86_64", ("numpy>=2",)),
    (
        "opencv-python-headless",
        "4.11.0.86",
        "cp37-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64",
        ("numpy>=1.21.2",),
    ),
]


def vendor_wheels(case: Case, python: str) -> list[Path]:
    """One wheel per pin of the shipped stack, of the kind the manifest says, plus old mirrors."""
    m = load_manifest(REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml")
    cp = f"cp{python.replace('.', '')}"
    out: list[Path] = []
    for pin in m.packages.values():
        if pin.index != "mthreads":
            continue
        tags = {
            "native": f"{cp}-{cp}-linux_x86_64",
            "abi3": "cp38-abi3-linux_x86_64",
            "pure": "py3-none-any",
        }[pin.wheel or "pure"]
        deps: tuple[str, ...] = ()
        if pin.name == "torch-musa":
            deps = ("torch==2.11.0.post2",)
        if pin.name == "torchvision":
            deps = ("torch==2.11.0.post2+musa5.2.0", "numpy")
        out.append(case.wheel(pin.key, pin.version_text, tags, requires_dist=deps))
        # the other SDK builds of the same version sit next to it
        if pin.name in ("torch", "torch-musa"):
            out.append(case.wheel(pin.key, pin.version_text + "s5000", tags))
            out.append(case.wheel(pin.key, pin.version_text, "cp310-cp310-linux_x86_64"))
    out.append(case.wheel("numpy", "1.21.0", f"{cp}-{cp}-linux_x86_64"))  # an unrelated old mirror
    return out


def local_stack(case: Case, python: str) -> Path:
    """The shipped stack with vLLM and vllm-musa local (the module docstring says why), next
    to the vllm-musa tree; the vLLM sdist is written for ``publish_public``."""
    text = (REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml").read_text()
    for shipped, local in ((GIT_VLLM, LOCAL_VLLM), (GIT_VLLM_MUSA, LOCAL_VLLM_MUSA)):
        assert shipped in text
        text = text.replace(shipped, local)
    for path in COMMITS:  # upstream's requirements files, as the fixtures hold them
        (case.tmp / "vllm-musa" / path).parent.mkdir(parents=True, exist_ok=True)
        (case.tmp / "vllm-musa" / path).write_bytes(upstream_file(path).body)
    (case.tmp / "vllm-musa" / "third_party").mkdir()
    (case.tmp / "vllm-musa" / "third_party" / "PINS").write_text(UPSTREAM_PINS)
    stack = case.tmp / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml"
    stack.parent.mkdir(exist_ok=True)
    stack.write_text(text)
    return stack


def vllm_sdist(case: Case) -> Path:
    return write_sdist(
        case.tmp / "sdists",
        "vllm-0.28.0.tar.gz",
        {
            "PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.28.0\n",
            "requirements/common.txt": VLLM_COMMON,
            "requirements/build/cuda.txt": VLLM_BUILD,
        },
    )


def lock_shipped(
    case: Case, python: str, pypi_url: str
) -> tuple[int, str, dict[str, dict[str, Any]]]:
    stack = local_stack(case, python)
    out = case.tmp / "lock"
    result = case.run(
        "lock", stack, "--out", out,
        "--index", f"mthreads={case.vendor.simple_url}",
        "--index", f"pypi={pypi_url}",
    )  # fmt: skip
    if result.code != 0:
        return result.code, result.err, {}
    doc = read_toml((out / "pylock.toml").read_text())
    return 0, result.err, {p["name"]: p for p in doc["packages"]}


def upstream_public() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """A pure stand-in wheel, without requirements, for each name vllm-musa's requirements
    files (the stack's: musa.txt and test.txt) ask for that neither the stack (pins,
    overrides, line_map) nor ``PUBLIC`` provides: the lowest version their specifiers name
    that every one of them allows (else 1.0)."""
    m = load_manifest(REPO / "stack" / "vllm-musa-0.28.0-py312.yaml")
    source = m.source("vllm-musa")
    assert source is not None
    got = read_requirements(fixture_reader(), source.requirements_files, where="vllm-musa")
    known = {canonicalize_name(n) for n, *_ in PUBLIC}
    known |= set(m.packages) | set(m.overrides) | {lm.name for lm in m.rules.line_map}
    specs: dict[str, list[SpecifierSet]] = {}
    for item in got.requirements:
        if item.name not in known:
            specs.setdefault(item.name, []).append(item.requirement.specifier)
    out: list[tuple[str, str, str, tuple[str, ...]]] = []
    for name, sets in sorted(specs.items()):
        tried = sorted(
            {Version(s.version.removesuffix(".*")) for ss in sets for s in ss} | {Version("1.0")}
        )
        version = next(v for v in tried if all(ss.contains(v, prereleases=True) for ss in sets))
        out.append((name, str(version), "py3-none-any", ()))
    return out


def publish_public(case: Case, python: str) -> None:
    cp = f"cp{python.replace('.', '')}"
    wheels = [
        case.wheel(n, v, t.replace("cp312", cp) if "abi3" not in t else t, requires_dist=d)
        for n, v, t, d in [*PUBLIC, *upstream_public()]
    ]
    case.publish(case.pypi, *wheels, vllm_sdist(case))


def test_v028_py312_resolves_and_never_picks_a_squat(case: Case) -> None:
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in vendor_wheels(case, "3.12")))
    publish_public(case, "3.12")
    code, err, packages = lock_shipped(case, "3.12", case.pypi.simple_url)
    assert code == 0, err
    m = load_manifest(REPO / "stack" / "vllm-musa-0.28.0-py312.yaml")
    for name, pin in m.packages.items():
        entry = packages[name]
        assert entry["version"] == pin.version_text
        wheel = entry["wheels"][0]
        expected_index = case.vendor.simple_url if pin.index == "mthreads" else case.pypi.simple_url
        assert entry["index"] == expected_index, name
        assert wheel["url"].startswith(expected_index.removesuffix("simple/")), name
    assert packages["triton"]["wheels"][0]["name"] == "triton-3.2.0-cp312-cp312-linux_x86_64.whl"
    assert packages["numpy"]["version"] == "1.26.4"
    assert packages["numpy"]["index"] == case.pypi.simple_url
    assert packages["compressed-tensors"]["version"] == "0.17.0"
    assert packages["transformers"]["version"] == "5.5.3"
    assert not [n for n in packages if n.startswith(("nvidia-", "cuda-"))]
    # vLLM is the sdist of its commit (pylock only), its requirements file is in the resolve,
    # and the override settles the numpy conflict, recorded with its reason and what it ignores
    assert packages["vllm"]["sdist"]["name"] == "vllm-0.28.0.tar.gz"
    assert "wheels" not in packages["vllm"]
    opencv = packages["opencv-python-headless"]
    assert opencv["version"] == "4.11.0.86"
    opencv_reason = m.overrides[canonicalize_name("opencv-python-headless")].reason
    assert opencv["tool"]["vllm-musa-image"]["override"] == {
        "reason": opencv_reason,
        "ignores": [
            "sources.vllm-musa:requirements/vllm_common.txt requires "
            "opencv-python-headless>=4.13.0",
            "vllm 0.28.0 (sources.vllm:requirements/common.txt) requires "
            "opencv-python-headless>=4.13.0",
        ],
    }
    # upstream's real files: the two departures of the stack from vllm-musa's common.txt are
    # recorded with their reasons, and nothing else of those files is ignored
    numpy, torchada = packages["numpy"], packages["torchada"]
    assert numpy["tool"]["vllm-musa-image"]["override"] == {
        "reason": m.overrides[canonicalize_name("numpy")].reason,
        "ignores": ["sources.vllm-musa:requirements/common.txt requires numpy==1.26"],
    }
    assert torchada["version"] == "0.1.90"
    assert torchada["wheels"][0]["name"] == "torchada-0.1.90-py3-none-any.whl"
    assert torchada["tool"]["vllm-musa-image"]["override"] == {
        "reason": m.overrides[canonicalize_name("torchada")].reason,
        "ignores": ["sources.vllm-musa:requirements/common.txt requires torchada==0.1.81"],
    }
    assert "overrides nothing" not in err
    requirements = (case.tmp / "lock" / "requirements.txt").read_text()
    assert "\nvllm==" not in requirements
    assert (
        f"# override: {opencv_reason}; ignores: sources.vllm-musa:requirements/vllm_common.txt "
        "requires opencv-python-headless>=4.13.0, vllm 0.28.0 "
        "(sources.vllm:requirements/common.txt) requires opencv-python-headless>=4.13.0\n"
        "opencv-python-headless==4.11.0.86 \\\n"
    ) in requirements
    # vllm-musa's requirements/common.txt, through its musa.txt
    assert packages["mthreads-ml-py"]["version"] == "2.4.3"
    assert packages["click"]["version"] == "8.2.0"
    assert packages["click"]["tool"]["vllm-musa-image"]["required-by"] == [
        "(sources.vllm-musa:requirements/common.txt)"
    ]
    assert packages["setuptools"]["version"] == "80.10.2"  # >=80.10.2 (vllm-musa), <81 (vLLM)
    # vllm-musa's requirements/test.txt: the test runner upstream's image installs
    for runner in ("pytest", "pytest-asyncio"):
        assert packages[runner]["tool"]["vllm-musa-image"]["required-by"] == [
            "(sources.vllm-musa:requirements/test.txt)"
        ], runner
    for squat in (
        "mate",
        "deep-gemm",
        "flash-mla",
        "triton",
        "torch",
        "apache-tvm-ffi",
        "flashinfer-python",
    ):
        assert (
            f"note: {squat} is bound to index mthreads; index pypi also has a project named {squat}, "
            "which this stack never uses"
        ) in err


def test_v028_py310_refuses_cp312_only_pins(case: Case) -> None:
    # the vendor publishes cp312 builds only: the 3.10 control must say so for every native pin
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in vendor_wheels(case, "3.12")))
    publish_public(case, "3.10")
    code, err, _ = lock_shipped(case, "3.10", case.pypi.simple_url)
    assert code == 1
    assert (
        "packages.torchvision: no acceptable wheel for torchvision==0.26.0.post2+musa5.2.0 (native)"
        in err
    )
    assert (
        "torchvision-0.26.0.post2+musa5.2.0-cp312-cp312-linux_x86_64.whl: wrong Python tag: built for "
        "CPython 3.12 (cp312-cp312); the target is CPython 3.10 (cp310)"
    ) in err
    assert "packages.torch:" not in err  # torch has a cp310 build on the vendor index
    assert "packages.triton: no acceptable wheel" in err
    assert not (case.tmp / "lock").exists()


def test_v028_py310_resolves_with_cp310_wheels_from_pypiserver(case: Case) -> None:
    """The same stack for CPython 3.10, with a second real index implementation (pypiserver)."""
    if find_pypi_server() is None:
        pytest.skip("pypi-server is not installed (make dev installs it)")
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in vendor_wheels(case, "3.10")))
    packages_dir = case.tmp / "pypiserver-packages"
    for n, v, t, d in [*PUBLIC, *upstream_public()]:
        tags = t.replace("cp312", "cp310") if "abi3" not in t else t
        build_wheel(WheelSpec(name=n, version=v, tags=tags, requires_dist=d), packages_dir)
    shutil.copy2(vllm_sdist(case), packages_dir)
    with PypiServer(packages_dir) as pypi:
        code, err, packages = lock_shipped(case, "3.10", pypi.url)
    assert code == 0, err
    assert (
        packages["torch"]["wheels"][0]["name"]
        == "torch-2.11.0.post2+musa5.2.0-cp310-cp310-linux_x86_64.whl"
    )
    assert packages["numpy"]["wheels"][0]["name"].startswith("numpy-1.26.4-cp310-cp310-")


def test_v028_py312_lock_renders_the_real_dockerfile(case: Case) -> None:
    """The shipped stack, locked against vendor-shaped indexes, renders the image it describes."""
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in vendor_wheels(case, "3.12")))
    publish_public(case, "3.12")
    code, err, packages = lock_shipped(case, "3.12", case.pypi.simple_url)
    assert code == 0, err
    stack = case.tmp / "stack" / "vllm-musa-0.28.0-py312.yaml"  # lock_shipped wrote it
    rendered = case.tmp / "Dockerfile"
    result = case.run("render", stack, "--lock", case.tmp / "lock", "--out", rendered)
    assert result.code == 0, result.err
    text = "\n".join(
        line for line in rendered.read_text().splitlines() if not line.lstrip().startswith("#")
    )  # the instructions, not the comments that explain them
    pip = packages["pip"]["wheels"][0]
    assert f'{pip["hashes"]["sha256"]}  /tmp/{pip["name"]}" | sha256sum -c -' in text
    assert "FROM base AS python-key" in text
    assert "F23C5A6CF475977595C89F51BA6932366A755776" in text
    assert "[signed-by=/etc/apt/keyrings/deadsnakes.gpg]" in text
    assert "trusted=yes" not in text
    assert "python3.12" in text
    assert "python3.12-venv" not in text
    assert "uv " not in text
    assert "ARG MTGPU_TARGET" not in text  # musa.gpu_arch: an ENV, not a build argument
    assert (
        "ENV MUSA_HOME=/usr/local/musa \\\n"
        "    PATH=/usr/local/mtshmem/bin:/usr/local/musa/bin:/usr/local/musa/mudnn/bin:${PATH} \\\n"
        "    LD_LIBRARY_PATH=/usr/local/mtshmem/lib:/usr/local/musa/lib:/usr/local/musa/mudnn/lib:"
        "/usr/local/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}} \\\n"
        "    MTGPU_TARGET=mp_31 \\\n"
        "    TORCH_MUSA_ARCH_LIST=31 \\\n"
        "    MATE_MUSA_ARCH_LIST=3.1\n"
    ) in text
    assert "ENV MTHREADS_VISIBLE_DEVICES=all\n" in text
    assert "ENV PYTHONUNBUFFERED=1 \\\n    PYTHONNOUSERSITE=1\n" in text
    assert (
        "install -y --no-install-recommends python3.12-dev build-essential ninja-build "
        "libmkl-core libmkl-gnu-thread libmkl-intel-lp64 libomp-dev libopenblas-base libnuma1 "
        "numactl libdrm2 rdma-core libibverbs-dev librdmacm-dev infiniband-diags openmpi-bin "
        "libopenmpi-dev gcc-12 g++-12 libstdc++-12-dev ca-certificates curl libcurl4-openssl-dev "
        "git git-lfs openssh-client lsof zip unzip xz-utils\n"
    ) in text  # the final image's C++ toolchain is upstream's: GCC 12 beside jammy's 11; and
    # the run-time tools of upstream's apt_base (the stack names what it leaves out, and why)
    assert (
        "install -y --no-install-recommends build-essential ccache cmake git ninja-build "
        "patchelf gcc-12 g++-12 libstdc++-12-dev pkg-config\n"
    ) in text
    assert (
        "RUN for pair in /usr/lib/x86_64-linux-gnu/libmkl_intel_lp64.so.2="
        "/usr/lib/x86_64-linux-gnu/libmkl_intel_lp64.so "
        "/usr/lib/x86_64-linux-gnu/libmkl_gnu_thread.so.2="
        "/usr/lib/x86_64-linux-gnu/libmkl_gnu_thread.so "
        "/usr/lib/x86_64-linux-gnu/libmkl_core.so.2=/usr/lib/x86_64-linux-gnu/libmkl_core.so; do"
    ) in text
    assert (
        "RUN printf '%s\\n' /usr/local/mtshmem/lib /usr/local/musa/lib /usr/local/musa/mudnn/lib "
        "/usr/local/lib > /etc/ld.so.conf.d/musa-runtime.conf \\\n && ldconfig\n"
    ) in text
    assert "update-alternatives --set python3 /usr/bin/python3.12 \\\n" in text
    # sdk: {from: base}: the musa-sdk base image's SDK, checked after the MUSA environment
    assert "AS sdk\n" not in text
    assert "RUN for cmd in mcc; do \\\n" in text
    assert "sdk.commands: $cmd is not on PATH ($PATH);" in text
    assert (
        " && for lib in libmusart.so libmublasLt.so libmudnn.so libmccl.so libmtml.so; do \\\n"
    ) in text
    assert text.index("MATE_MUSA_ARCH_LIST=3.1\n") < text.index("RUN for cmd in mcc; do")
    assert "VLLM_MUSA_CCACHE_DIR=/root/.cache/ccache" in text
    assert 'CMD ["/bin/bash"]' in text
    # vllm-musa drives the vLLM build, in /vllm-workspace, as upstream: one source step
    assert "COPY sources/vllm-musa/ /vllm-workspace/\n" in text
    assert (
        " && env MAX_JOBS=8 PIP_NO_INDEX=1 SKIP_THIRD_PARTY=1 VLLM_TARGET_DEVICE=empty "
        "VLLM_VERSION_OVERRIDE=0.28.0 \\\n"
        "      python3.12 -m pip install --verbose --no-deps --no-build-isolation --no-cache-dir \\\n"
        "      --disable-pip-version-check -e . \\\n"
    ) in text
    assert "/build/wheels/vllm/" not in text  # vLLM is no wheel of its own
    assert "COPY --from=build /vllm-workspace/ /vllm-workspace/\n" in text
    assert "COPY tools/third-party.json /opt/vllm-musa/third-party.json\n" in text
    assert (
        " && rm -rf /vllm-workspace/build /vllm-workspace/*.egg-info \\\n"
        "      /vllm-workspace/third_party/vllm/build /vllm-workspace/third_party/vllm/*.egg-info \\\n"
        "      /vllm-workspace/third_party/flashinfer/build "
        "/vllm-workspace/third_party/flashinfer/*.egg-info \\\n"
    ) in text
    assert "--require-hashes --only-binary :all:" in text
    assert 'org.opencontainers.image.version="v0.28.0"' in text
    # upstream's vLLM tag label: VLLM_TAG of vllm-musa's third_party/PINS at its revision,
    # read by render as by a build
    assert '      com.mthreads.vllm.version="v0.28.0" \\\n' in text
    assert "WORKDIR /vllm-workspace" in text
    assert 'ENTRYPOINT ["vllm", "serve"]' in text
    assert "s3cret" not in text


# MooreThreads/vllm-musa@194301ec65c36a945b3d40613849ad47df1a499f docker/musa.Dockerfile: the
# apt_base stage's packages (python{py} and python{py}-dev for the target), from which every
# later stage, final too, descends
UPSTREAM_APT_BASE = (
    "bash build-essential ca-certificates ccache cmake curl g++-12 gcc-12 git git-lfs gnupg "
    "infiniband-diags libcurl4-openssl-dev libdrm2 libibverbs-dev libmkl-core libmkl-gnu-thread "
    "libmkl-intel-lp64 libnuma1 libomp-dev libopenblas-base libopenmpi-dev librdmacm-dev "
    "libssl-dev libstdc++-12-dev libtool libyaml-dev lsb-release lsof make ninja-build numactl "
    "openmpi-bin openssh-client patchelf pkg-config python{py} python{py}-dev python3-pip "
    "python-is-python3 rdma-core unzip xz-utils zip"
)


@pytest.mark.parametrize("python", ["3.10", "3.12"])
def test_upstreams_apt_base_is_in_the_final_image_or_left_out_with_its_reason(
    python: str,
) -> None:
    path = REPO / "stack" / f"vllm-musa-0.28.0-py{python.replace('.', '')}.yaml"
    m = load_manifest(path)
    plan = apt_plan(m)
    kept = {*plan.python.packages, *plan.runtime.packages}  # the python stage: final has them
    upstream = set(UPSTREAM_APT_BASE.format(py=python).split())
    assert upstream - kept == {
        "bash", "make",  # Essential; build-essential depends on make
        "ccache", "cmake", "patchelf", "pkg-config", "libtool",  # build tools
        "libssl-dev", "libyaml-dev", "gnupg", "lsb-release", "python3-pip", "python-is-python3",
    }  # fmt: skip
    text = path.read_text(encoding="utf-8")
    reasons = text.split("  # Left out of the final image, with the reason:\n", 1)[1]
    reasons = reasons.split("  apt_packages:", 1)[0]
    for name in sorted(upstream - kept):
        assert re.search(rf"(?<![\w.+-]){re.escape(name)}(?![\w.+-])", reasons), name
    # the tools it keeps are in the image the build installs, not only in the comment
    assert {"curl", "git", "git-lfs", "openssh-client", "libcurl4-openssl-dev"} <= kept


# the libraries of upstream's SDK packages (docker/musa.Dockerfile @194301ec) that vLLM-MUSA loads
VLLM_MUSA_SDK_LIBRARIES = (
    "libmusart.so",
    "libmublasLt.so",
    "libmudnn.so",
    "libmccl.so",
    "libmtml.so",
)


@pytest.mark.parametrize("python", ["310", "312"])
def test_real_stacks_check_every_sdk_library_vllm_musa_loads(python: str) -> None:
    path = REPO / "stack" / f"vllm-musa-0.28.0-py{python}.yaml"
    m = load_manifest(path)
    assert m.sdk is not None
    assert m.sdk.origin == "base"
    assert m.sdk.commands == ("mcc",)
    assert m.sdk.libraries == VLLM_MUSA_SDK_LIBRARIES
    # upstream installs no mtshmem package, so nothing of it is checked, and the stack says so
    assert not any("mtshmem" in name for name in (*m.sdk.commands, *m.sdk.libraries))
    assert "mtshmem is not checked" in path.read_text(encoding="utf-8")


def test_sdk_defaults_stay_minimal_and_no_demo_stack_checks_an_sdk() -> None:
    """The defaults (mcc, libmusart.so) say only "a MUSA SDK is there"; the real stacks state
    their list. No demo stack has sdk:, so the defaults reach no shipped stack."""
    from manifest.model import SDK_COMMANDS, SDK_LIBRARIES

    assert (SDK_COMMANDS, SDK_LIBRARIES) == (("mcc",), ("libmusart.so",))
    for path in sorted((REPO / "stack").glob("demo*.yaml")):
        assert load_manifest(path).sdk is None, path.name
