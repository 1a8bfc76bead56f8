"""Hostile manifests: each is refused with ``error[manifest]`` (exit 2), naming the file and line,
in bounded time and memory.

Every case is run through ``build_image.main`` (``lock``, or ``render``) in one child process
whose address space is capped at its size after start-up plus ``HEADROOM``, the cases one after
the other: a regression that expands an alias bomb or enumerates 10**8 platform tags dies of
MemoryError there and fails its test (and those after it) instead of eating the machine. The
child's ``timeout`` is a guard that fails the tests if it hangs, not a time assertion.
"""

from __future__ import annotations

import codecs
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.errors import ManifestError
from manifest import load_manifest, parse_manifest
from manifest.reader import (
    MAX_DEPTH,
    MAX_KEY_CHARS,
    MAX_MANIFEST_BYTES,
    MAX_NODES,
    MAX_NUMBER_CHARS,
    MAX_SCALAR_CHARS,
)

REPO = Path(__file__).resolve().parents[2]
HEADROOM = 100 * 1024 * 1024  # bytes of address space over the interpreter's, once started
GUARD_SECONDS = 120  # for all the cases together; only a hang reaches it

# render needs the stack's lock; this one is committed
DEMO = REPO / "stack" / "demo-v028.yaml"
DEMO_LOCK = REPO / "stack" / "demo-v028.lock"

# argv[1]: the headroom; argv[2]: a JSON list of {"id", "argv"}. One JSON line out per run.
_CHILD = textwrap.dedent(
    """
    import io, json, resource, sys
    import build_image
    # what the commands import before they read the manifest, loaded before the cap
    import images.builder.context, images.builder.overrides, resolver.lock, resolver.lockfile
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
    cap = size + int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    with open(sys.argv[2]) as f:
        runs = json.load(f)
    for run in runs:
        out, err = io.StringIO(), io.StringIO()
        code = build_image.main(run["argv"], out=out, err=err)
        result = {"id": run["id"], "code": code, "out": out.getvalue()[:200], "err": err.getvalue()}
        print(json.dumps(result), flush=True)
    """
)

# seven lines: what a case appends starts at line 8
BASE = """\
schema: 1
name: t
release: "0.28.0"
target: {python: "3.12", arch: x86_64, glibc: "2.35"}
indexes:
  pypi: {url: "https://pypi.org/simple/"}
default_index: pypi
"""


def billion_laughs() -> str:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]")
    return BASE + "\n".join(lines) + "\n"


# (id, manifest text, the rest of the error line after the path)
CASES: list[tuple[str, str, str]] = [
    # YAML structure a stack manifest has no use for
    ("alias-bomb", billion_laughs(), ":8: a: a YAML anchor (&a) is not allowed"),
    ("alias", BASE.replace('"0.28.0"', "*r"), ":3: release: a YAML alias (*r) is not allowed"),
    (
        "merge-key",
        BASE.replace("target: {", "target: {<<: {arch: x86_64}, "),
        ":4: target: a YAML merge key (<<) is not allowed",
    ),
    (
        "python-object-tag",
        BASE + "x: !!python/object/apply:os.system [echo hi]\n",
        ":8: x: a YAML tag (tag:yaml.org,2002:python/object/apply:os.system) is not allowed",
    ),
    ("binary-tag", BASE + "x: !!binary aGk=\n", ":8: x: a YAML tag (tag:yaml.org,2002:binary) is not allowed"),
    ("set-tag", BASE + "x: !!set {a, b}\n", ":8: x: a YAML tag (tag:yaml.org,2002:set) is not allowed"),
    ("local-tag", BASE.replace('name: t', 'name: !t t'), ":2: name: a YAML tag (!t) is not allowed"),
    ("str-tag", BASE.replace('"3.12"', "!!str 3.12"), ":4: target.python: a YAML tag (tag:yaml.org,2002:str) is not allowed"),
    (
        "tag-handle",
        "%TAG !e! tag:yaml.org,2002:python/\n---\n" + BASE + "x: !e!object:os.system x\n",
        ":10: x: a YAML tag (tag:yaml.org,2002:python/object:os.system) is not allowed",
    ),
    ("second-document", BASE + "---\n" + BASE, ":8: a second YAML document; a manifest is one document"),
    # keys
    ("sequence-key", BASE + "? [a, b]\n: 1\n", ":8: (top level): a mapping key is a list; keys are plain strings"),
    ("mapping-key", BASE + "indexes2:\n  {a: 1}: 1\n", ":9: indexes2: a mapping key is a mapping; keys are plain strings"),
    ("nested-key", BASE + "? " + "[" * 100_000 + "\n", ":8: (top level): a mapping key is a list; keys are plain strings"),
    (
        "long-key",
        BASE + "? " + "k" * 100_000 + "\n: 1\n",
        f":8: (top level): a key of 100000 characters (at most {MAX_KEY_CHARS})",
    ),
    (
        "escape-in-key",
        BASE + 'packages: {"\\e[2Jtorch": 1}\n',
        ":8: packages: a key holds the character U+001B",
    ),
    # depth and size
    (
        "deep-flow",
        BASE + "x: " + "[" * 100_000 + "\n",
        ":8: x" + ".0" * (MAX_DEPTH - 1) + f": nested more than {MAX_DEPTH} levels deep",
    ),
    (
        "deep-flow-mapping",
        BASE + "x: " + "{a: " * 50_000 + "\n",
        ":8: x" + ".a" * (MAX_DEPTH - 1) + f": nested more than {MAX_DEPTH} levels deep",
    ),
    (
        "deep-block",
        BASE + "".join(f"{' ' * i}k{i}:\n" for i in range(200)),
        ":40: " + ".".join(f"k{i}" for i in range(MAX_DEPTH)) + f": nested more than {MAX_DEPTH} levels deep",
    ),
    (
        "many-items",
        BASE + "requirements:\n" + "- a\n" * 50_000,
        # BASE is 23 values, requirements and its list two more
        f":{9 + MAX_NODES - 25}: requirements.{MAX_NODES - 25}: more than {MAX_NODES} values; the manifest is too large",
    ),
    (
        "many-items-in-a-flow-list",
        BASE + "requirements: [" + "a," * 50_000 + "]\n",
        f":8: requirements.{MAX_NODES - 25}: more than {MAX_NODES} values; the manifest is too large",
    ),
    (
        "long-value",
        BASE.replace('"0.28.0"', '"' + "0" * 200_000 + '"'),
        f":3: release: a value of 200000 characters (at most {MAX_SCALAR_CHARS})",
    ),
    # numbers
    (
        "huge-int",
        BASE.replace("schema: 1", "schema: " + "9" * 100_000),
        f":1: schema: a value of 100000 characters (at most {MAX_SCALAR_CHARS})",
    ),
    (
        "long-int",
        BASE.replace("schema: 1", "schema: " + "9" * 4000),
        f":1: schema: a number of 4000 characters (at most {MAX_NUMBER_CHARS})",
    ),
    (
        "binary-int",
        BASE.replace("schema: 1", "schema: 0b" + "1" * 4000),
        f":1: schema: a number of 4002 characters (at most {MAX_NUMBER_CHARS})",
    ),
    (
        "sexagesimal-int",
        BASE.replace("schema: 1", "schema: 1" + ":59" * 1300),
        f":1: schema: a number of 3901 characters (at most {MAX_NUMBER_CHARS})",
    ),
    ("invalid-date", BASE.replace('"0.28.0"', "2024-13-45"), ":3: release: '2024-13-45' reads as a YAML date but is not a valid one"),
    ("empty-binary-int", BASE.replace("schema: 1", "schema: 0b_"), ":1: schema: '0b_' reads as a YAML integer but is not a valid one"),
    ("empty-hex-int", BASE.replace("schema: 1", "schema: -0x_"), ":1: schema: '-0x_' reads as a YAML integer but is not a valid one"),
    # characters
    ("nul-escape", BASE.replace('"0.28.0"', '"0.28.0\\0"'), ":3: release: a value holds the character U+0000"),
    ("bidi-override", BASE.replace("name: t", 'name: "t\\u202e"'), ":2: name: a value holds the character U+202E"),
    ("lone-surrogate", BASE.replace("name: t", 'name: "t\\ud800"'), ":2: name: a value holds the character U+D800"),
    ("raw-nul", BASE + "# \x00\n", ":8: the character U+0000 is not allowed in YAML"),
    ("raw-escape", BASE + "# \x1b[2J\n", ":8: the character U+001B is not allowed in YAML"),
    # the target
    ("glibc-2.99999999", BASE.replace('"2.35"', '"2.99999999"'), ":4: target.glibc: glibc 2.99999999 is not supported on x86_64"),
    ("glibc-2.100", BASE.replace('"2.35"', '"2.100"'), ":4: target.glibc: glibc 2.100 is not supported on x86_64"),
    ("glibc-2.4", BASE.replace('"2.35"', '"2.4"'), ":4: target.glibc: glibc 2.4 is not supported on x86_64"),
    ("glibc-3.0", BASE.replace('"2.35"', '"3.0"'), ":4: target.glibc: '3.0' is not a 2.Y version like \"2.35\""),
    ("glibc-leading-zero", BASE.replace('"2.35"', '"2.035"'), ":4: target.glibc: '2.035' has a leading zero"),
    (
        "aarch64-glibc-2.12",
        BASE.replace('arch: x86_64, glibc: "2.35"', 'arch: aarch64, glibc: "2.12"'),
        ":4: target.glibc: glibc 2.12 is not supported on aarch64",
    ),
    ("python-3.99", BASE.replace('"3.12"', '"3.99"'), ":4: target.python: CPython 3.99 is not supported"),
    ("python-3.1", BASE.replace('"3.12"', '"3.1"'), ":4: target.python: CPython 3.1 is not supported"),
    ("python-3.012", BASE.replace('"3.12"', '"3.012"'), ":4: target.python: '3.012' has a leading zero"),
    ("python-huge", BASE.replace('"3.12"', '"3.' + "9" * 4000 + '"'), ":4: target.python: CPython 3." + "9" * 4000 + " is not supported"),
    ("python-arabic-digits", BASE.replace('"3.12"', '"3.\u0661\u0662"'), ":4: target.python: '3.\u0661\u0662' is not a 3.Y version like \"3.12\""),
    ("python-3.13t", BASE.replace('"3.12"', '"3.13t"'), ":4: target.python: '3.13t' is not a 3.Y version like \"3.12\""),
    ("python-newline", BASE.replace('"3.12"', '"3.12\\n"'), ":4: target.python: a value holds the character U+000A"),
    (
        "python-block-newline",
        BASE.replace(
            'target: {python: "3.12", arch: x86_64, glibc: "2.35"}\n',
            'target:\n  python: |\n    3.12\n  arch: x86_64\n  glibc: "2.35"\n',
        ),
        ":5: target.python: a value holds the character U+000A",
    ),
    ("arch-newline", BASE.replace("arch: x86_64", 'arch: "x86_64\\n"'), ":4: target.arch: a value holds the character U+000A"),
    # the shape of the document
    ("empty", "", ": (top level): must be a mapping, got nothing (null)"),
    ("only-comments", "# " + "x" * (MAX_MANIFEST_BYTES - 3) + "\n", ": (top level): must be a mapping, got nothing (null)"),
    ("null-key", BASE + "~: 1\n", ": (top level): keys must be strings, got nothing (null)"),
    ("top-level-list", "- 1\n", ": (top level): must be a mapping, got a list"),
    ("unclosed-flow", BASE + "x: [1\n", ":9: not valid YAML: while parsing a flow sequence, expected ',' or ']', but got '<stream end>'"),
]  # fmt: skip


def _padded_demo() -> str:
    text = DEMO.read_text(encoding="utf-8")
    line = "# " + "x" * 77 + "\n"
    return text + line * ((MAX_MANIFEST_BYTES - len(text)) // len(line))


# (id, file content, the rest of the error line after the path, the hint line)
MILLION_ITEMS = (BASE + "requirements: [" + "a," * 1_000_000 + "]\n").encode()
FILE_CASES: list[tuple[str, bytes, str, str]] = [
    (
        "million-item-list",
        MILLION_ITEMS,
        f": the manifest is {len(MILLION_ITEMS)} bytes; at most {MAX_MANIFEST_BYTES} (256 KiB) are read",
        "a stack manifest is a few KB: is this the right file?",
    ),
    (
        "one-byte-over-the-size-cap",
        (BASE + "#" * (MAX_MANIFEST_BYTES - len(BASE)) + "\n").encode(),
        f": the manifest is {MAX_MANIFEST_BYTES + 1} bytes; at most {MAX_MANIFEST_BYTES} (256 KiB) are read",
        "a stack manifest is a few KB: is this the right file?",
    ),
    ("invalid-byte", BASE.encode() + b"# \xff\n", ":8: not UTF-8 text (the byte 0xff)", "save the manifest as UTF-8"),
    (
        "utf-16",
        codecs.BOM_UTF16_LE + BASE.encode("utf-16-le"),
        ":1: not UTF-8 text (the byte 0xff)",
        "save the manifest as UTF-8 (this file is UTF-16)",
    ),
    ("latin-1", (BASE + "# caf\xe9\n").encode("latin-1"), ":8: not UTF-8 text (the byte 0xe9)", "save the manifest as UTF-8"),
]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Run:
    path: Path
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Mapping[str, Run | str]:
    """Every case, run in turn in the capped child: id -> its run, or why there is none."""
    d = tmp_path_factory.mktemp("hostile")
    paths: dict[str, Path] = {}
    runs: list[dict[str, object]] = []

    def add(name: str, path: Path, *argv: str) -> None:
        paths[name] = path
        runs.append({"id": name, "argv": [argv[0], str(path), *argv[1:]]})

    for name, text, _ in CASES:
        (d / f"{name}.yaml").write_text(text, encoding="utf-8")
        add(name, d / f"{name}.yaml", "lock")
    for name, content, _, _ in FILE_CASES:
        (d / f"{name}.yaml").write_bytes(content)
        add(name, d / f"{name}.yaml", "lock")
    (d / "render-bomb.yaml").write_text(billion_laughs(), encoding="utf-8")
    add("render-bomb", d / "render-bomb.yaml", "render")
    with (d / "50-mb.yaml").open("wb") as f:  # sparse: 50 MB without writing them
        f.truncate(50 * 1024 * 1024)
    add("50-mb", d / "50-mb.yaml", "lock")
    os.mkfifo(d / "fifo.yaml")  # opening it would wait for a writer that never comes
    add("fifo", d / "fifo.yaml", "lock")
    (d / "a-directory.yaml").mkdir()
    add("directory", d / "a-directory.yaml", "lock")
    add("device", Path("/dev/zero"), "lock")
    # in a stack/ directory beside the product source's third_party/PINS, which render reads
    padded = d / "padded" / "stack" / "padded-demo.yaml"
    padded.parent.mkdir(parents=True)
    padded.write_text(_padded_demo(), encoding="utf-8")
    pins = d / "padded" / "demo" / "vllm-musa-v028" / "third_party" / "PINS"
    pins.parent.mkdir(parents=True)
    shutil.copyfile(REPO / "demo" / "vllm-musa-v028" / "third_party" / "PINS", pins)
    add("padded-demo", padded, "render", "--lock", str(DEMO_LOCK))
    (d / "runs.json").write_text(json.dumps(runs), encoding="utf-8")

    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(HEADROOM), str(d / "runs.json")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=GUARD_SECONDS,
        check=False,
    )
    results: dict[str, Run | str] = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        results[r["id"]] = Run(path=paths[r["id"]], code=r["code"], out=r["out"], err=r["err"])
    for run in runs:
        name = str(run["id"])
        if name not in results:
            results[name] = f"the capped child stopped before {name} finished:\n{proc.stderr}"
    return results


def refused(capped: Mapping[str, Run | str], name: str, message: str) -> str:
    """Assert the run of ``name`` exited 2 with this error line; return its hint line."""
    run = capped[name]
    if isinstance(run, str):
        pytest.fail(run)
    assert run.code == 2, run.err
    first, _, hint = run.err.partition("\n")
    assert first == f"error[manifest]: {run.path}{message}"
    return hint


@pytest.mark.parametrize(
    ("name", "message"), [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES]
)
def test_hostile_manifest_is_refused_within_the_cap(
    capped: Mapping[str, Run | str], name: str, message: str
) -> None:
    refused(capped, name, message)


@pytest.mark.parametrize(
    ("name", "message", "hint"),
    [(c[0], c[2], c[3]) for c in FILE_CASES],
    ids=[c[0] for c in FILE_CASES],
)
def test_a_file_too_large_or_not_utf8_is_refused(
    capped: Mapping[str, Run | str], name: str, message: str, hint: str
) -> None:
    assert refused(capped, name, message) == f"hint: {hint}\n"


def test_render_refuses_an_alias_bomb_within_the_cap(capped: Mapping[str, Run | str]) -> None:
    refused(capped, "render-bomb", ":8: a: a YAML anchor (&a) is not allowed")


def test_a_50_mb_manifest_is_refused_before_it_is_read(capped: Mapping[str, Run | str]) -> None:
    hint = refused(
        capped,
        "50-mb",
        f": the manifest is 52428800 bytes; at most {MAX_MANIFEST_BYTES} (256 KiB) are read",
    )
    assert hint == "hint: a stack manifest is a few KB: is this the right file?\n"


@pytest.mark.parametrize("name", ["fifo", "directory", "device"])
def test_what_is_not_a_regular_file_is_refused(capped: Mapping[str, Run | str], name: str) -> None:
    refused(capped, name, ": not a regular file")


def test_a_real_stack_padded_to_the_size_cap_renders_within_the_cap(
    capped: Mapping[str, Run | str],
) -> None:
    # the cap leaves room for a manifest at the size bound: it fails a regression, not this
    run = capped["padded-demo"]
    if isinstance(run, str):
        pytest.fail(run)
    assert run.code == 0, run.err
    assert run.out.startswith("# Rendered by `build_image.py render` from the stack manifest")


# in process: what the reader accepts of the same shapes


def test_a_utf8_bom_is_read_as_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_bytes(codecs.BOM_UTF8 + BASE.encode())
    plain = parse_manifest(BASE, path=path)
    assert load_manifest(path).lock_inputs_sha256 == plain.lock_inputs_sha256


def test_crlf_and_cr_line_ends_read_as_newlines() -> None:
    for end in ("\r\n", "\r"):
        m = parse_manifest(BASE.replace("\n", end), path=Path("s.yaml"))
        assert m.target.glibc == (2, 35)


def test_an_explicit_document_start_and_end_are_one_document() -> None:
    m = parse_manifest("%YAML 1.1\n---\n" + BASE + "...\n", path=Path("s.yaml"))
    assert m.target.python == (3, 12)


def test_the_bounds_leave_room_for_real_values() -> None:
    nested = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    text = BASE.replace("name: t", "name: " + "t" * MAX_SCALAR_CHARS) + nested
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, path=Path("s.yaml"))
    # the depth, the length and the node count all pass: the first refusal is the unknown key
    assert info.value.message == "s.yaml:8: x: unknown key"


@pytest.mark.parametrize(
    ("python", "glibc", "arch"),
    [("3.8", "2.5", "x86_64"), ("3.14", "2.99", "x86_64"), ("3.10", "2.17", "aarch64")],
)
def test_the_ends_of_the_supported_targets_parse(python: str, glibc: str, arch: str) -> None:
    text = BASE.replace(
        '{python: "3.12", arch: x86_64, glibc: "2.35"}',
        f'{{python: "{python}", arch: {arch}, glibc: "{glibc}"}}',
    )
    target = parse_manifest(text, path=Path("s.yaml")).target
    assert (target.python_str, target.arch, f"{target.glibc[0]}.{target.glibc[1]}") == (
        python,
        arch,
        glibc,
    )
