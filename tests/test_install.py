"""The installable tool: the wheel built from the checkout carries every package and data file,
and ``build-image`` installed from it into a fresh venv locks, renders and stages a build
context with the working directory outside the checkout.

The wheel is built offline (``pip wheel --no-build-isolation --no-index``) from a copy of the
checkout, with the dev venv's setuptools. The fresh venv gets the wheel with ``--no-deps
--no-index``; its third-party dependencies come from the dev venv's site-packages, listed in a
``.pth`` file: a path line only, so the dev venv's own ``.pth`` files (among them the editable
install's finder) are never run and the project's modules can come from the wheel only.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from testbed.distributions import WheelFactory
from testbed.index_server import IndexServer
from testbed.manifests import write_stack
from tests.support.lockcase import read_toml

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = (
    "core",
    "manifest",
    "resolver",
    "images",
    "images.builder",
    "images.builder.in_image",
    "images.publish",
)
TYPED = ("core", "manifest", "resolver", "images")
SETUPTOOLS = Version("77")  # [build-system] requires
# What the tool takes from `packaging`, module by module, and a release known to have all of it
# (each checked against that release's wheel). A name the tool starts to import that is not listed
# here fails the floor test below: find the first release that has it and list it.
_PACKAGING_SINCE = {
    "packaging.markers": ("22.0", {"Marker"}),
    "packaging.pylock": ("26.0", {"Pylock", "PylockValidationError"}),  # first ships in 26.0
    "packaging.requirements": ("22.0", {"InvalidRequirement", "Requirement"}),
    "packaging.specifiers": ("22.0", {"InvalidSpecifier", "SpecifierSet"}),
    "packaging.tags": ("22.0", {"Tag", "compatible_tags", "cpython_tags", "parse_tag"}),
    "packaging.utils": (
        "22.0",
        {
            "InvalidSdistFilename",
            "InvalidWheelFilename",
            "NormalizedName",
            "canonicalize_name",
            "parse_sdist_filename",
            "parse_wheel_filename",
        },
    ),
    "packaging.version": ("22.0", {"InvalidVersion", "Version"}),
}
_NOT_SOURCE = {".venv", ".git", "build", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def _clean_env() -> dict[str, str]:
    """The environment without pip's, Python's and the tool's own settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "PYTHON", "BUILD_IMAGE_", "VIRTUAL_ENV"))
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def _run(argv: list[str | Path], *, cwd: Path) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=_clean_env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert res.returncode == 0, f"{argv} exited {res.returncode}:\n{res.stdout}\n{res.stderr}"
    return res


def _copy_checkout(dest: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        if Path(directory) == ROOT:
            skip |= _NOT_SOURCE & set(names)
        return skip

    shutil.copytree(ROOT, dest, symlinks=True, ignore=ignore)
    return dest


def _packaging_names(files: list[Path]) -> set[tuple[str, str]]:
    """Every (module, name) these files take from `packaging`: `from packaging.M import N`, and
    `M.N` where `from packaging import M` bound the module."""
    used: set[tuple[str, str]] = set()
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        modules: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                assert not [a for a in node.names if a.name.startswith("packaging")], path
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            if node.module == "packaging":
                modules.update({a.asname or a.name: f"packaging.{a.name}" for a in node.names})
            elif node.module.startswith("packaging."):
                used.update((node.module, a.name) for a in node.names)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
            ):
                used.add((modules[node.value.id], node.attr))
    return used


def test_the_declared_packaging_floor_has_everything_the_tool_imports() -> None:
    pyproject = read_toml((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [declared] = [
        r for r in map(Requirement, pyproject["project"]["dependencies"]) if r.name == "packaging"
    ]
    [floor] = [Version(s.version) for s in declared.specifier if s.operator == ">="]
    shipped = pyproject["tool"]["setuptools"]  # what the wheel carries, and nothing else
    files = [ROOT / f"{m}.py" for m in shipped["py-modules"]]
    for package in shipped["packages"]:
        files += sorted((ROOT / package.replace(".", "/")).glob("*.py"))
    used = _packaging_names(files)
    assert ("packaging.pylock", "Pylock") in used  # the scan sees the lock's own import
    unlisted = sorted(
        f"{module}.{name}"
        for module, name in used
        if name not in _PACKAGING_SINCE.get(module, ("", set()))[1]
    )
    assert unlisted == []
    needed = max(Version(_PACKAGING_SINCE[module][0]) for module, _ in used)
    assert floor >= needed, f"pyproject.toml declares {declared}; the tool needs >= {needed}"


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def build_image(self) -> Path:
        return self.venv / "bin" / "build-image"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    have = Version(version("setuptools"))
    if have < SETUPTOOLS:
        pytest.fail(
            f"setuptools {have} in {sys.prefix} cannot build the wheel (needs >= {SETUPTOOLS}); "
            "make dev installs it"
        )
    work = tmp_path_factory.mktemp("install")
    source = _copy_checkout(work / "source")
    dist = work / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--no-index", "--quiet", "-w", dist, source],
        cwd=work,
    )  # fmt: skip
    [wheel] = dist.glob("vllm_musa_image-*.whl")
    venv = work / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=work)
    fresh = Installed(wheel=wheel, venv=venv)
    _run(
        [sys.executable, "-m", "pip", "--python", fresh.python, "install", "--no-deps",
         "--no-index", "--quiet", wheel],
        cwd=work,
    )  # fmt: skip
    site = _run(
        [fresh.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        cwd=work,
    ).stdout.strip()
    (Path(site) / "dev-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return fresh


def test_the_wheel_carries_every_package_and_data_file(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as whl:
        names = set(whl.namelist())
        template = whl.read("images/builder/Dockerfile.j2")
        in_image = {n for n in names if n.startswith("images/builder/in_image/")}
        scripts = {n: whl.read(n) for n in in_image}
    for package in PACKAGES:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    for package in TYPED:
        assert f"{package}/py.typed" in names, package
    assert "build_image.py" in names
    assert template == (ROOT / "Dockerfile.j2").read_bytes()  # the file, not the symlink
    shipped = ROOT / "images" / "builder" / "in_image"
    expected = {
        f"images/builder/in_image/{p.name}" for p in shipped.iterdir() if p.suffix in (".sh", ".py")
    }
    assert in_image == expected
    for name, data in scripts.items():
        assert data == (shipped / Path(name).name).read_bytes(), name


def test_the_project_comes_from_the_wheel_not_the_checkout(
    installed: Installed, tmp_path: Path
) -> None:
    probe = (
        "import json, sys, build_image, core, images, images.builder.render, manifest, resolver\n"
        "print(json.dumps({'files': [m.__file__ for m in (build_image, core, images, "
        "images.builder.render, manifest, resolver)], 'path': sys.path, "
        "'finders': [type(f).__module__ for f in sys.meta_path]}))\n"
    )
    seen = json.loads(_run([installed.python, "-c", probe], cwd=tmp_path).stdout)
    for file in seen["files"]:
        assert Path(file).is_relative_to(installed.venv), file
    assert str(ROOT) not in seen["path"]
    assert not [f for f in seen["finders"] if "editable" in f]
    usage = _run([installed.build_image, "--help"], cwd=tmp_path).stdout
    assert usage.startswith("usage: build-image [-h] [-q] [-v] [--version] COMMAND ...\n")
    assert "lock, build, gate and publish the vLLM-MUSA serving image" in usage
    shown = _run([installed.build_image, "--version"], cwd=tmp_path).stdout
    assert shown == f"build-image {version('vllm-musa-image')}\n"  # the wheel's metadata


def test_the_installed_tool_locks_renders_and_stages(
    installed: Installed, wheel_factory: WheelFactory, index_server: IndexServer, tmp_path: Path
) -> None:
    native = "cp311-cp311-linux_x86_64"
    index_server.add(
        wheel_factory("pip", "23.0.1"),
        wheel_factory("torch", "2.11.0.post2+musa5.2.0", tags=native),
        wheel_factory("mate", "0.2.7"),
        wheel_factory("setuptools", "66.1.1"),
        wheel_factory("wheel", "0.45.1"),
    )
    work = tmp_path / "work"
    for name in ("vllm", "vllm-musa"):
        (work / "src" / name).mkdir(parents=True)
        (work / "src" / name / "setup.py").write_text(f"# {name}\n")
    write_stack(
        work / "stack" / "demo.yaml",
        name="demo",
        release="0.1.0",
        target={"python": "3.11", "arch": "x86_64", "glibc": "2.36"},
        indexes={"vendor": {"url": index_server.simple_url}},
        default_index="vendor",
        packages={
            "torch": {"version": "2.11.0.post2+musa5.2.0", "index": "vendor", "wheel": "native"}
        },
        requirements=["pip", "mate"],
        base_image="debian:bookworm-slim",
        python_install={"provider": "distro"},
        sources={"vllm": {"path": "src/vllm"}, "vllm-musa": {"path": "src/vllm-musa"}},
        build={"requirements": ["setuptools", "wheel"]},
        gates={"imports": ["torch", "mate", "vllm_musa"]},
    )
    cache = work / "cache"
    locked = _run(
        [installed.build_image, "lock", "stack/demo.yaml", "--cache-dir", cache], cwd=work
    )
    assert (work / "stack" / "demo.lock" / "pylock.toml").is_file(), locked.stderr
    _run([installed.build_image, "render", "stack/demo.yaml", "--out", "Dockerfile"], cwd=work)
    dockerfile = (work / "Dockerfile").read_text()
    froms = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]
    assert froms == [
        "FROM ${BASE_IMAGE} AS base",
        "FROM base AS python",
        "FROM python AS deps",
        "FROM deps AS build",
        "FROM deps AS final",  # the targets: manifest.TARGETS
        "FROM final AS vllm-openai",
    ]
    assert 'ARG BASE_IMAGE="debian:bookworm-slim"' in dockerfile
    staged = _run(
        [
            installed.build_image,
            "stage",
            "stack/demo.yaml",
            "--target",
            "final",
            "--out",
            "context",
            "--cache-dir",
            cache,
        ],
        cwd=work,
    )
    context = work / "context"
    assert staged.stdout == "context\n"  # the staged directory, as given
    assert (context / "Dockerfile").read_text() == dockerfile
    files = {p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file()}
    shipped = ROOT / "images" / "builder" / "in_image"
    assert files == {
        "Dockerfile",
        "wheelhouse/runtime/pip-23.0.1-py3-none-any.whl",
        "wheelhouse/runtime/mate-0.2.7-py3-none-any.whl",
        f"wheelhouse/runtime/torch-2.11.0.post2+musa5.2.0-{native}.whl",
        "wheelhouse/build/setuptools-66.1.1-py3-none-any.whl",
        "wheelhouse/build/wheel-0.45.1-py3-none-any.whl",
        *(f"lock/{p.name}" for p in (work / "stack" / "demo.lock").iterdir()),
        "deps/pinned.txt",  # torch and mate, the manifest's packages: one layer
        "deps/locked.txt",  # pip: the other
        "sources/vllm/setup.py",
        "sources/vllm-musa/setup.py",
        "sbom/sbom.py",
        "sbom/sbom-facts.json",
        "tools/installed.py",
        "tools/third-party.json",  # no driven source: {"trees": []}
        *(f"tools/{p.name}" for p in shipped.glob("*.sh")),
    }
