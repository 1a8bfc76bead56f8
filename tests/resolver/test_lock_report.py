"""What ``lock`` says changed against the previous lock: the table after ``lock`` and the
``--json`` document, against real wheels on real HTTP indexes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, Case, numpy_world


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entry(case: Case, wheel: Path, name: str, version: str, index: str = "pypi") -> dict[str, Any]:
    server = case.pypi if index == "pypi" else case.vendor
    return {
        "filename": wheel.name,
        "group": "runtime",
        "index": index,
        "index_url": server.simple_url,
        "name": name,
        "sha256": _sha(wheel),
        "size": wheel.stat().st_size,
        "url": f"{server.simple_url.removesuffix('simple/')}files/{wheel.name}",
        "version": version,
    }


def test_the_first_lock_says_there_was_none_and_the_second_that_nothing_changed(
    case: Case,
) -> None:
    numpy_world(case)
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    lock = case.lock_dir()
    first = case.run("lock", stack)
    assert first.code == 0, first.err
    assert first.out == (
        f"locked 2 packages for CPython 3.12 (cp312), linux x86_64, glibc 2.35 -> {lock}\n"
        "no previous lock: 2 packages locked for the first time\n"
    )
    second = case.run("lock", stack)
    assert second.out.splitlines()[1:] == ["changes against the previous lock: none"]


def test_the_table_names_each_added_removed_and_changed_distribution(case: Case) -> None:
    wheels = numpy_world(case)
    assert case.run("lock", case.stack(PIN_TORCH, ["numpy==1.26.4", "filelock"])).code == 0
    case.publish(case.pypi, wheels["numpy-1.26.5"])
    result = case.run("lock", case.stack(PIN_TORCH, ["numpy>=1.26.4"]))
    assert result.code == 0, result.err
    assert result.out.splitlines()[1:] == [
        "changes against the previous lock: 0 added, 1 removed, 1 changed",
        "  change   package   previous  now     what",
        "  removed  filelock  3.17.0    -",
        "  changed  numpy     1.26.4    1.26.5  version",
    ]


def test_lock_json_is_the_one_document_on_stdout(case: Case) -> None:
    wheels = numpy_world(case)
    assert case.run("lock", case.stack(PIN_TORCH, ["numpy==1.26.4"])).code == 0
    case.publish(case.pypi, wheels["numpy-1.26.5"])
    stack = case.stack(PIN_TORCH, ["numpy>=1.26.4", "filelock"])
    result = case.run("lock", stack, "--json")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    assert result.out == json.dumps(doc, indent=2, sort_keys=True) + "\n"
    old, new = (_entry(case, wheels[f"numpy-{v}"], "numpy", v) for v in ("1.26.4", "1.26.5"))
    assert doc == {
        "changes": {
            "added": [_entry(case, wheels["filelock"], "filelock", "3.17.0")],
            "changed": [
                {
                    "fields": ["version", "filename", "sha256"]
                    + (["size"] if old["size"] != new["size"] else [])
                    + ["url"],
                    "name": "numpy",
                    "new": new,
                    "old": old,
                }
            ],
            "removed": [],
        },
        "check": False,
        "current": False,
        "lock_dir": str(case.lock_dir()),
        "lock_inputs_changed": True,
        "lock_inputs_sha256": doc["lock_inputs_sha256"],
        "packages": 3,
        "previous_lock": True,
        "schema": "build-image/lock/1",
        "stack": str(stack),
        "target": "CPython 3.12 (cp312), linux x86_64, glibc 2.35",
        "written": True,
    }
    assert len(doc["lock_inputs_sha256"]) == 64
    assert "changes against the previous lock: 1 added, 0 removed, 1 changed" in result.err


def test_lock_check_json_prints_the_drift_and_exits_1(case: Case) -> None:
    wheels = numpy_world(case)
    stack = case.stack(PIN_TORCH, ["numpy>=1.26.4"])
    assert case.run("lock", stack).code == 0
    case.publish(case.pypi, wheels["numpy-1.26.5"])
    result = case.run("lock", stack, "--check", "--json")
    assert result.code == 1
    doc = json.loads(result.out)  # one document: the error adds none
    assert (doc["check"], doc["current"], doc["written"]) == (True, False, False)
    assert [c["name"] for c in doc["changes"]["changed"]] == ["numpy"]
    assert result.err.startswith(f"error[lock]: {case.lock_dir()} is not current for {stack}:\n")
    current = case.run("lock", stack, "--json")
    assert current.code == 0
    again = case.run("lock", stack, "--check", "--json")
    assert again.code == 0, again.err
    assert json.loads(again.out)["current"] is True
    assert again.err.endswith(f"{case.lock_dir()}: current (2 packages)\n")


def test_a_failing_lock_under_json_prints_the_error_document(case: Case) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    stack = case.stack(PIN_TORCH)
    result = case.run("lock", stack, "--json", "--retries", "0")
    assert result.code == 1
    doc = json.loads(result.out)
    assert doc["schema"] == "build-image/error/1"
    assert doc["command"] == "lock"
    assert doc["error"]["code"] == "resolution"
    assert doc["error"]["exit_code"] == 1
    assert result.err.startswith(f"error[resolution]: {doc['error']['message']}\n")
    assert not case.lock_dir().exists()


def test_an_index_credential_never_reaches_the_lock_document(case: Case) -> None:
    numpy_world(case)
    secret = "s3cr3t-token"
    url = case.vendor.simple_url.replace("http://", f"http://bot:{secret}@")
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    result = case.run("lock", stack, "--json", "--index", f"mthreads={url}")
    assert result.code == 0, result.err
    doc = json.loads(result.out)
    torch = next(p for p in doc["changes"]["added"] if p["name"] == "torch")
    assert torch["index_url"] == case.vendor.simple_url
    assert secret not in result.out + result.err


def test_a_previous_lock_that_cannot_be_read_never_blocks_a_new_one(case: Case) -> None:
    numpy_world(case)
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    assert case.run("lock", stack).code == 0
    pylock = case.lock_dir() / "pylock.toml"
    pylock.write_text("lock-version = [\n")
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.out.splitlines()[1:] == ["no previous lock: 2 packages locked for the first time"]
    assert result.err.startswith("note: the previous lock cannot be compared: ")
    assert pylock.read_text().startswith("# PEP 751 lock\n")  # written anew


def test_the_same_files_through_a_mirror_are_moved_not_changed(case: Case) -> None:
    wheels = numpy_world(case)
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    assert case.run("lock", stack).code == 0
    with IndexServer(case.tmp / "mirror-index") as mirror:
        mirror.add(Listing(path=wheels["torch"], hash="none"))
        result = case.run("lock", stack, "--index", f"mthreads={mirror.simple_url}")
    assert result.code == 0, result.err
    assert result.out.splitlines()[1:] == [
        "changes against the previous lock: 0 added, 0 removed, 0 changed, 1 moved (the same "
        "files at other URLs)",
        "  change  package  previous                now                     what",
        "  moved   torch    2.11.0.post2+musa5.2.0  2.11.0.post2+musa5.2.0  url, index_url",
    ]
