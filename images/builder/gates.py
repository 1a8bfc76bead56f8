"""The acceptance gates of a built image, judged purely from the probes' facts.

The probes (``in_image/gate_probe.py``, ``upstream_probe.py``, ``linkage_probe.py``) run
inside the image and print JSON facts; ``evaluate_gates`` judges them against the manifest and
the lock (no I/O), one ``GateResult`` per gate in a fixed order; ``require_gates`` raises a
``GateError`` naming every failed gate. A build applies tags only after all pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from core.errors import GateError
from images.builder.installed_gate import (
    BASE_RECORD,
    built_versions,
    installed_problems,
    same_version,
)
from images.builder.linkage_gate import LINKAGE_PROBE, linkage_probe_args, linkage_problems
from images.builder.third_party import IMAGE_THIRD_PARTY, provider_overlay
from images.builder.upstream_gates import (
    NINJA_MISSING,
    SHOWN_LINES,
    UPSTREAM_PROBE,
    musa_jit_gate,
    provider_function_checks,
    pytest_gate,
    upstream_probe_args,
)
from manifest import Manifest
from resolver.lockfile import Lock

PROBE = Path(__file__).with_name("in_image") / "gate_probe.py"
# the entry points vLLM loads the plugin by (vllm-musa's pyproject.toml): group, name, value
REQUIRED_ENTRY_POINTS = (
    ("vllm.platform_plugins", "musa", "vllm_musa:musa_platform_plugin"),
    ("vllm.general_plugins", "musa_custom_ops", "vllm_musa:register_custom_ops"),
)
SYSTEM_PREFIX = "/usr"
GATE_NAMES = (
    "python-version",
    "system-prefix",
    "no-uv",
    "no-venv",
    "pip-check",
    "installed-equals-lock",
    "declared-versions",
    "imports",
    "find-spec",
    "libraries",
    "linkage",
    "no-cuda",
    "entry-points",
    "third-party",
    "markers",
    "flashinfer-provider",
    "components",
    "python3-is-target",
    "python-h",
    "cxx-extension",
    "musa-jit",
    "pytest",
)
# cxx-extension: what the probe's C++ extension returns for its call (in_image/gate_probe.py)
CXX_EXPECTED = "vllm-musa"


@dataclass(frozen=True, kw_only=True)
class GateResult:
    name: str
    ok: bool
    output: str


class ProbeRunner(Protocol):
    def run_python(self, image: str, python: str, script: str, args: Sequence[str]) -> str: ...


def evaluate_gates(facts: Mapping[str, Any], manifest: Manifest, lock: Lock) -> list[GateResult]:
    """Judge the probe's facts; pure. One result per name in ``GATE_NAMES``, in that order."""
    results: list[GateResult] = []

    def add(name: str, problems: Sequence[str], ok_text: str) -> None:
        results.append(
            GateResult(name=name, ok=not problems, output="\n".join(problems) or ok_text)
        )

    shown = ".".join(str(x) for x in facts.get("python", ())) or "nothing"
    wrong = tuple(facts.get("python", ()))[:2] != manifest.target.python
    problems = [f"python is {shown}, the target is {manifest.target.python_str}"] if wrong else []
    add("python-version", problems, f"python {shown}")
    prefix, base = facts.get("prefix"), facts.get("base_prefix")
    problems = []
    if not (prefix == base == SYSTEM_PREFIX):
        problems.append(
            f"sys.prefix is {prefix!r} and sys.base_prefix is {base!r}; both must be "
            f"{SYSTEM_PREFIX!r} (a venv or a non-system interpreter is in use)"
        )
    add("system-prefix", problems, f"sys.prefix == sys.base_prefix == {SYSTEM_PREFIX}")
    add("no-uv", [f"uv is on PATH: {p}" for p in facts.get("uv", [])], "no uv on PATH")
    problems = [f"the package {p} is installed" for p in facts.get("venv_packages", [])]
    problems += [
        f"venv's ensurepip wheel is present: {w}" for w in facts.get("ensurepip_wheels", [])
    ]
    add("no-venv", problems, "no python3.X-venv package, no ensurepip wheels")
    add("pip-check", *_pip_check(facts, manifest, lock))
    add("installed-equals-lock", *installed_problems(facts, manifest, lock))
    # declared-versions: the manifest's gates.versions (what the built sources install as)
    add("declared-versions", *_declared_versions(facts, manifest))
    imports: Mapping[str, str] = facts.get("imports", {})
    problems = []
    for module in manifest.gates.imports:
        if module not in imports:
            problems.append(f"import {module}: not probed")
        elif imports[module]:
            problems.append(f"import {module} failed:\n{imports[module]}")
    add("imports", problems, "imported: " + (", ".join(manifest.gates.imports) or "(none listed)"))
    # find-spec: located without importing (GPU-bound modules)
    add("find-spec", *_find_spec(facts, manifest))
    add("libraries", *_libraries(facts, manifest))
    add("linkage", *linkage_problems(facts, manifest))
    cuda = sorted(
        f"{name} {version}"
        for name, version in facts.get("distributions", [])
        if canonicalize_name(name).startswith(("nvidia-", "cuda-"))
    )
    add(
        "no-cuda",
        [f"a CUDA distribution is installed: {c}" for c in cuda],
        "no nvidia-*/cuda-* distribution",
    )
    # entry-points: vLLM's plugin groups, registered by a source-built distribution
    add("entry-points", *_entry_points(facts))
    # third-party: each driven tree is the one installed, its files the staged ones but for
    # what the patch series changes; markers: the files the series adds are there
    add("third-party", *_third_party(facts, manifest))
    add("markers", *_markers(facts, manifest))
    add("flashinfer-provider", *_flashinfer_provider(facts, manifest))
    # components: the marker says exactly what the manifest turned on, and each is there
    built = ", ".join(manifest.components.enabled()) or "none (all off)"
    add("components", _component_problems(facts, manifest), f"components built: {built}")
    add("python3-is-target", *_python_commands(facts, manifest))
    add("python-h", *_python_h(facts, manifest))
    add("cxx-extension", *_cxx_extension(facts, manifest))
    add("musa-jit", *musa_jit_gate(facts, manifest))
    add("pytest", *pytest_gate(facts, manifest, lock))
    return results


def _python_commands(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    """python3-is-target: ``python3`` and ``python`` on PATH run the target interpreter, as
    ``docker run IMAGE python3`` does."""
    want = manifest.target.python_str
    target = facts.get("executable_realpath") or "the probe's interpreter (not reported)"
    problems: list[str] = []
    commands: Mapping[str, Any] = facts.get("python_commands") or {}
    for command in ("python3", "python"):
        info = commands.get(command)
        if not isinstance(info, Mapping):
            problems.append(f"{command}: not probed")
        elif info.get("error"):
            problems.append(f"{command}: {info['error']}")
        else:
            shown = ".".join(str(x) for x in info.get("version", ())) or "nothing"
            if tuple(info.get("version", ()))[:2] != manifest.target.python:
                problems.append(f"{command} is Python {shown}, the target is {want}")
            if info.get("realpath") != facts.get("executable_realpath"):
                problems.append(f"{command} runs {info.get('realpath')}, not the target {target}")
    return problems, f"python3 and python run {target} (Python {want})"


def _python_h(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    """python-h: the target's Python.h is there (Triton and Inductor compile against it)."""
    python_h: Mapping[str, Any] = facts.get("python_h") or {}
    header = f"{python_h.get('include', '(include dir not reported)')}/Python.h"
    if python_h.get("present") is True:
        return [], f"{header} is present"
    return [
        f"{header} is missing: install python{manifest.target.python_str}-dev (Triton and "
        "Inductor compile against it)"
    ], ""


def _cxx_extension(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    """cxx-extension: the image's C++ compiler (``$CXX`` or ``c++``, as the vllm-musa JIT
    runs it while serving) built a Python extension that the target imported and called; and
    ninja, which the JIT runs, is on PATH. A failure names the step, its command and output."""
    info = facts.get("cxx_extension")
    if not isinstance(info, Mapping):
        return ["the C++ extension build was not probed"], ""
    compiler = str(info.get("compiler") or "c++")
    python = f"python{manifest.target.python_str}"
    module, call = info.get("module"), info.get("call")
    stage = str(info.get("stage") or "")
    command = " ".join(str(word) for word in info.get("command") or [])
    output = [str(line) for line in info.get("output") or []][:SHOWN_LINES]
    said = "".join(f"\n  {line}" for line in output)
    problems: list[str] = []
    if stage == "compiler":
        problems.append(
            f"compiler missing: {compiler} is not on PATH; install build-essential (the "
            "vllm-musa JIT compiles and links with $CXX or c++ while serving)"
        )
    elif stage == "python-h":
        problems.append(
            f"Python.h missing: {info.get('include')}/Python.h is not there; install {python}-dev"
        )
    elif stage == "import":
        problems.append(
            f"import failed: {python} cannot import {module}, which {compiler} built:{said}"
        )
    elif stage:
        problems.append(f"{stage} failed: {command}{said}")
    elif info.get("result") != CXX_EXPECTED:
        problems.append(
            f"call failed: {module}.{call} returned {info.get('result')!r}, not {CXX_EXPECTED!r}"
        )
    if not info.get("ninja"):
        problems.append(NINJA_MISSING)
    ok = (
        f"{compiler} ({info.get('version')}) compiled and linked {module} against "
        f"{info.get('include')}/Python.h; {python} imported it and {call} returned "
        f"{CXX_EXPECTED!r}; ninja is {info.get('ninja')}"
    )
    return problems, ok


_PIP_CHECK_RE = re.compile(
    r"^(?P<dist>\S+) (?P<version>\S+) has requirement (?P<req>.+), but you have "
    r"(?P<have>\S+) (?P<have_version>\S+)\.$"
)


def _requirer_name(requirer: str) -> str:
    """The distribution of a recorded requirer: ``vllm 0.28.0 (...)`` -> vllm,
    ``sources.vllm-musa:requirements/musa.txt`` -> vllm-musa (a source builds its namesake)."""
    first = requirer.split(" ", 1)[0]
    if first.startswith("sources."):
        first = first.removeprefix("sources.").split(":", 1)[0]
    return canonicalize_name(first)


def _same_requirement(a: str, b: str) -> bool:
    try:
        ra, rb = Requirement(a), Requirement(b)
    except InvalidRequirement:
        return a == b
    return canonicalize_name(ra.name) == canonicalize_name(rb.name) and (
        ra.specifier == rb.specifier
    )


def _pip_check(facts: Mapping[str, Any], manifest: Manifest, lock: Lock) -> tuple[list[str], str]:
    """``pip check`` must be clean, apart from the requirements an ``overrides`` entry ignores
    as the lock records them (that requirer and requirement, the overridden distribution at
    exactly its declared version): those are forgiven, and listed."""
    pip_check = facts.get("pip_check") or {}
    rc = pip_check.get("returncode")
    output = str(pip_check.get("output", ""))
    if rc == 0:
        return [], output or "pip check: clean"
    recorded = lock.overrides()
    problems: list[str] = []
    forgiven: list[str] = []
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        m = _PIP_CHECK_RE.match(line)
        name = canonicalize_name(m.group("have")) if m else None
        override = manifest.overrides.get(name) if name else None
        locked = recorded.get(name) if name else None
        ok = bool(
            m
            and override
            and locked
            and same_version(m.group("have_version"), override.version_text)
            and any(
                _requirer_name(requirer) == canonicalize_name(m.group("dist"))
                and _same_requirement(requirement, m.group("req"))
                for requirer, requirement in locked.override_requirements()
            )
        )
        if ok:
            assert override is not None
            forgiven.append(f"forgiven (overrides.{override.key}: {override.reason}): {line}")
        else:
            problems.append(line)
    if problems or not lines:
        return [f"pip check exited {rc}:", *problems, *forgiven], ""
    return [], "\n".join(["pip check: clean apart from the declared overrides", *forgiven])


def _third_party(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    record = facts.get("third_party") or {}
    if "error" in record:
        return [f"the record of the driven trees is unreadable: {record['error']}"], ""
    trees = {t.get("source"): t for t in record.get("trees", [])}
    problems: list[str] = []
    ok: list[str] = []
    for driver in manifest.sources:
        for t in (t for t in driver.third_party if t.installed):
            tree = trees.get(t.source)
            if tree is None:
                problems.append(f"sources.{t.source} (third_party/{t.dir}): no record in the image")
                continue
            root = tree["dir"]
            for pkg, info in sorted(tree.get("packages", {}).items()):
                owners = info.get("owners", [])
                if [canonicalize_name(o) for o in owners] != [canonicalize_name(t.source)]:
                    problems.append(
                        f"{pkg}: owned by {', '.join(owners) or 'no distribution'}; exactly one "
                        f"distribution, {t.source}, must provide it"
                    )
                if info.get("found") != f"{root}/{pkg}":
                    problems.append(
                        f"{pkg} is found at {info.get('found') or 'nowhere'}, not in the driven "
                        f"tree {root}/{pkg}"
                    )
                problems += [f"{pkg}: another copy is on sys.path: {c}" for c in info["copies"]]
            problems += [
                f"{root}/{f}: differs from the staged source, and the series does not touch it"
                for f in tree.get("changed", [])
            ]
            problems += [f"{root}/{f}: missing from the image" for f in tree.get("missing", [])]
            ok.append(
                f"{t.source} in {root}: {tree.get('checked')} files as staged, "
                f"{tree.get('exempt')} changed by the series ({len(tree.get('series', []))} "
                f"patches) or written by the build; one owner"
            )
    return problems, "\n".join(ok) or "no driven sources"


def _flashinfer_provider(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    """The provider overlaid from third_party/flashinfer (third_party.py): its marker holds
    the pinned commit and a newline, as upstream's setup.py writes it, and the image's record
    names the same commit."""
    overlay = provider_overlay(manifest)
    if overlay is None:
        return [], "no FlashInfer overlay (no third_party/flashinfer)"
    pin = f"{overlay.pin}={overlay.commit}"
    record = facts.get("third_party") or {}
    if "error" in record:
        return [f"the record of the driven trees is unreadable: {record['error']}"], ""
    entry = next((o for o in record.get("overlays", []) if o.get("source") == overlay.source), None)
    where = f"{overlay.package}/{overlay.marker}"
    if entry is None:
        return [f"{where}: the image's record names no overlay of sources.{overlay.source}"], ""
    problems: list[str] = []
    if entry.get("commit") != overlay.commit:
        problems.append(f"the image's record pins {entry.get('commit')}, the manifest {pin}")
    path = entry.get("path") or where
    if not entry.get("found"):
        problems.append(
            f"{path} is not in the image; expected {pin} (the FlashInfer provider was not "
            "overlaid into the installed flashinfer)"
        )
    elif entry.get("error"):
        problems.append(f"{path} is unreadable ({entry['error']}); expected {pin}")
    elif entry.get("content") != f"{overlay.commit}\n":
        problems.append(f"{path} holds {str(entry.get('content')).strip()!r}, not the pinned {pin}")
    # and the functions upstream's image imports from the provider, located without importing
    missing, found = provider_function_checks(facts, overlay.dir)
    return (
        problems + missing,
        f"{path}: {overlay.commit} ({overlay.pin}, from {overlay.dir})\n{found}",
    )


def _markers(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    found: Mapping[str, Mapping[str, Any]] = facts.get("markers", {})
    problems: list[str] = []
    ok: list[str] = []
    for dist, rel in manifest.gates.markers.items():
        info = found.get(dist)
        if info is None:
            problems.append(f"marker of {dist} ({rel}): not probed")
        elif not info.get("found"):
            problems.append(
                f"marker of {dist}: {info.get('path')} is not in the image; the installed "
                f"{dist} is not the patched tree"
            )
        else:
            ok.append(f"{dist}: {info.get('path')}")
    return problems, "present: " + (", ".join(ok) or "(none listed)")


def _declared_versions(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    installed: dict[str, list[str]] = {}
    for dist_name, version in facts.get("distributions", []):
        installed.setdefault(canonicalize_name(dist_name), []).append(version)
    problems: list[str] = []
    for dist, want in manifest.gates.versions.items():
        versions = installed.get(canonicalize_name(dist), [])
        if not versions:
            problems.append(f"{dist} is not installed; gates.versions declares {want}")
        for version in versions:
            if not same_version(version, want):
                problems.append(
                    f"{dist} {version} is installed, but gates.versions declares {want}"
                )
    shown = ", ".join(f"{d} {v}" for d, v in manifest.gates.versions.items())
    return problems, "installed as declared: " + (shown or "(none declared)")


def _find_spec(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    specs: Mapping[str, Mapping[str, Any]] = facts.get("find_spec", {})
    problems: list[str] = []
    for module in manifest.gates.find_spec:
        if module not in specs:
            problems.append(f"find_spec {module}: not probed")
        elif not specs[module].get("found"):
            problems.append(
                f"find_spec {module}: not found ({specs[module].get('detail', 'no detail')})"
            )
    listed = ", ".join(manifest.gates.find_spec) or "(none listed)"
    return problems, "located (not imported): " + listed


def _libraries(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    found: Mapping[str, str] = facts.get("libraries", {})
    problems: list[str] = []
    for soname in manifest.gates.libraries:
        if soname not in found:
            problems.append(f"library {soname}: not probed")
        elif not found[soname]:
            problems.append(
                f"library {soname}: the dynamic linker does not find it "
                "(not in ldconfig -p, not in LD_LIBRARY_PATH)"
            )
    shown = ", ".join(f"{s} ({found[s]})" for s in manifest.gates.libraries if found.get(s))
    return problems, "found: " + (shown or "(none listed)")


def _entry_points(facts: Mapping[str, Any]) -> tuple[list[str], str]:
    built = set(built_versions(facts))
    registered = list(facts.get("entry_points", []))
    problems: list[str] = []
    ok: list[str] = []
    for group, name, value in REQUIRED_ENTRY_POINTS:
        in_group = [e for e in registered if e.get("group") == group]
        mine = [e for e in in_group if e["name"] == name and canonicalize_name(e["dist"]) in built]
        if not mine:
            others = ", ".join(f"{e['name']} = {e['value']} ({e['dist']})" for e in in_group)
            problems.append(
                f"{group}: the entry point {name} = {value} is not registered by a source-built "
                f"distribution ({', '.join(sorted(built)) or 'none built'}); registered in "
                f"{group}: {others or 'none'}"
            )
        for e in mine:
            shown = f"{group}: {name} = {e['value']} ({e['dist']})"
            if e["value"] != value:
                problems.append(f"{shown}, but vLLM-MUSA's entry point is {name} = {value}")
            else:
                ok.append(shown)
    return problems, "\n".join(ok)


def _component_problems(facts: Mapping[str, Any], manifest: Manifest) -> list[str]:
    comp = facts.get("components") or {}
    marker = comp.get("marker") if isinstance(comp, Mapping) else None
    if not isinstance(marker, Mapping):
        error = comp.get("error", "missing") if isinstance(comp, Mapping) else "missing"
        return [f"no readable /opt/vllm-musa/components.json in the image: {error}"]
    rs = manifest.components.vllm_rs
    mc = manifest.components.mooncake
    problems = _marker_problems(marker, "vllm-rs", on=rs is not None)
    problems += _vllm_rs_problems(comp.get("vllm_rs") or {}, on=rs is not None)
    problems += _marker_problems(marker, "mooncake", on=mc is not None)
    if mc is not None:
        versions = [
            v for n, v in facts.get("distributions", []) if canonicalize_name(n) == mc.pin.name
        ]
        if not versions:
            problems.append(f"components.mooncake: {mc.pin.key} is not installed")
        elif versions[0] != mc.pin.version_text:
            problems.append(
                f"components.mooncake: {mc.pin.key} {versions[0]} is installed, but the "
                f"manifest pins {mc.pin.version_text}"
            )
    return problems


def _marker_problems(marker: Mapping[str, Any], name: str, *, on: bool) -> list[str]:
    """The image's components marker must say ``name`` was built exactly when ``on``."""
    built = bool((marker.get(name) or {}).get("built"))
    if built == on:
        return []
    return [
        f"the marker says {name} built={str(built).lower()}, but components.{name} "
        f"is {'on' if on else 'off'}"
    ]


def _vllm_rs_problems(found: Mapping[str, Any], *, on: bool) -> list[str]:
    """vllm-rs on: the binary and at least one loadable Rust module in the vllm package
    directory (where vLLM looks); off: neither there."""
    if "error" in found:
        return [f"components.vllm-rs: the vllm package cannot be located: {found['error']}"]
    package = found.get("package", "?")
    binary, modules = found.get("binary", ""), found.get("modules") or {}
    if not on:
        there = ([binary] if binary else []) + [f"{package}/{m}" for m in sorted(modules)]
        return (
            [f"components.vllm-rs is off, but {', '.join(there)} is in the image"] if there else []
        )
    problems = []
    if not binary:
        problems.append(
            f"components.vllm-rs: no executable {package}/vllm-rs, where vLLM's "
            "VLLM_RUST_FRONTEND_PATH=auto looks"
        )
    if not modules:
        problems.append(f"components.vllm-rs: no Rust module ({package}/_rust_*.so)")
    for name, error in sorted(modules.items()):
        if error:
            problems.append(f"components.vllm-rs: {package}/{name} does not load: {error}")
    return problems


def require_gates(results: Sequence[GateResult], *, image: str) -> None:
    failed = [r for r in results if not r.ok]
    if failed:
        parts = [f"gate {r.name} failed:\n    " + r.output.replace("\n", "\n    ") for r in failed]
        raise GateError(
            f"image {image} failed {len(failed)} gate(s); no tag was applied\n  "
            + "\n  ".join(parts),
            hint="fix the manifest, the lock or the sources, then build again",
        )


def parse_probe_output(text: str, *, image: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                data: dict[str, Any] = json.loads(line)
            except ValueError:
                break
            return data
    raise GateError(
        f"the gate probe in {image} printed no JSON:\n{text[-2000:]}",
        hint="run the image by hand: docker run --rm --entrypoint python3 IMAGE -c 'print(1)'",
    )


def probe_args(manifest: Manifest) -> list[str]:
    """The probe's arguments: the modules to import, to locate only, the libraries to find."""
    gates = manifest.gates
    return [
        *gates.imports,
        *(f"--find-spec={m}" for m in gates.find_spec),
        *(f"--library={s}" for s in gates.libraries),
        *(f"--marker={d}={p}" for d, p in gates.markers.items()),
        f"--third-party={IMAGE_THIRD_PARTY}",
        f"--base-record={BASE_RECORD}",
    ]


def probe_facts(runner: ProbeRunner, image: str, manifest: Manifest) -> dict[str, Any]:
    """The facts of the probes run in ``image``."""
    python = f"python{manifest.target.python_str}"
    overlay = provider_overlay(manifest) is not None
    facts: dict[str, Any] = {}
    for script, args in (
        (PROBE, probe_args(manifest)),
        (UPSTREAM_PROBE, upstream_probe_args(manifest, overlay=overlay)),
        (LINKAGE_PROBE, linkage_probe_args(manifest)),
    ):
        output = runner.run_python(image, python, script.read_text(encoding="utf-8"), args)
        facts |= parse_probe_output(output, image=image)
    return facts


def run_gates(runner: ProbeRunner, image: str, manifest: Manifest, lock: Lock) -> list[GateResult]:
    """Run the probe in ``image`` and judge it; does not raise on a failed gate."""
    return evaluate_gates(probe_facts(runner, image, manifest), manifest, lock)
