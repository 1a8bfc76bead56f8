"""The linkage gate (images/builder/linkage_gate.py), judged purely from the probe's facts:
each missing library named with its file, distribution, what was searched and the packages
that give it; a library the manifest declares as the host's passes and is listed.
tests/images/builder/test_linkage_probe.py gathers the facts from real files."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from images.builder.gates import GATE_NAMES, evaluate_gates, probe_facts
from images.builder.linkage_gate import LINKAGE_PROBE, linkage_probe_args, linkage_problems
from manifest import Manifest
from tests.images.builder.test_gates import GOOD
from tests.support.images import MANIFEST, lock_for, manifest

SITE = "/usr/local/lib/python3.10/dist-packages"
SEARCHED = [
    f"RUNPATH $ORIGIN ({SITE}/mooncake)",
    "LD_LIBRARY_PATH /usr/local/musa/lib",
    "the ld.so cache",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib",
    "/usr/lib",
]
MUSA = "the MUSA driver's library: the mthreads container runtime injects it from the host"
HOST = f'runtime:\n  host_libraries:\n    libmusa.so.1: "{MUSA}"\n'


def _missing(soname: str, file: str = "mooncake/engine.so", **extra: Any) -> dict[str, Any]:
    return {
        "file": file,
        "path": f"{SITE}/{file}",
        "distribution": "mooncake-transfer-engine-musa",
        "version": "0.3.12.post1",
        "soname": soname,
        "searched": SEARCHED,
        "elsewhere": [],
        **extra,
    }


def _facts(*missing: dict[str, Any], **changes: Any) -> dict[str, Any]:
    linkage = {
        "distributions": 120,
        "elf_files": 3,
        "other_machine": 0,
        "needs": 9,
        "resolved": 9 - len(missing),
        "missing": list(missing),
        "missing_total": len(missing),
        "host_provided": {},
        "malformed": [],
        "malformed_total": 0,
        "unlisted": [],
        **changes,
    }
    return {"linkage": linkage}


@pytest.fixture
def plain(tmp_path: Path) -> Manifest:
    return manifest(tmp_path, MANIFEST)


@pytest.fixture
def hosted(tmp_path: Path) -> Manifest:
    return manifest(tmp_path, MANIFEST + HOST)


CURL_LINE = (
    "mooncake/engine.so (mooncake-transfer-engine-musa 0.3.12.post1): needs libcurl.so.4, which "
    f"the image does not have (searched: RUNPATH $ORIGIN ({SITE}/mooncake), LD_LIBRARY_PATH "
    "/usr/local/musa/lib, the ld.so cache, /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, "
    "/lib, /usr/lib); runtime packages that give it: libcurl4 (Debian/Ubuntu); add one to "
    "runtime.apt_packages, or declare it under runtime.host_libraries if the host provides it at "
    "run time"
)


def test_a_missing_library_is_named_with_its_file_distribution_search_and_packages(
    plain: Manifest,
) -> None:
    problems, _ = linkage_problems(_facts(_missing("libcurl.so.4")), plain)
    assert problems == [CURL_LINE]


def test_the_packages_of_other_well_known_libraries(plain: Manifest) -> None:
    facts = _facts(_missing("libnuma.so.1"), _missing("libmlx5.so.1"), _missing("libmusart.so.5"))
    tails = [line.split("); ", 1)[1] for line in linkage_problems(facts, plain)[0]]
    declare = (
        "add one to runtime.apt_packages, or declare it under runtime.host_libraries if the "
        "host provides it at run time"
    )
    assert tails == [
        f"runtime packages that give it: libnuma1 (Debian/Ubuntu); {declare}",
        f"runtime packages that give it: ibverbs-providers (Debian/Ubuntu); {declare}",
        "runtime packages that give it: musa-musart-5-2 (the MUSA SDK's apt repository, in one "
        "transaction with the rest of the SDK; the musa-sdk base image has it under "
        f"/usr/local/musa/lib); {declare}",
    ]


def test_an_unknown_library_says_how_to_find_its_package(plain: Manifest) -> None:
    problems, _ = linkage_problems(_facts(_missing("libfoo_vendor.so.3")), plain)
    assert problems[0].split("); ", 1)[1] == (
        "no runtime package is known to give it: find one with `apt-file search "
        "libfoo_vendor.so.3` on the target distribution; add one to runtime.apt_packages, or "
        "declare it under runtime.host_libraries if the host provides it at run time"
    )


def test_the_driver_library_undeclared_is_refused_saying_it_is_the_hosts(plain: Manifest) -> None:
    problems, _ = linkage_problems(_facts(_missing("libmusa.so.1", "torch_musa/lib/a.so")), plain)
    assert problems == [
        "torch_musa/lib/a.so (mooncake-transfer-engine-musa 0.3.12.post1): needs libmusa.so.1, "
        f"which the image does not have (searched: {', '.join(SEARCHED)}); it is {MUSA}: "
        "declare it under runtime.host_libraries"
    ]


def test_a_declared_host_library_passes_and_is_listed(hosted: Manifest) -> None:
    host = {"libmusa.so.1": {"needs": 4, "files": ["a.so", "b.so", "c.so"]}}
    facts = _facts(host_provided=host, resolved=5)
    assert linkage_problems(facts, hosted) == (
        [],
        "3 ELF files of 120 distributions read: ld.so finds 5 of their 9 needed libraries, the "
        "host provides 4\n"
        f"host-provided (runtime.host_libraries): libmusa.so.1, needed by 4 files (a.so, b.so, "
        f"c.so, ...): {MUSA}",
    )


def test_a_declared_host_library_the_probe_was_not_told_of_passes_too(hosted: Manifest) -> None:
    facts = _facts(_missing("libmusa.so.1", "torch_musa/lib/a.so"), _missing("libcurl.so.4"))
    problems, ok = linkage_problems(facts, hosted)
    assert problems == [CURL_LINE]
    assert ok.splitlines()[1] == (
        f"host-provided (runtime.host_libraries): libmusa.so.1, needed by 1 file "
        f"(torch_musa/lib/a.so): {MUSA}"
    )


def test_a_host_library_the_manifest_does_not_declare_fails(plain: Manifest) -> None:
    host = {"libmusa.so.1": {"needs": 4, "files": ["a.so", "b.so", "c.so"]}}
    assert linkage_problems(_facts(host_provided=host, resolved=5), plain)[0] == [
        "a.so, b.so, c.so, ...: 4 needs on libmusa.so.1, which the image does not have, and "
        f"runtime.host_libraries does not declare it; it is {MUSA}: declare it under "
        "runtime.host_libraries"
    ]


def test_a_clean_image_lists_what_it_read(hosted: Manifest) -> None:
    facts = _facts(other_machine=2, unlisted=["python3-apt 2.6.0"], elf_files=1, needs=1)
    facts["linkage"]["resolved"] = 1
    assert linkage_problems(facts, hosted) == (
        [],
        "1 ELF file of 120 distributions read: ld.so finds 1 of their 1 needed library\n"
        f"host-provided (runtime.host_libraries): libmusa.so.1, needed by none: {MUSA}\n"
        "2 ELF files for another machine or class, which ld.so does not load here: not read "
        "further\n"
        "not read (no RECORD lists their files): python3-apt 2.6.0",
    )


def test_a_need_found_once_another_distributions_library_is_loaded_passes_listed(
    plain: Manifest,
) -> None:
    provider = f"{SITE}/tvm_ffi/lib/libtvm_ffi.so (apache-tvm-ffi 0.1.15.post2)"
    first = {
        "file": "xgrammar/libxgrammar_bindings.so",
        "path": f"{SITE}/xgrammar/libxgrammar_bindings.so",
        "distribution": "xgrammar",
        "version": "0.2.9",
        "soname": "libtvm_ffi.so",
        "provider": provider,
    }
    facts = _facts(loaded_first=[first] * 11, loaded_first_total=12, resolved=8)
    problems, ok = linkage_problems(facts, plain)
    assert problems == []
    assert ok.splitlines()[:2] == [
        "3 ELF files of 120 distributions read: ld.so finds 8 of their 9 needed libraries, 12 "
        "once another distribution's library is loaded",
        "found once loaded first: xgrammar/libxgrammar_bindings.so (xgrammar 0.2.9) needs "
        f"libtvm_ffi.so, which {provider} has as its soname; ld.so takes a loaded library of "
        "that soname (the provider's package must be imported first)",
    ]
    assert ok.splitlines()[11:] == ["and 2 more needs found once loaded first"]


def test_a_library_of_that_name_elsewhere_in_the_image_is_named(plain: Manifest) -> None:
    elsewhere = [f"{SITE}/mooncake.libs/libcurl.so.4 (mooncake-transfer-engine-musa 0.3.12.post1)"]
    problems, _ = linkage_problems(_facts(_missing("libcurl.so.4", elsewhere=elsewhere)), plain)
    assert problems[0].split("); ", 1)[1].split("; runtime packages")[0] == (
        f"the image has that name at {elsewhere[0]}, where ld.so does not look for this file"
    )


def test_what_the_probe_left_off_and_unreadable_files_are_counted(plain: Manifest) -> None:
    facts = _facts(
        _missing("libcurl.so.4"),
        missing_total=204,
        malformed=[
            {
                "file": "torch/lib/libcut.so",
                "path": f"{SITE}/torch/lib/libcut.so",
                "distribution": "torch",
                "version": "2.11.0",
                "error": "program header 0 at offset 64 (56 bytes) is past the end (100 bytes)",
            }
        ],
        malformed_total=3,
    )
    assert linkage_problems(facts, plain)[0] == [
        CURL_LINE,
        "and 203 more needs the image does not have (the probe lists the first 1)",
        "torch/lib/libcut.so (torch 2.11.0): cannot be read as an ELF file (program header 0 at "
        "offset 64 (56 bytes) is past the end (100 bytes)), so what it needs is unknown; "
        "reinstall its distribution from an undamaged wheel",
        "and 2 more files that cannot be read as ELF files",
    ]


def test_not_probed_and_an_unreadable_interpreter_fail(plain: Manifest) -> None:
    assert linkage_problems({}, plain) == (
        ["the linkage of the installed ELF files was not probed"],
        "",
    )
    error = "cannot read the interpreter /usr/bin/python3.11: not a little-endian ELF file"
    assert linkage_problems({"linkage": {"error": error}}, plain) == (
        [f"the linkage probe could not read the image: {error}"],
        "",
    )


def test_the_gate_runs_after_libraries_in_every_evaluation(tmp_path: Path) -> None:
    assert GATE_NAMES[GATE_NAMES.index("libraries") + 1] == "linkage"
    m = manifest(tmp_path, MANIFEST)
    facts = copy.deepcopy(GOOD)
    facts.update(_facts(_missing("libcurl.so.4")))
    results = {r.name: r for r in evaluate_gates(facts, m, lock_for(m))}
    assert (results["linkage"].ok, results["linkage"].output) == (False, CURL_LINE)


def test_the_probe_is_told_the_host_libraries(hosted: Manifest, plain: Manifest) -> None:
    assert linkage_probe_args(hosted) == ["--host-library=libmusa.so.1"]
    assert linkage_probe_args(plain) == []


class Runner:
    """Answers each probe with its facts; records what it was asked to run."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    def run_python(self, image: str, python: str, script: str, args: Sequence[str]) -> str:
        self.calls.append((script, list(args)))
        if script == LINKAGE_PROBE.read_text(encoding="utf-8"):
            return json.dumps(_facts(_missing("libcurl.so.4"))) + "\n"
        return json.dumps({"python": [3, 11, 2]}) + "\n"


def test_probe_facts_runs_the_linkage_probe_with_the_host_libraries(hosted: Manifest) -> None:
    runner = Runner()
    facts = probe_facts(runner, "img", hosted)
    assert facts["linkage"] == _facts(_missing("libcurl.so.4"))["linkage"]
    assert facts["python"] == [3, 11, 2]
    assert (LINKAGE_PROBE.read_text(encoding="utf-8"), ["--host-library=libmusa.so.1"]) in (
        runner.calls
    )
