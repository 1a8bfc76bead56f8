"""testbed.simple_index: the pages parse as the resolver reads them, merge across calls and
are deterministic; the find-links page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resolver.simple_page import (
    JSON_CONTENT_TYPE,
    IndexFile,
    parse_find_links_page,
    parse_project_page,
)
from testbed.distributions import WheelSpec, build_sdist, build_wheel, read_wheel_metadata
from testbed.simple_index import Listing, write_find_links_page, write_simple_index
from tests.testbed.common import MATE, TORCH, sha256_of


def _expected(
    path: Path,
    base: str,
    *,
    hashes: dict[str, str] | None = None,
    requires_python: str | None = None,
    yanked: bool = False,
    yanked_reason: str = "",
    metadata_hashes: dict[str, str] | None = None,
    json_page: bool = False,
) -> IndexFile:
    quoted = path.name.replace("+", "%2B")
    return IndexFile(
        filename=path.name,
        url=f"{base}files/{quoted}",
        hashes={"sha256": sha256_of(path)} if hashes is None else hashes,
        requires_python=requires_python,
        yanked=yanked,
        yanked_reason=yanked_reason,
        metadata_hashes=metadata_hashes,
        size=path.stat().st_size if json_page else None,
        upload_time="2024-01-01T00:00:00.000000Z" if json_page else None,
    )


@pytest.mark.parametrize("json_page", [False, True], ids=["html", "json"])
def test_project_pages_parse_into_index_files(tmp_path: Path, json_page: bool) -> None:
    dists = tmp_path / "dists"
    torch = build_wheel(TORCH, dists)
    old = build_wheel(WheelSpec(name="torch", version="2.9.1+musa5.2.0"), dists)
    bad = build_wheel(WheelSpec(name="torch", version="2.0"), dists)
    nohash = build_wheel(WheelSpec(name="torch", version="1.0"), dists)
    sdist = build_sdist("torch", "2.11.0", dists)
    root = tmp_path / "index"
    write_simple_index(
        root,
        [
            Listing(path=torch, requires_python=">=3.8,<3.14", metadata=True),
            Listing(path=old, yanked="CUDA build uploaded by mistake"),
            Listing(path=bad, yanked=True, hash="wrong"),
            Listing(path=nohash, hash="none"),
            sdist,
        ],
        json=json_page,
    )
    page_dir = root / "simple" / "torch"
    page = page_dir / ("index.json" if json_page else "index.html")
    content_type = JSON_CONTENT_TYPE if json_page else "text/html"
    base = "https://vendor.example/"
    files = parse_project_page(page.read_bytes(), content_type, f"{base}simple/torch/")

    meta_file = root / "files" / f"{torch.name}.metadata"
    assert meta_file.read_bytes() == read_wheel_metadata(torch)
    wrong = files[1].hashes["sha256"]
    assert wrong != sha256_of(bad)
    assert len(wrong) == 64
    assert files == [
        _expected(nohash, base, hashes={}, json_page=json_page),
        _expected(bad, base, hashes={"sha256": wrong}, yanked=True, json_page=json_page),
        _expected(
            torch,
            base,
            requires_python=">=3.8,<3.14",
            metadata_hashes={"sha256": sha256_of(meta_file)},
            json_page=json_page,
        ),
        _expected(sdist, base, json_page=json_page),
        _expected(
            old,
            base,
            yanked=True,
            yanked_reason="CUDA build uploaded by mistake",
            json_page=json_page,
        ),
    ]
    html = (page_dir / "index.html").read_text()
    assert "%2Bmusa5.2.0-cp312" in html
    assert 'data-requires-python="&gt;=3.8,&lt;3.14"' in html
    assert (page_dir / "index.json").exists() == json_page
    if json_page:
        blob = json.loads(page.read_bytes())
        assert blob["meta"] == {"api-version": "1.1"}
        assert blob["versions"] == ["1.0", "2.0", "2.9.1+musa5.2.0", "2.11.0", TORCH.version]


def test_index_merges_and_is_deterministic(tmp_path: Path) -> None:
    dists = tmp_path / "dists"
    torch = build_wheel(TORCH, dists)
    mate = build_wheel(MATE, dists)
    first, second = tmp_path / "one", tmp_path / "two"
    write_simple_index(first, [Listing(path=torch, yanked=True)], json=True)
    write_simple_index(first, [mate], json=True)
    write_simple_index(second, [mate, Listing(path=torch, yanked=True)], json=True)

    def tree(root: Path) -> dict[str, bytes]:
        return {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }

    assert tree(first) == tree(second)
    root_page = (first / "simple" / "index.html").read_text()
    assert '<a href="mate/">mate</a>' in root_page
    assert '<a href="torch/">torch</a>' in root_page
    torch_page = parse_project_page(
        (first / "simple" / "torch" / "index.html").read_bytes(),
        "text/html",
        "http://x/simple/torch/",
    )
    assert [f.yanked for f in torch_page] == [True]  # the option of the first call is kept

    write_simple_index(first, [], json=False)  # json=False drops the JSON pages
    assert not list(first.rglob("index.json"))
    write_simple_index(first, [torch])  # a bare path lists the file with the defaults again
    torch_page = parse_project_page(
        (first / "simple" / "torch" / "index.html").read_bytes(),
        "text/html",
        "http://x/simple/torch/",
    )
    assert [f.yanked for f in torch_page] == [False]


def test_listing_needs_a_project_for_odd_filenames(tmp_path: Path) -> None:
    odd = tmp_path / "torch-2.11.0.exe"
    odd.write_bytes(b"MZ")
    with pytest.raises(ValueError, match="cannot tell the project"):
        write_simple_index(tmp_path / "index", [odd])
    write_simple_index(tmp_path / "index2", [Listing(path=odd, project="Torch")])
    assert (
        "torch-2.11.0.exe" in (tmp_path / "index2" / "simple" / "torch" / "index.html").read_text()
    )


def test_find_links_page(tmp_path: Path) -> None:
    dists = tmp_path / "dists"
    torch = build_wheel(TORCH, dists)
    mate = build_wheel(MATE, dists)
    page = write_find_links_page(tmp_path / "fl", [Listing(path=torch, hash="none"), mate])
    assert page == tmp_path / "fl" / "find-links" / "index.html"
    files = parse_find_links_page(page.read_bytes(), "text/html", "http://h/find-links/")
    assert [(f.filename, f.url, dict(f.hashes)) for f in files] == [
        (mate.name, f"http://h/files/{mate.name}", {"sha256": sha256_of(mate)}),
        (torch.name, "http://h/files/" + torch.name.replace("+", "%2B"), {}),
    ]
