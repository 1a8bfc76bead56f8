"""Gate evaluation tests (pure): a passing image, then each gate failing with its name and output."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from core.errors import GateError, ManifestError
from images.builder.gates import (
    GATE_NAMES,
    evaluate_gates,
    parse_probe_output,
    probe_args,
    require_gates,
)
from manifest import Manifest
from resolver.lockfile import Lock
from tests.support.images import MANIFEST, lock_for, manifest


def _built(name: str, version: str) -> dict[str, Any]:
    return {
        "name": name,
        "version": version,
        "properties": [{"name": "vllm-musa:built-from", "value": f"path:demo/{name}"}],
    }


GOOD: dict[str, Any] = {
    "python": [3, 11, 2],
    "prefix": "/usr",
    "base_prefix": "/usr",
    "uv": [],
    "venv_packages": [],
    "ensurepip_wheels": [],
    "pip_check": {"returncode": 0, "output": "No broken requirements found."},
    "distributions": [
        ["mate", "0.2.7"],
        ["pip", "23.0.1"],
        ["torch", "2.11.0.post2+musa5.2.0"],
        ["vllm", "0.28.0+demo"],
        ["vllm_musa", "0.1.28+demo"],
    ],
    "imports": {"torch": "", "mate": "", "vllm_musa": ""},
    "find_spec": {
        "mate": {"found": True, "detail": "/usr/lib/python3/dist-packages/mate/__init__.py"},
        "triton.language": {"found": True, "detail": "/usr/lib/triton/language/__init__.py"},
    },
    "libraries": {"libz.so.1": "/lib/x86_64-linux-gnu/libz.so.1"},
    # the linkage gate: see tests/images/builder/test_linkage_gate.py
    "linkage": {"distributions": 5, "elf_files": 1, "needs": 1, "resolved": 1, "missing": []},
    "entry_points": [
        {
            "group": "vllm.general_plugins",
            "name": "musa_custom_ops",
            "value": "vllm_musa:register_custom_ops",
            "dist": "vllm_musa",
        },
        {
            "group": "vllm.platform_plugins",
            "name": "musa",
            "value": "vllm_musa:musa_platform_plugin",
            "dist": "vllm_musa",
        },
    ],
    "sbom": {"components": [_built("vllm", "0.28.0+demo"), _built("vllm-musa", "0.1.28+demo")]},
    "components": {
        "marker": {"mooncake": {"built": False}, "vllm-rs": {"built": False}},
        "vllm_rs": {"package": "/usr/lib/python3/dist-packages/vllm", "binary": "", "modules": {}},
    },
    # python3-is-target and python-h (tests/images/builder/test_gates_interpreter.py)
    "executable_realpath": "/usr/bin/python3.11",
    "python_commands": {
        "python3": {"version": [3, 11, 2], "realpath": "/usr/bin/python3.11"},
        "python": {"version": [3, 11, 2], "realpath": "/usr/bin/python3.11"},
    },
    "python_h": {"include": "/usr/include/python3.11", "present": True},
    # the cxx-extension gate: see tests/images/builder/test_gates_cxx.py
    "cxx_extension": {
        "compiler": "c++",
        "path": "/usr/bin/c++",
        "version": "c++ (Debian 12.2.0-14+deb12u1) 12.2.0",
        "ninja": "/usr/bin/ninja",
        "include": "/usr/include/python3.11",
        "module": "_vllm_musa_cxx_probe",
        "call": "join('vllm', 'musa')",
        "stage": "",
        "command": [],
        "output": [],
        "result": "vllm-musa",
    },
    # musa-jit, with no mcc in the image: see tests/images/builder/test_gates_upstream.py
    "musa_jit": {
        "mcc": "/usr/local/musa/bin/mcc",
        "mcc_from": "$MUSA_HOME/bin/mcc",
        "mcc_path": "",
        "musa_home": "/usr/local/musa",
    },
}


GATES = """\
gates:
  imports: [torch, vllm_musa]
  find_spec: [mate, triton.language]
  versions: {vllm: "0.28.0+demo", vllm_musa: "0.1.28+demo"}
  libraries: [libz.so.1]
"""


def _with_gates(gates: str) -> str:
    text = MANIFEST.replace("gates:\n  imports: [torch, mate, vllm_musa]\n", gates)
    assert text != MANIFEST
    return text


@pytest.fixture
def stack(tmp_path: Path) -> tuple[Manifest, Lock]:
    m = manifest(tmp_path)
    return m, lock_for(m)


@pytest.fixture
def gated(tmp_path: Path) -> tuple[Manifest, Lock]:
    """The stack with every gates key: find_spec, versions and libraries too."""
    m = manifest(tmp_path, _with_gates(GATES))
    return m, lock_for(m)


def _failed(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> dict[str, str]:
    results = evaluate_gates(facts, *stack)
    assert [r.name for r in results] == list(GATE_NAMES)
    return {r.name: r.output for r in results if not r.ok}


def test_a_good_image_passes_every_gate(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(GOOD, stack) == {}
    require_gates(evaluate_gates(GOOD, *stack), image="img")


def _bad(**changes: Any) -> dict[str, Any]:
    facts = copy.deepcopy(GOOD)
    facts.update(changes)
    return facts


def test_python_version(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(_bad(python=[3, 12, 1]), stack) == {
        "python-version": "python is 3.12.1, the target is 3.11"
    }


def test_system_prefix(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(_bad(prefix="/opt/venv"), stack) == {
        "system-prefix": "sys.prefix is '/opt/venv' and sys.base_prefix is '/usr'; both must be "
        "'/usr' (a venv or a non-system interpreter is in use)"
    }


def test_no_uv(stack: tuple[Manifest, Lock]) -> None:
    assert _failed(_bad(uv=["/usr/local/bin/uv"]), stack) == {
        "no-uv": "uv is on PATH: /usr/local/bin/uv"
    }


def test_no_venv(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(
        venv_packages=["python3.11-venv"],
        ensurepip_wheels=["/usr/share/python-wheels/pip-23.0.1-py3-none-any.whl"],
    )
    assert _failed(facts, stack) == {
        "no-venv": "the package python3.11-venv is installed\n"
        "venv's ensurepip wheel is present: /usr/share/python-wheels/pip-23.0.1-py3-none-any.whl"
    }


def test_pip_check(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(pip_check={"returncode": 1, "output": "mate 0.2.7 requires torch, not installed"})
    assert _failed(facts, stack) == {
        "pip-check": "pip check exited 1:\nmate 0.2.7 requires torch, not installed"
    }


def test_installed_equals_lock(stack: tuple[Manifest, Lock]) -> None:
    dists = [d for d in GOOD["distributions"] if d[0] != "mate"]
    dists[1] = ["torch", "2.11.0.post2+musa5.2.1mp22"]
    dists += [["setuptools", "66.1.1"], ["requests", "2.32.0"]]
    assert _failed(_bad(distributions=dists), stack) == {
        "installed-equals-lock": "requests 2.32.0 is installed but is not in the lock\n"
        "setuptools 66.1.1 is a build-stage package (requirements-build.txt) and must not be in "
        "the image\n"
        "torch 2.11.0.post2+musa5.2.1mp22 is installed, but the lock has 2.11.0.post2+musa5.2.0\n"
        "mate 0.2.7 is in the lock but not installed"
    }


def test_installed_source_must_be_built(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(sbom={"components": [_built("vllm", "0.28.0+demo")]})
    failed = _failed(facts, stack)
    assert failed["installed-equals-lock"] == (
        "source vllm-musa was not built into the image (no SBOM entry)\n"
        "vllm-musa 0.1.28+demo is installed but is not in the lock"
    )


def test_imports(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(imports={"torch": "", "mate": "ModuleNotFoundError: No module named 'mate'"})
    assert _failed(facts, stack) == {
        "imports": "import mate failed:\nModuleNotFoundError: No module named 'mate'\n"
        "import vllm_musa: not probed"
    }


def test_no_cuda(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(distributions=[*GOOD["distributions"], ["nvidia-cublas-cu12", "12.4.5.8"]])
    failed = _failed(facts, stack)
    assert failed["no-cuda"] == "a CUDA distribution is installed: nvidia-cublas-cu12 12.4.5.8"


def test_entry_points_pass_with_both_groups(stack: tuple[Manifest, Lock]) -> None:
    results = {r.name: r for r in evaluate_gates(GOOD, *stack)}
    assert results["entry-points"].ok
    assert results["entry-points"].output == (
        "vllm.platform_plugins: musa = vllm_musa:musa_platform_plugin (vllm_musa)\n"
        "vllm.general_plugins: musa_custom_ops = vllm_musa:register_custom_ops (vllm_musa)"
    )


def test_entry_points_name_each_missing_group(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(
        entry_points=[
            {"group": "vllm.platform_plugins", "name": "cuda", "value": "x:y", "dist": "other"}
        ]
    )
    assert _failed(facts, stack) == {
        "entry-points": "vllm.platform_plugins: the entry point musa = "
        "vllm_musa:musa_platform_plugin is not registered by a source-built distribution "
        "(vllm, vllm-musa); registered in vllm.platform_plugins: cuda = x:y (other)\n"
        "vllm.general_plugins: the entry point musa_custom_ops = vllm_musa:register_custom_ops "
        "is not registered by a source-built distribution (vllm, vllm-musa); registered in "
        "vllm.general_plugins: none"
    }


def test_entry_points_the_general_plugin_alone_missing(stack: tuple[Manifest, Lock]) -> None:
    facts = _bad(entry_points=[GOOD["entry_points"][1]])
    assert _failed(facts, stack) == {
        "entry-points": "vllm.general_plugins: the entry point musa_custom_ops = "
        "vllm_musa:register_custom_ops is not registered by a source-built distribution "
        "(vllm, vllm-musa); registered in vllm.general_plugins: none"
    }


def test_entry_points_of_another_distribution_do_not_count(
    stack: tuple[Manifest, Lock],
) -> None:
    facts = _bad(entry_points=[{**e, "dist": "other"} for e in GOOD["entry_points"]])
    assert _failed(facts, stack) == {
        "entry-points": "vllm.platform_plugins: the entry point musa = "
        "vllm_musa:musa_platform_plugin is not registered by a source-built distribution "
        "(vllm, vllm-musa); registered in vllm.platform_plugins: musa = "
        "vllm_musa:musa_platform_plugin (other)\n"
        "vllm.general_plugins: the entry point musa_custom_ops = vllm_musa:register_custom_ops "
        "is not registered by a source-built distribution (vllm, vllm-musa); registered in "
        "vllm.general_plugins: musa_custom_ops = vllm_musa:register_custom_ops (other)"
    }


def test_entry_points_with_another_value(stack: tuple[Manifest, Lock]) -> None:
    eps = copy.deepcopy(GOOD["entry_points"])
    eps[1]["value"] = "vllm_musa:register"
    assert _failed(_bad(entry_points=eps), stack) == {
        "entry-points": "vllm.platform_plugins: musa = vllm_musa:register (vllm_musa), but "
        "vLLM-MUSA's entry point is musa = vllm_musa:musa_platform_plugin"
    }


def test_every_gates_key_passes_on_a_good_image(gated: tuple[Manifest, Lock]) -> None:
    results = {r.name: r for r in evaluate_gates(GOOD, *gated)}
    assert [name for name, r in results.items() if not r.ok] == []
    assert results["imports"].output == "imported: torch, vllm_musa"
    assert results["find-spec"].output == "located (not imported): mate, triton.language"
    assert results["declared-versions"].output == (
        "installed as declared: vllm 0.28.0+demo, vllm_musa 0.1.28+demo"
    )
    assert results["libraries"].output == "found: libz.so.1 (/lib/x86_64-linux-gnu/libz.so.1)"


def test_without_gates_keys_the_new_gates_pass_empty(stack: tuple[Manifest, Lock]) -> None:
    bare = _bad(find_spec={}, libraries={})
    outputs = {r.name: r.output for r in evaluate_gates(bare, *stack) if r.ok}
    assert outputs["find-spec"] == "located (not imported): (none listed)"
    assert outputs["declared-versions"] == "installed as declared: (none declared)"
    assert outputs["libraries"] == "found: (none listed)"


def test_find_spec(gated: tuple[Manifest, Lock]) -> None:
    facts = _bad(find_spec={"mate": {"found": False, "detail": "no spec"}})
    assert _failed(facts, gated) == {
        "find-spec": "find_spec mate: not found (no spec)\nfind_spec triton.language: not probed"
    }


def test_find_spec_reports_the_probe_error(gated: tuple[Manifest, Lock]) -> None:
    specs = copy.deepcopy(GOOD["find_spec"])
    specs["triton.language"] = {"found": False, "detail": "ValueError: triton.__spec__ is None"}
    assert _failed(_bad(find_spec=specs), gated) == {
        "find-spec": "find_spec triton.language: not found (ValueError: triton.__spec__ is None)"
    }


def test_declared_versions(gated: tuple[Manifest, Lock]) -> None:
    dists = [d for d in GOOD["distributions"] if d[0] != "vllm_musa"]
    dists[dists.index(["vllm", "0.28.0+demo"])] = ["vllm", "0.28.0+empty"]
    facts = _bad(
        distributions=dists,
        sbom={"components": [_built("vllm", "0.28.0+empty"), _built("vllm-musa", "0.1.28+demo")]},
    )
    failed = _failed(facts, gated)
    assert failed["declared-versions"] == (
        "vllm 0.28.0+empty is installed, but gates.versions declares 0.28.0+demo\n"
        "vllm_musa is not installed; gates.versions declares 0.1.28+demo"
    )


def test_declared_versions_compare_normalized(gated: tuple[Manifest, Lock]) -> None:
    dists = copy.deepcopy(GOOD["distributions"])
    dists[dists.index(["vllm", "0.28.0+demo"])] = ["vllm", "0.28.0.0+DEMO"]
    results = {r.name: r for r in evaluate_gates(_bad(distributions=dists), *gated)}
    assert results["declared-versions"].ok


def test_libraries(tmp_path: Path) -> None:
    m = manifest(
        tmp_path,
        _with_gates("gates:\n  libraries: [libz.so.1, libmkl_core.so.2, libmkl_gnu_thread.so.2]\n"),
    )
    facts = _bad(libraries={"libz.so.1": "/lib/x86_64-linux-gnu/libz.so.1", "libmkl_core.so.2": ""})
    assert _failed(facts, (m, lock_for(m))) == {
        "libraries": "library libmkl_core.so.2: the dynamic linker does not find it "
        "(not in ldconfig -p, not in LD_LIBRARY_PATH)\n"
        "library libmkl_gnu_thread.so.2: not probed"
    }


def test_probe_args_carry_every_gates_list(gated: tuple[Manifest, Lock]) -> None:
    assert probe_args(gated[0]) == [
        "torch",
        "vllm_musa",
        "--find-spec=mate",
        "--find-spec=triton.language",
        "--library=libz.so.1",
        "--third-party=/opt/vllm-musa/third-party.json",
        "--base-record=/opt/vllm-musa/base-distributions.json",
    ]


def test_every_manifest_pin_must_be_in_the_lock(tmp_path: Path) -> None:
    text = MANIFEST.replace(
        "requirements: [pip, torch, mate]\n",
        "packages:\n"
        '  torch: {version: "2.11.0.post2+musa5.2.0s5000", index: vendor, wheel: native}\n'
        '  deep-ep: {version: "1.1.0+musa5.2.0", index: vendor, wheel: native}\n'
        "requirements: [pip, mate]\n",
    )
    m = manifest(tmp_path, text)
    assert _failed(GOOD, (m, lock_for(m))) == {
        "installed-equals-lock": "torch is pinned 2.11.0.post2+musa5.2.0s5000 in the manifest, "
        "but the lock has 2.11.0.post2+musa5.2.0\n"
        "deep-ep 1.1.0+musa5.2.0 is pinned in the manifest but is not in the lock"
    }


def _gates_error(tmp_path: Path, gates: str) -> str:
    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, _with_gates(gates))
    return info.value.message


def test_a_module_both_imported_and_located_is_refused(tmp_path: Path) -> None:
    message = _gates_error(
        tmp_path, "gates:\n  imports: [torch, mate]\n  find_spec: [triton, mate]\n"
    )
    path = tmp_path / "stack" / "demo.yaml"
    assert message == (
        f"{path}:21: gates.find_spec.1: mate is also in gates.imports; a module is either "
        "imported or only located"
    )


@pytest.mark.parametrize(
    ("gates", "expected"),
    [
        ("  find_spec: [mate, mate]\n", "gates.find_spec.1: mate is listed twice"),
        ("  imports: [torch, torch]\n", "gates.imports.1: torch is listed twice"),
        ("  find_spec: [mate-mubin]\n", "gates.find_spec.0: 'mate-mubin' is not a module name"),
        (
            '  versions: {vllm: "0.28.0-empty!"}\n',
            "gates.versions.vllm: '0.28.0-empty!' is not a PEP 440 version",
        ),
        (
            '  versions: {vllm_musa: "1", vllm-musa: "1"}\n',
            "gates.versions.vllm-musa: vllm-musa and vllm_musa name the same distribution",
        ),
        ('  versions: {"-x": "1"}\n', "gates.versions.-x: '-x' is not a distribution name"),
        (
            "  versions: {vllm: 0.28}\n",
            "gates.versions.vllm: must be a string, got the number 0.28",
        ),
        (
            "  libraries: [mkl_core]\n",
            "gates.libraries.0: 'mkl_core' is not a shared-library soname",
        ),
        ("  libraries: [libz.so.1, libz.so.1]\n", "gates.libraries.1: libz.so.1 is listed twice"),
        ("  library: [libz.so.1]\n", "gates.library: unknown key"),
    ],
)
def test_gates_keys_are_validated(tmp_path: Path, gates: str, expected: str) -> None:
    message = _gates_error(tmp_path, "gates:\n" + gates)
    assert message.split(": ", 1)[1] == expected


def test_shipped_stacks_locate_gpu_bound_modules_only() -> None:
    from manifest import load_manifest

    root = Path(__file__).resolve().parents[3]
    imports = ("torch", "torch_musa", "torchada", "numpy", "vllm", "vllm_musa")
    for name, extra in (("py312", ()), ("py310", ("mooncake.engine",))):
        gates = load_manifest(root / "stack" / f"vllm-musa-0.28.0-{name}.yaml").gates
        # upstream's image imports TransferEngine from mooncake.engine after installing it
        assert gates.imports == (*imports, *extra)
        assert {"mate", "flash_mla", "tilelang", "triton"} <= set(gates.find_spec)
        assert dict(gates.versions) == {"vllm": "0.28.0"}
        assert gates.libraries == (
            "libmkl_core.so.2",
            "libmkl_gnu_thread.so.2",
            "libmkl_intel_lp64.so.2",
        )
    demo = load_manifest(root / "stack" / "demo.yaml").gates
    assert demo.find_spec == ("triton", "mate")
    assert dict(demo.versions) == {"vllm": "0.28.0+demo", "vllm-musa": "0.1.28+demo"}
    assert demo.libraries == ("libz.so.1",)


def test_a_failed_gate_is_an_error_naming_it(stack: tuple[Manifest, Lock]) -> None:
    with pytest.raises(GateError) as info:
        require_gates(evaluate_gates(_bad(uv=["/usr/bin/uv"]), *stack), image="sha256:abc")
    assert info.value.message == (
        "image sha256:abc failed 1 gate(s); no tag was applied\n"
        "  gate no-uv failed:\n    uv is on PATH: /usr/bin/uv"
    )


def test_probe_output_without_json() -> None:
    with pytest.raises(GateError) as info:
        parse_probe_output("Traceback ...\n", image="img")
    assert info.value.message == "the gate probe in img printed no JSON:\nTraceback ...\n"


def test_a_local_label_is_not_the_declared_version(tmp_path: Path) -> None:
    m = manifest(tmp_path, _with_gates('gates:\n  versions: {vllm: "0.28.0"}\n'))
    assert _failed(GOOD, (m, lock_for(m))) == {
        "declared-versions": "vllm 0.28.0+demo is installed, but gates.versions declares 0.28.0"
    }


# ------------------------------------------------------------------------- components: vllm-rs

PACKAGE = "/vllm-workspace/third_party/vllm/vllm"


def _vllm_rs_stack(tmp_path: Path) -> tuple[Manifest, Lock]:
    from tests.support.images import VLLM_RS_DISTRO, components_text

    m = manifest(tmp_path, components_text(VLLM_RS_DISTRO))
    return m, lock_for(m)


def _rs_facts(built: bool, binary: str, modules: dict[str, str]) -> dict[str, Any]:
    marker = {"built": True, "tree": "vllm", "package": "vllm", "binary": "vllm-rs"}
    return _bad(
        components={
            "marker": {
                "mooncake": {"built": False},
                "vllm-rs": marker if built else {"built": False},
            },
            "vllm_rs": {"package": PACKAGE, "binary": binary, "modules": modules},
        }
    )


def test_vllm_rs_in_the_package_directory_passes(tmp_path: Path) -> None:
    facts = _rs_facts(True, f"{PACKAGE}/vllm-rs", {"_rust_tool_parser.abi3.so": ""})
    assert _failed(facts, _vllm_rs_stack(tmp_path)) == {}


def test_vllm_rs_missing_or_not_loading_names_the_file(tmp_path: Path) -> None:
    error = "ImportError: undefined symbol: PyInit__rust_tool_parser"
    facts = _rs_facts(True, "", {"_rust_tool_parser.abi3.so": error})
    assert _failed(facts, _vllm_rs_stack(tmp_path)) == {
        "components": f"components.vllm-rs: no executable {PACKAGE}/vllm-rs, where vLLM's "
        "VLLM_RUST_FRONTEND_PATH=auto looks\n"
        f"components.vllm-rs: {PACKAGE}/_rust_tool_parser.abi3.so does not load: {error}"
    }
    assert _failed(_rs_facts(True, f"{PACKAGE}/vllm-rs", {}), _vllm_rs_stack(tmp_path)) == {
        "components": f"components.vllm-rs: no Rust module ({PACKAGE}/_rust_*.so)"
    }


def test_vllm_rs_off_refuses_its_artifacts_in_the_image(stack: tuple[Manifest, Lock]) -> None:
    facts = _rs_facts(False, f"{PACKAGE}/vllm-rs", {"_rust_tool_parser.abi3.so": ""})
    assert _failed(facts, stack) == {
        "components": f"components.vllm-rs is off, but {PACKAGE}/vllm-rs, "
        f"{PACKAGE}/_rust_tool_parser.abi3.so is in the image"
    }
