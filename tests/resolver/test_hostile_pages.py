"""Hostile index pages, served by real index servers: filenames are data, never paths, and
a page of the wrong JSON types is a broken page, never a traceback.

A filename that could be read as a path (``/``, ``\\``, ``..``, NUL, a control character)
stays on the list as a refused file (``unsafe filename``), escaped wherever it is shown; a
PEP 691 value of the wrong type is an ``error[index]`` naming the index, the page and the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, read_toml, refused

NEVER_USED = "a filename is data, never a path, so this file is never used"


def json_page(server: IndexServer, project: str, files: list[object]) -> None:
    """Replace ``project``'s PEP 691 page with one listing ``files`` (no HTML page)."""
    page = server.root / "simple" / project
    page.mkdir(parents=True, exist_ok=True)
    (page / "index.html").unlink(missing_ok=True)
    doc = {"meta": {"api-version": "1.1"}, "name": project, "files": files}
    (page / "index.json").write_text(json.dumps(doc))


def html_page(server: IndexServer, project: str, hrefs: list[str]) -> None:
    page = server.root / "simple" / project
    page.mkdir(parents=True, exist_ok=True)
    (page / "index.json").unlink(missing_ok=True)
    anchors = "\n".join(f'<a href="{h}">x</a><br>' for h in hrefs)
    (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}\n</body></html>\n")


def entry(
    filename: object, url: object = "../../files/evil-2.0-py3-none-any.whl", **kw: object
) -> dict[str, object]:
    return {"filename": filename, "url": url, "hashes": {}, **kw}


def outside(case: Case) -> list[Path]:
    """Every file under the test's directory that is not where the tool may write."""
    allowed = ("cache", "stack", "wheels", "vendor-index", "pypi-index")
    return [p for p in case.tmp.rglob("*") if p.relative_to(case.tmp).parts[0] not in allowed]


# ----------------------------------------------------------------------------- filenames


def test_a_build_tag_with_an_encoded_slash_in_an_href_is_refused_for_a_pin(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    hostile = f"torch-{TORCH}-1/../../../../escape-cp312-cp312-linux_x86_64.whl"
    html_page(case.vendor, "torch", [f"../../files/{quote(hostile, safe='')}"])
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        f"error[resolution]: packages.torch: no acceptable wheel for torch=={TORCH} (native) on "
        f"index mthreads ({case.vendor.simple_url}torch/) for CPython 3.12 (cp312), linux x86_64, "
        f"glibc 2.35:\n  {hostile}: unsafe filename: the name holds '/', a path separator; "
        f"{NEVER_USED}\nhint: "
    )
    assert outside(case) == []


def test_a_pep691_filename_with_a_path_is_never_locked(case: Case) -> None:
    old, new = case.wheel("evil", "1.0"), case.wheel("evil", "2.0")
    case.publish(case.pypi, old, new, json=True)
    page = json.loads((case.pypi.root / "simple" / "evil" / "index.json").read_text())
    hostile = "evil-2.0-1/../../../../../escape-py3-none-any.whl"
    for f in page["files"]:
        if f["filename"] == new.name:
            f["filename"] = hostile
    json_page(case.pypi, "evil", page["files"])
    stack = case.stack(requirements=["evil"])
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    doc = read_toml((case.lock_dir() / "pylock.toml").read_text())
    assert [(p["name"], p["version"], p["wheels"][0]["name"]) for p in doc["packages"]] == [
        ("evil", "1.0", old.name)
    ]
    explained = case.run("explain", stack, "evil")
    assert explained.code == 0, explained.err
    rows = explained.out.splitlines()[3:]
    assert rows[1].split()[:2] == ["evil-1.0-py3-none-any.whl", "selected"]
    assert rows[2].startswith(f"{hostile}  unsafe filename  the name holds '/', a path separator")
    assert outside(case) == []


@pytest.mark.parametrize(
    ("filename", "shown", "problem"),
    [
        ("evil-2.0-py3-none-any.whl\\..\\x", "evil-2.0-py3-none-any.whl\\\\..\\\\x",
         "holds '\\\\', a path separator"),
        ("evil-2.0-py3-none-any..whl", "evil-2.0-py3-none-any..whl",
         "holds '..', a parent-directory step"),
        ("evil-2.0-py3-none-any.whl\0", "evil-2.0-py3-none-any.whl\\x00", "holds a NUL character"),
        ("evil-2.0-py3-none-any\x1b[2J.whl", "evil-2.0-py3-none-any\\x1b[2J.whl",
         "holds the control or invisible character U+001B"),
        ("evil-2.0-py3-none-any\u202e.whl", "evil-2.0-py3-none-any\\u202e.whl",
         "holds the control or invisible character U+202E"),
        ("evil-2.0-1$(reboot)-py3-none-any.whl", "evil-2.0-1$(reboot)-py3-none-any.whl",
         "holds '$', which no wheel or sdist filename has (only letters, digits and . _ + ! -)"),
        ("evil-2.0-" + "1" * 250 + "-py3-none-any.whl", "evil-2.0-" + "1" * 191 + "...",
         "is 276 bytes long, more than a file name may be (255)"),
    ],
)  # fmt: skip
def test_explain_shows_an_unsafe_filename_escaped_and_refused(
    case: Case, filename: str, shown: str, problem: str
) -> None:
    case.publish(case.pypi, case.wheel("evil", "2.0"), json=True)
    json_page(case.pypi, "evil", [entry(filename)])
    stack = case.stack(requirements=["evil"])
    result = case.run("explain", stack, "evil")
    assert result.code == 0, result.err
    assert (
        result.out.splitlines()[4] == f"{shown}  unsafe filename  the name {problem}; {NEVER_USED}"
    )
    report = json.loads(case.run("explain", stack, "evil", "--json").out)
    assert [(f["filename"], f["reason"]) for f in report["files"]] == [(shown, "unsafe filename")]
    assert not any(ch in result.out for ch in "\0\x1b\u202e")


def test_a_find_links_page_with_an_encoded_slash_is_refused(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    url = case.vendor.add_find_links(torch, case.wheel("mate", "0.2.7"))
    page = case.vendor.root / "find-links" / "index.html"
    hostile = f"torch-{TORCH}-1/../../../escape-cp312-cp312-linux_x86_64.whl"
    page.write_text(page.read_text().replace(quote(torch.name, safe=""), quote(hostile, safe="")))
    stack = case.stack(PIN_TORCH)
    stack.write_text(
        stack.read_text().replace(
            f'mthreads: {{url: "{case.vendor.simple_url}"}}',
            f'mthreads: {{url: "{url}", format: find-links}}',
        )
    )
    err = refused(case, stack)
    assert f"\n  {hostile}: unsafe filename: the name holds '/', a path separator; " in err
    assert err.startswith(
        f"error[resolution]: packages.torch: no acceptable wheel for torch=={TORCH} (native) on "
        f"index mthreads ({url}torch/) for CPython 3.12 (cp312), linux x86_64, glibc 2.35:\n"
    )


# ----------------------------------------------------------------------------- wrong JSON types

WHEEL = "evil-2.0-py3-none-any.whl"


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ([entry(WHEEL, **{"requires-python": 3})],
         f"PEP 691 file {WHEEL}: 'requires-python' is a JSON int, not a string"),
        (["evil-2.0-py3-none-any.whl"],
         "PEP 691 file entry without url or filename: 'evil-2.0-py3-none-any.whl'"),
        ([entry(12)], "PEP 691 file entry: 'filename' is a JSON int, not a string"),
        ([entry(WHEEL, url=["x"])], f"PEP 691 file {WHEEL}: 'url' is a JSON list, not a string"),
        ([entry(WHEEL, url=None)], f"PEP 691 file {WHEEL}: 'url' is a JSON null, not a string"),
        ([entry(WHEEL, hashes=["sha256"])],
         f"PEP 691 file {WHEEL}: 'hashes' is a JSON list, not an object"),
        ([entry(WHEEL, hashes={"sha256": 5})],
         f"PEP 691 file {WHEEL}: 'hashes'['sha256'] is a JSON int, not a string"),
        ([entry(WHEEL, size="12")], f"PEP 691 file {WHEEL}: 'size' is a JSON str, not a number of bytes"),
        ([entry(WHEEL, size=True)], f"PEP 691 file {WHEEL}: 'size' is a JSON bool, not a number of bytes"),
        ([entry(WHEEL, size=-1)], f"PEP 691 file {WHEEL}: 'size' is -1, less than zero"),
        ([entry(WHEEL, yanked=1)],
         f"PEP 691 file {WHEEL}: 'yanked' is a JSON int, not true, false or a reason"),
        ([entry(WHEEL, **{"upload-time": 0})],
         f"PEP 691 file {WHEEL}: 'upload-time' is a JSON int, not a string"),
        ([entry(WHEEL, **{"core-metadata": "sha256=x"})],
         f"PEP 691 file {WHEEL}: 'core-metadata' is a JSON str, not an object"),
        ([entry(WHEEL, url="http://[::1/x.whl")],
         "link 'http://[::1/x.whl' is not a URL"),
    ],
)  # fmt: skip
def test_wrong_json_types_are_a_broken_page(case: Case, files: list[object], problem: str) -> None:
    case.publish(case.pypi, case.wheel("evil", "2.0"), json=True)
    json_page(case.pypi, "evil", files)
    err = refused(case, case.stack(requirements=["evil"]))
    assert err == f"error[index]: index pypi: {case.pypi.simple_url}evil/: {problem}\n"


def test_wrong_types_of_the_page_itself(case: Case) -> None:
    case.publish(case.pypi, case.wheel("evil", "2.0"), json=True)
    page = case.pypi.root / "simple" / "evil" / "index.json"
    stack = case.stack(requirements=["evil"])
    for body, problem in [
        ({"meta": {"api-version": 1.1}, "files": []},
         "PEP 691 JSON: 'meta.api-version' is a JSON float, not a string"),
        ({"meta": "1.1", "files": []}, "PEP 691 JSON: 'meta' is a JSON str, not an object"),
        ({"files": {}}, "PEP 691 JSON without a 'files' list"),
        ([], "PEP 691 JSON without a 'files' list"),
    ]:  # fmt: skip
        page.write_text(json.dumps(body))
        assert refused(case, stack) == (
            f"error[index]: index pypi: {case.pypi.simple_url}evil/: {problem}\n"
        )


def test_deeply_nested_json_is_a_broken_page_not_a_recursion_error(case: Case) -> None:
    case.publish(case.pypi, case.wheel("evil", "2.0"), json=True)
    (case.pypi.root / "simple" / "evil" / "index.json").write_text("[" * 200_000)
    err = refused(case, case.stack(requirements=["evil"]))
    assert err == (
        f"error[index]: index pypi: {case.pypi.simple_url}evil/: broken PEP 691 JSON: nested "
        "too deeply\n"
    )


def test_deeply_nested_json_in_a_file_the_target_cannot_run_is_a_broken_page(case: Case) -> None:
    case.publish(case.pypi, case.wheel("evil", "2.0"), json=True)
    windows = entry("evil-2.0-cp312-cp312-win_amd64.whl", deep=0)
    json_page(case.pypi, "evil", [windows, entry(WHEEL)])
    page = case.pypi.root / "simple" / "evil" / "index.json"
    page.write_text(page.read_text().replace('"deep": 0', '"deep": ' + "[" * 200_000))
    err = refused(case, case.stack(requirements=["evil"]))
    assert err == (
        f"error[index]: index pypi: {case.pypi.simple_url}evil/: broken PEP 691 JSON: nested "
        "too deeply\n"
    )


def test_an_html_link_that_is_no_url_is_a_broken_page(case: Case) -> None:
    case.publish(case.pypi, case.wheel("evil", "2.0"))
    html_page(case.pypi, "evil", ["http://u:SECRET@[::1/evil-2.0-py3-none-any.whl"])
    err = refused(case, case.stack(requirements=["evil"]))
    assert err == (
        f"error[index]: index pypi: {case.pypi.simple_url}evil/: link "
        "'http://***@[::1/evil-2.0-py3-none-any.whl' is not a URL\n"
    )
