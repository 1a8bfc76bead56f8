"""Ties are errors wherever the search meets them: two different files of one version that
rank equally for the target stop the lock, naming the package, the version, the index and
both files; an older version is never taken in silence instead. A tie in a version the
search never tries changes nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from testbed.simple_index import Listing
from tests.support.lockcase import Case, refused

HINT = (
    "hint: the index must publish one file per tag set for a version: ask its owner to remove "
    "one; to lock an older version on purpose, exclude this one in requirements "
    "({name}!={version}, or ,!={version} added to a requirement on {name})\n"
)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tied(case: Case, name: str, version: str) -> tuple[Path, Path]:
    """Two real wheels of ``name`` ``version`` whose best tag is the same (py3-none-any)."""
    return case.wheel(name, version, "py3-none-any"), case.wheel(name, version, "py2.py3-none-any")


def test_a_tie_in_the_newest_version_of_a_dependency_is_an_error(case: Case) -> None:
    a, b = tied(case, "filelock", "3.17.0")
    case.publish(case.pypi, case.wheel("filelock", "3.16.1"), a, b)
    err = refused(case, case.stack(requirements=["filelock"]))
    first, second = sorted((a, b), key=lambda p: p.name)
    assert err == (
        f"error[resolution]: filelock 3.17.0 on index pypi ({case.pypi.simple_url}filelock/): "
        "two different files rank equally for the target, so neither is chosen (and no older "
        "version is taken instead); the search reached it by requirements -> "
        f"filelock==3.17.0:\n  {first.name} (sha256 {sha(first)})\n  {second.name} (sha256 "
        f"{sha(second)})\n" + HINT.format(name="filelock", version="3.17.0")
    )


def test_a_tie_deep_in_the_closure_names_the_chain(case: Case) -> None:
    a, b = tied(case, "idna", "3.10")
    case.publish(
        case.pypi,
        case.wheel("requests", "2.32.3", requires_dist=("idna>=3",)),
        case.wheel("idna", "3.9"),
        a,
        b,
    )
    err = refused(case, case.stack(requirements=["requests"]))
    assert err.startswith(
        f"error[resolution]: idna 3.10 on index pypi ({case.pypi.simple_url}idna/): two "
        "different files rank equally for the target, so neither is chosen (and no older "
        "version is taken instead); the search reached it by requirements -> "
        "requests==2.32.3 -> idna==3.10:\n"
    )


def test_the_same_filename_listed_twice_with_other_hashes_is_a_tie(case: Case) -> None:
    good = case.wheel("filelock", "3.17.0")
    case.publish(case.pypi, case.wheel("filelock", "3.16.1"), good, json=True)
    page = case.pypi.root / "simple" / "filelock" / "index.json"
    doc = json.loads(page.read_text())
    twin = next(f for f in doc["files"] if f["filename"] == good.name)
    doc["files"].append({**twin, "hashes": {"sha256": "0" * 64}})
    page.write_text(json.dumps(doc))
    err = refused(case, case.stack(requirements=["filelock"]))
    assert (
        f":\n  {good.name} (sha256 {sha(good)})\n  {good.name} (sha256 {'0' * 64})\nhint: " in err
    )
    assert err.startswith("error[resolution]: filelock 3.17.0 on index pypi ")


def test_a_tie_in_a_version_the_search_never_tries_is_no_error(case: Case) -> None:
    a, b = tied(case, "filelock", "3.16.1")
    c, d = tied(case, "filelock", "3.18.0")
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"), a, b, c, d)
    result = case.run("lock", case.stack(requirements=["filelock<3.18"]))
    assert result.code == 0, result.err
    assert "filelock==3.17.0" in (case.lock_dir() / "constraints.txt").read_text()


def test_excluding_the_tied_version_locks_the_older_one_on_purpose(case: Case) -> None:
    a, b = tied(case, "filelock", "3.17.0")
    case.publish(case.pypi, case.wheel("filelock", "3.16.1"), a, b)
    result = case.run("lock", case.stack(requirements=["filelock>=3,!=3.17.0"]))
    assert result.code == 0, result.err
    assert "filelock==3.16.1" in (case.lock_dir() / "constraints.txt").read_text()


def test_a_tie_of_files_the_index_hashes_alike_is_one_file(case: Case) -> None:
    good = case.wheel("filelock", "3.17.0")
    case.publish(case.pypi, Listing(path=good), json=True)
    page = case.pypi.root / "simple" / "filelock" / "index.json"
    doc = json.loads(page.read_text())
    doc["files"].append(dict(doc["files"][0]))
    page.write_text(json.dumps(doc))
    result = case.run("lock", case.stack(requirements=["filelock"]))
    assert result.code == 0, result.err
