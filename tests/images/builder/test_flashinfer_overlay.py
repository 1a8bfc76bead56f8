"""FlashInfer's provider overlay: upstream's copy rules (in_image/flashinfer_overlay.py), the
staged checkout checked and recorded (third_party.py), the render's step, and the
flashinfer-provider gate (pure)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from core.errors import SourceError
from images.builder.gates import evaluate_gates
from images.builder.in_image import flashinfer_overlay as fo
from images.builder.render import workspace_step
from images.builder.third_party import check_and_record, provider_overlay, record_json
from manifest import Manifest, parse_manifest
from resolver.lockfile import Lock
from tests.images.builder.test_gates_driven import DRIVEN, _facts, _with_override
from tests.images.builder.test_third_party import STACK_WITH_SERIES, _staged
from tests.sources.test_third_party_pins_and_patches import REV
from tests.support.images import lock_for, manifest

COMMIT = "5e4b43c411a5280329d8b1fd362b2656d389f3ef"
OTHER = "b8fe9501e1e37023679fb2e2b6d930f8d034469c"


def _with_flashinfer(stack: str) -> str:
    """``stack`` with a FlashInfer source staged as its driving source's third_party/flashinfer."""
    return stack.replace(
        "  vllm-musa:\n",
        f'  flashinfer: {{git: "https://github.com/yeahdongcn/flashinfer.git", rev: "{COMMIT}"}}\n'
        "  vllm-musa:\n",
    ).replace(
        "      vllm: {source: vllm, pin: VLLM_COMMIT, patches: vllm_musa/patches/series}\n",
        "      vllm: {source: vllm, pin: VLLM_COMMIT, patches: vllm_musa/patches/series}\n"
        "      flashinfer: {source: flashinfer, pin: FLASHINFER_COMMIT, installed: false}\n",
    )


WITH_FLASHINFER = _with_flashinfer(STACK_WITH_SERIES)
PINS = f"VLLM_COMMIT={REV}\nFLASHINFER_COMMIT={COMMIT}\n"
SITE = "/usr/local/lib/python3.11/dist-packages"
MARKER = f"{SITE}/flashinfer/mamba/MUSA_PROVIDER_COMMIT"
# what upstream_probe.py reports of the provider's functions in a good image
FUNCTIONS = [
    {
        "module": "flashinfer.mamba.ssd_combined",
        "function": "ssd_combined_fwd_varlen",
        "path": f"{SITE}/flashinfer/mamba/ssd_combined.py",
        "binding": "def",
        "error": "",
    },
    {
        "module": "flashinfer.mamba.selective_state_update",
        "function": "selective_state_update",
        "path": f"{SITE}/flashinfer/mamba/selective_state_update.py",
        "binding": "def",
        "error": "",
    },
]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _checkout(root: Path) -> Path:
    _write(
        root / "flashinfer",
        {
            "__init__.py": "checkout\n",
            "mamba/__init__.py": "checkout\n",
            "mamba/ssd.py": "checkout\n",
            "jit/__init__.py": "checkout\n",
            "autotuner/__init__.py": "checkout\n",
            "sampling.py": "checkout\n",
            "api_logging.py": "checkout\n",
            "gemm/__init__.py": "checkout\n",  # not one of upstream's sibling packages
        },
    )
    _write(root, {"csrc/norm.cu": "kernel\n"})
    return root


def _installed(root: Path) -> Path:
    _write(
        root,
        {
            "__init__.py": "wheel\n",
            "sampling.py": "wheel\n",
            "jit/__init__.py": "wheel\n",
            "jit/wheel_only.py": "wheel\n",
            "mamba/stale.py": "wheel\n",
            "gemm/__init__.py": "wheel\n",
        },
    )
    return root


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------- upstream's rules


def test_the_overlay_follows_upstreams_copy_rules(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "checkout")
    target = _installed(tmp_path / "site" / "flashinfer")
    written = fo.overlay(checkout, target, COMMIT)
    assert written == [
        "api_logging.py",
        "autotuner",
        "jit",
        "mamba",
        "mamba/MUSA_PROVIDER_COMMIT",
    ]
    assert _tree(target) == {
        "__init__.py": "wheel\n",  # never __init__.py
        "api_logging.py": "checkout\n",  # absent: copied
        "autotuner/__init__.py": "checkout\n",  # a sibling package the wheel lacked
        "gemm/__init__.py": "wheel\n",  # not a sibling upstream replaces
        "jit/__init__.py": "checkout\n",  # replaced wholesale: wheel_only.py is gone
        "mamba/MUSA_PROVIDER_COMMIT": f"{COMMIT}\n",
        "mamba/__init__.py": "checkout\n",  # mamba replaced: stale.py is gone
        "mamba/ssd.py": "checkout\n",
        "sampling.py": "wheel\n",  # present: left alone
    }


def test_a_checkout_without_the_provider_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "checkout" / "flashinfer", {"jit/__init__.py": "checkout\n"})
    target = _installed(tmp_path / "site" / "flashinfer")
    with pytest.raises(fo.OverlayError, match="has no Mamba provider"):
        fo.overlay(tmp_path / "checkout", target, COMMIT)
    assert (target / "jit" / "wheel_only.py").is_file()  # nothing written


def test_the_checkout_itself_is_never_the_target(tmp_path: Path) -> None:
    checkout = _checkout(tmp_path / "checkout")
    with pytest.raises(fo.OverlayError, match="refusing to overwrite the checkout"):
        fo.overlay(checkout, checkout / "flashinfer", COMMIT)


def test_the_script_fails_when_flashinfer_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(fo, "installed_root", lambda package="flashinfer": None)
    assert fo.main([str(_checkout(tmp_path / "checkout")), COMMIT]) == 1
    assert capsys.readouterr().err.startswith(
        "error[flashinfer-overlay]: flashinfer is not installed"
    )


def test_the_script_overlays_the_installed_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = _installed(tmp_path / "site" / "flashinfer")
    monkeypatch.setattr(fo, "installed_root", lambda package="flashinfer": target)
    assert fo.main([str(_checkout(tmp_path / "checkout")), COMMIT]) == 0
    assert (target / "mamba" / "MUSA_PROVIDER_COMMIT").read_text() == f"{COMMIT}\n"
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"flashinfer overlay: Mamba provider {COMMIT} from {tmp_path / 'checkout'}"
    )


# ---------------------------------------------------------------- staged, recorded, rendered


def _with_checkout(tmp_path: Path, *, provider: bool = True) -> Path:
    sources = _staged(tmp_path, pins=PINS)
    checkout = sources / "vllm-musa" / "third_party" / "flashinfer"
    _write(checkout, {"flashinfer/__init__.py": "", "csrc/norm.cu": ""})
    if provider:
        _write(checkout, {"flashinfer/mamba/__init__.py": ""})
    return sources


def test_the_record_names_the_overlay_and_the_pinned_commit(tmp_path: Path) -> None:
    m = parse_manifest(WITH_FLASHINFER, path=tmp_path / "stack.yaml")
    trees = check_and_record(m, _with_checkout(tmp_path))
    assert [t.source for t in trees] == ["vllm"]  # installed: false, so no file record
    record = json.loads(record_json(trees, provider_overlay(m)))
    assert record["overlays"] == [
        {
            "source": "flashinfer",
            "dir": "/vllm-workspace/third_party/flashinfer",
            "package": "flashinfer",
            "marker": "mamba/MUSA_PROVIDER_COMMIT",
            "pin": f"FLASHINFER_COMMIT={COMMIT}",
            "commit": COMMIT,
        }
    ]
    assert "overlays" not in json.loads(record_json(trees))  # no overlay, no key


def test_a_staged_checkout_without_the_provider_stops_the_build(tmp_path: Path) -> None:
    m = parse_manifest(WITH_FLASHINFER, path=tmp_path / "stack.yaml")
    with pytest.raises(SourceError) as err:
        check_and_record(m, _with_checkout(tmp_path, provider=False))
    assert err.value.message == (
        "sources.vllm-musa.third_party.flashinfer: sources.flashinfer as staged has no "
        "flashinfer/mamba/, the provider upstream's setup.py overlays into the installed "
        "flashinfer"
    )


def test_the_render_runs_the_overlay_only_for_a_flashinfer_checkout(tmp_path: Path) -> None:
    m = parse_manifest(WITH_FLASHINFER, path=tmp_path / "stack.yaml")
    step = workspace_step(m)
    assert step is not None
    assert step.overlay is not None
    assert (step.overlay.dir, step.overlay.pin, step.overlay.commit) == (
        "/vllm-workspace/third_party/flashinfer",
        "FLASHINFER_COMMIT",
        COMMIT,
    )
    plain = workspace_step(parse_manifest(STACK_WITH_SERIES, path=tmp_path / "stack.yaml"))
    assert plain is not None
    assert plain.overlay is None


# ---------------------------------------------------------------------------- the gate


@pytest.fixture
def overlaid(tmp_path: Path) -> tuple[Manifest, Lock]:
    text = _with_flashinfer(DRIVEN)
    assert text != DRIVEN
    m = manifest(tmp_path, text)
    return m, _with_override(lock_for(m))


def _overlay_facts(**entry: Any) -> dict[str, Any]:
    facts = _facts()
    overlay = {
        "source": "flashinfer",
        "dir": "/vllm-workspace/third_party/flashinfer",
        "package": "flashinfer",
        "marker": "mamba/MUSA_PROVIDER_COMMIT",
        "pin": f"FLASHINFER_COMMIT={COMMIT}",
        "commit": COMMIT,
        "path": MARKER,
        "found": True,
        "content": f"{COMMIT}\n",
        **entry,
    }
    facts["third_party"] = {**copy.deepcopy(facts["third_party"]), "overlays": [overlay]}
    facts["provider_functions"] = copy.deepcopy(FUNCTIONS)
    return facts


def _gate(facts: dict[str, Any], stack: tuple[Manifest, Lock]) -> tuple[bool, str]:
    result = next(r for r in evaluate_gates(facts, *stack) if r.name == "flashinfer-provider")
    return result.ok, result.output


def test_the_pinned_marker_and_the_functions_pass(overlaid: tuple[Manifest, Lock]) -> None:
    assert _gate(_overlay_facts(), overlaid) == (
        True,
        f"{MARKER}: {COMMIT} (FLASHINFER_COMMIT, from /vllm-workspace/third_party/flashinfer)\n"
        "flashinfer.mamba.ssd_combined.ssd_combined_fwd_varlen: def in "
        f"{SITE}/flashinfer/mamba/ssd_combined.py\n"
        "flashinfer.mamba.selective_state_update.selective_state_update: def in "
        f"{SITE}/flashinfer/mamba/selective_state_update.py",
    )


def test_another_commit_in_the_marker_fails_naming_both(overlaid: tuple[Manifest, Lock]) -> None:
    assert _gate(_overlay_facts(content=f"{OTHER}\n"), overlaid) == (
        False,
        f"{MARKER} holds '{OTHER}', not the pinned FLASHINFER_COMMIT={COMMIT}",
    )


def test_a_marker_without_its_newline_fails(overlaid: tuple[Manifest, Lock]) -> None:
    ok, output = _gate(_overlay_facts(content=COMMIT), overlaid)
    assert not ok
    assert output == f"{MARKER} holds '{COMMIT}', not the pinned FLASHINFER_COMMIT={COMMIT}"


def test_a_missing_marker_fails_naming_the_file_and_the_pin(
    overlaid: tuple[Manifest, Lock],
) -> None:
    assert _gate(_overlay_facts(found=False, content=None), overlaid) == (
        False,
        f"{MARKER} is not in the image; expected FLASHINFER_COMMIT={COMMIT} (the FlashInfer "
        "provider was not overlaid into the installed flashinfer)",
    )


def test_an_image_record_without_the_overlay_fails(overlaid: tuple[Manifest, Lock]) -> None:
    assert _gate(_facts(), overlaid) == (
        False,
        "flashinfer/mamba/MUSA_PROVIDER_COMMIT: the image's record names no overlay of "
        "sources.flashinfer",
    )


def test_a_record_pinning_another_commit_fails(overlaid: tuple[Manifest, Lock]) -> None:
    ok, output = _gate(_overlay_facts(commit=OTHER, content=f"{OTHER}\n"), overlaid)
    assert not ok
    assert output.splitlines() == [
        f"the image's record pins {OTHER}, the manifest FLASHINFER_COMMIT={COMMIT}",
        f"{MARKER} holds '{OTHER}', not the pinned FLASHINFER_COMMIT={COMMIT}",
    ]


def test_no_flashinfer_checkout_no_overlay(tmp_path: Path) -> None:
    m = manifest(tmp_path, DRIVEN)
    assert _gate(_facts(), (m, _with_override(lock_for(m)))) == (
        True,
        "no FlashInfer overlay (no third_party/flashinfer)",
    )
