"""Docker tests: what the demo's final image holds (marked ``docker``), on the session's demo
build (the ``demo`` fixture of conftest.py): its interpreter, environment and links, its C and
C++ toolchain and the cxx-extension gate (passing, and failing in the image itself for each
thing it names), its labels and its SBOM.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
from datetime import datetime, timezone
from typing import Any

import pytest

import build_image
from images.builder.gates import GATE_NAMES, PROBE, evaluate_gates, probe_args
from manifest import load_manifest
from resolver.lockfile import load_lock
from tests.support.demo_build import ROOT, Demo
from tests.support.environment import BASE_IMAGE
from tests.support.environment import DOCKER_CLI as DOCKER

pytestmark = pytest.mark.docker

FINAL = "vllm-musa-demo:final"


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=False, timeout=300)


def test_demo_runtime_interpreter_env_and_links(demo: Demo) -> None:
    """python/python3 are the target; Python.h and gcc compile against it as Triton does; the
    manifest's musa environment and runtime link; final is a shell image, vllm-openai serves."""
    final = json.loads(_docker("image", "inspect", "vllm-musa-demo:final").stdout)[0]["Config"]
    env = dict(item.split("=", 1) for item in final["Env"])
    assert final["Cmd"] == ["/bin/bash"]
    assert {
        k: env.get(k)
        for k in (
            "PYTHONUNBUFFERED",
            "PYTHONNOUSERSITE",
            "MUSA_HOME",
            "LD_LIBRARY_PATH",
            "MTGPU_TARGET",
            "TORCH_MUSA_ARCH_LIST",
            "MATE_MUSA_ARCH_LIST",
            "MTHREADS_VISIBLE_DEVICES",
            "CCACHE_DIR",
        )
    } == {
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "MUSA_HOME": "/usr/local/musa",
        "LD_LIBRARY_PATH": "/usr/local/musa/lib",
        "MTGPU_TARGET": "mp_31",
        "TORCH_MUSA_ARCH_LIST": "31",
        "MATE_MUSA_ARCH_LIST": "3.1",
        "MTHREADS_VISIBLE_DEVICES": "all",
        "CCACHE_DIR": None,  # the build stage's, not the image's
    }
    assert env["PATH"].startswith("/usr/local/musa/bin:")
    assert "/usr/lib/ccache" not in env["PATH"]
    serve = json.loads(_docker("image", "inspect", "vllm-musa-demo:vllm-openai").stdout)[0]
    assert serve["Config"]["Entrypoint"] == ["vllm", "serve"]
    assert serve["Config"]["Cmd"] is None
    script = (
        "for py in python3 python; do "
        "$py -c 'import os, sys; print(sys.version_info[:2], os.path.realpath(sys.executable))'; "
        "done; "
        "printf '#include <Python.h>\\nint main(void) { return Py_IsInitialized(); }\\n' "
        "> /tmp/t.c && gcc -fsyntax-only $(python3-config --includes) /tmp/t.c && echo Python.h; "
        "readlink /usr/lib/x86_64-linux-gnu/libvllm_musa_demo.so.2; "
        'python3 -c \'import ctypes; print(ctypes.CDLL("libvllm_musa_demo.so.2").zlibVersion '
        "is not None)'; "
        "cat /etc/ld.so.conf.d/musa-runtime.conf"
    )
    run = _docker("run", "--rm", "vllm-musa-demo:final", "sh", "-c", script)
    assert run.stdout.splitlines() == [
        "(3, 11) /usr/bin/python3.11",
        "(3, 11) /usr/bin/python3.11",
        "Python.h",
        "/usr/lib/x86_64-linux-gnu/libz.so.1",
        "True",
        "/usr/local/musa/lib",
    ], run.stdout + run.stderr
    report = json.loads((ROOT / "build" / "reports" / "demo-final.json").read_text())
    assert report["gates"]["python3-is-target"] is True
    assert report["gates"]["python-h"] is True


# ------------------------------------------------------------------------ the C++ toolchain


def test_the_final_image_has_the_runtime_cxx_toolchain_and_no_build_tools(demo: Demo) -> None:
    """build-essential and ninja-build, as upstream's final image (the vllm-musa JIT compiles
    with c++ through ninja while serving); git, cmake, ccache and patchelf stay in the build
    stage (git applies the patch series there)."""
    script = (
        "for t in cc gcc c++ g++ make ninja; do command -v $t || echo no $t; done; "
        "for t in git cmake ccache patchelf; do command -v $t > /dev/null && echo has $t; done; "
        "dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' build-essential ninja-build"
    )
    run = _docker("run", "--rm", FINAL, "sh", "-c", script)
    assert run.stdout.splitlines() == [
        "/usr/bin/cc",
        "/usr/bin/gcc",
        "/usr/bin/c++",
        "/usr/bin/g++",
        "/usr/bin/make",
        "/usr/bin/ninja",
        "build-essential ii ",
        "ninja-build ii ",
    ], run.stdout + run.stderr


def _cxx_version() -> str:
    return _docker("run", "--rm", FINAL, "c++", "--version").stdout.splitlines()[0]


def test_the_cxx_extension_gate_passes_and_every_gate_is_reported(demo: Demo) -> None:
    for target in ("final", "vllm-openai"):
        report = json.loads((ROOT / "build" / "reports" / f"demo-{target}.json").read_text())
        assert sorted(report["gates"]) == sorted(GATE_NAMES)  # the report sorts its keys
        assert report["gates"]["cxx-extension"] is True
    out = io.StringIO()
    argv = ["gate", FINAL, "stack/demo.yaml", "--lock", str(demo.lock_dir), "--json"]
    assert build_image.main(argv, out=out, err=io.StringIO()) == 0
    results = {r["name"]: r for r in json.loads(out.getvalue())}
    assert results["cxx-extension"] == {
        "name": "cxx-extension",
        "ok": True,
        "output": f"c++ ({_cxx_version()}) compiled and linked _vllm_musa_cxx_probe against "
        "/usr/include/python3.11/Python.h; python3.11 imported it and join('vllm', 'musa') "
        "returned 'vllm-musa'; ninja is /usr/bin/ninja",
    }


def _probe_in_image(demo: Demo, prepare: str, *env: str) -> tuple[bool, str]:
    """The gate probe run in the final image after the shell command ``prepare`` (as root, in
    a throwaway container), with ``env`` (NAME=VALUE); the cxx-extension gate's verdict."""
    m = load_manifest(ROOT / "stack" / "demo.yaml")
    argv = ["run", "--rm", "--network", "none", "--entrypoint", "sh"]
    for pair in env:
        argv += ["-e", pair]
    script = f'{prepare} && exec python3.11 -c "$0" "$@"'
    run = _docker(*argv, FINAL, "-c", script, PROBE.read_text("utf-8"), *probe_args(m))
    assert run.returncode == 0, run.stderr[-3000:]
    facts: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    result = next(
        r for r in evaluate_gates(facts, m, load_lock(demo.lock_dir)) if r.name == "cxx-extension"
    )
    return result.ok, result.output


def test_the_cxx_extension_gate_names_a_missing_compiler_in_the_image(demo: Demo) -> None:
    assert _probe_in_image(demo, "true", "CXX=no-such-c++") == (
        False,
        "compiler missing: no-such-c++ is not on PATH; install build-essential (the vllm-musa "
        "JIT compiles and links with $CXX or c++ while serving)",
    )


def test_the_cxx_extension_gate_names_a_missing_python_h_in_the_image(demo: Demo) -> None:
    assert _probe_in_image(demo, "rm /usr/include/python3.11/Python.h") == (
        False,
        "Python.h missing: /usr/include/python3.11/Python.h is not there; install python3.11-dev",
    )


def test_the_cxx_extension_gate_names_a_failed_link_in_the_image(demo: Demo) -> None:
    gcc = "/usr/lib/gcc/x86_64-linux-gnu/12"
    # without libstdc++'s linker files (libstdc++-12-dev), c++ compiles but cannot link
    assert _probe_in_image(demo, f"rm {gcc}/libstdc++.so {gcc}/libstdc++.a") == (
        False,
        "link failed: c++ -shared probe.o -o _vllm_musa_cxx_probe.cpython-311-x86_64-linux-gnu.so\n"
        "  /usr/bin/ld: cannot find -lstdc++: No such file or directory\n"
        "  collect2: error: ld returned 1 exit status",
    )


def test_the_cxx_extension_gate_names_a_missing_ninja_in_the_image(demo: Demo) -> None:
    assert _probe_in_image(demo, "rm /usr/bin/ninja") == (
        False,
        "ninja missing: ninja is not on PATH; install ninja-build (the vllm-musa JIT builds its "
        "kernels with ninja while serving)",
    )


# ------------------------------------------------------------------------ labels and SBOM


def _labels(ref: str) -> dict[str, str]:
    inspect = json.loads(_docker("image", "inspect", ref).stdout)[0]
    labels: dict[str, str] = inspect["Config"]["Labels"]
    return labels


def _git(*argv: str) -> str:
    return subprocess.run(
        ["git", *argv], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_demo_labels_base_and_source_and_marker(demo: Demo) -> None:
    labels = _labels("vllm-musa-demo:final")
    assert labels["org.opencontainers.image.base.name"] == BASE_IMAGE
    assert "org.opencontainers.image.base.digest" not in labels  # docker import: no digest
    # the demo's sources are path sources: no source, revision or vllm.* label
    for label in (
        "org.opencontainers.image.source",
        "org.opencontainers.image.revision",
        "io.vllm-musa.vllm.revision",
        "io.vllm-musa.vllm.version",
        "com.mthreads.vllm.version",  # no PINS in demo/vllm-musa, no vLLM version
    ):
        assert label not in labels
    assert labels["org.opencontainers.image.version"] == "v0.1.28"  # v{release}
    assert labels["io.vllm-musa.tooling.revision"] == _git("rev-parse", "HEAD")
    if not os.environ.get("SOURCE_DATE_EPOCH"):
        committed = datetime.fromisoformat(_git("log", "-1", "--format=%cI"))
        assert labels["org.opencontainers.image.created"] == committed.astimezone(
            timezone.utc
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert [v for v in labels.values() if str(ROOT) in v or "file://" in v] == []
    report = json.loads((ROOT / "build" / "reports" / "demo-final.json").read_text())
    assert report["stack"] == "stack/demo.yaml"
    assert str(ROOT) not in json.dumps(report)
    dockerfile = (ROOT / "build" / "context" / "demo-final" / "Dockerfile").read_bytes()
    assert report["dockerfile_sha256"] == hashlib.sha256(dockerfile).hexdigest()
    marker = _docker(
        "run",
        "--rm",
        "vllm-musa-demo:final",
        "sh",
        "-c",
        "cat /opt/vllm-musa/components.json; command -v vllm-rs cargo rustc || true",
    )
    assert marker.stdout.strip() == '{"mooncake":{"built":false},"vllm-rs":{"built":false}}'


def test_demo_sbom_validates_and_lists_the_python_and_debian_packages(demo: Demo) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    text = _docker("run", "--rm", "vllm-musa-demo:final", "cat", "/opt/vllm-musa/sbom.json").stdout
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    assert error is None, str(error)
    doc = json.loads(text)
    purls = {c["name"]: c["purl"] for c in doc["components"]}
    # the demo binds every package to its one index, the default: plain purls
    assert purls["torch"] == "pkg:pypi/torch@2.11.0.post2%2Bmusa5.2.0"
    assert purls["libc6"].startswith("pkg:deb/debian/libc6@")
    assert purls["libc6"].endswith("?arch=amd64&distro=debian-12&upstream=glibc")
    assert purls["python3.11"].startswith("pkg:deb/debian/python3.11@")
    refs = {c["bom-ref"] for c in doc["components"]} | {doc["metadata"]["component"]["bom-ref"]}
    graph = {d["ref"]: d["dependsOn"] for d in doc["dependencies"]}
    assert set(graph) == refs
    assert {r for deps in graph.values() for r in deps} <= refs
    image = doc["metadata"]["component"]
    assert purls["torch"] in graph[image["bom-ref"]]  # a pin of the manifest
    assert (image["name"], image["version"]) == ("vllm-musa-demo", "0.1.28")
    # the SBOM's time is its stage's (final's tier), never after the image's created label
    created = _labels("vllm-musa-demo:final")["org.opencontainers.image.created"]
    report = json.loads((ROOT / "build" / "reports" / "demo-final.json").read_text())
    stage_time = datetime.fromtimestamp(report["layers"][-1]["clamp"], tz=timezone.utc)
    assert doc["metadata"]["timestamp"] == stage_time.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert doc["metadata"]["timestamp"] <= created
