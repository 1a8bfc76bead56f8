"""The manifest's exact versions against its sources' requirements files: the pure check
(``sources.contradictions``), on manifests parsed from text and lines read from files."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from core.errors import ResolutionError
from manifest import Manifest, parse_manifest
from resolver.target import marker_environment
from sources.contradictions import (
    SourceLine,
    check_contradictions,
    exact_of,
    exact_versions,
    find_contradictions,
    source_lines,
)
from sources.requirements_files import FileRequirement, ReadFile, read_requirements
from tests.support.upstream_requirements import override_versions

PATH = Path("stack/t.yaml")


def manifest(body: str) -> Manifest:
    """A manifest whose line 9 is the first line of ``body``."""
    head = (
        "schema: 1\n"  # 1
        "name: t\n"  # 2
        'release: "0.28.0"\n'  # 3
        'target: {python: "3.12", arch: x86_64, glibc: "2.35"}\n'  # 4
        "indexes:\n"  # 5
        '  mthreads: {url: "https://vendor.example/simple/"}\n'  # 6
        '  pypi: {url: "https://pypi.example/simple/"}\n'  # 7
        "default_index: pypi\n"  # 8
    )
    return parse_manifest(head + body, path=PATH)


def env(m: Manifest) -> dict[str, str]:
    return marker_environment(m.target)


def reader(files: Mapping[str, str]) -> ReadFile:
    def read(path: str) -> bytes | None:
        text = files.get(path)
        return None if text is None else text.encode()

    return read


def lines(
    files: Mapping[str, str], listed: str = "requirements/musa.txt", source: str = "vllm-musa"
) -> tuple[SourceLine, ...]:
    got = read_requirements(reader(files), [listed], where=f"sources.{source}")
    return source_lines(source, got.requirements)


UPSTREAM = {
    "requirements/musa.txt": "# Common dependencies\n-r common.txt\n-r musa_private.txt\n",
    "requirements/common.txt": (
        "# Runtime Python dependencies that are portable across MUSA images.\n"
        "torchada==0.1.81\n"
        "mthreads-ml-py>=2.4.1\n"
        "numpy==1.26\n"
        "transformers==5.5.3\n"
    ),
    "requirements/musa_private.txt": "torch==2.11.0.post2+musa5.2.0\ntorch_musa==2.11.0.post2\n",
}

PINS = (
    "packages:\n"  # 9
    '  torch: {version: "2.11.0.post2+musa5.2.0", index: mthreads, wheel: native}\n'  # 10
    '  torch-musa: {version: "2.11.0.post2+musa5.2.0", index: mthreads, wheel: native}\n'  # 11
    '  torchada: {version: "0.1.95", index: pypi, wheel: pure, deps: false}\n'  # 12
    "requirements:\n"  # 13
    "  - pip==26.3\n"  # 14
    "  - numpy==1.26.4\n"  # 15
    "  - transformers==5.5.3\n"  # 16
    "  - mthreads-ml-py>=2.4.1\n"  # 17
)


# ----------------------------------------------------------------------------- exact versions


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("numpy==1.26.4", "1.26.4"),
        ("numpy===1.26.4", "1.26.4"),
        ("torch==2.11.0.post2+musa5.2.0", "2.11.0.post2+musa5.2.0"),
        ("numpy>=1.26,==1.26.4", "1.26.4"),
        ("numpy==1.26.*", None),  # a line, not a version
        ("numpy>=1.26", None),
        ("numpy", None),
        ("numpy===not-pep-440", None),
    ],
)
def test_exact_of(text: str, version: str | None) -> None:
    got = exact_of(Requirement(text))
    assert (str(got) if got is not None else None) == version


def test_exact_versions_name_the_key_path_and_the_manifest_line() -> None:
    m = manifest(
        PINS
        + "build:\n"  # 18
        + '  requirements: ["setuptools==80.10.2", "wheel", "cython==3.1; python_version < \'3.12\'"]\n'  # 19
    )
    got = [(e.where, e.dotted, e.text, str(e.version)) for e in exact_versions(m, env(m))]
    assert got == [
        ("stack/t.yaml:10", "packages.torch.version", "torch 2.11.0.post2+musa5.2.0", "2.11.0.post2+musa5.2.0"),
        ("stack/t.yaml:11", "packages.torch-musa.version", "torch-musa 2.11.0.post2+musa5.2.0", "2.11.0.post2+musa5.2.0"),
        ("stack/t.yaml:12", "packages.torchada.version", "torchada 0.1.95", "0.1.95"),
        ("stack/t.yaml:14", "requirements.0", "pip==26.3", "26.3"),
        ("stack/t.yaml:15", "requirements.1", "numpy==1.26.4", "1.26.4"),
        ("stack/t.yaml:16", "requirements.2", "transformers==5.5.3", "5.5.3"),
        # a range asks for no one version; a marker that excludes the target, for nothing
        ("stack/t.yaml:19", "build.requirements.0", "setuptools==80.10.2", "80.10.2"),
    ]  # fmt: skip


def test_an_overridden_name_asks_for_nothing_here() -> None:
    m = manifest(
        PINS.replace("  - numpy==1.26.4\n", "")
        + "overrides:\n"
        + '  numpy: {version: "1.26.4", reason: "the 1.26 line"}\n'
        + '  torchada: {version: "0.1.95", reason: "newer"}\n'
        + "build:\n"
        + '  requirements: ["numpy==1.26.4"]\n'
    )
    names = [e.name for e in exact_versions(m, env(m))]
    assert "numpy" not in names  # neither the override nor build.requirements.0
    assert "torchada" not in names  # a pin whose departure is declared
    assert [(e.dotted, e.where) for e in override_versions(m)] == [
        ("overrides.numpy.version", "stack/t.yaml:18"),
        ("overrides.torchada.version", "stack/t.yaml:19"),
    ]


def test_the_mooncake_pin_is_named_by_its_own_key_path() -> None:
    m = manifest(
        "components:\n"  # 9
        '  mooncake: {enabled: true, version: "0.3.13", index: pypi}\n'  # 10
    )
    (e,) = exact_versions(m, env(m))
    assert (e.dotted, e.where, e.text) == (
        "components.mooncake.version",
        "stack/t.yaml:10",
        "mooncake-transfer-engine-musa 0.3.13",
    )


# ----------------------------------------------------------------------------- contradictions


def test_the_upstream_pins_contradict_the_stack_and_both_ends_are_named() -> None:
    m = manifest(PINS)
    found = find_contradictions(exact_versions(m, env(m)), lines(UPSTREAM), env(m))
    assert [c.message() for c in found] == [
        "stack/t.yaml:12: packages.torchada.version: torchada 0.1.95 is not allowed by "
        "sources.vllm-musa:requirements/common.txt:2 (included from requirements/musa.txt:2): "
        "torchada==0.1.81",
        "stack/t.yaml:15: requirements.1: numpy==1.26.4 is not allowed by "
        "sources.vllm-musa:requirements/common.txt:4 (included from requirements/musa.txt:2): "
        "numpy==1.26 (PEP 440: ==1.26 is 1.26.0 only, not the 1.26 line; that would be "
        "==1.26.*)",
    ]
    assert [c.hint() for c in found] == [
        "torchada: follow the file (change packages.torchada.version to a version "
        "`torchada==0.1.81` allows), or declare the departure with its reason: "
        'overrides.torchada: {version: "0.1.95", reason: "<why, citing '
        'requirements/common.txt>"} beside packages.torchada',
        "numpy: follow the file (change requirements.1 to a version `numpy==1.26` allows), or "
        'declare the departure with its reason: overrides.numpy: {version: "1.26.4", reason: '
        '"<why, citing requirements/common.txt>"} in place of requirements.1',
    ]


def test_check_refuses_with_every_contradiction_in_one_error() -> None:
    m = manifest(PINS)
    with pytest.raises(ResolutionError) as info:
        check_contradictions(m, lines(UPSTREAM), env(m))
    assert info.value.message.splitlines() == [
        c.message() for c in find_contradictions(exact_versions(m, env(m)), lines(UPSTREAM), env(m))
    ]
    assert info.value.hint is not None
    assert [h.split(":", 1)[0] for h in info.value.hint.splitlines()] == ["torchada", "numpy"]


def test_following_the_file_or_declaring_the_departure_settles_it() -> None:
    followed = manifest(
        PINS.replace('"0.1.95"', '"0.1.81"').replace("numpy==1.26.4", "numpy==1.26.0")
    )
    check_contradictions(followed, lines(UPSTREAM), env(followed))
    declared = manifest(
        PINS.replace("  - numpy==1.26.4\n", "")
        + "overrides:\n"
        + '  numpy: {version: "1.26.4", reason: "the 1.26 line (requirements/common.txt:4)"}\n'
        + '  torchada: {version: "0.1.95", reason: "newer (requirements/common.txt:2)"}\n'
    )
    check_contradictions(declared, lines(UPSTREAM), env(declared))
    # what each override departs from
    departs = find_contradictions(override_versions(declared), lines(UPSTREAM), env(declared))
    assert [(c.manifest.dotted, c.line.item.location) for c in departs] == [
        ("overrides.numpy.version", "requirements/common.txt:4"),
        ("overrides.torchada.version", "requirements/common.txt:2"),
    ]


@pytest.mark.parametrize(
    ("pinned", "line", "allowed"),
    [
        # PEP 440: a specifier without a local label matches every local label of its version
        ("2.11.0.post2+musa5.2.0", "torch==2.11.0.post2", True),
        ("2.11.0.post2+musa5.2.0", "torch==2.11.0.post2+musa5.2.0", True),
        # a specifier with one matches that label only: another SDK build is another version
        ("2.11.0.post2+musa5.2.0", "torch==2.11.0.post2+musa5.2.0s5000", False),
        ("2.11.0.post2+musa5.2.0s5000", "torch==2.11.0.post2+musa5.2.0", False),
        ("2.11.0.post2+musa5.2.0", "torch==2.11.0.post1", False),
        ("2.11.0.post2+musa5.2.0", "torch>=2.11,<2.12", True),
        ("2.11.0.post2+musa5.2.0", "torch!=2.11.0.post2", False),
        # the manifest chose a pre-release: a range allows it
        ("2.12.0rc1", "torch>=2.11", True),
        ("1.26.0", "torch==1.26", True),  # zero padding
        ("1.26.4", "torch==1.26.*", True),
        ("1.26.4", "torch==1.26", False),
        ("1.26.4", "torch", True),
    ],
)
def test_the_full_version_is_compared_as_pep_440_does(
    pinned: str, line: str, allowed: bool
) -> None:
    m = manifest(f'packages:\n  torch: {{version: "{pinned}", index: mthreads, wheel: native}}\n')
    found = find_contradictions(
        exact_versions(m, env(m)), lines({"r.txt": line + "\n"}, "r.txt"), env(m)
    )
    assert (not found) is allowed


def test_a_line_whose_marker_excludes_the_target_is_not_checked() -> None:
    m = manifest(PINS)  # CPython 3.12 on x86_64
    files = {
        "r.txt": "numpy==2.0; python_version < '3.12'\n"
        "numpy==1.26; platform_machine == 'aarch64'\n"
        "numpy>=2; python_version >= '3.12'\n"
    }
    found = find_contradictions(exact_versions(m, env(m)), lines(files, "r.txt"), env(m))
    assert [c.line.item.location for c in found] == ["r.txt:3"]


def test_names_are_compared_normalized_and_each_line_is_named_once() -> None:
    m = manifest('packages:\n  Torch_Musa: {version: "2.11.0", index: mthreads, wheel: native}\n')
    files = {
        "a.txt": "-r b.txt\ntorch.musa==2.9.1\n",
        "b.txt": "-r c.txt\n",
        "c.txt": "TORCH-MUSA==2.9.0  # an old line\n",
    }
    found = find_contradictions(exact_versions(m, env(m)), lines(files, "a.txt"), env(m))
    assert [c.message() for c in found] == [
        "stack/t.yaml:10: packages.Torch_Musa.version: Torch_Musa 2.11.0 is not allowed by "
        "sources.vllm-musa:c.txt:1 (included from b.txt:1 via a.txt:1): TORCH-MUSA==2.9.0",
        "stack/t.yaml:10: packages.Torch_Musa.version: Torch_Musa 2.11.0 is not allowed by "
        "sources.vllm-musa:a.txt:2: torch.musa==2.9.1",
    ]


def test_the_padding_note_is_only_for_a_shorter_plain_release() -> None:
    def note(pinned: str, line: str) -> str:
        m = manifest(f'packages:\n  numpy: {{version: "{pinned}", index: pypi, wheel: native}}\n')
        (c,) = find_contradictions(
            exact_versions(m, env(m)), lines({"r.txt": line + "\n"}, "r.txt"), env(m)
        )
        return c.message().split(": numpy", 2)[-1]

    assert note("1.26.4", "numpy==1.26") == (
        "==1.26 (PEP 440: ==1.26 is 1.26.0 only, not the 1.26 line; that would be ==1.26.*)"
    )
    assert note("2.0.1", "numpy==2") == (
        "==2 (PEP 440: ==2 is 2.0.0 only, not the 2 line; that would be ==2.*)"
    )
    assert note("1.26.4", "numpy==1.26.3") == "==1.26.3"
    assert note("1.27.1", "numpy==1.26") == "==1.26"
    assert note("1.26.4", "numpy==1.26rc1") == "==1.26rc1"
    assert note("1.26.4", "numpy>=2,==1.26") == ">=2,==1.26"


def test_a_file_requirement_keeps_its_text_and_its_include_chain() -> None:
    got = read_requirements(
        reader(
            {
                "musa.txt": "-r sub/common.txt\n",
                "sub/common.txt": "numpy \\\n  == 1.26   # the MUSA line\n",
            }
        ),
        ["musa.txt"],
        where="sources.s",
    )
    (item,) = got.requirements
    assert item == FileRequirement(
        requirement=item.requirement,
        file="sub/common.txt",
        line=1,
        text="numpy   == 1.26",
        via=("musa.txt:1",),
    )
    assert item.requirement.specifier.contains(Version("1.26.0"))
