"""Render tests (pure, fast): stages, signed-by, the ARG check, determinism, variables, secrets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import BuildArgError, CredentialError, RenderError
from images.builder.render import (
    build_render_context,
    check_build_args,
    check_no_credentials,
    declared_args,
    render_dockerfile,
)
from tests.support.images import MANIFEST, deadsnakes_text, lock_for, manifest

LOCK_SHA = "ab" * 32


def _render(tmp_path: Path, text: str = MANIFEST) -> str:
    m = manifest(tmp_path, text)
    return render_dockerfile(build_render_context(m, lock_for(m), lock_sha256=LOCK_SHA))


def _code(text: str) -> str:
    """The Dockerfile without its comment lines."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))


def test_template_variables_equal_context_fields() -> None:
    """Every variable the template reads is a field of the render context, and the reverse."""
    import dataclasses

    import jinja2.meta

    from images.builder.render import TEMPLATE, RenderContext, _environment

    ast = _environment().parse(TEMPLATE.read_text(encoding="utf-8"))
    variables = jinja2.meta.find_undeclared_variables(ast)
    assert variables == {f.name for f in dataclasses.fields(RenderContext)}


def test_every_stage_is_present(tmp_path: Path) -> None:
    text = _render(tmp_path)
    stages = re.findall(r"^FROM \S+ AS (\S+)$", text, re.M)
    assert stages == ["base", "python", "deps", "build", "final", "vllm-openai"]
    assert text.endswith('FROM final AS vllm-openai\nENTRYPOINT ["vllm", "serve"]\n')
    assert text.count("CMD [") == 1  # final's; vllm-openai's ENTRYPOINT clears it
    assert "WORKDIR /vllm-workspace" in text
    assert "FROM deps AS final" in text  # final never inherits the build stage


def test_every_stage_that_runs_a_step_sees_its_tier_time(tmp_path: Path) -> None:
    """SOURCE_DATE_EPOCH is declared first in every stage with a RUN (an ARG is per stage), as
    the time of the stage's tier: DEPS_TIME up to deps, SOURCES_TIME from build on."""
    text = _code(_render(tmp_path, deadsnakes_text()))
    assert text.split("\nFROM ", 1)[0].endswith("\nARG DEPS_TIME=0\nARG SOURCES_TIME=0\n")
    stages = re.split(r"^FROM \S+ AS (\S+)\n", text, flags=re.M)[1:]
    running = [name for name, body in zip(stages[::2], stages[1::2], strict=True) if "RUN " in body]
    assert running == ["python-key", "python", "deps", "build", "final"]
    for name, body in zip(stages[::2], stages[1::2], strict=True):
        if name in running:
            tier = "SOURCES_TIME" if name in ("build", "final") else "DEPS_TIME"
            assert body.startswith(f"ARG {tier}\nARG SOURCE_DATE_EPOCH=${{{tier}}}\n"), name
            # and the first step that writes a layer is a RUN, keyed by that time
            steps = [line.split()[0] for line in body.splitlines()[2:] if line[:1].isupper()]
            assert next(s for s in steps if s in ("RUN", "COPY", "WORKDIR", "ADD")) == "RUN", name


def test_deadsnakes_has_key_stage_signed_by_and_never_trusted(tmp_path: Path) -> None:
    text = _code(_render(tmp_path, deadsnakes_text()))
    assert "FROM base AS python-key" in text
    assert (
        '"deb [signed-by=/etc/apt/keyrings/deadsnakes.gpg] "http://127.0.0.1:8765/repo" '
        "${VERSION_CODENAME} main"
    ) in text
    assert "grep -qx F23C5A6CF475977595C89F51BA6932366A755776 /tmp/fpr" in text
    assert "trusted=yes" not in text
    assert "curl" not in text.split("FROM base AS python\n", 1)[1]  # curl stays in python-key


def test_distro_has_no_deadsnakes(tmp_path: Path) -> None:
    text = _render(tmp_path)
    assert "python-key" not in text
    assert "install -y --no-install-recommends python3.11" in text


def test_pip_is_bootstrapped_from_the_locked_wheel_by_hash(tmp_path: Path) -> None:
    full = _render(tmp_path)
    text = _code(full)
    pip = "pip-23.0.1-py3-none-any.whl"
    assert f'echo "{"1" * 64}  /tmp/{pip}" | sha256sum -c -' in text
    assert f"python3.11 /tmp/{pip}/pip install --no-index --no-deps" in text
    assert "get-pip" not in text
    assert "PEP 668" in full
    assert "EXTERNALLY-MANAGED" in text
    for banned in ("uv ", "python3.11-venv", "-m venv", "ensurepip"):
        assert banned not in text


def test_deps_install_nothing_resolved(tmp_path: Path) -> None:
    text = _render(tmp_path)
    assert (
        "python3.11 -m pip install --no-index --no-deps --require-hashes --only-binary :all:"
        in text
    )
    deps = text.split("FROM python AS deps\n", 1)[1].split("FROM deps AS build", 1)[0]
    assert "requirements-build.txt" not in deps
    # one pip step, one layer, per part of the lock (this lock pins nothing: one part)
    assert re.findall(r"source=deps/(\S+),target=/tmp/requirements.txt", deps) == ["locked.txt"]
    assert deps.count("-r /tmp/requirements.txt") == 1


def test_build_stage_compiles_sources_in_order_with_ccache(tmp_path: Path) -> None:
    text = _render(tmp_path)
    build = text.split("FROM deps AS build\n", 1)[1].split("FROM deps AS final", 1)[0]
    assert build.index("sources/vllm,") < build.index("sources/vllm-musa,")
    assert build.count("--mount=type=cache,target=/root/.cache/ccache") == 2
    assert "COMPILER" not in build
    assert "CC=" not in build
    assert 'ARG MTGPU_TARGET="mp_31"' in build
    assert "-r /tmp/requirements-build.txt" in build
    assert (
        "    cd /src/vllm \\\n"
        " && export CCACHE_STATSLOG=/tmp/ccache-step.log \\\n"
        " && env VLLM_TARGET_DEVICE=empty \\\n"
        "      python3.11 -m pip wheel --no-index --no-deps --no-build-isolation --no-cache-dir \\\n"
        "      --disable-pip-version-check --wheel-dir /build/wheels/vllm . \\\n"
    ) in build
    assert (
        "    cd /src/vllm-musa \\\n"
        " && export CCACHE_STATSLOG=/tmp/ccache-step.log \\\n"
        " && python3.11 -m pip wheel --no-index --no-deps --no-build-isolation --no-cache-dir \\\n"
        "      --disable-pip-version-check --wheel-dir /build/wheels/vllm-musa . \\\n"
        " && python3.11 -m pip install --no-index --no-deps --no-cache-dir \\\n"
        "      --disable-pip-version-check /build/wheels/vllm-musa/*.whl \\\n"
        ' && if [ -s "$CCACHE_STATSLOG" ]; then ccache --show-log-stats; else echo "ccache: no compiler call in this step"; fi \\\n'
        ' && rm -f "$CCACHE_STATSLOG"\n'
    ) in build


def test_build_stage_toolchain_and_a_compiler_cache_that_caches(tmp_path: Path) -> None:
    text = _render(tmp_path)
    build = text.split("FROM deps AS build\n", 1)[1].split("\n# source vllm:", 1)[0]
    assert (
        " && sh /tmp/tools/apt-get.sh 3 '' '' install -y --no-install-recommends build-essential "
        "ccache cmake git ninja-build patchelf gcc libc6-dev\n"
        "# ccache in front of every gcc-family compiler: /usr/lib/ccache first on PATH, with cc and c++\n"
        "# added (torch's extension build runs c++); the cache is a BuildKit cache mount, which the\n"
        "# vllm-musa build's own ccache around mcc uses too (VLLM_MUSA_CCACHE_DIR). Each source step\n"
        "# prints the hits and misses of its own compiles (CCACHE_STATSLOG), not the cache's totals.\n"
        "ENV PATH=/usr/lib/ccache:${PATH} \\\n"
        "    CCACHE_DIR=/root/.cache/ccache \\\n"
        "    VLLM_MUSA_CCACHE_DIR=/root/.cache/ccache \\\n"
        "    CCACHE_NOHASHDIR=true\n"
        "RUN mkdir -p /build/wheels \\\n"
        " && ln -sf ../../bin/ccache /usr/lib/ccache/cc \\\n"
        " && ln -sf ../../bin/ccache /usr/lib/ccache/c++ \\\n"
        " && for cc in cc c++ gcc g++; do \\\n"
        '        if [ "$(readlink -f "$(command -v "$cc")")" != "$(readlink -f "$(command -v ccache)")" ]; then \\\n'
        '            echo "error[ccache]: $cc does not run through ccache" >&2; \\\n'
        "            exit 1; \\\n"
        "        fi; \\\n"
        "    done \\\n"
        f" && {PYTHON_LINKS_CHECK}\n"
        "RUN --mount=type=bind,source=wheelhouse/build,target=/tmp/wheelhouse \\\n"
    ) in build


PYTHON_LINKS_CHECK = (
    "for py in python python3; do \\\n"
    '        found="$(readlink -f "$(command -v "$py")")"; \\\n'
    '        if [ "$found" != /usr/bin/python3.11 ]; then \\\n'
    '            echo "error[python-link]: $py is ${found:-not on PATH}, not the target" \\\n'
    '                 "/usr/bin/python3.11" >&2; \\\n'
    "            exit 1; \\\n"
    "        fi; \\\n"
    "    done"
)
# the base image's own distributions, recorded before anything is pip-installed
BASE_RECORD_STEP = (
    "# The Python distributions the target interpreter already sees, before anything is\n"
    "# pip-installed: the base image's own (pip-installed, or python3-* debs in its site\n"
    "# directories), each with name, version and location, recorded in\n"
    "# /opt/vllm-musa/base-distributions.json. The installed-equals-lock gate accepts exactly these as from\n"
    "# the base image; the SBOM marks them.\n"
    "RUN --mount=type=bind,source=tools/installed.py,target=/tmp/installed.py \\\n"
    "    python3.11 /tmp/installed.py base /opt/vllm-musa/base-distributions.json\n"
)
PYTHON_LINKS = (
    "# python and python3 are the target interpreter (update-alternatives, as upstream vLLM sets\n"
    "# python3), python3-config is python3.11-config; a wrong link fails the build here.\n"
    "RUN update-alternatives --install /usr/bin/python3 python3 /usr/bin/python3.11 1 \\\n"
    " && update-alternatives --set python3 /usr/bin/python3.11 \\\n"
    " && update-alternatives --install /usr/bin/python python /usr/bin/python3.11 1 \\\n"
    " && update-alternatives --set python /usr/bin/python3.11 \\\n"
    " && ln -sf /usr/bin/python3.11-config /usr/bin/python3-config \\\n"
    f" && {PYTHON_LINKS_CHECK}\n"
    f"{BASE_RECORD_STEP}"
    "# Unbuffered output (the server's logs), and no user site-packages: a mounted or reused\n"
    "# ~/.local never shadows the image's packages.\n"
    "ENV PYTHONUNBUFFERED=1 \\\n"
    "    PYTHONNOUSERSITE=1\n"
    "# pip comes from the pip wheel in the lock"
)


@pytest.mark.parametrize("provider", ["distro", "deadsnakes"])
def test_python_and_python3_are_the_target_with_the_runtime_packages(
    tmp_path: Path, provider: str
) -> None:
    text = _render(tmp_path, MANIFEST if provider == "distro" else deadsnakes_text())
    python = text.split(" AS python\n", 1)[1].split("FROM python AS deps", 1)[0]
    assert (
        " && sh /tmp/tools/apt-get.sh 3 '' '' install -y --no-install-recommends python3.11 \\\n"
        " && sh /tmp/tools/apt-get.sh 3 '' '' install -y --no-install-recommends python3.11-dev "
        f"build-essential ninja-build\n{PYTHON_LINKS}"
    ) in python
    assert "MUSA_HOME" not in text  # no musa: key, no MUSA environment
    assert "MTHREADS_VISIBLE_DEVICES" not in text
    assert "ldconfig" not in text


MUSA_RUNTIME = """\
musa:
  gpu_arch: mp_22
  path: [/usr/local/mtshmem/bin, bin]
  library_path: [lib, /usr/local/lib]
runtime:
  apt_packages: [libnuma1]
  library_links:
    /usr/lib/x86_64-linux-gnu/libmkl_core.so.2: /usr/lib/x86_64-linux-gnu/libmkl_core.so
    /usr/lib/x86_64-linux-gnu/libmkl_gnu_thread.so.2: /usr/lib/x86_64-linux-gnu/libmkl_gnu_thread.so
"""


def test_musa_environment_and_runtime_links(tmp_path: Path) -> None:
    text = _render(tmp_path, MANIFEST.replace("  args: {MTGPU_TARGET: mp_31}\n", "") + MUSA_RUNTIME)
    python = text.split("FROM base AS python\n", 1)[1].split("FROM python AS deps", 1)[0]
    assert (
        " && sh /tmp/tools/apt-get.sh 3 '' '' install -y --no-install-recommends python3.11-dev "
        "build-essential ninja-build libnuma1\n"
    ) in python
    assert (
        f" && {PYTHON_LINKS_CHECK}\n"
        f"{BASE_RECORD_STEP}"
        "# runtime.library_links (the MKL .so.2 names the MUSA torch wheel links against, for the real\n"
        "# stacks), each to a file the image has, then ldconfig.\n"
        "RUN for pair in /usr/lib/x86_64-linux-gnu/libmkl_core.so.2=/usr/lib/x86_64-linux-gnu/"
        "libmkl_core.so /usr/lib/x86_64-linux-gnu/libmkl_gnu_thread.so.2=/usr/lib/x86_64-linux-gnu/"
        "libmkl_gnu_thread.so; do \\\n"
        '        link="${pair%%=*}" target="${pair#*=}"; \\\n'
        '        if [ ! -e "$target" ]; then \\\n'
        '            echo "error[library-link]: runtime.library_links: $target is not in the image, so" \\\n'
        '                 "$link would dangle; add the package that has it to runtime.apt_packages" >&2; \\\n'
        "            exit 1; \\\n"
        "        fi; \\\n"
        '        mkdir -p "$(dirname "$link")" && ln -sf "$target" "$link" || exit 1; \\\n'
        "    done \\\n"
        " && ldconfig\n"
        "# musa.library_path, also for processes started without LD_LIBRARY_PATH.\n"
        "RUN printf '%s\\n' /usr/local/musa/lib /usr/local/lib > /etc/ld.so.conf.d/musa-runtime.conf \\\n"
        " && ldconfig\n"
        "# Unbuffered output (the server's logs), and no user site-packages: a mounted or reused\n"
        "# ~/.local never shadows the image's packages.\n"
        "ENV PYTHONUNBUFFERED=1 \\\n"
        "    PYTHONNOUSERSITE=1\n"
        "# musa: the MUSA environment (upstream's devel and vllm_musa_deps stages), from here on, so the\n"
        "# build stage and the final image have it; gpu_arch mp_22.\n"
        "ENV MUSA_HOME=/usr/local/musa \\\n"
        "    PATH=/usr/local/mtshmem/bin:/usr/local/musa/bin:${PATH} \\\n"
        "    LD_LIBRARY_PATH=/usr/local/musa/lib:/usr/local/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}} \\\n"
        "    MTGPU_TARGET=mp_22 \\\n"
        "    TORCH_MUSA_ARCH_LIST=22 \\\n"
        "    MATE_MUSA_ARCH_LIST=2.2\n"
        "# pip comes from the pip wheel in the lock"
    ) in python
    final = text.split("FROM deps AS final\n", 1)[1]
    assert final.startswith(
        "ARG SOURCES_TIME\n"
        "ARG SOURCE_DATE_EPOCH=${SOURCES_TIME}\n"
        "# The stage's first step is a RUN, whose cache key holds the stage's time: BuildKit keys a\n"
        "# WORKDIR or a COPY by content alone, so one taken from a build at another time would keep\n"
        "# that build's mtimes, and the layer would depend on what the builder has seen.\n"
        "RUN mkdir -p /vllm-workspace\n"
        "WORKDIR /vllm-workspace\n"
        "# musa.visible_devices: the GPUs the image's processes see (the build stages leave it unset).\n"
        "ENV MTHREADS_VISIBLE_DEVICES=all\n"
        'CMD ["/bin/bash"]\n'
        "COPY lock/ /opt/vllm-musa/lock/\n"
    )
    assert "MTHREADS_VISIBLE_DEVICES" not in text.split("FROM deps AS final\n", 1)[0]


def test_musa_without_directories_sets_home_and_the_arch_only(tmp_path: Path) -> None:
    text = _render(
        tmp_path,
        MANIFEST.replace("  args: {MTGPU_TARGET: mp_31}\n", "")
        + "musa: {gpu_arch: mp_31, home: /opt/musa, visible_devices: '0,1'}\n",
    )
    assert (
        "ENV MUSA_HOME=/opt/musa \\\n"
        "    MTGPU_TARGET=mp_31 \\\n"
        "    TORCH_MUSA_ARCH_LIST=31 \\\n"
        "    MATE_MUSA_ARCH_LIST=3.1\n"
    ) in text
    assert "ENV MTHREADS_VISIBLE_DEVICES=0,1\n" in text
    assert "ld.so.conf.d" not in text
    assert "LD_LIBRARY_PATH" not in text


def test_final_takes_built_wheels_by_bind_mount_and_labels(tmp_path: Path) -> None:
    text = _render(tmp_path)
    final = text.split("FROM deps AS final\n", 1)[1]
    assert "--mount=type=bind,from=build,source=/build,target=/tmp/build" in final
    assert "/tmp/build/wheels/vllm/*.whl /tmp/build/wheels/vllm-musa/*.whl" in final
    assert "COPY lock/ /opt/vllm-musa/lock/" in final
    assert "--out /opt/vllm-musa/sbom.json" in final
    assert "wheelhouse" not in final
    m = manifest(tmp_path)
    # path sources: no source, revision or vllm.* label; the tooling labels are build args
    assert final.split("\nLABEL ", 1)[1].split("\n\n", 1)[0].splitlines() == [
        'org.opencontainers.image.created="${IMAGE_CREATED}" \\',
        '      org.opencontainers.image.version="v0.1.0" \\',
        '      org.opencontainers.image.title="demo" \\',
        '      org.opencontainers.image.description="vLLM 0.1.0 for Moore Threads GPUs (vLLM-MUSA), stack demo" \\',
        '      org.opencontainers.image.licenses="Apache-2.0" \\',
        '      org.opencontainers.image.base.name="debian:bookworm-slim" \\',
        '      io.vllm-musa.tooling.revision="${TOOLING_REVISION}" \\',
        f'      io.vllm-musa.lock.sha256="{LOCK_SHA}" \\',
        f'      io.vllm-musa.lock-inputs.sha256="{m.lock_inputs_sha256}"',
    ]


def test_render_is_deterministic(tmp_path: Path) -> None:
    assert _render(tmp_path) == _render(tmp_path)


def test_render_declares_every_arg_the_engine_passes(tmp_path: Path) -> None:
    text = _render(tmp_path)
    engine = {"BASE_IMAGE", "TOOLING_REVISION", "IMAGE_CREATED", "MTGPU_TARGET"}
    assert engine <= declared_args(text)
    assert "COMPILER" not in declared_args(text)
    check_build_args(
        text,
        {"BASE_IMAGE": "x", "TOOLING_REVISION": "y", "IMAGE_CREATED": "z", "MTGPU_TARGET": "mp_22"},
        where="D",
    )


def test_undeclared_build_arg_is_an_error(tmp_path: Path) -> None:
    text = _render(tmp_path)
    with pytest.raises(BuildArgError) as info:
        check_build_args(
            text, {"BUILD_VLLM_RS": "1", "TOOLING_REVISION": "x"}, where="ctx/Dockerfile"
        )
    assert info.value.message == (
        "build arg BUILD_VLLM_RS is not declared by any ARG in ctx/Dockerfile; "
        "Docker would silently ignore it"
    )


def test_lock_without_pip_is_refused(tmp_path: Path) -> None:
    m = manifest(tmp_path)
    with pytest.raises(RenderError) as info:
        build_render_context(m, lock_for(m, with_pip=False), lock_sha256=LOCK_SHA)
    assert "the lock has no runtime pip wheel" in info.value.message


def test_credentials_are_refused_in_build_args() -> None:
    with pytest.raises(CredentialError) as info:
        check_no_credentials({"INDEX_TOKEN": "abc"})
    assert info.value.message == (
        "build arg INDEX_TOKEN looks like a credential; build args are kept in the image history"
    )
    with pytest.raises(CredentialError) as info:
        check_no_credentials({"MIRROR": "https://user:pw@mirror.example/simple"})
    assert info.value.message.startswith("build arg MIRROR holds a URL with credentials")


def test_render_carries_no_index_url_or_credentials(tmp_path: Path) -> None:
    text = _render(tmp_path)
    assert "127.0.0.1:8000" not in text  # the index is used on the host only
    assert not re.search(r"(?i)(password|token|secret|_AUTH)", text)


def test_key_url_defaults_to_the_keyserver_by_fingerprint(tmp_path: Path) -> None:
    text = deadsnakes_text().replace('  key_url: "http://127.0.0.1:8765/key.asc"\n', "")
    rendered = _render(tmp_path, text)
    assert (
        "https://keyserver.ubuntu.com/pks/lookup?op=get&options=mr&search=0x"
        "F23C5A6CF475977595C89F51BA6932366A755776" in rendered
    )


SDK_BASE_CHECK = (
    "RUN for cmd in mcc; do \\\n"
    '        if ! command -v "$cmd" > /dev/null; then \\\n'
    '            echo "error[sdk-check]: demo.yaml: sdk.commands: $cmd is not on PATH ($PATH);" \\\n'
    '                 "sdk.from is base, so the base image must have the MUSA SDK: use a MUSA SDK '
    "base_image, point musa.path/musa.library_path at its directories, or install it with "
    'sdk.from: apt" >&2; \\\n'
    "            exit 1; \\\n"
    "        fi; \\\n"
    "    done \\\n"
    " && for lib in libmusart.so; do \\\n"
    '        if ! ldconfig -p | awk -v n="$lib" \'$1 == n || index($1, n ".") == 1 { f = 1 } '
    "END { exit !f }'; then \\\n"
    '            echo "error[sdk-check]: demo.yaml: sdk.libraries: $lib is not known to the" \\\n'
    '                 "dynamic linker (ldconfig -p); sdk.from is base, so the base image must '
    "have the MUSA SDK: use a MUSA SDK base_image, point musa.path/musa.library_path at its "
    'directories, or install it with sdk.from: apt" >&2; \\\n'
    "            exit 1; \\\n"
    "        fi; \\\n"
    "    done\n"
)


def test_sdk_from_base_checks_the_base_images_sdk_after_the_musa_environment(
    tmp_path: Path,
) -> None:
    text = _render(
        tmp_path,
        MANIFEST.replace("  args: {MTGPU_TARGET: mp_31}\n", "")
        + MUSA_RUNTIME
        + "sdk: {from: base}\n",
    )
    python = text.split("FROM base AS python\n", 1)[1].split("FROM python AS deps", 1)[0]
    assert "AS sdk" not in text  # the base image's SDK: no sdk stage
    assert SDK_BASE_CHECK in python
    assert python.index("    MATE_MUSA_ARCH_LIST=2.2\n") < python.index(SDK_BASE_CHECK)
    assert python.index("/etc/ld.so.conf.d/musa-runtime.conf") < python.index(SDK_BASE_CHECK)
    assert python.index(SDK_BASE_CHECK) < python.index("pip install --no-index")


def test_sdk_checks_only_what_the_manifest_lists(tmp_path: Path) -> None:
    text = _render(tmp_path, MANIFEST + "sdk: {from: base, libraries: []}\n")
    assert "RUN for cmd in mcc; do \\\n" in text
    assert "ldconfig -p" not in text
    text = _render(tmp_path / "l", MANIFEST + "sdk: {from: base, commands: []}\n")
    assert 'command -v "$cmd"' not in text
    assert "RUN for lib in libmusart.so; do \\\n" in text


def test_without_sdk_nothing_about_the_sdk_is_rendered(tmp_path: Path) -> None:
    text = _render(tmp_path)
    assert "sdk.from" not in text
    assert "error[sdk-check]" not in text


def test_sdk_from_apt_installs_the_pinned_packages_in_one_transaction_then_checks(
    tmp_path: Path,
) -> None:
    from tests.support.images import SDK_APT

    apt = SDK_APT.replace("[musa-sdk]", "[musa-toolkit-5-2, musart-5-2, mtml=2.4.1]")
    text = _render(tmp_path, MANIFEST + apt + 'sdk: {from: apt, runtime: "5.2"}\n')
    sdk = text.split("FROM base AS sdk\n", 1)[1].split("FROM sdk AS python\n", 1)[0]
    assert sdk.count("install -y --no-install-recommends") == 1
    assert "install -y --no-install-recommends musa-toolkit-5-2 musart-5-2 mtml=2.4.1\n" in sdk
    python = text.split("FROM sdk AS python\n", 1)[1].split("FROM python AS deps", 1)[0]
    assert "# sdk.from: apt: the MUSA SDK of sdk_apt, runtime line 5.2, checked here" in python
    assert (
        '"sdk.from is apt: add the sdk_apt package that has it, or point '
        'musa.path/musa.library_path at its directories" >&2; \\\n'
    ) in python


def test_sdk_from_apt_refuses_an_unpinned_package_before_any_render(tmp_path: Path) -> None:
    from core.errors import ManifestError
    from tests.support.images import SDK_APT

    with pytest.raises(ManifestError) as info:
        manifest(tmp_path, MANIFEST + SDK_APT + 'sdk: {from: apt, runtime: "5.2"}\n')
    assert info.value.message.split(": ", 1)[1] == (
        "sdk_apt.packages.0: 'musa-sdk' is not pinned to the runtime line 5.2 of sdk.runtime"
    )
    assert info.value.hint == (
        "name the line's package (musa-sdk-5-2) or pin a version (musa-sdk=VERSION)"
    )


def test_final_writes_the_sbom_in_a_step_of_its_own_before_the_build_args(tmp_path: Path) -> None:
    """The SBOM's step names no tooling commit and no build time: the build args that carry
    them come after it, so a commit that changes no input leaves its layer as it was."""
    final = _render(tmp_path).split("FROM deps AS final\n", 1)[1]
    step = final.split("\n# The SBOM (CycloneDX 1.5)", 1)[1].split("\n\n", 1)[0]
    assert final.index("ARG TOOLING_REVISION=unknown\n") > final.index(step)
    assert step.splitlines() == [
        ": the Python distributions (a vendor index's with its",
        "# repository_url), the dpkg packages of the image and the lock's dependency graph; its",
        "# timestamp is this stage's time, its serial number derived from its content. It names no",
        "# tooling commit: a commit that changes no input leaves this layer as it was.",
        "RUN --mount=type=bind,from=build,source=/build,target=/tmp/build \\",
        "    --mount=type=bind,source=sbom,target=/tmp/sbom \\",
        "    python3.11 /tmp/sbom/sbom.py --lock /opt/vllm-musa/lock/requirements.txt \\",
        "      --facts /tmp/sbom/sbom-facts.json --built /tmp/build/wheels --out /opt/vllm-musa/sbom.json \\",
        f"      --name demo --version 0.1.0 --lock-sha256 {LOCK_SHA} \\",
        "      --licenses Apache-2.0 --description 'vLLM 0.1.0 for Moore Threads GPUs (vLLM-MUSA), stack demo' \\",
        '      --created "$(date -u -d "@${SOURCE_DATE_EPOCH}" +%Y-%m-%dT%H:%M:%SZ)" \\',
        "      --base /opt/vllm-musa/base-distributions.json \\",
        "      --source vllm=path:demo/vllm \\",
        "      --source vllm-musa=path:demo/vllm-musa",
    ]


def test_labels_state_licenses_description_and_a_pinned_base_digest(tmp_path: Path) -> None:
    digest = "sha256:" + "0123456789abcdef" * 4
    text = MANIFEST.replace(
        'base_image: "debian:bookworm-slim"', f'base_image: "debian:bookworm-slim@{digest}"'
    ) + (
        "image:\n  repository: registry.example/vllm\n"
        '  licenses: "Apache-2.0 AND LicenseRef-MooreThreads"\n'
        '  description: "vLLM for MUSA, it\'s $HOME"\n'
    )
    m = manifest(tmp_path, text)
    final = _render(tmp_path, text).split("FROM deps AS final\n", 1)[1]
    assert final.split("\nLABEL ", 1)[1].split("\n\n", 1)[0].splitlines() == [
        'org.opencontainers.image.created="${IMAGE_CREATED}" \\',
        '      org.opencontainers.image.version="v0.1.0" \\',
        '      org.opencontainers.image.title="demo" \\',
        '      org.opencontainers.image.description="vLLM for MUSA, it\'s \\$HOME" \\',
        '      org.opencontainers.image.licenses="Apache-2.0 AND LicenseRef-MooreThreads" \\',
        f'      org.opencontainers.image.base.name="debian:bookworm-slim@{digest}" \\',
        f'      org.opencontainers.image.base.digest="{digest}" \\',
        '      io.vllm-musa.tooling.revision="${TOOLING_REVISION}" \\',
        f'      io.vllm-musa.lock.sha256="{LOCK_SHA}" \\',
        f'      io.vllm-musa.lock-inputs.sha256="{m.lock_inputs_sha256}"',
    ]
    assert (
        "      --licenses 'Apache-2.0 AND LicenseRef-MooreThreads' "
        "--description 'vLLM for MUSA, it'\"'\"'s $HOME' \\\n"
    ) in final


def test_the_deps_layers_put_the_pinned_vendor_stack_first(tmp_path: Path) -> None:
    import dataclasses

    from images.builder.plan import deps_layers
    from tests.support.images import lock_for

    lock = lock_for(manifest(tmp_path))
    pinned = {"torch", "mate"}
    lock = dataclasses.replace(
        lock,
        packages=tuple(
            dataclasses.replace(p, origin="pin" if p.name in pinned else p.origin)
            for p in lock.packages
        ),
    )
    layers = deps_layers(lock)
    assert [(x.file, [p.name for p in x.packages]) for x in layers] == [
        ("pinned.txt", ["mate", "torch"]),
        ("locked.txt", ["pip"]),
    ]
    only = dataclasses.replace(lock, packages=tuple(p for p in lock.packages if p.name == "pip"))
    assert [x.file for x in deps_layers(only)] == ["locked.txt"]  # no empty layer
