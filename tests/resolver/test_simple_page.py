"""Index pages parse the same through the fast paths and through the full parsers: HTML
through html.parser, and a PEP 691 page read for a target (``json_for_target``, orjson) as
``json.loads`` of the whole page reads it (``parse_json_full``), or given up on."""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path
from urllib.parse import quote

import pytest

from manifest import Target
from resolver import search_record
from resolver.page_html import _AnchorParser, _scan_tags
from resolver.page_json import json_for_target, parse_json_full
from resolver.simple_page import (
    JSON_CONTENT_TYPE,
    ListedFile,
    PageParseError,
    parse_kept,
    parse_project_page,
)
from resolver.target import TargetTags

PAGE = """<!DOCTYPE html>
<html><head><base href="https://files.example/root/"><title>Links for torch</title></head>
<body>
<A HREF="torch-2.11.0.post2%2Bmusa5.2.0-cp312-cp312-linux_x86_64.whl#sha256=aa{pad}"
   data-requires-python="&gt;=3.9" data-core-metadata="sha256=bb{pad}">x</A><br/>
<a href='torch-2.9.1-cp312-cp312-linux_x86_64.whl' data-yanked>y</a>
<a href=torch-2.8.0.tar.gz data-yanked="broken &amp; gone">z</a>
<a data-dist-info-metadata=true href="torch-2.7.0-py3-none-any.whl">w</a>
</body></html>
""".replace("{pad}", "0" * 62)


def reference(text: str) -> tuple[str | None, list[dict[str, str | None]]]:
    parser = _AnchorParser()
    parser.feed(text)
    parser.close()
    return parser.base, parser.anchors


def test_fast_scanner_equals_html_parser() -> None:
    assert _scan_tags(PAGE) == reference(PAGE)


def test_page_with_comments_uses_the_real_parser() -> None:
    tricky = PAGE.replace("<body>", '<body><!-- <a href="ghost.whl"> -->')
    base, anchors = _scan_tags(tricky)
    assert (base, anchors) == reference(tricky)
    assert all(a.get("href") != "ghost.whl" for a in anchors)


def test_parsed_files() -> None:
    files = parse_project_page(PAGE.encode(), "text/html", "https://index.example/simple/torch/")
    first = files[0]
    assert first.filename == "torch-2.11.0.post2+musa5.2.0-cp312-cp312-linux_x86_64.whl"
    assert (
        first.url
        == "https://files.example/root/torch-2.11.0.post2%2Bmusa5.2.0-cp312-cp312-linux_x86_64.whl"
    )
    assert first.hashes == {"sha256": "aa" + "0" * 62}
    assert first.requires_python == ">=3.9"
    assert first.metadata_hashes == {"sha256": "bb" + "0" * 62}
    assert (files[1].yanked, files[1].yanked_reason) == (True, "")
    assert (files[2].yanked, files[2].yanked_reason) == (True, "broken & gone")
    assert files[3].metadata_hashes == {}


def test_json_page() -> None:
    doc = {
        "meta": {"api-version": "1.1"},
        "name": "torch",
        "files": [
            {
                "filename": "torch-1.0-py3-none-any.whl",
                "url": "../../files/torch-1.0-py3-none-any.whl",
                "hashes": {"sha256": "cc" * 32},
                "requires-python": ">=3.8",
                "yanked": "bad",
                "core-metadata": {"sha256": "dd" * 32},
                "size": 12,
            }
        ],
    }
    files = parse_project_page(
        json.dumps(doc).encode(),
        "application/vnd.pypi.simple.v1+json",
        "https://i.example/simple/torch/",
    )
    assert files[0].url == "https://i.example/files/torch-1.0-py3-none-any.whl"
    assert (files[0].yanked, files[0].yanked_reason, files[0].size) == (True, "bad", 12)
    assert files[0].metadata_hashes == {"sha256": "dd" * 32}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "broken PEP 691 JSON: not valid JSON"),
        (b'{"meta": {"api-version": "2.0"}, "files": []}', "unsupported PEP 691 api-version 2.0"),
        (
            b'{"meta": [], "files": []}',
            "PEP 691 JSON: 'meta' is a JSON list, not an object",
        ),
        (b'{"files": [{"url": "x"}]}', "PEP 691 file entry without url or filename: {'url': 'x'}"),
    ],
)
def test_broken_json_is_a_page_error(body: bytes, message: str) -> None:
    with pytest.raises(PageParseError) as info:
        parse_project_page(
            body, "application/vnd.pypi.simple.v1+json", "https://i.example/simple/x/"
        )
    assert str(info.value) == message


def test_metadata_headers_parse_like_packaging() -> None:
    from packaging.metadata import parse_email

    from resolver.wheel_metadata import parse_core_metadata

    data = (
        b"Metadata-Version: 2.1\r\nName: Torch_Musa\r\nVersion: 2.11.0.post2+musa5.2.0\r\n"
        b"Requires-Python: >=3.9\r\nRequires-Dist: torch ==2.11.0.post2\r\n"
        b"Requires-Dist: numpy; extra == 'test'\r\nDescription: line one\r\n  line two\r\n\r\n"
        b"Requires-Dist: not-a-header-this-is-the-body\r\n"
    )
    meta = parse_core_metadata(data, where="x")
    raw, _ = parse_email(data)
    assert meta.name == "torch-musa"
    assert str(meta.version) == raw["version"]
    assert [str(r) for r in meta.requires_dist] == ["torch==2.11.0.post2", 'numpy; extra == "test"']
    assert meta.requires_python == raw["requires_python"]


# ----------------------------------------------------------------------- PEP 691, for a target

CP312 = TargetTags(Target(python=(3, 12), arch="x86_64", glibc=(2, 35)))
ARM = TargetTags(Target(python=(3, 10), arch="aarch64", glibc=(2, 17)))
URL = "https://pypi.example/simple/numpy/"
SHA = "ab" * 32
KEEP = "numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
DROP = "numpy-1.26.4-cp312-cp312-win_amd64.whl"
TAGS = [
    "cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64", "cp312-cp312-win_amd64",
    "cp311-cp311-manylinux_2_17_x86_64", "cp312-cp312-macosx_11_0_arm64",
    "cp310-cp310-manylinux_2_17_aarch64.manylinux2014_aarch64", "py3-none-any",
    "cp312-cp312-musllinux_1_2_x86_64", "cp38-abi3-manylinux2014_x86_64", "cp313-cp313t-win32",
    "cp312-cp312-manylinux_2_36_x86_64", "CP312-Cp312-MANYLINUX_2_17_X86_64", "cp312-cp312-",
]  # fmt: skip
ODD_NAMES = [
    "numpy-1.26.4.tar.gz", "numpy-1.26.4.zip", "numpy-cp312-cp312-linux_x86_64.whl",
    "numpy-1.26.4-py3.12.egg", "numpy-2.0.0rc1-1-cp312-cp312-win_amd64.whl",
]  # fmt: skip
# kept whatever the target, and shown escaped: each goes through ``_json_file``
PROBLEM_NAMES = [
    "../x.whl", "a/b-1.0-py3-none-any.whl", ".", "..", "numpy..1-1.0-py3-none-any.whl", "",
    "numpy-1.0-py3-none-any.whl ", "nümpy-1.0-cp312-cp312-win_amd64.whl", "x" * 300 + ".whl",
]  # fmt: skip
YANKED: list[object] = [
    False, True, "", "a reason", 'a "quoted" reason', "broken },{ build", 'a },{"filename":"x"',
    "gelöscht",
]  # fmt: skip
METADATA: list[object] = [True, False, {"sha256": "cd" * 32}, {}, {"sha256": "CD" * 32}, None]
HASHES: list[object] = [
    {"sha256": SHA}, {}, {"sha256": SHA.upper()}, {"sha512": "ef" * 64},
    {"md5": "01" * 16, "sha256": SHA}, {"blake2b": "x"}, None,
]  # fmt: skip


def full(body: bytes, keep: TargetTags) -> tuple[list[ListedFile], int]:
    return parse_json_full(body, URL, keep.may_run)


def targeted(body: bytes, keep: TargetTags) -> tuple[list[ListedFile], int] | None:
    """The read for a target, checked against the whole read: the same rows and count, or
    (None) the whole read itself."""
    got = json_for_target(body, URL, keep.may_run)
    assert parse_kept(body, JSON_CONTENT_TYPE, URL, keep=keep.may_run) == (
        full(body, keep) if got is None else got
    )
    if got is not None:
        assert got == full(body, keep)
    return got


def random_entry(rng: random.Random, name: str) -> dict[str, object]:
    entry: dict[str, object] = {"filename": name}
    href = rng.choice(["../../files/", "https://files.example/p/", "/files/", ""]) + quote(name)
    entry["url"] = href + rng.choice(["", "", "", f"#sha256={SHA}"])
    choices: list[tuple[str, list[object]]] = [
        ("hashes", HASHES),
        ("requires-python", [">=3.9", "", None, ">=3.8,<4"]),
        ("yanked", YANKED),
        ("core-metadata", METADATA),
        ("dist-info-metadata", METADATA),
        ("data-dist-info-metadata", METADATA),
        ("size", [0, 123_456, None]),
        ("upload-time", ["2025-01-01T00:00:00.000000Z", None]),
        ("provenance", [None, "https://pypi.example/provenance"]),
        ("a-note", ["}]", "[", 1.5e3, -2, None, {"k": "v"}]),  # before the filename, sorted
        ("x-extra", [[1, {"a": "b"}], {"x": {"y": [None]}}, [{}, {"k": "},{"}]]),
    ]
    for key, values in choices:
        if rng.random() < 0.5:
            entry[key] = rng.choice(values)
    return entry


def random_page(rng: random.Random) -> bytes:
    layout = rng.choice(["ours", "pypi", "testbed", "spaced"])
    names = [f"numpy-1.{rng.randint(0, 9)}-{t}.whl" for t in TAGS] + ODD_NAMES + PROBLEM_NAMES
    files = [random_entry(rng, rng.choice(names)) for _ in range(rng.randint(0, 30))]
    versions = [f"1.{i}" for i in range(rng.randint(0, 5))]
    if layout == "ours":  # bench/realindex.py: the filename first, compact
        doc = {"meta": {"api-version": "1.1", "_last-serial": 1}, "name": "numpy",
               "versions": versions, "files": files}  # fmt: skip
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()
    doc = {"alternate-locations": [], "files": files, "name": "numpy", "project-status": {},
           "versions": versions, "meta": {"_last-serial": 7, "api-version": "1.4"}}  # fmt: skip
    if layout == "pypi":  # keys sorted: core-metadata and data-dist-info-metadata come first
        return json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()
    if layout == "testbed":  # testbed/simple_index.py
        return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False).encode() + b"\n"
    return json.dumps(doc).encode()


def test_a_page_read_for_a_target_is_read_as_the_whole_page_reads_it() -> None:
    rng = random.Random(691)  # noqa: S311 (page contents, not secrets)
    kinds: set[str] = set()
    for _ in range(400):
        body = random_page(rng)
        for target in (CP312, ARM):
            got = targeted(body, target)
            assert got is not None, body  # no page here makes the read give up
            rows, dropped = got
            kinds |= {"kept"} if rows else set()
            kinds |= {"dropped"} if dropped else set()
            kinds |= {"problem"} if any(r[9] for r in rows) else set()
            kinds |= {"sha512"} if any("sha512" in r[2] for r in rows) else set()  # _json_file
            kinds |= {"yanked"} if any(r[5] == 'a },{"filename":"x"' for r in rows) else set()
            kinds |= {"escape"} if b"\\u00f6" in body and rows else set()
    assert kinds == {"kept", "dropped", "problem", "sha512", "yanked", "escape"}  # not vacuous


def test_a_real_sized_pypi_page_is_read_for_a_target() -> None:
    entries = []
    for i in range(200):
        name = f"numpy-2.{i}.0-{TAGS[i % len(TAGS)]}.whl"
        entries.append(
            {"core-metadata": {"sha256": SHA}, "data-dist-info-metadata": {"sha256": SHA},
             "filename": name, "hashes": {"sha256": SHA}, "provenance": None,
             "requires-python": ">=3.9", "size": 123, "upload-time": "2024-02-05T21:18:07Z",
             "url": f"https://files.pythonhosted.org/packages/ab/cd/{name}", "yanked": False}
        )  # fmt: skip
    doc = {"alternate-locations": [], "files": entries, "name": "numpy", "project-status": {},
           "versions": ["2.0.0"], "meta": {"_last-serial": 1, "api-version": "1.4"}}  # fmt: skip
    body = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()
    assert body.startswith(b'{"alternate-locations":[],"files":[{"core-metadata":{"sha256":"')
    got = targeted(body, CP312)
    assert got is not None
    # CP312 may run 5 of the 12 tags (the first, py3-none-any, abi3, upper-case, unreadable)
    assert (len(got[0]), got[1]) == (83, 117)


def page(files: str, top: str = '"meta":{"api-version":"1.1"},') -> bytes:
    return f'{{{top}"name":"numpy","files":[{files}]}}'.encode()


def plain(name: str, rest: str = "") -> str:
    return f'{{"filename":"{name}","url":"../../files/{name}"{rest}}}'


# pages that would fool a reader looking for names in the text, and pages in another encoding
TRICKY = {
    # a list of objects in a file left out, one of them with a filename
    "nested filename": page(plain(DROP, ',"x":[{},{"filename":"numpy-1.0.tar.gz"}]')),
    "a nested filename before the next file": page(
        plain(DROP, f',"x":[{{}},{{"filename":"{DROP}"}},{{}}]') + "," + plain(KEEP)
    ),
    "nested in a later value": page(
        plain(DROP), '"z":[{},{"filename":"numpy-1.0.tar.gz"}],'
    ).replace(b"}]}", b'}],"y":[{},{"filename":"numpy-1.0.tar.gz","url":"u"}]}'),
    "filename as a value": page(plain(DROP, ',"x":"filename"') + "," + plain(KEEP)),
    "filename twice": page(plain(DROP, f',"filename":"{KEEP}"')),
    "an escaped second filename": page(
        plain(DROP, f',"file\\u006eame":"{KEEP}"') + "," + plain(DROP)
    ),
    "an escaped only filename": page(
        plain(DROP) + "," + f'{{"file\\u006eame":"{KEEP}","url":"k"}}' + "," + plain(DROP)
    ),
    "an escaped name": page(plain("numpy\\u002d1.0.tar.gz")),
    "a name with a backslash": page(plain("a\\\\b.whl")),
    "a list before the name": page(plain(DROP) + ',{"a":[1],"filename":"x.tar.gz","url":"u"}'),
    "a first list before the name": page('{"a":[1],"filename":"x.tar.gz","url":"u"}'),
    "files twice": page(plain(DROP), f'"files":[{plain(KEEP)}],'),
    "meta twice": page(plain(KEEP), '"meta":{"api-version":"2.0"},"meta":{"api-version":"1.0"},'),
    "a BOM": b"\xef\xbb\xbf" + page(plain(KEEP)),
    "UTF-16": page(plain(KEEP)).decode().encode("utf-16"),
    "UTF-16-LE": page(plain(KEEP)).decode().encode("utf-16-le"),
}


GIVES_UP = {"a BOM", "UTF-16", "UTF-16-LE"}  # json.loads reads them, orjson does not


@pytest.mark.parametrize("name", TRICKY)
def test_a_tricky_page_read_for_a_target_gives_what_the_whole_read_gives(name: str) -> None:
    body = TRICKY[name]
    for target in (CP312, ARM):
        got = targeted(body, target)  # the same rows as the whole read, or the whole read
        assert (got is None) == (name in GIVES_UP)
    assert full(body, CP312) == parse_kept(body, JSON_CONTENT_TYPE, URL, keep=CP312.may_run)


def test_a_tricky_page_has_the_files_json_gives() -> None:
    body = TRICKY["nested filename"]
    assert parse_kept(body, JSON_CONTENT_TYPE, URL, keep=CP312.may_run) == ([], 1)
    body = TRICKY["an escaped only filename"]
    rows, dropped = parse_kept(body, JSON_CONTENT_TYPE, URL, keep=CP312.may_run)
    assert ([r[0] for r in rows], dropped) == ([KEEP], 2)
    body = TRICKY["an escaped second filename"]  # json.loads keeps the last one
    rows, dropped = parse_kept(body, JSON_CONTENT_TYPE, URL, keep=CP312.may_run)
    assert ([r[0] for r in rows], dropped) == ([KEEP], 1)


def test_braces_in_the_strings_of_a_file_left_out_are_no_entries() -> None:
    forged = plain(KEEP).replace('"', '\\"')
    body = page(plain(DROP, f',"yanked":"x}},{forged}"') + "," + plain(DROP, ',"y":"},{"'))
    got = targeted(body, CP312)
    assert got == ([], 2)


BROKEN = {
    "not UTF-8": (
        page(plain(KEEP, ',"yanked":"caf\u00e9"')).replace("\u00e9".encode(), b"\xe9"),
        "broken PEP 691 JSON: 'utf-8' codec can't decode byte 0xe9 in position 245: invalid "
        "continuation byte",
    ),
    "a kept entry of the wrong type": (
        page(plain(DROP) + "," + plain(KEEP, ',"size":-1')),
        f"PEP 691 file {KEEP}: 'size' is -1, less than zero",
    ),
    "a kept entry that is no JSON": (
        page(plain(DROP) + "," + plain(KEEP, ",")),
        "broken PEP 691 JSON: not valid JSON",
    ),
    "a kept entry without url": (
        page(f'{{"filename":"{KEEP}"}}'),
        f"PEP 691 file entry without url or filename: {{'filename': '{KEEP}'}}",
    ),
    "an entry that is no object": (
        page('"x"'),
        "PEP 691 file entry without url or filename: 'x'",
    ),
    "a trailing comma": (
        page(plain(DROP) + ","),
        "broken PEP 691 JSON: not valid JSON",
    ),
    "text after the page": (
        page(plain(DROP)) + b" x",
        "broken PEP 691 JSON: not valid JSON",
    ),
    "no files": (b'{"meta":{"api-version":"1.1"}}', "PEP 691 JSON without a 'files' list"),
    "files no list": (b'{"files":{}}', "PEP 691 JSON without a 'files' list"),
    "a page that is a list": (b"[]", "PEP 691 JSON without a 'files' list"),
    "api-version 2": (
        page(plain(KEEP), '"meta":{"api-version":"2.0"},'),
        "unsupported PEP 691 api-version 2.0",
    ),
    "api-version a number": (
        page(plain(KEEP), '"meta":{"api-version":1.1},'),
        "PEP 691 JSON: 'meta.api-version' is a JSON float, not a string",
    ),
    "meta a string": (
        page(plain(DROP), '"meta":"1.1",'),
        "PEP 691 JSON: 'meta' is a JSON str, not an object",
    ),
    "nested lists": (b"[" * 100_000, "broken PEP 691 JSON: nested too deeply"),
    "nested files": (b'{"files":' + b"[" * 100_000, "broken PEP 691 JSON: nested too deeply"),
    "nested in a value": (
        page(plain(KEEP), '"x":' + "[" * 100_000 + "]" * 100_000 + ","),
        "broken PEP 691 JSON: nested too deeply",
    ),
    "nested in a file left out": (
        page(plain(DROP, ',"x":' + "[" * 100_000 + "]" * 100_000) + "," + plain(KEEP)),
        "broken PEP 691 JSON: nested too deeply",
    ),
    "nested in a kept file": (
        page(plain(KEEP, ',"x":' + '{"a":' * 100_000 + "1" + "}" * 100_000)),
        "broken PEP 691 JSON: nested too deeply",
    ),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_page_the_whole_parse_refuses_is_refused_for_a_target(name: str) -> None:
    body, message = BROKEN[name]
    for keep in (None, CP312.may_run):  # the broken entries are of files CP312 may run
        with pytest.raises(PageParseError) as info:
            parse_kept(body, JSON_CONTENT_TYPE, URL, keep=keep)
        assert str(info.value) == message


def test_the_search_record_code_digest_covers_every_module_of_the_page_reader() -> None:
    """A search record is replayed only while the code that decides the search is the same
    (``search_record.code_digest``); the page reader is that code, in every module of it."""
    here = Path(search_record.__file__).parent
    reader: set[str] = set()
    todo = ["simple_page"]
    while todo:
        name = todo.pop()
        if name in reader:
            continue
        reader.add(name)
        tree = ast.parse((here / f"{name}.py").read_text())
        todo += [
            node.module.removeprefix("resolver.")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.startswith("resolver.")
        ]
    assert {f"{name}.py" for name in reader} <= set(search_record._CODE)
