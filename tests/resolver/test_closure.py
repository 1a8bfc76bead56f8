"""The full closure: equal to uv's for the same roots, target and index binding; installable
with pip --no-deps --require-hashes into a clean interpreter with `pip check` clean. And the
provider hands resolvelib the one name its preference ranks first."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import pip
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import NormalizedName
from packaging.version import Version

from resolver.closure import PYTHON, Candidate, Provider, Req
from testbed.closuregen import generate
from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case


def uv() -> str:
    found = Path(sys.executable).parent / "uv"
    if found.is_file():
        return str(found)
    which = shutil.which("uv")
    if which is None:
        pytest.fail("uv is not installed (make dev installs it)")
    return which


def pins_of(text: str) -> dict[str, str]:
    out = {}
    for raw in text.splitlines():
        line = raw.strip()
        if "==" in line and not line.startswith("#"):
            name, _, rest = line.partition("==")
            out[name.strip()] = rest.split()[0].rstrip("\\")
    return out


def test_closure_equals_uv_pip_compile(tmp_path: Path) -> None:
    world = generate(tmp_path / "world", projects=120, seed=11, upper_bounds=False)
    with IndexServer(world.public_root) as public, IndexServer(world.vendor_root) as vendor:
        stack = tmp_path / "stack" / "generated.yaml"
        stack.parent.mkdir()
        stack.write_text(world.manifest(vendor.simple_url, public.simple_url))
        case = Case(tmp_path, vendor, public)
        result = case.run("lock", stack, "--no-verify")
        assert result.code == 0, result.err
        project = tmp_path / "uvproject"
        project.mkdir()
        (project / "pyproject.toml").write_text(
            world.uv_pyproject(vendor.simple_url, public.simple_url)
        )
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "XDG_CONFIG_HOME": str(tmp_path)}
        proc = subprocess.run(
            [
                uv(), "pip", "compile", "pyproject.toml", "--python-version", "3.12",
                "--python-platform", "x86_64-manylinux_2_35", "--only-binary", ":all:",
                "--no-cache", "--no-header", "--no-annotate", "-o", "uv.txt",
            ],
            cwd=project, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    ours = pins_of((tmp_path / "stack" / "generated.lock" / "constraints.txt").read_text())
    theirs = pins_of((project / "uv.txt").read_text())
    assert len(ours) > 20
    assert ours == theirs


def test_lock_installs_with_pip_require_hashes_and_pip_check_is_clean(case: Case) -> None:
    """Target = the host's own interpreter, so pip can install the lock for real."""
    host = f"{sys.version_info.major}.{sys.version_info.minor}"
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"
    case.publish(
        case.vendor,
        Listing(path=case.wheel("torch", TORCH, f"{cp}-{cp}-linux_x86_64", requires_dist=("filelock", "typing-extensions>=4.8")), hash="none"),
        Listing(path=case.wheel("torch-musa", TORCH, f"{cp}-{cp}-linux_x86_64", requires_dist=("torch==2.11.0.post2",)), hash="none"),
    )  # fmt: skip
    case.publish(
        case.pypi,
        case.wheel("filelock", "3.16.0"),
        case.wheel("filelock", "3.17.0"),
        case.wheel("typing-extensions", "4.12.2"),
        case.wheel("typing-extensions", "4.7.0"),
        case.wheel("numpy", "1.26.4", f"{cp}-{cp}-manylinux_2_17_x86_64", requires_dist=("colorama; sys_platform == 'win32'",)),
        case.wheel("transformers", "5.5.3", requires_dist=("numpy>=1.17", "filelock", "tqdm[notebook]>=4")),
        case.wheel("tqdm", "4.67.1", requires_dist=("ipywidgets>=6; extra == 'notebook'",)),
        case.wheel("ipywidgets", "8.1.5"),
        case.wheel("torch", "2.11.0", f"{cp}-{cp}-manylinux_2_28_x86_64", requires_dist=("nvidia-cublas-cu12",)),
    )  # fmt: skip
    stack = case.stack(
        f'  torch: {{version: "{TORCH}", index: mthreads, wheel: native}}\n'
        f'  torch-musa: {{version: "{TORCH}", index: mthreads, wheel: native}}',
        ["numpy==1.26.4", "transformers>=5"],
        python=host,
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    wheelhouse = case.tmp / "wheelhouse"
    wheelhouse.mkdir()
    for w in case.wheels.iterdir():
        shutil.copy(w, wheelhouse / w.name)
    target = case.tmp / "site"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    install = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--isolated", "--no-index", "--find-links", str(wheelhouse),
            "--no-deps", "--require-hashes", "--only-binary", ":all:", "--target", str(target),
            "-r", str(case.lock_dir() / "requirements.txt"),
        ],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr
    installed = sorted(p.name.split("-")[0].lower() for p in target.glob("*.dist-info"))
    assert installed == [
        "filelock",
        "ipywidgets",
        "numpy",
        "torch",
        "torch_musa",
        "tqdm",
        "transformers",
        "typing_extensions",
    ]
    # pip check sees the lock and pip only: -S keeps this venv's own packages off the path
    pip_only = case.tmp / "pip-only"
    pip_only.mkdir()
    (pip_only / "pip").symlink_to(Path(pip.__file__).parent)
    check = subprocess.run(
        [sys.executable, "-S", "-m", "pip", "check", "--isolated"],
        env={**env, "PYTHONPATH": f"{target}{os.pathsep}{pip_only}", "PYTHONNOUSERSITE": "1"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr


def test_pin_label_conflict_names_both_ends(case: Case) -> None:
    case.publish(
        case.vendor,
        Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"),
        Listing(path=case.wheel("torch-musa", TORCH, NATIVE, requires_dist=(f"torch=={TORCH}s5000",)), hash="none"),
    )  # fmt: skip
    stack = case.stack(
        PIN_TORCH + f'\n  torch-musa: {{version: "{TORCH}", index: mthreads, wheel: native}}'
    )
    result = case.run("lock", stack)
    assert result.code == 1
    assert result.err == (
        "error[resolution]: the dependencies cannot be satisfied together:\n"
        f"  packages -> torch-musa=={TORCH} requires torch=={TORCH}s5000; but packages.torch pins "
        f"torch {TORCH} (the full version, local label included, must satisfy every requirement)\n"
    )


def test_unpinned_torch_of_a_deps_false_package_never_pulls_cuda(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(
        case.pypi,
        case.wheel("torchada", "0.1.95", requires_dist=("torch",)),
        case.wheel("torch", "2.11.0", "cp312-cp312-manylinux_2_28_x86_64", requires_dist=("nvidia-cublas-cu12",)),
        case.wheel("nvidia-cublas-cu12", "12.8.4.1", "py3-none-manylinux_2_27_x86_64"),
    )  # fmt: skip
    stack = case.stack(
        PIN_TORCH + '\n  torchada: {version: "0.1.95", index: pypi, wheel: pure, deps: false}'
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    constraints = (case.lock_dir() / "constraints.txt").read_text()
    assert "nvidia" not in constraints
    assert f"torch=={TORCH}" in constraints


def test_markers_use_the_target_not_the_host(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel(
            "app", "1.0",
            requires_dist=(
                "only-old-python; python_version < '3.12'",
                "only-windows; sys_platform == 'win32'",
                "only-aarch64; platform_machine == 'aarch64'",
                "only-312; python_full_version >= '3.12.0'",
            ),
        ),
        case.wheel("only-old-python", "1.0"),
        case.wheel("only-windows", "1.0"),
        case.wheel("only-aarch64", "1.0"),
        case.wheel("only-312", "1.0"),
    )  # fmt: skip
    result = case.run("lock", case.stack(requirements=["app"]))
    assert result.code == 0, result.err
    names = [
        line.split("==")[0]
        for line in (case.lock_dir() / "constraints.txt").read_text().splitlines()
        if "==" in line
    ]
    assert names == ["app", "only-312"]


def test_metadata_requires_python_and_prereleases(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel("lib", "2.0", requires_python=">=3.13"),
        case.wheel("lib", "1.5"),
        case.wheel("lib", "3.0rc1"),
    )  # fmt: skip
    result = case.run("lock", case.stack(requirements=["lib"]))
    assert result.code == 0, result.err
    assert "lib==1.5" in (case.lock_dir() / "constraints.txt").read_text()
    pre = case.run("lock", case.stack(requirements=["lib>=3.0rc1"]))
    assert pre.code == 0, pre.err
    assert "lib==3.0rc1" in (case.lock_dir() / "constraints.txt").read_text()


def test_why_prints_the_chain(case: Case) -> None:
    case.publish(
        case.vendor,
        Listing(path=case.wheel("torch", TORCH, NATIVE, requires_dist=("filelock",)), hash="none"),
    )
    case.publish(
        case.pypi,
        case.wheel("transformers", "5.5.3", requires_dist=("huggingface-hub",)),
        case.wheel("huggingface-hub", "1.1.0", requires_dist=("filelock>=3",)),
        case.wheel("filelock", "3.17.0"),
    )  # fmt: skip
    stack = case.stack(PIN_TORCH, ["transformers==5.5.3"])
    assert case.run("lock", stack).code == 0
    result = case.run("why", stack, "filelock")
    assert result.code == 0, result.err
    assert result.out == (
        "packages: torch 2.11.0.post2+musa5.2.0 -> filelock 3.17.0\n"
        "requirements: transformers 5.5.3 -> huggingface-hub 1.1.0 -> filelock 3.17.0\n"
    )
    explain = case.run("explain", stack, "filelock")
    assert explain.code == 0, explain.err
    assert "wanted: ==3.17.0, as locked" in explain.out
    assert "selected" in explain.out


def test_unsatisfiable_range_says_which_chain(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel("a", "1.0", requires_dist=("x",)),
        case.wheel("x", "1.0", requires_dist=("c<2",)),
        case.wheel("b", "1.0", requires_dist=("c>=2",)),
        case.wheel("c", "1.0"),
        case.wheel("c", "2.0"),
    )  # fmt: skip
    result = case.run("lock", case.stack(requirements=["a", "b"]))
    assert result.code == 1
    assert result.err == (
        "error[resolution]: the dependencies cannot be satisfied together:\n"
        "  requirements -> b==1.0 requires c>=2; requirements -> a==1.0 -> x==1.0 requires c<2; "
        "no version satisfies all of them "
        "(newest usable: 2.0, 1.0)\n"
        "hint: if the stack must have these versions anyway, one possible fix is an override with "
        'its reason: overrides: {b: {version: "...", reason: "..."}} (or of x, c); every '
        "requirement on an overridden package is ignored, and each one its version does not "
        "satisfy is recorded in the lock\n"
    )


class _Information(NamedTuple):
    """What resolvelib hands a provider of a criterion: a requirement and who asked for it."""

    requirement: Req
    parent: Candidate | None


class _InformationOf(Mapping[str, Iterator[_Information]]):
    """resolvelib's view of the criteria: a new iterator of a name's information each time."""

    def __init__(self, infos: dict[str, list[_Information]]) -> None:
        self.infos = infos

    def __getitem__(self, key: str) -> Iterator[_Information]:
        return iter(self.infos[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)


class _NoSource:
    def candidates(self, name: NormalizedName) -> Iterable[Candidate]:
        raise AssertionError("ranking reads no candidates")

    def requirements_of(self, candidate: Candidate) -> tuple[Sequence[Requirement], str | None]:
        raise AssertionError("ranking reads no metadata")

    def follows_deps(self, name: NormalizedName) -> bool:
        return True

    def prefetch(self, names: Iterable[NormalizedName]) -> None:
        pass


def test_the_name_narrowed_to_is_the_one_get_preference_ranks_first() -> None:
    """resolvelib pins the one name ``narrow_requirement_selection`` leaves without asking
    ``get_preference``; that name is the one ``get_preference`` would have put first, for any
    set of names left to pin and any backtrack causes."""
    torch = NormalizedName("torch")
    provider = Provider(
        _NoSource(),
        environment={},
        python_version=Version("3.12.3"),
        pins={torch: Candidate(torch, Version("2.11.0"), pinned=True)},
    )
    asks = {
        PYTHON: ">=3.9",
        "torch": ">=2",
        "numpy": "==2.1.0",
        "numpy[extra]": "==2.1.*",
        "requests": ">=2.26",
        "aiohttp": "===3.9.5",
        "zstandard": "",
    }
    infos = _InformationOf(
        {
            key: [
                _Information(
                    Req(
                        NormalizedName(key.split("[")[0]), frozenset(), SpecifierSet(spec), "x", ""
                    ),
                    None,
                )
            ]
            for key, spec in asks.items()
        }
    )
    for causes in ([], [next(infos["requests"])], [next(infos["zstandard"]), next(infos[PYTHON])]):
        for size in range(2, len(asks) + 1):
            for names in itertools.permutations(asks, size):
                narrowed = provider.narrow_requirement_selection(names, {}, {}, infos, causes)
                first = min(names, key=lambda n: provider.get_preference(n, {}, {}, infos, causes))
                assert narrowed == [first]
