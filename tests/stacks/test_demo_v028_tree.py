"""The v0.28.0 demo tree (``demo/vllm-musa-v028``): its patch series on the real vLLM 0.28.0
sdist, its stand-in ``mcc``, its pins, requirements and entry points, and the refusals of its
``setup.py`` before it builds anything.

The sdist is downloaded from PyPI by URL once, checked against its sha256 and kept in
``build/test-cache/``. Without PyPI those tests are skipped, and they fail when ``CI=true``.
The full build (``pip install -e .`` of the tree) installs into the interpreter that runs it,
so it is not a test here: the image build runs it.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

from core.file_store import sha256_of
from demo.make_index import FLASHINFER_SRC, FLASHINFER_SRC_FILES, STAND_INS
from images.builder.in_image.flashinfer_overlay import overlay
from manifest import load_manifest
from testbed.distributions import build_sdist, build_wheel
from tests.support.environment import in_ci

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
TREE = REPO / "demo" / "vllm-musa-v028"
SERIES = TREE / "vllm_musa" / "patches" / "series"
MCC = TREE / "tools" / "mcc"
CACHE = REPO / "build" / "test-cache"

SDIST_URL = (
    "https://files.pythonhosted.org/packages/22/39/"
    "096d88cfe34ee43a8b6e7c957d1ad6338fa5256474d6ff9a32008c6f8cd6/vllm-0.28.0.tar.gz"
)
SDIST_SHA256 = "ac96dd0ec5be9c13f2aa4bfb50498c4727110406f6e4980b58a4097e4d18634a"
VLLM_COMMIT = "2cf0a6915ce544dc493a0990f2ea38d81601128a"

TOUCHED = {
    "0001-MUSA-vllm.platforms.patch": ("vllm/platforms/__init__.py",),
    "0002-MUSA-vllm.platforms.musa_series.patch": ("vllm/platforms/musa_series.py",),
    "0003-MUSA-csrc-musa-musa_ops.mu.patch": ("csrc/musa/musa_ops.mu",),
    "0004-MUSA-build-setup.py-CMakeLists.txt.patch": ("CMakeLists.txt", "setup.py"),
    # the demo's own: vLLM's Rust entry on a stand-in workspace (crates.io is out of reach)
    "0005-demo-vllm-rs-stand-in-workspace.patch": (
        "rust/standin/Cargo.lock",
        "rust/standin/Cargo.toml",
        "rust/standin/src/cmd/Cargo.toml",
        "rust/standin/src/cmd/src/main.rs",
        "rust/standin/src/parser/python/Cargo.toml",
        "rust/standin/src/parser/python/src/lib.rs",
        "tools/build_rust.py",
    ),
}


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def vllm_sdist() -> Path:
    """vLLM 0.28.0's sdist from PyPI, verified, cached in build/test-cache/."""
    cached = CACHE / "vllm-0.28.0.tar.gz"
    if cached.is_file() and sha256_of(cached) == SDIST_SHA256:
        return cached
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = cached.with_name(f".{cached.name}.{os.getpid()}.part")
    try:
        with urllib.request.urlopen(SDIST_URL, timeout=60) as answer, partial.open("wb") as out:
            shutil.copyfileobj(answer, out, 1 << 20)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        if in_ci():
            pytest.fail(f"cannot download {SDIST_URL} ({exc}); CI=true, so it must be reachable")
        pytest.skip(f"PyPI is unreachable, so the real vLLM 0.28.0 sdist is not here: {exc}")
    got = sha256_of(partial)
    if got != SDIST_SHA256:
        partial.unlink()
        pytest.fail(f"{SDIST_URL} has sha256 {got}, not {SDIST_SHA256}")
    partial.replace(cached)
    return cached


@pytest.fixture(scope="session")
def pristine_vllm(vllm_sdist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist extracted once, top directory stripped (as the build tool stages it)."""
    out = tmp_path_factory.mktemp("vllm-sdist")
    with tarfile.open(vllm_sdist) as tar:
        members = []
        for member in tar.getmembers():
            name = member.name.split("/", 1)[1] if "/" in member.name else ""
            if name:
                member.name = name
                members.append(member)
        if hasattr(tarfile, "data_filter"):
            tar.extractall(out, members=members, filter="data")
        else:  # Python before 3.10.12 / 3.11.4
            tar.extractall(out, members=members)  # noqa: S202 - PyPI's sdist, hash-checked
    return out


@pytest.fixture
def vllm_tree(pristine_vllm: Path, tmp_path: Path) -> Path:
    """A fresh copy of the pristine tree for one test."""
    tree = tmp_path / "third_party" / "vllm"
    shutil.copytree(pristine_vllm, tree, symlinks=True)
    return tree


def load_build_apply() -> ModuleType:
    """vllm_musa/patches/build_apply.py, loaded by path the way setup.py loads it."""
    path = TREE / "vllm_musa" / "patches" / "build_apply.py"
    spec = importlib.util.spec_from_file_location("_musa_build_apply", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__ in the tree
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = writes
    return module


def snapshot(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree)): sha256_of(p)
        for p in sorted(tree.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def patch_lines(patch: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Per file, the removed and the added lines of a patch, read without build_apply."""
    out: dict[str, tuple[list[str], list[str]]] = {}
    current: tuple[list[str], list[str]] | None = None
    for line in patch.read_text("utf-8").splitlines():
        if line.startswith("+++ b/"):
            current = out.setdefault(line[len("+++ b/") :], ([], []))
        elif line.startswith(("--- a/", "--- /dev/null", "diff --git ")):
            continue
        elif current is not None and line.startswith("-"):
            current[0].append(line[1:])
        elif current is not None and line.startswith("+"):
            current[1].append(line[1:])
    return out


def diff_lines(before: list[str], after: list[str]) -> tuple[list[str], list[str]]:
    removed: list[str] = []
    added: list[str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, a0, a1, b0, b1 in matcher.get_opcodes():
        if tag != "equal":
            removed.extend(before[a0:a1])
            added.extend(after[b0:b1])
    return removed, added


# ----------------------------------------------------------------------------- the series
# build_apply.py applies the series with git, as upstream's does: per patch `git -C TREE apply
# --recount -p 1` with --reverse --check (already applied: skipped), --check, then the apply
# with --whitespace=nowarn (MooreThreads/vllm_musa@b78203f4 vllm_musa/patches/build_apply.py).

GIT_OPTIONS = ["--recount", "-p", "1"]


def git_calls(log: Path) -> list[list[str]]:
    """The git command lines the logging wrapper saw, each with its GIT_CEILING_DIRECTORIES."""
    if not log.is_file():
        return []
    return [line.rstrip("\x1f").split("\x1f") for line in log.read_text("utf-8").splitlines()]


@pytest.fixture
def logged_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``git`` first on PATH that logs its arguments (and GIT_CEILING_DIRECTORIES), then runs
    the real git; returns the log file."""
    real = shutil.which("git")
    if real is None:
        pytest.fail("git is not installed; the applier runs git apply")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git.log"
    wrapper = bin_dir / "git"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"printf '%s\\037' \"$GIT_CEILING_DIRECTORIES\" \"$@\" >> '{log}'\n"
        f"echo >> '{log}'\n"
        f'exec "{real}" "$@"\n',
        "utf-8",
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def test_the_series_lists_its_files_in_its_headers() -> None:
    build_apply = load_build_apply()
    patches = sorted(SERIES.glob("*.patch"))
    assert [p.name for p in patches] == list(TOUCHED)
    # git apply --numstat reads them: from inside this checkout too (a series directory in a
    # repository), where a plain `git apply` would read the paths from the checkout's top
    assert {p.name: build_apply.touched_files(p) for p in patches} == TOUCHED
    for patch in patches:
        headers = [
            line
            for line in patch.read_text("utf-8").splitlines()
            if line.startswith(("--- ", "+++ "))
        ]
        assert headers, patch.name
        assert all(h[4:].startswith(("a/", "b/", "/dev/null")) for h in headers), patch.name


def test_the_series_applies_to_the_real_vllm_0_28_0_with_upstreams_git_calls(
    vllm_tree: Path, pristine_vllm: Path, logged_git: Path
) -> None:
    build_apply = load_build_apply()
    assert not (vllm_tree / ".git").exists()  # the sdist: git apply runs outside a repository
    before = snapshot(vllm_tree)

    results = build_apply.apply_patch_series(vllm_tree, SERIES)

    assert results == [(name, "applied") for name in TOUCHED]
    ceiling = str(vllm_tree.parent.resolve())
    assert git_calls(logged_git) == [
        [ceiling, "-C", str(vllm_tree), "apply", *options, *GIT_OPTIONS, str(SERIES / name)]
        for name in TOUCHED
        for options in (["--reverse", "--check"], ["--check"], ["--whitespace=nowarn"])
    ]
    marker = vllm_tree / "vllm" / "platforms" / "musa_series.py"
    assert marker.read_text("utf-8").splitlines()[-2:] == [
        'SERIES = "vllm-musa-demo"',
        f"PATCHES = {len(TOUCHED)}",
    ]
    ops = (vllm_tree / "csrc" / "musa" / "musa_ops.mu").read_text("utf-8")
    assert "PyMODINIT_FUNC PyInit__C(void)" in ops

    # nothing changed but the files the headers name (no stamp, no other file)
    after = snapshot(vllm_tree)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    assert changed == {f for files in TOUCHED.values() for f in files}
    # and in them, exactly the lines the series removes and adds
    for name in TOUCHED:
        for relpath, (removed, added) in patch_lines(SERIES / name).items():
            now = (vllm_tree / relpath).read_text("utf-8").splitlines()
            was = pristine_vllm / relpath
            old = was.read_text("utf-8").splitlines() if was.is_file() else []
            assert diff_lines(old, now) == (removed, added), relpath


def test_a_second_run_reverse_checks_each_patch_and_changes_nothing(
    vllm_tree: Path, logged_git: Path
) -> None:
    build_apply = load_build_apply()
    build_apply.apply_patch_series(vllm_tree, SERIES)
    patched = snapshot(vllm_tree)
    logged_git.unlink()

    results = build_apply.apply_patch_series(vllm_tree, SERIES)

    assert results == [(name, "already-applied") for name in TOUCHED]
    assert [call[4:6] for call in git_calls(logged_git)] == [["--reverse", "--check"]] * len(
        TOUCHED
    )
    assert snapshot(vllm_tree) == patched


def test_a_tree_with_the_first_patches_applied_gets_the_rest(vllm_tree: Path) -> None:
    build_apply = load_build_apply()
    first, second, *_ = sorted(SERIES.glob("*.patch"))
    for patch in (first, second):
        subprocess.run(["git", "apply", "-p1", str(patch)], cwd=vllm_tree, check=True)

    results = build_apply.apply_patch_series(vllm_tree, SERIES)

    assert results == [
        (name, "already-applied" if i < 2 else "applied") for i, name in enumerate(TOUCHED)
    ]


@pytest.mark.parametrize(
    ("relpath", "edit", "failed", "output"),
    [
        (
            "vllm/platforms/__init__.py",
            ('    "cpu": cpu_platform_plugin,\n', '    "cpu": cpu_platform_plugin,  # edited\n'),
            "0001-MUSA-vllm.platforms.patch",
            [
                "error: patch failed: vllm/platforms/__init__.py:213",
                "error: vllm/platforms/__init__.py: patch does not apply",
            ],
        ),
        (
            "CMakeLists.txt",
            (
                'set(VLLM_TARGET_DEVICE "cuda" CACHE STRING "Target device backend for vLLM")\n',
                'set(VLLM_TARGET_DEVICE "musa" CACHE STRING "Target device backend for vLLM")\n',
            ),
            "0004-MUSA-build-setup.py-CMakeLists.txt.patch",
            [
                "error: patch failed: CMakeLists.txt:31",
                "error: CMakeLists.txt: patch does not apply",
            ],
        ),
    ],
    ids=["vllm-platforms", "cmakelists"],
)
def test_a_drifted_line_fails_naming_the_patch_and_the_tree(
    vllm_tree: Path, relpath: str, edit: tuple[str, str], failed: str, output: list[str]
) -> None:
    build_apply = load_build_apply()
    line, edited = edit
    target = vllm_tree / relpath
    text = target.read_text("utf-8")
    assert text.count(line) == 1
    target.write_text(text.replace(line, edited), "utf-8")
    drifted = snapshot(vllm_tree)

    with pytest.raises(build_apply.PatchError) as caught:
        build_apply.apply_patch_series(vllm_tree, SERIES)

    assert str(caught.value) == (
        f"patch {failed} does not apply to {vllm_tree} (git apply --recount -p 1):\n"
        + "".join(f"  {said}\n" for said in output)
        + "the tree is not the vLLM this series was made for: stage the pinned vLLM pristine, "
        "or regenerate the series against it"
    )
    assert caught.value.patch == failed
    # the patch that failed wrote nothing; the ones before it are applied
    after = snapshot(vllm_tree)
    changed = {p for p in drifted.keys() | after.keys() if drifted.get(p) != after.get(p)}
    before_failed = list(TOUCHED)[: list(TOUCHED).index(failed)]
    assert changed == {f for name in before_failed for f in TOUCHED[name]}


def test_not_strict_reports_the_conflict_and_goes_on(vllm_tree: Path) -> None:
    build_apply = load_build_apply()
    target = vllm_tree / "vllm" / "platforms" / "__init__.py"
    target.write_text(target.read_text("utf-8").replace("cpu_platform_plugin,", "x,"), "utf-8")

    results = build_apply.apply_patch_series(vllm_tree, SERIES, strict=False)

    assert results == [
        (name, "conflict" if i == 0 else "applied") for i, name in enumerate(TOUCHED)
    ]


def test_a_tree_inside_another_repository_is_still_patched(vllm_tree: Path) -> None:
    """The staged tree has no .git; inside some other checkout, a plain ``git -C TREE apply``
    would skip a ``diff --git`` patch's paths (read from that checkout's top) and succeed, so
    the reverse check would say "already-applied" for an unpatched tree."""
    outer = vllm_tree.parent.parent
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    build_apply = load_build_apply()

    results = build_apply.apply_patch_series(vllm_tree, SERIES)

    assert results == [(name, "applied") for name in TOUCHED]
    assert (vllm_tree / "vllm" / "platforms" / "musa_series.py").is_file()


def test_without_git_the_series_fails_naming_git(
    vllm_tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-git"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    build_apply = load_build_apply()

    with pytest.raises(build_apply.PatchError) as caught:
        build_apply.apply_patch_series(vllm_tree, SERIES)

    assert str(caught.value) == (
        "git is not on PATH: the patch series is applied with `git apply` (install git)"
    )


def test_gnu_patch_agrees_without_fuzz(vllm_tree: Path, pristine_vllm: Path) -> None:
    """Where GNU patch is installed, ``patch -p1 --fuzz=0`` gives the same files."""
    if shutil.which("patch") is None:
        pytest.skip("GNU patch is not installed (the applier itself needs none)")
    build_apply = load_build_apply()
    build_apply.apply_patch_series(vllm_tree, SERIES)
    touched = [f for files in TOUCHED.values() for f in files]
    other = vllm_tree.parent / "by-gnu-patch"
    for relpath in touched:
        if (pristine_vllm / relpath).is_file():
            (other / relpath).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(pristine_vllm / relpath, other / relpath)
    for name in TOUCHED:
        subprocess.run(
            ["patch", "-p1", "--fuzz=0", "--batch", "--quiet", "-i", str(SERIES / name)],
            cwd=other,
            check=True,
        )
    for relpath in touched:
        assert (other / relpath).read_bytes() == (vllm_tree / relpath).read_bytes(), relpath


# ----------------------------------------------------------------------------- the tree


def test_stand_in_mcc_compiles_a_mu_file_with_the_musa_flags(tmp_path: Path) -> None:
    if shutil.which("cc") is None and not in_ci():
        pytest.skip("no host C compiler (cc)")
    assert os.access(MCC, os.X_OK)
    source = tmp_path / "kernel.mu"
    source.write_text(
        "#ifndef ENABLE_FP8\n#error ENABLE_FP8 did not reach the compiler\n#endif\n"
        "int scale(int x) { return 2 * x; }\n",
        "utf-8",
    )
    obj = tmp_path / "kernel.o"
    flags = ["-x", "musa", "-mtgpu", "--offload-arch=mp_31", "-DENABLE_FP8", "-fPIC", "-O2"]

    done = subprocess.run(
        [str(MCC), *flags, "-c", str(source), "-o", str(obj)],
        capture_output=True,
        text=True,
        check=False,
    )

    assert (done.returncode, done.stderr) == (0, "")
    head = obj.read_bytes()[:18]
    assert head[:4] == b"\x7fELF"
    assert int.from_bytes(head[16:18], "little") == 1  # ET_REL: an object file


def test_stand_in_mcc_only_compiles(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(MCC), "-x", "musa", "-mtgpu", "a.o", "-o", "a.so"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        2,
        "mcc (stand-in): only compiles (-c); link with the host toolchain\n",
    )


def test_stand_in_mcc_takes_the_jits_command_line_as_cxx(tmp_path: Path) -> None:
    """The run-time JIT's compile_musa rule (-MD -MF, -std=c++17, -ffast-math, --offload-arch,
    -I$MUSA_HOME/include), on a kernel with __global__ and extern "C": compiled as C++."""
    if shutil.which("c++") is None and not in_ci():
        pytest.skip("no host C++ compiler (c++)")
    include = TREE / "tools" / "musa-standin" / "include"
    (tmp_path / "k.mu").write_text(
        "#include <musa_runtime.h>\n"
        "__global__ void fill(float *out, int n) { for (int i = 0; i < n; ++i) out[i] = 1; }\n"
        'extern "C" int devices(void) { int n = 0; return musaGetDeviceCount(&n); }\n',
        "utf-8",
    )
    flags = ["-std=c++17", "-fPIC", "-O3", "-ffast-math", "--offload-arch=mp_31", f"-I{include}"]
    done = subprocess.run(
        [str(MCC), "-MD", "-MF", "k.o.d", *flags, "-c", "k.mu", "-o", "k.o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert (tmp_path / "k.o").read_bytes()[:4] == b"\x7fELF"
    assert f"{include}/musa_runtime.h" in (tmp_path / "k.o.d").read_text()
    # the stand-in MUSA_HOME's mcc runs the same script
    assert os.access(TREE / "tools" / "musa-standin" / "bin" / "mcc", os.X_OK)


def test_pins_name_the_vllm_commit() -> None:
    pins = {}
    for raw in (TREE / "third_party" / "PINS").read_text("utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            key, sep, value = line.partition("=")
            assert sep, raw
            pins[key.strip()] = value.strip()
    assert pins == {
        "VLLM_TAG": "v0.28.0",
        "VLLM_COMMIT": VLLM_COMMIT,
        "FLASHINFER_REPOSITORY": "https://github.com/yeahdongcn/flashinfer.git",
        "FLASHINFER_COMMIT": "5e4b43c411a5280329d8b1fd362b2656d389f3ef",
    }


FLASHINFER_COMMIT = "5e4b43c411a5280329d8b1fd362b2656d389f3ef"


def test_the_demo_stages_the_flashinfer_checkout_at_the_pinned_commit() -> None:
    """stack/demo-v028.yaml stages the stand-in FlashInfer sdist at third_party/flashinfer,
    as cut from PINS FLASHINFER_COMMIT (the build checks PINS against the rev again)."""
    m = load_manifest(REPO / "stack" / "demo-v028.yaml")
    driver = m.source("vllm-musa")
    assert driver is not None
    entry = next(t for t in driver.third_party if t.dir == "flashinfer")
    assert (entry.source, entry.pin, entry.installed) == ("flashinfer", "FLASHINFER_COMMIT", False)
    source = m.source("flashinfer")
    assert source is not None
    assert source.sdist is not None
    assert (source.sdist.index, source.sdist.version_text) == ("demo", FLASHINFER_SRC[1])
    assert source.rev == FLASHINFER_COMMIT
    assert driver.env["SKIP_THIRD_PARTY"] == "1"  # upstream's overlay is off: the tool's runs


def test_the_stand_in_checkout_overlays_the_stand_in_wheel(tmp_path: Path) -> None:
    """The demo's FlashInfer sdist overlaid into the demo's flashinfer-python wheel, with
    upstream's rules: what the demo-v028 image must hold."""
    sdist = build_sdist(*FLASHINFER_SRC, tmp_path, extra=FLASHINFER_SRC_FILES)
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "src", filter="data")
    checkout = tmp_path / "src" / f"{FLASHINFER_SRC[0]}-{FLASHINFER_SRC[1]}"
    spec = next(s for s in STAND_INS if s.name == "flashinfer-python")
    with zipfile.ZipFile(build_wheel(spec, tmp_path / "wheels")) as wheel:
        wheel.extractall(tmp_path / "site")  # noqa: S202 - our own stand-in wheel
    target = tmp_path / "site" / "flashinfer"
    assert (target / "jit" / "wheel_only.py").is_file()
    written = overlay(checkout, target, FLASHINFER_COMMIT)
    assert written == [
        "api_logging.py",
        "autotuner",
        "jit",
        "mamba",
        "mamba/MUSA_PROVIDER_COMMIT",
    ]
    assert (target / "mamba" / "MUSA_PROVIDER_COMMIT").read_text() == f"{FLASHINFER_COMMIT}\n"
    assert (target / "mamba" / "ssd_combined.py").is_file()
    assert not (target / "jit" / "wheel_only.py").exists()  # replaced wholesale
    assert "the flashinfer-python wheel" in (target / "sampling.py").read_text()  # kept
    assert "the FlashInfer checkout" in (target / "api_logging.py").read_text()  # added
    assert (target / "__init__.py").read_text() == '__version__ = "0.2.7+musa"\n'
    # the functions upstream's image imports from the provider, as the image's probe finds them
    probe_path = REPO / "images" / "builder" / "in_image" / "upstream_probe.py"
    probe_spec = importlib.util.spec_from_file_location("upstream_probe_demo", probe_path)
    assert probe_spec is not None
    assert probe_spec.loader is not None
    probe = importlib.util.module_from_spec(probe_spec)
    probe_spec.loader.exec_module(probe)
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        found = [
            probe._provider_function(m, f)
            for m, f in (
                ("flashinfer.mamba.ssd_combined", "ssd_combined_fwd_varlen"),
                ("flashinfer.mamba.selective_state_update", "selective_state_update"),
            )
        ]
    finally:
        sys.path.remove(str(tmp_path / "site"))
    assert [(e["path"], e["binding"], e["error"]) for e in found] == [
        (str(target / "mamba" / "ssd_combined.py"), "def", ""),
        (str(target / "mamba" / "selective_state_update.py"), "def", ""),
    ]


def test_requirements_name_stand_ins_and_public_wheels_only() -> None:
    musa = (TREE / "requirements" / "musa.txt").read_text("utf-8").splitlines()
    common = (TREE / "requirements" / "common.txt").read_text("utf-8").splitlines()
    assert "-r common.txt" in musa

    def names(lines: list[str]) -> list[str]:
        return [
            Requirement(line).name
            for line in lines
            if line.strip() and not line.startswith(("#", "-"))
        ]

    assert names(musa) == ["torch-musa", "torchada", "mate"]
    assert set(names(musa)) <= {spec.name for spec in STAND_INS}
    assert names(common) == ["numpy", "pyyaml"]  # cp311 wheels on PyPI
    # the test runner, as upstream's image has it (requirements/test.txt, beside musa.txt:
    # not a dependency of the package), at an exact version of a pure wheel on PyPI
    test = (TREE / "requirements" / "test.txt").read_text("utf-8").splitlines()
    assert [line for line in test if not line.startswith("#")] == ["pytest==9.2.0"]
    source = load_manifest(REPO / "stack" / "demo-v028.yaml").source("vllm-musa")
    assert source is not None
    assert source.requirements_files == ("requirements/musa.txt", "requirements/test.txt")


def test_pyproject_declares_both_plugin_entry_points() -> None:
    project = tomllib.loads((TREE / "pyproject.toml").read_text("utf-8"))
    assert project["build-system"]["requires"] == ["setuptools>=80.10.2", "wheel"]
    assert project["project"]["name"] == "vllm-musa"
    assert project["project"]["version"] == "0.1.28+demo"
    assert project["project"]["dynamic"] == ["dependencies"]
    assert project["project"]["entry-points"] == {
        "vllm.platform_plugins": {"musa": "vllm_musa:musa_platform_plugin"},
        "vllm.general_plugins": {"musa_custom_ops": "vllm_musa:register_custom_ops"},
    }


# ----------------------------------------------------------------------------- setup.py


@pytest.fixture(scope="session")
def stand_in_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's torch and torchada stand-ins, unpacked: what setup.py imports first."""
    site = tmp_path_factory.mktemp("site")
    for spec in STAND_INS:
        if spec.name in ("torch", "torchada"):
            with zipfile.ZipFile(build_wheel(spec, site / "wheels")) as wheel:
                wheel.extractall(site / "lib")  # noqa: S202 - our own stand-in wheels
    return site / "lib"


def run_setup(tree: Path, site: Path, **env: str) -> subprocess.CompletedProcess[str]:
    ours = {"SKIP_THIRD_PARTY", "MTGPU_TARGET", "VLLM_MUSA_NO_BUILD_PATCH", "PYTHONPATH"}
    clean = {k: v for k, v in os.environ.items() if k not in ours}
    return subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext"],
        cwd=tree,
        env={**clean, "PYTHONPATH": str(site), **env},
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "vllm-workspace"
    shutil.copytree(TREE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_stand_in_torch_has_what_vllm_setup_reads(stand_in_site: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, torchada\n"
            "from torch.utils.cpp_extension import CUDA_HOME, ROCM_HOME\n"
            "v = torch.version\n"
            "print(torch.__version__, v.cuda, v.hip, v.xpu, v.musa, CUDA_HOME, ROCM_HOME)",
        ],
        env={**os.environ, "PYTHONPATH": str(stand_in_site)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "2.11.0.post2+musa5.2.0 None None None 5.2.0 None None\n"


def test_setup_refuses_to_clone(tree_copy: Path, stand_in_site: Path) -> None:
    done = run_setup(tree_copy, stand_in_site)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "vllm-musa: error: third_party/vllm would be cloned from "
        f"https://github.com/vllm-project/vllm.git at {VLLM_COMMIT}, but this stand-in tree "
        "has no network: the build tool stages third_party/vllm (the vLLM sdist at PINS "
        "VLLM_COMMIT) and runs the build with SKIP_THIRD_PARTY=1"
    )


def test_setup_needs_a_staged_vllm(tree_copy: Path, stand_in_site: Path) -> None:
    done = run_setup(tree_copy, stand_in_site, SKIP_THIRD_PARTY="1")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "vllm-musa: error: SKIP_THIRD_PARTY=1 but third_party/vllm/setup.py does not exist: "
        f"stage vLLM's source (PINS VLLM_COMMIT {VLLM_COMMIT}) at third_party/vllm first"
    )


def test_setup_refuses_an_unknown_gpu_target(tree_copy: Path, stand_in_site: Path) -> None:
    done = run_setup(tree_copy, stand_in_site, SKIP_THIRD_PARTY="1", MTGPU_TARGET="mp_99")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        "vllm-musa: error: MTGPU_TARGET=mp_99 is not one of mp_22, mp_31"
    )
