"""A page parsed for a target: rows only for the files it may run, and every file for what
shows every file (explain, the refusal of a pin, of a missing sdist)."""

from __future__ import annotations

import itertools
import json

import pytest
from packaging.utils import canonicalize_name

from manifest import Target
from resolver.cache import Cache as CacheStore
from resolver.index_client import IndexClient, IndexEndpoint
from resolver.page_json import json_for_target, parse_json_full
from resolver.simple_page import (
    JSON_CONTENT_TYPE,
    IndexFile,
    PageParseError,
    parse_kept,
)
from resolver.target import TargetTags
from resolver.wheel_select import evaluate
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, refused

CP312 = TargetTags(Target(python=(3, 12), arch="x86_64", glibc=(2, 35)))
CP310_ARM = TargetTags(Target(python=(3, 10), arch="aarch64", glibc=(2, 17)))
TARGETS = [
    CP312,
    CP310_ARM,
    TargetTags(Target(python=(3, 8), arch="x86_64", glibc=(2, 5))),
    TargetTags(Target(python=(3, 13), arch="x86_64", glibc=(2, 28))),
    TargetTags(Target(python=(3, 14), arch="aarch64", glibc=(2, 39))),
]

INTERPRETERS = [
    "cp27", "cp36", "cp38", "cp310", "cp311", "cp312", "cp313", "cp314", "cp311.cp312",
    "cp312.cp313", "py2", "py3", "py2.py3", "py38", "py312", "pp310", "CP312", "Py3", "ip27",
]  # fmt: skip
ABIS = [
    "none", "abi3", "cp38", "cp310", "cp311", "cp312", "cp313", "cp312d", "cp313t", "cp27mu",
    "pypy310_pp73", "CP312", "ABI3", "abi3.none", "cp311.cp312", "None",
]  # fmt: skip
PLATFORMS = [
    "any", "ANY", "linux_x86_64", "linux_aarch64", "linux_i686", "linux_armv7l",
    "manylinux1_x86_64", "manylinux1_i686", "manylinux2010_x86_64", "manylinux2014_x86_64",
    "manylinux2014_aarch64", "manylinux_2_5_x86_64", "manylinux_2_17_x86_64",
    "manylinux_2_17_x86_64.manylinux2014_x86_64", "manylinux_2_17_aarch64.manylinux2014_aarch64",
    "manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "manylinux_2_35_x86_64",
    "manylinux_2_36_x86_64", "manylinux_2_39_aarch64", "manylinux_2_40_aarch64",
    "MANYLINUX_2_17_X86_64", "Manylinux2014_Aarch64", "manylinux_2_17_ppc64le",
    "manylinux_2_17_s390x", "musllinux_1_1_x86_64", "musllinux_1_2_aarch64",
    "macosx_10_9_x86_64", "macosx_11_0_arm64", "macosx_10_9_universal2",
    "macosx_10_9_x86_64.macosx_11_0_arm64", "win_amd64", "win32", "win_arm64",
    "linux_x86_64.win_amd64", "musllinux_1_2_x86_64.manylinux_2_17_x86_64",
]  # fmt: skip
STEMS = ["numpy-1.26.4", "numpy-2.0.0rc1-1", "Numpy-1.26.4+local.1-2abc", "foo_bar-0.1-10"]
ODD = [
    "numpy-1.26.4-cp312-cp312-.whl",  # an empty platform
    "numpy-1.26.4-cp312..cp313-cp312-linux_x86_64.whl",  # an empty member of a set
    "numpy-1.26.4-3cp-none-any.whl",  # an interpreter that is no identifier
    "numpy-cp312-cp312-linux_x86_64.whl",  # too few parts
    "numpy-1.26.4-1-2-cp312-cp312-linux_x86_64.whl",  # too many parts
    "numpy-1.26.4-cp312-cp312-linux_x86_64.WHL",
    "numpy-1.26.4.tar.gz",
    "numpy-1.26.4.zip",
    "numpy-1.26.4-cp312-cp312-win_amd64.exe",
    "numpy-1.26.4.win-amd64-py3.12.msi",
    "numpy-1.26.4-py3.12.egg",
]
# names packaging refuses for their name, version or build part: the filter reads only the
# tags, so these are kept or not by their tags (evaluate refuses them all the same)
BAD_PARTS = [
    "numpy-1.26.4-bad_version-cp312-cp312-linux_x86_64.whl",
    "numpy-x.y-cp312-cp312-linux_x86_64.whl",
    "num__py-1.0-cp312-cp312-linux_x86_64.whl",
    "numpy-x.y-cp310-cp310-manylinux2014_aarch64.whl",
]


def names() -> list[str]:
    tags = itertools.product(INTERPRETERS, ABIS, PLATFORMS)
    stems = itertools.cycle(STEMS)
    return [f"{next(stems)}-{i}-{a}-{p}.whl" for i, a, p in tags] + ODD + BAD_PARTS


def accepted(target_tags: TargetTags, filename: str) -> bool:
    file = IndexFile(filename=filename, url=f"https://x/{filename}")
    project = canonicalize_name(filename.split("-", 1)[0])
    verdict = evaluate(file, project=project, target_tags=target_tags)
    return verdict is not None and verdict.accepted


def test_the_filter_never_refuses_a_file_the_target_can_use() -> None:
    filenames = names()
    assert len(filenames) > 10_000
    for target_tags in TARGETS:
        refused_names = [f for f in filenames if not target_tags.may_run(f)]
        wrongly = [f for f in refused_names if accepted(target_tags, f)]
        assert wrongly == []
        # not vacuous: most names are for other targets, and many are accepted
        assert len(refused_names) > len(filenames) // 2
        assert sum(accepted(target_tags, f) for f in filenames) > 100
        # every name evaluate could not even read, and every file that is no wheel, is kept
        assert all(target_tags.may_run(f) for f in ODD)


def test_the_filter_reads_tags_as_packaging_does() -> None:
    assert CP312.may_run("numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.whl")
    assert CP312.may_run("numpy-1.26.4-CP312-Cp312-MANYLINUX_2_17_X86_64.whl")
    assert CP312.may_run("six-1.16.0-py2.py3-none-any.whl")
    assert CP312.may_run("x-1.0-cp311.cp312-abi3-win_amd64.linux_x86_64.whl")
    assert CP312.may_run("x-1.0-7-cp38-abi3-manylinux2014_x86_64.whl")
    assert not CP312.may_run("numpy-1.26.4-cp312-cp312-win_amd64.whl")
    assert not CP312.may_run("numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.whl")
    assert not CP312.may_run("numpy-1.26.4-cp312-cp312-manylinux_2_36_x86_64.whl")
    assert not CP312.may_run("numpy-1.26.4-cp312-cp312-musllinux_1_2_x86_64.whl")
    assert not CP312.may_run("x-1.0-cp313-abi3-manylinux2014_x86_64.whl")
    # a huge compressed set costs its length, not the product of its parts
    many = ".".join(f"p{i}" for i in range(3000))
    assert not CP312.may_run(f"x-1.0-{many}-{many}-{many}.whl")


def test_the_target_key_names_the_target_and_its_tags() -> None:
    assert CP312.key.startswith("cp312-x86_64-glibc2_35-")
    assert CP310_ARM.key.startswith("cp310-aarch64-glibc2_17-")
    assert len({target_tags.key for target_tags in TARGETS}) == len(TARGETS)
    assert TargetTags(Target(python=(3, 12), arch="x86_64", glibc=(2, 35))).key == CP312.key


# ----------------------------------------------------------------------------- parsing

FILES = [
    "numpy-1.26.4-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-1.26.4-cp312-cp312-win_amd64.whl",
    "numpy-1.26.4-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
    "numpy-1.26.4-cp312-cp312-macosx_11_0_arm64.whl",
    "numpy-1.26.4-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
    "numpy-1.26.4-cp310-cp310-manylinux_2_17_aarch64.manylinux2014_aarch64.whl",
    "numpy-1.26.4.tar.gz",
    "numpy-1.26.4-py3-none-any.whl",
    "numpy-1.26.4-cp312-cp312-.whl",
]
CP312_KEPT = [FILES[0], FILES[6], FILES[7], FILES[8]]
ARM_KEPT = [FILES[5], FILES[6], FILES[7], FILES[8]]


def json_doc(filenames: list[str]) -> bytes:
    files = [
        {"filename": f, "url": f"../../files/{f}", "hashes": {"sha256": "ab" * 32}}
        for f in filenames
    ]
    return json.dumps({"meta": {"api-version": "1.1"}, "name": "numpy", "files": files}).encode()


def html_doc(filenames: list[str]) -> bytes:
    anchors = "".join(
        f'<a href="../../files/{f}#sha256={"ab" * 32}">{f}</a><br>' for f in filenames
    )
    return f"<!DOCTYPE html><html><body>{anchors}</body></html>".encode()


def test_a_page_parsed_for_a_target_has_the_rows_it_may_run_and_the_count_of_the_rest() -> None:
    url = "https://pypi.example/simple/numpy/"
    for body, kind in [(json_doc(FILES), JSON_CONTENT_TYPE), (html_doc(FILES), "text/html")]:
        whole = parse_kept(body, kind, url, keep=None)[0]
        rows, dropped = parse_kept(body, kind, url, keep=CP312.may_run)
        assert [r[0] for r in rows] == CP312_KEPT
        assert dropped == len(FILES) - len(CP312_KEPT)
        assert rows == [r for r in whole if r[0] in CP312_KEPT]  # the same rows, the same order
        rows, dropped = parse_kept(body, kind, url, keep=CP310_ARM.may_run)
        assert ([r[0] for r in rows], dropped) == (ARM_KEPT, len(FILES) - len(ARM_KEPT))


def test_a_broken_entry_the_target_may_run_breaks_the_page() -> None:
    url = "https://pypi.example/simple/numpy/"
    doc = json.loads(json_doc(FILES))
    doc["files"][0]["size"] = -1  # the manylinux cp312 wheel
    body = json.dumps(doc).encode()
    for keep in (None, CP312.may_run):
        with pytest.raises(PageParseError) as broken:
            parse_kept(body, JSON_CONTENT_TYPE, url, keep=keep)
        assert str(broken.value) == f"PEP 691 file {FILES[0]}: 'size' is -1, less than zero"


def test_a_file_the_target_cannot_run_is_not_read_beyond_its_name() -> None:
    url = "https://pypi.example/simple/numpy/"
    clean = parse_kept(json_doc(FILES), JSON_CONTENT_TYPE, url, keep=CP312.may_run)
    doc = json.loads(json_doc(FILES))
    doc["files"][1]["size"] = -1  # the win_amd64 wheel
    doc["files"][3]["url"] = "http://[::1/x.whl"  # the macosx wheel
    body = json.dumps(doc).encode()
    assert parse_kept(body, JSON_CONTENT_TYPE, url, keep=CP312.may_run) == clean
    assert clean[1] == 5
    # the page read whole (explain, a refusal) reads every file, and refuses the page
    with pytest.raises(PageParseError) as broken:
        parse_kept(body, JSON_CONTENT_TYPE, url, keep=None)
    assert str(broken.value) == f"PEP 691 file {FILES[1]}: 'size' is -1, less than zero"


def test_a_broken_link_breaks_an_html_page_even_when_the_target_cannot_run_it() -> None:
    url = "https://pypi.example/simple/numpy/"
    html = html_doc(FILES).replace(f"{FILES[1]}#sha256=".encode(), f"{FILES[1]}#sha256=zz".encode())
    for keep in (None, CP312.may_run):
        with pytest.raises(PageParseError) as broken:
            parse_kept(html, "text/html", url, keep=keep)
        assert str(broken.value).startswith(f"{FILES[1]}: sha256 hash 'zzabab")


def test_the_pages_of_the_test_index_are_read_for_a_target(case: Case) -> None:
    wheels = [
        Listing(path=case.wheel("numpy", "1.26.4", "cp312-cp312-manylinux_2_17_x86_64"),
                metadata=True, requires_python=">=3.9"),
        Listing(path=case.wheel("numpy", "1.26.4", "cp312-cp312-win_amd64"), yanked="broken"),
        Listing(path=case.wheel("numpy", "1.26.3", "cp311-cp311-linux_x86_64"), hash="none"),
        Listing(path=case.wheel("numpy", "1.26.2", "py3-none-any"), yanked=True, metadata=True),
    ]  # fmt: skip
    case.publish(case.pypi, *wheels, json=True)
    body = (case.pypi.root / "simple" / "numpy" / "index.json").read_bytes()
    assert b'"core-metadata": {' in body  # sorted keys, indented: before the filename
    url = f"{case.pypi.simple_url}numpy/"
    got = json_for_target(body, url, CP312.may_run)
    assert got == parse_json_full(body, url, CP312.may_run)
    assert got is not None
    rows, dropped = got
    assert ([r[0] for r in rows], dropped) == ([wheels[3].path.name, wheels[0].path.name], 2)


# ----------------------------------------------------------------------------- the client


def publish_numpy(case: Case) -> None:
    page = case.pypi.root / "simple" / "numpy"
    page.mkdir(parents=True, exist_ok=True)
    (page / "index.json").write_bytes(json_doc(FILES))


def test_the_kept_parses_of_one_page_for_two_targets_do_not_mix(case: Case) -> None:
    publish_numpy(case)
    endpoint = IndexEndpoint(name="pypi", url=case.pypi.simple_url)
    for run in range(3):  # arrived and parsed; parsed again after a 304, kept; read back
        client = IndexClient(CacheStore(case.cache), concurrency=2)
        try:
            got = {}
            for target_tags in (CP312, CP310_ARM, CP312):
                page = client.project_files(endpoint, "numpy", target_tags)
                assert page is not None
                got[target_tags.key] = ([f.filename for f in page], page.dropped, page.target)
                assert [f.filename for f in page.whole()] == FILES
            stats = dict(client.stats)
        finally:
            client.close()
        assert got == {
            CP312.key: (CP312_KEPT, 5, CP312.key),
            CP310_ARM.key: (ARM_KEPT, 5, CP310_ARM.key),
        }
        assert stats["parsed_cached"] == [0, 1, 3][run]  # CP312 again: its own parse
    kept = sorted(p.name.split(".", 1)[1] for p in (case.cache / "pages").glob("*.rows"))
    assert kept == sorted(f"{target_tags.key}.rows" for target_tags in (CP312, CP310_ARM))
    for path in (case.cache / "pages").glob("*.rows"):
        payload = json.loads(path.read_bytes().partition(b"\n")[2])
        assert payload["dropped"] == 5
        assert payload["target"] in path.name
        assert len(payload["rows"]) == 4


def test_a_kept_parse_for_another_target_is_never_read_for_this_one(case: Case) -> None:
    publish_numpy(case)
    endpoint = IndexEndpoint(name="pypi", url=case.pypi.simple_url)
    for _ in range(2):  # arrived; then parsed again after a 304, and kept
        first = IndexClient(CacheStore(case.cache), concurrency=2)
        try:
            assert first.project_files(endpoint, "numpy", CP312) is not None
        finally:
            first.close()
    client = IndexClient(CacheStore(case.cache), concurrency=2)
    try:
        [path] = (case.cache / "pages").glob("*.rows")
        # the parse for CP312, planted where the ARM target's parse would be
        path.rename(path.with_name(path.name.replace(CP312.key, CP310_ARM.key)))
        page = client.project_files(endpoint, "numpy", CP310_ARM)
        assert page is not None
        assert [f.filename for f in page] == ARM_KEPT
        assert client.stats["parsed_cached"] == 0
    finally:
        client.close()


# ----------------------------------------------------------------------------- end to end


def test_explain_from_a_filtered_cache_lists_every_file_with_its_reason(case: Case) -> None:
    good = case.wheel("torch", TORCH, NATIVE)
    win = case.wheel("torch", TORCH, "cp312-cp312-win_amd64")
    cp310 = case.wheel("torch", TORCH, "cp310-cp310-linux_x86_64")
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in (good, win, cp310)))
    stack = case.stack(PIN_TORCH)
    assert case.run("lock", stack).code == 0
    assert list((case.cache / "pages").glob("*.rows")) == []  # the page just arrived
    assert case.run("lock", stack).code == 0  # a 304: parsed again, and kept
    [kept] = list((case.cache / "pages").glob("*.rows"))
    assert json.loads(kept.read_bytes().partition(b"\n")[2])["dropped"] == 2
    result = case.run("explain", stack, "torch")
    assert result.code == 0, result.err
    width = max(len(p.name) for p in (good, win, cp310))
    assert result.out.splitlines()[3:] == [
        f"{'FILE':<{width}}  VERDICT           DETAIL",
        f"{good.name:<{width}}  selected          native wheel, tag rank 34",
        f"{cp310.name:<{width}}  wrong Python tag  built for CPython 3.10 (cp310-cp310); the "
        "target is CPython 3.12 (cp312)",
        f"{win.name:<{width}}  wrong platform    platform win_amd64 does not run on linux "
        "x86_64 with glibc 2.35 (tags cp312-cp312-win_amd64)",
    ]
    # explain reads the target's parse: it kept no parse of its own
    assert [p.name for p in (case.cache / "pages").glob("*.rows")] == [kept.name]


def test_the_refusal_of_a_pin_with_only_wheels_it_cannot_run_names_each(case: Case) -> None:
    win = case.wheel("torch", TORCH, "cp312-cp312-win_amd64")
    cp310 = case.wheel("torch", TORCH, "cp310-cp310-linux_x86_64")
    older = case.wheel("torch", "2.10.0", "cp312-cp312-macosx_11_0_arm64")
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in (win, cp310, older)))
    stack = case.stack(PIN_TORCH)
    for _ in range(2):  # parsed, then from the cache
        err = refused(case, stack)
        assert err.startswith(
            f"error[resolution]: packages.torch: no acceptable wheel for torch=={TORCH} (native) "
            f"on index mthreads ({case.vendor.simple_url}torch/) for CPython 3.12 (cp312), "
            "linux x86_64, glibc 2.35:\n"
            f"  {cp310.name}: wrong Python tag: built for CPython 3.10 (cp310-cp310); the target "
            "is CPython 3.12 (cp312)\n"
            f"  {win.name}: wrong platform: platform win_amd64 does not run on linux x86_64 with "
            "glibc 2.35 (tags cp312-cp312-win_amd64)\n"
            "  other versions on the index, not considered: 2.10.0\n"
        ), err
