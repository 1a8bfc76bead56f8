"""The linkage probe (in_image/linkage_probe.py): its bounded ELF reader on hand-written ELF
files (testbed/elf.py), whole and damaged; its resolver against ld.so's order; the ld.so cache
reader; and the whole probe run by this interpreter over a site directory that pip installed a
wheel with native libraries into. tests/images/builder/test_linkage_gate.py judges the facts.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from images.builder.linkage_gate import LINKAGE_PROBE, linkage_problems
from testbed.distributions import WheelSpec, build_wheel
from testbed.elf import EM_386, EM_AARCH64, SharedObject, render_shared_object
from tests.support.images import MANIFEST, manifest


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("linkage_probe_under_test", LINKAGE_PROBE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


probe = _load()
PLAIN = SharedObject()
CURL = SharedObject(needed=("libcurl.so.4", "libc.so.6"), soname="libte.so", runpath="$ORIGIN")


class Counting(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.read_bytes += len(data)
        return data


def _read(data: bytes) -> Any:
    return probe.read_elf_file(io.BytesIO(data), len(data))


def _error(data: bytes) -> str:
    with pytest.raises(probe.ElfError) as info:
        _read(data)
    return str(info.value)


# ------------------------------------------------------------------------------ the reader


def test_the_reader_gives_needed_soname_and_search_paths() -> None:
    elf = _read(render_shared_object(CURL))
    assert elf == probe.Elf(
        64, True, 62, needed=("libcurl.so.4", "libc.so.6"), soname="libte.so", runpath="$ORIGIN"
    )
    assert elf.kind == (64, 62)
    spec = SharedObject(needed=("libc.so.6",), rpath="/opt/a:$ORIGIN/../lib", nodeflib=True)
    assert _read(render_shared_object(spec)) == probe.Elf(
        64, True, 62, needed=("libc.so.6",), rpath="/opt/a:$ORIGIN/../lib", nodeflib=True
    )


def test_the_reader_reads_elf32_and_other_machines() -> None:
    spec = SharedObject(needed=("libm.so.6",), soname="lib32.so", machine=EM_386, elf_class=32)
    assert _read(render_shared_object(spec)) == probe.Elf(
        32, True, 3, needed=("libm.so.6",), soname="lib32.so"
    )
    arm = _read(render_shared_object(SharedObject(needed=("libc.so.6",), machine=EM_AARCH64)))
    assert arm.kind == (64, 183)


def test_a_big_endian_file_is_read_no_further_than_its_identification() -> None:
    data = bytearray(render_shared_object(CURL))
    data[5] = 2
    elf = _read(bytes(data))
    assert (elf, elf.kind) == (probe.Elf(64, False), None)


def test_an_object_without_pt_dynamic_needs_nothing() -> None:
    data = bytearray(render_shared_object(CURL))
    struct.pack_into("<I", data, 64 + 56, 0)  # PT_DYNAMIC -> PT_NULL
    assert _read(bytes(data)) == probe.Elf(64, True, 62)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (10, "the ELF identification at offset 0 (16 bytes) is past the end (10 bytes)"),
        (40, "the ELF header at offset 16 (48 bytes) is past the end (40 bytes)"),
        (100, "program header 0 at offset 64 (56 bytes) is past the end (100 bytes)"),
        (300, "PT_DYNAMIC at offset 320 (160 bytes) is past the end (300 bytes)"),
        (479, "PT_DYNAMIC at offset 320 (160 bytes) is past the end (479 bytes)"),
    ],
)
def test_a_truncated_file_is_named_by_what_is_missing(size: int, expected: str) -> None:
    assert _error(render_shared_object(CURL)[:size]) == expected


def test_every_truncation_and_every_flipped_byte_is_an_elf_error_or_a_reading() -> None:
    data = render_shared_object(CURL)
    for size in range(4, len(data)):
        _error(data[:size])
    rng = random.Random("linkage")  # noqa: S311 - seeded: the same damage every run
    for _ in range(500):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(4, len(data))] = rng.randrange(256)
        with contextlib.suppress(probe.ElfError):
            _read(bytes(damaged))


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        # e_phnum
        ((56, "<H", 5000), "5000 program headers (at most 4096 are read)"),
        # e_phentsize
        ((54, "<H", 8), "program header entries of 8 bytes"),
        # PT_DYNAMIC's p_filesz
        ((64 + 56 + 32, "<Q", 2 << 20), "PT_DYNAMIC of 2097152 bytes (at most 1048576 are read)"),
        # PT_LOAD's p_filesz: DT_STRTAB (0x110) falls outside it
        ((64 + 32, "<Q", 0x100), "DT_STRTAB 0x110 is in no PT_LOAD segment of the file"),
        # DT_STRSZ (the 8th entry of the dynamic section at 320)
        ((320 + 7 * 16 + 8, "<Q", 1), "a string offset 1 is outside the string table (1 bytes)"),
    ],
)
def test_a_malformed_file_is_named_by_what_is_wrong(
    patch: tuple[int, str, int], expected: str
) -> None:
    data = bytearray(render_shared_object(CURL))
    struct.pack_into(patch[1], data, patch[0], patch[2])
    assert _error(bytes(data)) == expected


def test_an_unterminated_string_and_a_missing_string_table_are_named() -> None:
    data = bytearray(render_shared_object(SharedObject(needed=("libc.so.6",))))
    dynamic = 0x120
    assert struct.unpack_from("<qQ", data, dynamic + 32) == (5, 0x110)  # DT_STRTAB
    struct.pack_into("<qQ", data, dynamic + 32, 0x7FFF, 0)  # an unknown tag instead
    assert _error(bytes(data)) == (
        "DT_NEEDED, DT_SONAME or a search path without DT_STRTAB and DT_STRSZ"
    )
    data = bytearray(render_shared_object(SharedObject(needed=("libc.so.6",))))
    data[0x110 : 0x110 + 11] = b"x" * 11  # the NULs of the string table overwritten
    assert _error(bytes(data)) == "a dynamic string at offset 1 has no end in 10 bytes"


def test_reads_are_bounded_whatever_the_file_claims() -> None:
    big = render_shared_object(SharedObject(needed=("libc.so.6",), soname="x" * 100_000))
    fh = Counting(big)
    with pytest.raises(probe.ElfError) as info:
        probe.read_elf_file(fh, len(big))
    assert str(info.value) == "a dynamic string at offset 11 has no end in 4096 bytes"
    # the identification, the header, 3 program headers, 8 dynamic entries, 2 strings at most
    assert fh.read_bytes == 16 + 48 + 3 * 56 + 8 * 16 + 2 * probe.MAX_STRING


def test_a_file_that_is_not_elf_is_none(tmp_path: Path) -> None:
    (tmp_path / "module.py").write_text("print(1)\n")
    (tmp_path / "tiny").write_bytes(b"\x7fEL")
    assert probe.read_elf(str(tmp_path / "module.py")) is None
    assert probe.read_elf(str(tmp_path / "tiny")) is None


# ---------------------------------------------------------------------------- the resolver


def _env(
    *, ld_library_path: tuple[str, ...] = (), system: tuple[str, ...] = (), cache: Any = None
) -> Any:
    return probe.SearchEnv(
        ld_library_path=list(ld_library_path),
        cache=cache or {},
        cache_source="/etc/ld.so.cache" if cache else "",
        system=list(system),
        system_source="assumed",
        lib="lib/x86_64-linux-gnu",
        platform="x86_64",
    )


def _lib(path: Path, spec: SharedObject = PLAIN) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render_shared_object(spec))
    return path


def _resolve(spec: SharedObject, at: Path, env: Any, soname: str = "libdep.so.1") -> Any:
    return probe.resolve(soname, _read(render_shared_object(spec)), str(at), env)


def test_runpath_with_origin_finds_a_library_beside_the_file(tmp_path: Path) -> None:
    _lib(tmp_path / "pkg" / "libdep.so.1")
    found = _resolve(SharedObject(runpath="$ORIGIN"), tmp_path / "pkg" / "engine.so", _env())
    assert found == (str(tmp_path / "pkg" / "libdep.so.1"), [f"RUNPATH $ORIGIN ({tmp_path}/pkg)"])
    brace = SharedObject(runpath="${ORIGIN}/../pkg.libs")
    _lib(tmp_path / "pkg.libs" / "libdep.so.1")
    assert _resolve(brace, tmp_path / "pkg" / "engine.so", _env())[0] == (
        f"{tmp_path}/pkg/../pkg.libs/libdep.so.1"
    )


def test_lib_and_platform_are_expanded_as_this_ld_so_does(tmp_path: Path) -> None:
    _lib(tmp_path / "lib" / "x86_64-linux-gnu" / "x86_64" / "libdep.so.1")
    spec = SharedObject(runpath=f"{tmp_path}/$LIB/${{PLATFORM}}")
    assert _resolve(spec, tmp_path / "engine.so", _env()) == (
        f"{tmp_path}/lib/x86_64-linux-gnu/x86_64/libdep.so.1",
        [f"RUNPATH {tmp_path}/$LIB/${{PLATFORM}} ({tmp_path}/lib/x86_64-linux-gnu/x86_64)"],
    )


def test_the_search_order_is_rpath_ld_library_path_runpath_cache_system(tmp_path: Path) -> None:
    for d in ("rpath", "env", "runpath", "cached", "system"):
        _lib(tmp_path / d / "libdep.so.1")
    cache = {"libdep.so.1": [str(tmp_path / "cached" / "libdep.so.1")]}
    env = _env(
        ld_library_path=(str(tmp_path / "env"),), system=(str(tmp_path / "system"),), cache=cache
    )
    at = tmp_path / "engine.so"
    rpath = SharedObject(rpath=str(tmp_path / "rpath"))
    assert _resolve(rpath, at, env)[0] == str(tmp_path / "rpath" / "libdep.so.1")
    # RPATH is not read when RUNPATH is there: LD_LIBRARY_PATH comes first, then RUNPATH
    both = SharedObject(rpath=str(tmp_path / "rpath"), runpath=str(tmp_path / "runpath"))
    assert _resolve(both, at, env)[0] == str(tmp_path / "env" / "libdep.so.1")
    assert _resolve(both, at, _env(cache=cache))[0] == str(tmp_path / "runpath" / "libdep.so.1")
    # then the cache, then the system directories
    assert _resolve(SharedObject(), at, env)[0] == str(tmp_path / "env" / "libdep.so.1")
    assert _resolve(SharedObject(), at, _env(cache=cache, system=(str(tmp_path / "system"),)))[
        0
    ] == str(tmp_path / "cached" / "libdep.so.1")
    assert _resolve(SharedObject(), at, _env(system=(str(tmp_path / "system"),)))[0] == str(
        tmp_path / "system" / "libdep.so.1"
    )


def test_nothing_found_lists_what_was_searched_in_order(tmp_path: Path) -> None:
    env = _env(ld_library_path=("/opt/a", "/opt/b"), system=("/lib/x", "/usr/lib"), cache={"x": []})
    spec = SharedObject(rpath="$ORIGIN/rp", runpath="$ORIGIN/../lib")
    assert _resolve(spec, tmp_path / "pkg" / "engine.so", env) == (
        None,
        [
            "LD_LIBRARY_PATH /opt/a:/opt/b",
            f"RUNPATH $ORIGIN/../lib ({tmp_path}/pkg/../lib)",
            "the ld.so cache",
            "/lib/x",
            "/usr/lib",
        ],
    )
    assert _resolve(SharedObject(rpath="/opt/r"), tmp_path / "e.so", _env()) == (
        None,
        ["RPATH /opt/r", "no ld.so cache"],
    )


def test_nodeflib_skips_the_cache_and_the_system_directories(tmp_path: Path) -> None:
    _lib(tmp_path / "system" / "libdep.so.1")
    env = _env(system=(str(tmp_path / "system"),))
    assert _resolve(SharedObject(nodeflib=True), tmp_path / "e.so", env) == (
        None,
        ["not the ld.so cache nor the system directories (-z nodeflib)"],
    )


def test_a_library_of_another_class_or_machine_is_skipped_as_ld_so_does(tmp_path: Path) -> None:
    _lib(tmp_path / "first" / "libdep.so.1", SharedObject(machine=EM_386, elf_class=32))
    _lib(tmp_path / "second" / "libdep.so.1", SharedObject(machine=EM_AARCH64))
    (tmp_path / "third").mkdir()
    (tmp_path / "third" / "libdep.so.1").write_text("INPUT(-lfoo)\n")  # a linker script
    _lib(tmp_path / "fourth" / "libdep.so.1")
    dirs = ":".join(str(tmp_path / d) for d in ("first", "second", "third", "fourth"))
    found, _ = _resolve(SharedObject(runpath=dirs), tmp_path / "e.so", _env())
    assert found == str(tmp_path / "fourth" / "libdep.so.1")


def test_a_library_in_the_same_directory_is_not_found_without_origin(tmp_path: Path) -> None:
    _lib(tmp_path / "pkg" / "libdep.so.1")
    assert _resolve(SharedObject(), tmp_path / "pkg" / "engine.so", _env())[0] is None


def test_a_needed_path_is_opened_as_a_path(tmp_path: Path) -> None:
    lib = _lib(tmp_path / "libdep.so.1")
    assert _resolve(SharedObject(), tmp_path / "e.so", _env(), soname=str(lib)) == (
        str(lib),
        [f"the path {lib}"],
    )


# ---------------------------------------------------------------------------- the ld.so cache


def _cache_file(entries: list[tuple[str, str]]) -> bytes:
    strings = bytearray()
    table = bytearray()
    base = 48 + 24 * len(entries)
    for key, value in entries:
        k = base + len(strings)
        strings += key.encode() + b"\0"
        v = base + len(strings)
        strings += value.encode() + b"\0"
        table += struct.pack("<iIIIQ", 0x0303, k, v, 0, 0)
    header = probe.CACHE_MAGIC + struct.pack("<IIB3xI12x", len(entries), len(strings), 2, 0)
    assert len(header) == 48
    return bytes(header + table + strings)


def test_the_ld_so_cache_is_read_as_glibc_writes_it() -> None:
    data = _cache_file([("libz.so.1", "/lib/x/libz.so.1"), ("libz.so.1", "/usr/lib/libz.so.1")])
    assert probe.parse_ld_so_cache(data) == {
        "libz.so.1": ["/lib/x/libz.so.1", "/usr/lib/libz.so.1"]
    }
    with pytest.raises(ValueError, match=r"^not a glibc-ld\.so\.cache1\.1 file$"):
        probe.parse_ld_so_cache(b"ld.so-1.7.0" + bytes(40))
    with pytest.raises(ValueError, match=r"^2 entries do not fit in 60 bytes$"):
        probe.parse_ld_so_cache(data[:60])
    with pytest.raises(ValueError, match=r"^the string at offset 96 has no end$"):
        probe.parse_ld_so_cache(data[:100])


def test_the_hosts_ld_so_cache_reads_as_ldconfig_lists_it() -> None:
    cache = Path(probe.LD_SO_CACHE)
    ldconfig = next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if Path(p).exists()), "")
    if not cache.is_file() or not ldconfig:
        pytest.skip("no ld.so cache or ldconfig on this machine")
    listed = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, check=True).stdout
    parsed = probe.parse_ld_so_cache(cache.read_bytes())
    expected = probe.parse_ldconfig_p(listed)
    assert {k: sorted(v) for k, v in parsed.items()} == {k: sorted(v) for k, v in expected.items()}


# ----------------------------------------------------------------------------- the whole probe


def test_scan_counts_host_libraries_apart_and_names_unreadable_files(tmp_path: Path) -> None:
    a = _lib(tmp_path / "pkg" / "liba.so", SharedObject(needed=("libmusa.so.1", "libdep.so.1")))
    b = _lib(tmp_path / "pkg" / "libdep.so.1", SharedObject(needed=("libmusa.so.1",)))
    arm = _lib(tmp_path / "pkg" / "arm.so", SharedObject(needed=("libx.so",), machine=EM_AARCH64))
    (tmp_path / "pkg" / "cut.so").write_bytes(render_shared_object(CURL)[:100])
    (tmp_path / "pkg" / "mod.py").write_text("")
    entries = [(f"pkg/{p.name}", str(p)) for p in (a, b, arm, tmp_path / "pkg" / "cut.so")]
    entries.append(("pkg/mod.py", str(tmp_path / "pkg" / "mod.py")))
    entries.append(("pkg/again.so", str(a)))  # listed twice (a second site directory)
    facts = probe.scan([("d", "1.0", entries)], _env(), (64, 62), ["libmusa.so.1"])
    assert facts == {
        "files": 5,
        "elf_files": 2,
        "other_machine": 1,
        "needs": 3,
        "resolved": 0,
        "missing": [
            {
                "file": "pkg/liba.so",
                "path": str(a),
                "distribution": "d",
                "version": "1.0",
                "soname": "libdep.so.1",
                "searched": ["no ld.so cache"],
                "elsewhere": [f"{b} (d 1.0)"],
            }
        ],
        "missing_total": 1,
        "loaded_first": [],
        "loaded_first_total": 0,
        "host_provided": {
            "libmusa.so.1": {"needs": 2, "files": ["pkg/liba.so", "pkg/libdep.so.1"]}
        },
        "malformed": [
            {
                "file": "pkg/cut.so",
                "path": str(tmp_path / "pkg" / "cut.so"),
                "distribution": "d",
                "version": "1.0",
                "error": "program header 0 at offset 64 (56 bytes) is past the end (100 bytes)",
            }
        ],
        "malformed_total": 1,
    }


def _dist(name: str, *libs: Path) -> tuple[str, str, list[tuple[str, str]]]:
    return (name, "1.0", [(str(p.relative_to(p.parents[1])), str(p)) for p in libs])


def test_a_grafted_library_finds_its_siblings_through_the_rpath_of_its_loaders(
    tmp_path: Path,
) -> None:
    """auditwheel's layout: the extension's DT_RPATH $ORIGIN/../pkg.libs; the grafted
    libraries have no search path of their own, and ld.so searches their loaders' RPATH."""
    libs = tmp_path / "pkg.libs"
    ext = _lib(
        tmp_path / "pkg" / "ext.so", SharedObject(needed=("liba.so",), rpath="$ORIGIN/../pkg.libs")
    )
    a = _lib(libs / "liba.so", SharedObject(needed=("libb.so",), soname="liba.so"))
    b = _lib(libs / "libb.so", SharedObject(needed=("libc2.so",), soname="libb.so"))
    c = _lib(libs / "libc2.so", SharedObject(soname="libc2.so"))
    facts = probe.scan([_dist("pkg", ext, a, b, c)], _env(), (64, 62), [])
    assert (facts["needs"], facts["resolved"], facts["missing"]) == (3, 3, [])


def test_a_runpath_does_not_reach_the_libraries_it_loads(tmp_path: Path) -> None:
    libs = tmp_path / "pkg.libs"
    ext = _lib(
        tmp_path / "pkg" / "ext.so",
        SharedObject(needed=("liba.so",), runpath="$ORIGIN/../pkg.libs"),
    )
    a = _lib(libs / "liba.so", SharedObject(needed=("libb.so",), soname="liba.so"))
    b = _lib(libs / "libb.so", SharedObject(soname="libb.so"))
    facts = probe.scan([_dist("pkg", ext, a, b)], _env(), (64, 62), [])
    assert (
        facts["resolved"],
        [(m["file"], m["soname"], m["elsewhere"]) for m in facts["missing"]],
    ) == (
        1,
        [("pkg.libs/liba.so", "libb.so", [f"{b} (pkg 1.0)"])],
    )
    # nor does a loader's RPATH reach a library that has a RUNPATH of its own
    ext = _lib(
        tmp_path / "pkg" / "ext.so", SharedObject(needed=("liba.so",), rpath="$ORIGIN/../pkg.libs")
    )
    _lib(libs / "liba.so", SharedObject(needed=("libb.so",), soname="liba.so", runpath="/opt/x"))
    facts = probe.scan([_dist("pkg", ext, a, b)], _env(), (64, 62), [])
    assert [m["soname"] for m in facts["missing"]] == ["libb.so"]


def test_a_soname_of_another_distribution_counts_once_loaded_first(tmp_path: Path) -> None:
    """xgrammar's bindings need libtvm_ffi.so with no path to it: ld.so takes the library
    apache-tvm-ffi's package loads first, by its soname. One of the same distribution does not
    count: nothing loads it first."""
    bindings = _lib(tmp_path / "xg" / "libbind.so", SharedObject(needed=("libtvm_ffi.so",)))
    ffi = _lib(tmp_path / "tvm" / "libtvm_ffi.so", SharedObject(soname="libtvm_ffi.so"))
    facts = probe.scan([_dist("xg", bindings), _dist("tvm", ffi)], _env(), (64, 62), [])
    assert (facts["missing"], facts["loaded_first_total"]) == ([], 1)
    assert facts["loaded_first"] == [
        {
            "file": "xg/libbind.so",
            "path": str(bindings),
            "distribution": "xg",
            "version": "1.0",
            "soname": "libtvm_ffi.so",
            "provider": f"{ffi} (tvm 1.0)",
        }
    ]
    facts = probe.scan([_dist("xg", bindings, ffi)], _env(), (64, 62), [])
    assert [(m["soname"], m["elsewhere"]) for m in facts["missing"]] == [
        ("libtvm_ffi.so", [f"{ffi} (xg 1.0)"])
    ]


def test_the_list_of_missing_needs_is_capped_and_counted(tmp_path: Path) -> None:
    needs = tuple(f"libabsent{i}.so.1" for i in range(probe.LISTED + 5))
    lib = _lib(tmp_path / "libmany.so", SharedObject(needed=needs))
    facts = probe.scan([("d", "1", [("libmany.so", str(lib))])], _env(), (64, 62), [])
    assert (len(facts["missing"]), facts["missing_total"]) == (probe.LISTED, probe.LISTED + 5)


def test_the_probe_on_this_interpreter_names_a_wheels_missing_library(tmp_path: Path) -> None:
    """A wheel installed by pip into a site directory, the probe run by this interpreter with
    only that directory on its path: the need no library satisfies is named with its
    distribution; the one RUNPATH $ORIGIN finds, and libc, are not."""
    cp = f"cp{sys.version_info.major}{sys.version_info.minor}"  # a wheel pip installs here
    spec = WheelSpec(
        name="engine-demo",
        version="0.3.12.post1",
        tags=f"{cp}-{cp}-linux_x86_64",
        modules={"engine_demo/__init__.py": ""},
        binaries={
            "engine_demo/libengine.so": render_shared_object(
                SharedObject(
                    needed=("libvllm_musa_absent.so.7", "libhelper.so.1", "libc.so.6"),
                    runpath="$ORIGIN",
                )
            ),
            "engine_demo/libhelper.so.1": render_shared_object(
                SharedObject(needed=("libc.so.6",), soname="libhelper.so.1")
            ),
        },
    )
    wheel = build_wheel(spec, tmp_path / "wheels")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--no-deps", "--no-index",
         "--quiet", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
    )  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-S", "-c", LINKAGE_PROBE.read_text(), "--host-library=libmusa.so.1"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
        cwd=tmp_path,
        env={
            "PYTHONPATH": str(site),
            "PATH": "/usr/bin:/bin",
            "LD_LIBRARY_PATH": "/opt/vllm-musa-none",
        },
    )
    facts = json.loads(run.stdout)
    linkage = facts["linkage"]
    system = linkage["search"]["system"]
    assert {k: linkage[k] for k in ("distributions", "elf_files", "needs", "resolved")} == {
        "distributions": 1,
        "elf_files": 2,
        "needs": 4,
        "resolved": 3,
    }
    assert linkage["missing"] == [
        {
            "file": "engine_demo/libengine.so",
            "path": f"{site}/engine_demo/libengine.so",
            "distribution": "engine-demo",
            "version": "0.3.12.post1",
            "soname": "libvllm_musa_absent.so.7",
            "searched": [
                "LD_LIBRARY_PATH /opt/vllm-musa-none",
                f"RUNPATH $ORIGIN ({site}/engine_demo)",
                "the ld.so cache",
                *system,
            ],
            "elsewhere": [],
        }
    ]
    m = manifest(tmp_path, MANIFEST)
    assert linkage_problems(facts, m)[0] == [
        f"engine_demo/libengine.so (engine-demo 0.3.12.post1): needs libvllm_musa_absent.so.7, "
        f"which the image does not have (searched: LD_LIBRARY_PATH /opt/vllm-musa-none, RUNPATH "
        f"$ORIGIN ({site}/engine_demo), the ld.so cache, {', '.join(system)}); no runtime "
        "package is known to give it: find one with `apt-file search libvllm_musa_absent.so.7` "
        "on the target distribution; add one to runtime.apt_packages, or declare it under "
        "runtime.host_libraries if the host provides it at run time"
    ]
