"""The test infrastructure itself: real wheels, index trees, and the HTTP servers."""

from __future__ import annotations

import base64
import csv
import email.utils
import gzip
import hashlib
import http.client
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from packaging.metadata import Metadata
from packaging.tags import parse_tag
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from core.errors import MetadataError
from resolver.simple_page import (
    ACCEPT,
    JSON_CONTENT_TYPE,
    IndexFile,
    parse_find_links_page,
    parse_project_page,
)
from resolver.wheel_metadata import check_matches_filename, parse_core_metadata
from tests.support.index_server import IndexServer, IndexServerFactory, PypiServer
from tests.support.indexgen import (
    NGINX,
    Listing,
    WheelFactory,
    WheelSpec,
    build_sdist,
    build_wheel,
    nginx_config,
    read_wheel_metadata,
    start_nginx,
    stop_nginx,
    write_find_links_page,
    write_simple_index,
)

TORCH = WheelSpec(
    name="torch",
    version="2.11.0.post2+musa5.2.0",
    tags="cp312-cp312-linux_x86_64",
    requires_dist=("filelock", "numpy>=1.26; extra == 'numpy'"),
    requires_python=">=3.10",
)
TILELANG = WheelSpec(
    name="tilelang_musa",
    version="0.1.12+musa.2",
    tags="cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64",
)
MATE = WheelSpec(
    name="Mate",
    version="0.2.7",
    entry_points={"console_scripts": {"mate-hello": "mate:hello"}},
    modules={"mate/__init__.py": "def hello() -> None:\n    print('hi')\n"},
)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def http_get(
    url: str, headers: dict[str, str] | None = None, *, method: str = "GET", timeout: float = 5
) -> tuple[int, http.client.HTTPMessage, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        conn.request(
            method, parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {}
        )
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


# ----------------------------------------------------------------------------- wheels


def test_wheel_bytes_are_deterministic(tmp_path: Path) -> None:
    spec = WheelSpec(name="big", version="1.0", payload_bytes=(1 << 20) + 7, requires_dist=("x",))
    first = build_wheel(spec, tmp_path / "a")
    time.sleep(0.01)
    second = build_wheel(spec, tmp_path / "b")
    assert first.name == second.name == "big-1.0-py3-none-any.whl"
    assert first.read_bytes() == second.read_bytes()
    other = build_wheel(WheelSpec(name="big", version="1.0", payload_bytes=1 << 20), tmp_path / "c")
    assert other.read_bytes() != first.read_bytes()


@pytest.mark.parametrize(
    ("spec", "filename"),
    [
        (TORCH, "torch-2.11.0.post2+musa5.2.0-cp312-cp312-linux_x86_64.whl"),
        (TILELANG, f"tilelang_musa-0.1.12+musa.2-{TILELANG.tags}.whl"),
        (WheelSpec(name="Deep-GEMM", version="1.0"), "deep_gemm-1.0-py3-none-any.whl"),
        (
            WheelSpec(name="flash.mla", version="1.0", build="2", tags="py2.py3-none-any"),
            "flash_mla-1.0-2-py2.py3-none-any.whl",
        ),
    ],
)
def test_wheel_filename_follows_the_spec(spec: WheelSpec, filename: str, tmp_path: Path) -> None:
    path = build_wheel(spec, tmp_path)
    assert path.name == filename
    name, version, build, tags = parse_wheel_filename(path.name)
    assert name == canonicalize_name(spec.name)
    assert version == Version(spec.version)
    assert build == ((int(spec.build), "") if spec.build else ())
    assert tags == parse_tag(spec.tags)


def test_wheel_contents_are_valid(tmp_path: Path) -> None:
    path = build_wheel(TORCH, tmp_path)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        files = {n: zf.read(n) for n in names}
    dist_info = "torch-2.11.0.post2+musa5.2.0.dist-info"
    assert names == [
        "torch/__init__.py",
        f"{dist_info}/METADATA",
        f"{dist_info}/WHEEL",
        f"{dist_info}/RECORD",
    ]
    assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert {i.external_attr >> 16 for i in infos} == {0o100644}
    assert files["torch/__init__.py"] == b'__version__ = "2.11.0.post2+musa5.2.0"\n'

    rows = list(csv.reader(io.StringIO(files[f"{dist_info}/RECORD"].decode())))
    assert rows[-1] == [f"{dist_info}/RECORD", "", ""]
    assert sorted(r[0] for r in rows) == sorted(names)
    for name, digest, size in rows[:-1]:
        want = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=")
        assert digest == "sha256=" + want.decode()
        assert int(size) == len(files[name])

    wheel = files[f"{dist_info}/WHEEL"].decode()
    assert "Root-Is-Purelib: false\n" in wheel
    assert "Tag: cp312-cp312-linux_x86_64\n" in wheel
    meta = Metadata.from_email(files[f"{dist_info}/METADATA"], validate=True)
    assert meta.name == "torch"
    assert meta.version == Version("2.11.0.post2+musa5.2.0")
    assert [str(r) for r in meta.requires_dist or []] == [
        "filelock",
        'numpy>=1.26; extra == "numpy"',
    ]
    assert str(meta.requires_python) == ">=3.10"
    assert meta.provides_extra == ["numpy"]


def test_pure_wheel_is_purelib_and_metadata_can_disagree(tmp_path: Path) -> None:
    pure = build_wheel(MATE, tmp_path)
    with zipfile.ZipFile(pure) as zf:
        assert b"Root-Is-Purelib: true\n" in zf.read("mate-0.2.7.dist-info/WHEEL")
        assert zf.read("mate-0.2.7.dist-info/entry_points.txt") == (
            b"[console_scripts]\nmate-hello = mate:hello\n"
        )
    renamed = build_wheel(
        WheelSpec(name="triton", version="3.2.0", metadata_version="3.2.0+cuda"), tmp_path
    )
    assert renamed.name == "triton-3.2.0-py3-none-any.whl"
    meta = parse_core_metadata(read_wheel_metadata(renamed), where=renamed.name)
    assert str(meta.version) == "3.2.0+cuda"
    with pytest.raises(MetadataError, match=r"METADATA says Version 3\.2\.0\+cuda"):
        check_matches_filename(
            meta, name=canonicalize_name("triton"), version=Version("3.2.0"), where=renamed.name
        )


def test_payload_is_incompressible_and_streamed(tmp_path: Path) -> None:
    size = 3 * (1 << 20) + 11
    path = build_wheel(WheelSpec(name="blob", version="1", payload_bytes=size), tmp_path)
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("blob/payload.bin")
        data = zf.read(info)
        record = zf.read("blob-1.dist-info/RECORD").decode()
    assert info.file_size == size == len(data)
    assert len(gzip.compress(data[: 1 << 20])) > (1 << 20) * 0.99  # random, not zeros
    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert f"blob/payload.bin,sha256={want},{size}\n" in record


def test_wheels_install_with_pip(tmp_path: Path) -> None:
    wheels = [build_wheel(spec, tmp_path / "w") for spec in (TORCH, TILELANG, MATE)]
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    # install for a CPython 3.12 Linux target, whatever the host is
    cmd = [
        sys.executable, "-m", "pip", "install", "--isolated", "--no-deps",
        "--no-index", "--disable-pip-version-check", "--no-compile",
        "--target", str(target), "--only-binary=:all:",
        "--python-version", "3.12", "--implementation", "cp",
        "--abi", "cp312", "--abi", "abi3", "--abi", "none",
        "--platform", "linux_x86_64", "--platform", "manylinux2014_x86_64",
        *map(str, wheels),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "torch" / "__init__.py").read_text() == (
        '__version__ = "2.11.0.post2+musa5.2.0"\n'
    )
    assert (target / "tilelang_musa" / "__init__.py").is_file()
    assert (target / "mate" / "__init__.py").read_text().startswith("def hello()")
    assert (target / "bin" / "mate-hello").is_file()
    assert (target / "torch-2.11.0.post2+musa5.2.0.dist-info" / "RECORD").is_file()


def test_sdist_is_valid_and_deterministic(tmp_path: Path) -> None:
    first = build_sdist("Flash.MLA", "1.0.post1", tmp_path / "a")
    second = build_sdist("Flash.MLA", "1.0.post1", tmp_path / "b")
    assert first.name == "flash_mla-1.0.post1.tar.gz"
    assert first.read_bytes() == second.read_bytes()
    assert parse_sdist_filename(first.name) == ("flash-mla", Version("1.0.post1"))
    with tarfile.open(first) as tar:
        names = tar.getnames()
        pkg_info = tar.extractfile("flash_mla-1.0.post1/PKG-INFO")
        assert pkg_info is not None
        meta = Metadata.from_email(pkg_info.read(), validate=True)
    assert "flash_mla-1.0.post1/pyproject.toml" in names
    assert meta.name == "Flash.MLA"


def test_wheel_factory_fixture(wheel_factory: WheelFactory) -> None:
    by_fields = wheel_factory("deep_ep", "1.1.0+musa5.2.0", tags="cp312-cp312-linux_x86_64")
    by_spec = wheel_factory(
        WheelSpec(name="deep_ep", version="1.1.0+musa5.2.0", tags="cp312-cp312-linux_x86_64")
    )
    assert by_fields == by_spec
    assert by_fields.parent == wheel_factory.out_dir
    assert wheel_factory.sdist("deep_ep", "1.0").name == "deep_ep-1.0.tar.gz"
    with pytest.raises(TypeError):
        wheel_factory("deep_ep")


# ----------------------------------------------------------------------------- pages


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


# ----------------------------------------------------------------------------- IndexServer


def test_server_negotiates_json_and_html(
    make_index_server: IndexServerFactory, tmp_path: Path
) -> None:
    torch = build_wheel(TORCH, tmp_path)
    server = make_index_server("vendor")
    server.add(torch, json=True)
    url = server.simple_url + "torch/"

    status, headers, body = http_get(url, {"Accept": ACCEPT})
    assert status == 200
    assert headers["Content-Type"] == JSON_CONTENT_TYPE
    assert parse_project_page(body, headers["Content-Type"], url)[0].filename == torch.name

    for accept in (None, "text/html", f"text/html, {JSON_CONTENT_TYPE};q=0.5"):
        status, headers, body = http_get(url, {"Accept": accept} if accept else {})
        assert (status, headers["Content-Type"]) == (200, "text/html"), accept
        assert body.startswith(b"<!DOCTYPE html>")

    html_only = make_index_server("html-only", json=False)
    html_only.add(torch, json=True)
    status, headers, _ = http_get(html_only.simple_url + "torch/", {"Accept": ACCEPT})
    assert headers["Content-Type"] == "text/html"

    status, headers, _ = http_get(server.url + "/simple/torch")
    assert (status, headers["Location"]) == (301, "/simple/torch/")
    assert http_get(server.simple_url + "nothere/")[0] == 404
    assert http_get(server.url + "/simple/../listings.json")[0] in (403, 404)
    status, headers, body = http_get(server.url + f"/files/{torch.name}.metadata")
    assert status == 404  # not published
    server.add(Listing(path=torch, metadata=True))
    status, headers, body = http_get(
        server.url + "/files/" + torch.name.replace("+", "%2B") + ".metadata"
    )
    assert (status, headers["Content-Type"]) == (200, "application/octet-stream")
    assert body == read_wheel_metadata(torch)


def test_server_etag_last_modified_and_replace(index_server: IndexServer, tmp_path: Path) -> None:
    mate = build_wheel(MATE, tmp_path)
    index_server.add(mate)
    url = f"{index_server.url}/files/{mate.name}"
    status, headers, body = http_get(url)
    assert status == 200
    assert body == mate.read_bytes()
    etag = headers["ETag"]
    assert etag == f'"{sha256_of(mate)}"'
    modified = headers["Last-Modified"]
    assert http_get(url, {"If-None-Match": etag})[0] == 304
    assert http_get(url, {"If-None-Match": '"other", ' + etag})[0] == 304
    assert http_get(url, {"If-None-Match": '"other"'})[0] == 200
    assert http_get(url, {"If-Modified-Since": modified})[0] == 304
    assert http_get(url, {"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"})[0] == 200
    status, headers, body = http_get(url, method="HEAD")
    assert (status, body, headers["Content-Length"]) == (200, b"", str(mate.stat().st_size))

    index_server.replace(f"/files/{mate.name}", b"new bytes")
    status, headers, body = http_get(url, {"If-None-Match": etag})
    assert (status, body) == (200, b"new bytes")
    assert headers["ETag"] == f'"{hashlib.sha256(b"new bytes").hexdigest()}"'
    new_time = email.utils.parsedate_to_datetime(headers["Last-Modified"])
    assert new_time > email.utils.parsedate_to_datetime(modified)
    assert http_get(url, {"If-Modified-Since": modified})[0] == 200
    # the page still advertises the old hash until the tree is rewritten
    page = parse_project_page(
        http_get(index_server.simple_url + "mate/")[2],
        "text/html",
        index_server.simple_url + "mate/",
    )
    assert page[0].hashes["sha256"] == sha256_of(mate)
    index_server.add()
    page = parse_project_page(
        http_get(index_server.simple_url + "mate/")[2],
        "text/html",
        index_server.simple_url + "mate/",
    )
    assert page[0].hashes["sha256"] == hashlib.sha256(b"new bytes").hexdigest()


def test_server_ranges(make_index_server: IndexServerFactory, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    server = make_index_server("ranged")
    (server.root / "files").mkdir(parents=True)
    (server.root / "files" / "blob.bin").write_bytes(data)
    url = f"{server.url}/files/blob.bin"
    size = len(data)
    cases = {
        "bytes=0-9": (0, 9),
        "bytes=1000-": (1000, size - 1),
        "bytes=-5": (size - 5, size - 1),
        "bytes=1020-5000": (1020, size - 1),
        "bytes=-5000": (0, size - 1),
    }
    for header, (first, last) in cases.items():
        status, headers, body = http_get(url, {"Range": header})
        assert status == 206, header
        assert headers["Content-Range"] == f"bytes {first}-{last}/{size}", header
        assert headers["Accept-Ranges"] == "bytes"
        assert body == data[first : last + 1], header
    status, headers, _ = http_get(url, {"Range": f"bytes={size}-"})
    assert (status, headers["Content-Range"]) == (416, f"bytes */{size}")
    assert http_get(url, {"Range": "bytes=0-1,5-6"})[0] == 200  # multiple ranges: whole file

    server.ranges = False
    status, headers, body = http_get(url, {"Range": "bytes=0-9"})
    assert (status, body, headers["Accept-Ranges"]) == (200, data, None)


def test_server_fault_injection(index_server: IndexServer, tmp_path: Path) -> None:
    mate = build_wheel(MATE, tmp_path)
    index_server.add(mate)
    page = index_server.simple_url + "mate/"

    index_server.fail("/simple/mate/", status=503, times=2, retry_after=1)
    first = http_get(page)
    assert (first[0], first[1]["Retry-After"]) == (503, "1")
    assert http_get(page)[0] == 503
    assert http_get(page)[0] == 200
    index_server.fail(f"/files/{mate.name}", status=500, times=1)
    assert http_get(page)[0] == 200  # other paths are not affected
    assert http_get(f"{index_server.url}/files/{mate.name}")[0] == 500

    index_server.delay("/simple/", 2.0)
    with pytest.raises(TimeoutError):  # the client's read timeout, not the delay, ends it
        http_get(page, timeout=0.2)
    assert http_get(page)[0] == 200  # the delay was for one request

    index_server.drop("/simple/")
    with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
        http_get(page)
    assert http_get(page)[0] == 200

    index_server.require_auth("user", "s3cret")
    status, headers, _ = http_get(page)
    assert (status, headers["WWW-Authenticate"]) == (401, 'Basic realm="index"')
    good = "Basic " + base64.b64encode(b"user:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"user:wrong").decode()
    assert http_get(page, {"Authorization": bad})[0] == 401
    assert http_get(page, {"Authorization": good})[0] == 200
    index_server.require_auth(None)
    assert http_get(page)[0] == 200


def test_server_records_requests(index_server: IndexServer, tmp_path: Path) -> None:
    torch = build_wheel(TORCH, tmp_path)
    index_server.add(torch)
    index_server.clear_requests()
    quoted = torch.name.replace("+", "%2B")
    http_get(f"{index_server.url}/files/{quoted}", {"Range": "bytes=-10", "X-Test": "1"})
    http_get(index_server.simple_url + "torch/", method="HEAD")
    seen = index_server.requests
    assert [(r.method, r.path) for r in seen] == [
        ("GET", f"/files/{quoted}"),
        ("HEAD", "/simple/torch/"),
    ]
    headers = seen[0].headers
    assert (headers["range"], headers["Range"], headers.get("X-TEST")) == (
        "bytes=-10",
        "bytes=-10",
        "1",
    )
    assert "x-test" in headers
    assert index_server.paths(None) == [f"/files/{torch.name}", "/simple/torch/"]
    index_server.clear_requests()
    assert index_server.requests == []


def test_server_stops_and_frees_its_port(tmp_path: Path) -> None:
    with IndexServer(tmp_path / "root") as server:
        port = server.port
        assert http_get(server.url + "/nothing")[0] == 404
        with socket.create_connection(("127.0.0.1", port)):  # an idle keep-alive client
            pass
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), 1):
        pass


# ----------------------------------------------------------------------------- nginx


@pytest.mark.skipif(not NGINX.exists(), reason=f"{NGINX} is not installed (apt-get install nginx)")
def test_nginx_serves_the_tree(tmp_path: Path) -> None:
    torch = build_wheel(TORCH, tmp_path / "dists")
    root = tmp_path / "index"
    write_simple_index(root, [Listing(path=torch, metadata=True)], json=True)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert f"listen 127.0.0.1:{port};" in nginx_config(root, port, tmp_path / "nginx")
    proc = start_nginx(root, port, tmp_path / "nginx")
    try:
        url = f"http://127.0.0.1:{port}/simple/torch/"
        status, headers, body = http_get(url, {"Accept": ACCEPT})
        assert (status, headers["Content-Type"]) == (200, JSON_CONTENT_TYPE)
        files = parse_project_page(body, headers["Content-Type"], url)
        assert [f.hashes["sha256"] for f in files] == [sha256_of(torch)]
        assert http_get(url, {"Accept": "text/html"})[1]["Content-Type"] == "text/html"
        status, headers, body = http_get(files[0].url, {"Range": "bytes=-10"})
        assert (status, body) == (206, torch.read_bytes()[-10:])
        assert headers["ETag"]
        assert http_get(files[0].metadata_url)[2] == read_wheel_metadata(torch)
    finally:
        stop_nginx(proc)
    assert proc.returncode is not None


# ----------------------------------------------------------------------------- pypiserver


def test_pypi_server_serves_uploaded_wheels(pypi_server: PypiServer, tmp_path: Path) -> None:
    torch = build_wheel(TORCH, tmp_path)
    pypi_server.add(torch)
    url = pypi_server.url + "torch/"
    status, headers, body = http_get(url)
    assert status == 200
    files = parse_project_page(body, headers["Content-Type"], url)
    assert [(f.filename, dict(f.hashes)) for f in files] == [
        (torch.name, {"sha256": sha256_of(torch)})
    ]
    status, _, data = http_get(files[0].url)
    assert (status, data) == (200, torch.read_bytes())
    assert http_get(pypi_server.url + "not-a-project/")[0] == 404
