"""Index pages parse the same through the fast scanner and through html.parser."""

from __future__ import annotations

import json

import pytest

from resolver.simple_page import PageParseError, _AnchorParser, _scan_tags, parse_project_page

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
        (
            b"{",
            "broken PEP 691 JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
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
