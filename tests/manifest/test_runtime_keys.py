"""musa:, runtime: and the build stage's keys: parsed values, and every refusal with its text."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ManifestError
from manifest import Manifest, Musa, Runtime, parse_manifest
from tests.manifest.test_manifest import GOOD


def parse(text: str) -> Manifest:
    return parse_manifest(text, path=Path("stack/t.yaml"))


def error_of(text: str) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        parse(text)
    return info.value


def test_without_the_keys_there_is_no_musa_environment_and_no_runtime_extras() -> None:
    m = parse(GOOD)
    assert m.musa is None
    assert m.runtime == Runtime()


def test_musa_resolves_directories_under_home_and_derives_the_arch() -> None:
    m = parse(
        GOOD + "musa:\n"
        "  gpu_arch: mp_31\n"
        "  path: [/usr/local/mtshmem/bin, bin, mudnn/bin/]\n"
        "  library_path: [lib]\n"
    )
    assert m.musa == Musa(
        gpu_arch="mp_31",
        home="/usr/local/musa",
        visible_devices="all",
        path=("/usr/local/mtshmem/bin", "/usr/local/musa/bin", "/usr/local/musa/mudnn/bin"),
        library_path=("/usr/local/musa/lib",),
    )
    assert (m.musa.torch_arch, m.musa.mate_arch) == ("31", "3.1")


def test_runtime_keeps_the_written_order() -> None:
    m = parse(
        GOOD + "runtime:\n"
        "  apt_packages: [libnuma1, libmkl-core]\n"
        "  library_links:\n"
        "    /usr/lib/x/libb.so.2: /usr/lib/x/libb.so\n"
        "    /usr/lib/x/liba.so.2: /usr/lib/x/liba.so\n"
    )
    assert m.runtime == Runtime(
        apt_packages=("libnuma1", "libmkl-core"),
        library_links=(
            ("/usr/lib/x/libb.so.2", "/usr/lib/x/libb.so"),
            ("/usr/lib/x/liba.so.2", "/usr/lib/x/liba.so"),
        ),
    )


def test_host_libraries_keep_each_reason() -> None:
    m = parse(
        GOOD + "runtime:\n"
        "  host_libraries:\n"
        '    libmusa.so.1: "the MUSA driver\'s library, injected by the mthreads runtime"\n'
    )
    assert m.runtime == Runtime(
        host_libraries={
            "libmusa.so.1": "the MUSA driver's library, injected by the mthreads runtime"
        }
    )
    extra = "runtime: {host_libraries: {libmusa.so.1: the driver's}}\n"
    assert parse(GOOD + extra).lock_inputs_sha256 == parse(GOOD).lock_inputs_sha256


def test_the_image_keys_are_not_lock_inputs() -> None:
    extra = "musa: {gpu_arch: mp_22}\nruntime: {apt_packages: [libnuma1]}\n"
    assert parse(GOOD + extra).lock_inputs_sha256 == parse(GOOD).lock_inputs_sha256


def test_build_compiler_is_an_unknown_key() -> None:
    err = error_of(GOOD + "build:\n  compiler: gcc\n")
    assert err.message == "stack/t.yaml:19: build.compiler: unknown key"
    assert err.hint == "known keys: requirements, args, apt_packages"


def test_an_arch_build_arg_beside_musa_is_refused() -> None:
    err = error_of(GOOD + "build:\n  args: {MTGPU_TARGET: mp_31}\nmusa: {gpu_arch: mp_31}\n")
    assert err.message == (
        "stack/t.yaml:19: build.args.MTGPU_TARGET: MTGPU_TARGET is set by musa: an ENV of the "
        "image, which a build argument of the same name cannot change"
    )
    assert err.hint == "remove build.args.MTGPU_TARGET; musa.gpu_arch sets the architecture"
    err = error_of(GOOD + "build:\n  args: {MUSA_HOME: /opt/musa}\nmusa: {gpu_arch: mp_31}\n")
    assert err.hint == "remove build.args.MUSA_HOME"


@pytest.mark.parametrize(
    ("block", "message", "hint"),
    [
        (
            "musa: {gpu_arch: ph1}\n",
            "stack/t.yaml:18: musa.gpu_arch: 'ph1' is not a MUSA GPU architecture like mp_31",
            "mp_31 (S5000) or mp_22; it sets MTGPU_TARGET, TORCH_MUSA_ARCH_LIST and "
            "MATE_MUSA_ARCH_LIST",
        ),
        (
            "musa: {home: /usr/local/musa}\n",
            "stack/t.yaml:18: musa: missing required key 'gpu_arch'",
            None,
        ),
        (
            "musa: {gpu_arch: mp_31, home: musa}\n",
            "stack/t.yaml:18: musa.home: 'musa' is not an absolute path",
            None,
        ),
        (
            "musa: {gpu_arch: mp_31, path: ['$MUSA_HOME/bin']}\n",
            "stack/t.yaml:18: musa.path.0: '$MUSA_HOME/bin' is not a directory path",
            "letters, digits, '.', '_', '+', '-' and '/'; no '..', no variables",
        ),
        (
            "musa: {gpu_arch: mp_31, library_path: [../lib]}\n",
            "stack/t.yaml:18: musa.library_path.0: '../lib' is not a directory path",
            "letters, digits, '.', '_', '+', '-' and '/'; no '..', no variables",
        ),
        (
            "musa: {gpu_arch: mp_31, visible_devices: 'GPU-0'}\n",
            "stack/t.yaml:18: musa.visible_devices: 'GPU-0' is not all, none or a list of "
            "device numbers like 0,1",
            None,
        ),
        (
            "runtime: {apt_packages: ['libmkl core']}\n",
            "stack/t.yaml:18: runtime.apt_packages.0: 'libmkl core' is not a Debian package name",
            None,
        ),
        (
            "runtime: {library_links: {libmkl_core.so.2: /usr/lib/libmkl_core.so}}\n",
            "stack/t.yaml:18: runtime.library_links.libmkl_core.so.2: 'libmkl_core.so.2' is not "
            "an absolute path",
            None,
        ),
        (
            "runtime: {library_links: {/usr/lib/a.so.2: '/usr/lib/a.so; rm -rf /'}}\n",
            "stack/t.yaml:18: runtime.library_links./usr/lib/a.so.2: '/usr/lib/a.so; rm -rf /' "
            "is not a file path",
            "letters, digits, '.', '_', '+', '-' and '/'; no '..', no variables",
        ),
        (
            "runtime: {host_libraries: {libmusa.so.1: ''}}\n",
            "stack/t.yaml:18: runtime.host_libraries.libmusa.so.1: must not be empty",
            None,
        ),
        (
            "runtime: {host_libraries: {libmusa.so.1: null}}\n",
            "stack/t.yaml:18: runtime.host_libraries.libmusa.so.1: must be a string, got nothing "
            "(null)",
            None,
        ),
        (
            "runtime: {host_libraries: {/usr/lib/libmusa.so.1: the driver's}}\n",
            "stack/t.yaml:18: runtime.host_libraries./usr/lib/libmusa.so.1: '/usr/lib/libmusa.so.1' "
            "is not a shared-library soname",
            "the name a DT_NEEDED entry gives and the dynamic linker looks up, e.g. libmusa.so.1",
        ),
        (
            "runtime: {host_libraries: [libmusa.so.1]}\n",
            "stack/t.yaml:18: runtime.host_libraries: must be a mapping, got a list",
            None,
        ),
    ],
)
def test_refusals(block: str, message: str, hint: str | None) -> None:
    err = error_of(GOOD + block)
    assert err.message == message
    assert err.hint == hint
