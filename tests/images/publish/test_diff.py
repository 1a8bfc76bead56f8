"""Lock diffs by distribution: added, removed, version changed, local label only, same
version with another file; the table with sizes, the ``--json`` document, and the command's
exit codes (0 same, 1 different, 2 trouble) on real locks from real indexes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from packaging.utils import canonicalize_name

from core.tables import render_table
from images.publish.diff import (
    DiffSide,
    diff_document,
    differs,
    distribution_rows,
    render_diff,
)
from manifest import Target
from resolver.lockfile import Lock, LockedPackage
from tests.support.lockcase import PIN_TORCH, Case, numpy_world


def _pkg(name: str, version: str, sha: str = "0", *, size: int | None = 1) -> LockedPackage:
    return LockedPackage(
        name=canonicalize_name(name),
        version=version,
        index="vendor",
        index_url="http://127.0.0.1/simple",
        filename=f"{name}-{version}-py3-none-any.whl",
        url=f"http://127.0.0.1/{name}.whl",
        sha256=sha * 64,
        size=size,
        kind="pure",
        origin="pin",
        required_by=(),
    )


def _lock(*packages: LockedPackage) -> Lock:
    return Lock(
        stack="pubtest",
        target=Target(python=(3, 12), arch="x86_64", glibc=(2, 35)),
        lock_inputs_sha256="a" * 64,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
    )


def _changes(a: Lock, b: Lock) -> list[tuple[str, str, str, str]]:
    """(name, change, a's version, b's version) of each distribution that differs."""
    return [
        (r.name, r.change, r.a.version if r.a else "-", r.b.version if r.b else "-")
        for r in distribution_rows(a, b)
    ]


def test_distributions_differ_by_version_label_file_or_presence() -> None:
    a = _lock(
        _pkg("torch", "2.11.0.post2+musa5.2.0"),
        _pkg("numpy", "1.26.3"),
        _pkg("gone", "1.0"),
        _pkg("mate", "0.2.7", "1"),
    )
    b = _lock(
        _pkg("torch", "2.11.0.post2+musa5.2.0s5000"),
        _pkg("numpy", "1.26.4"),
        _pkg("new", "2.0"),
        _pkg("mate", "0.2.7", "2"),
    )
    assert _changes(a, b) == [
        ("gone", "removed", "1.0", "-"),
        ("mate", "file", "0.2.7", "0.2.7"),
        ("new", "added", "-", "2.0"),
        ("numpy", "version", "1.26.3", "1.26.4"),
        ("torch", "label", "2.11.0.post2+musa5.2.0", "2.11.0.post2+musa5.2.0s5000"),
    ]


def test_label_gained_or_lost_is_a_label_change() -> None:
    a, b = _lock(_pkg("mate", "0.2.7")), _lock(_pkg("mate", "0.2.7+musa"))
    assert _changes(a, b) == [("mate", "label", "0.2.7", "0.2.7+musa")]


def test_a_file_at_another_url_installs_the_same_distribution() -> None:
    moved = replace(_pkg("mate", "0.2.7"), url="http://mirror.example/mate.whl", size=2)
    assert _changes(_lock(_pkg("mate", "0.2.7")), _lock(moved)) == []


def test_render_diff_of_two_locks_is_a_table_by_distribution_with_sizes() -> None:
    a = DiffSide(
        name="a",
        lock=_lock(
            _pkg("torch", "2.11.0.post2+musa5.2.0", size=2_100_000_000),
            _pkg("numpy", "1.26.3", size=18_000_000),
            _pkg("gone", "1.0", size=900),
            _pkg("mate", "0.2.7", "1", size=None),
        ),
    )
    b = DiffSide(
        name="b",
        lock=_lock(
            _pkg("torch", "2.11.0.post2+musa5.2.0s5000", size=2_200_000_000),
            _pkg("numpy", "1.26.4", size=18_300_000),
            _pkg("new", "2.0", size=45_000),
            _pkg("mate", "0.2.7", "2", size=12_000),
        ),
    )
    assert render_diff(a, b) == [
        "--- a",
        "+++ b",
        "5 distributions differ (1 added, 1 removed, 1 version changed, 1 local label only, "
        "1 same version, other file):",
        "  distribution  change   a                       b                              "
        "size a    size b",
        "  gone          removed  1.0                     -                               "
        "900 B         -",
        "  mate          file     0.2.7                   0.2.7                               "
        "?  12.00 kB",
        "  new           added    -                       2.0                                 "
        "-  45.00 kB",
        "  numpy         version  1.26.3                  1.26.4                       "
        "18.00 MB  18.30 MB",
        "  torch         label    2.11.0.post2+musa5.2.0  2.11.0.post2+musa5.2.0s5000   "
        "2.10 GB   2.20 GB",
        "a: 4 distributions, 2.12 GB, 1 without a size",
        "b: 4 distributions, 2.22 GB (size change: +100.36 MB)",
    ]
    assert render_diff(a, a)[2:] == [
        "the locks install the same distributions at the same versions",
        "a: 4 distributions, 2.12 GB, 1 without a size",
        "b: 4 distributions, 2.12 GB, 1 without a size (size change: 0 B)",
    ]
    assert differs(a, b)
    assert not differs(a, a)


def test_images_compare_the_product_revision_and_the_tooling_revision_apart() -> None:
    lock = _lock(_pkg("torch", "2.11.0.post2+musa5.2.0"))
    a = DiffSide(
        name="a",
        lock=lock,
        image_id="sha256:" + "1" * 64,
        labels={
            "org.opencontainers.image.revision": "a" * 40,
            "io.vllm-musa.tooling.revision": "1111",
            "io.vllm-musa.vllm.revision": "c" * 40,
        },
    )
    b = DiffSide(
        name="b",
        lock=lock,
        image_id="sha256:" + "2" * 64,
        labels={
            "org.opencontainers.image.revision": "a" * 40,
            "io.vllm-musa.tooling.revision": "2222",
            "io.vllm-musa.vllm.revision": "d" * 40,
        },
    )
    assert render_diff(a, b)[5:] == [
        "image (5):",
        f"  image id: sha256:{'1' * 64} -> sha256:{'2' * 64}",
        "  base image: (not labelled) (same)",
        f"  revision: {'a' * 40} (same)",
        "  tooling revision: 1111 -> 2222",
        f"  io.vllm-musa.vllm.revision: {'c' * 40} -> {'d' * 40}",
    ]
    lock_side = DiffSide(name="lock", lock=lock)
    assert render_diff(a, lock_side)[5:] == [
        "image a (the other side is a lock) (4):",
        f"  image id: sha256:{'1' * 64}",
        "  base image: (not labelled)",
        f"  revision: {'a' * 40}",
        "  tooling revision: 1111",
    ]


# ------------------------------------------------------------------------------ the command


def _two_locks(case: Case) -> tuple[Path, Path, dict[str, Path]]:
    """Two real locks of one stack, from real indexes: numpy moves on, filelock comes in."""
    wheels = numpy_world(case)
    old, new = case.tmp / "old.lock", case.tmp / "new.lock"
    assert case.run("lock", case.stack(PIN_TORCH, ["numpy==1.26.4"]), "--out", old).code == 0
    case.publish(case.pypi, wheels["numpy-1.26.5"])
    stack = case.stack(PIN_TORCH, ["numpy>=1.26.4", "filelock"])
    assert case.run("lock", stack, "--out", new).code == 0
    return old, new, wheels


def _human(size: int) -> str:
    return f"{size} B" if size < 1000 else f"{size / 1000:.2f} kB"


def test_diff_of_two_real_locks_exits_1_and_shows_the_table(case: Case) -> None:
    old, new, wheels = _two_locks(case)
    result = case.run("diff", old, new)
    assert result.code == 1, result.err
    assert result.err == ""
    size = {k: w.stat().st_size for k, w in wheels.items()}
    total_old = size["torch"] + size["numpy-1.26.4"]
    total_new = total_old - size["numpy-1.26.4"] + size["numpy-1.26.5"] + size["filelock"]
    table = render_table(
        [
            ("distribution", "change", "a", "b", "size a", "size b"),
            ("filelock", "added", "-", "3.17.0", "-", _human(size["filelock"])),
            (
                "numpy",
                "version",
                "1.26.4",
                "1.26.5",
                _human(size["numpy-1.26.4"]),
                _human(size["numpy-1.26.5"]),
            ),
        ],
        right=(4, 5),
    )
    assert result.out.splitlines() == [
        f"--- {old}",
        f"+++ {new}",
        "2 distributions differ (1 added, 1 version changed):",
        *table,
        f"a: 2 distributions, {_human(total_old)}",
        f"b: 3 distributions, {_human(total_new)} (size change: +{_human(total_new - total_old)})",
    ]


def test_diff_of_a_lock_with_itself_exits_0(case: Case) -> None:
    old, _, _ = _two_locks(case)
    result = case.run("diff", old, old / "pylock.toml")
    assert result.code == 0, result.err
    assert result.out.splitlines()[2] == (
        "the locks install the same distributions at the same versions"
    )
    same = case.run("diff", old, old, "--json")
    assert same.code == 0
    assert json.loads(same.out)["same"] is True
    assert same.err.splitlines()[0] == f"--- {old}"  # the text goes to stderr


def test_diff_json_of_two_real_locks(case: Case) -> None:
    old, new, wheels = _two_locks(case)
    result = case.run("diff", old, new, "--json")
    assert result.code == 1, result.err
    assert result.out == json.dumps(json.loads(result.out), indent=2, sort_keys=True) + "\n"

    def entry(key: str, version: str) -> dict[str, object]:
        w = wheels[key]
        sha = hashlib.sha256(w.read_bytes()).hexdigest()
        return {"filename": w.name, "sha256": sha, "size": w.stat().st_size, "version": version}

    size = {k: w.stat().st_size for k, w in wheels.items()}
    target = "CPython 3.12 (cp312), linux x86_64, glibc 2.35"
    assert json.loads(result.out) == {
        "a": {
            "image": None,
            "name": str(old),
            "packages": 2,
            "size_bytes": size["torch"] + size["numpy-1.26.4"],
            "target": target,
            "without_size": 0,
        },
        "b": {
            "image": None,
            "name": str(new),
            "packages": 3,
            "size_bytes": size["torch"] + size["numpy-1.26.5"] + size["filelock"],
            "target": target,
            "without_size": 0,
        },
        "distributions": [
            {"a": None, "b": entry("filelock", "3.17.0"), "change": "added", "name": "filelock"},
            {
                "a": entry("numpy-1.26.4", "1.26.4"),
                "b": entry("numpy-1.26.5", "1.26.5"),
                "change": "version",
                "name": "numpy",
            },
        ],
        "image_differences": [],
        "same": False,
        "schema": "build-image/diff/1",
        "target_changed": False,
    }


def test_trouble_in_diff_exits_2_also_for_what_would_be_a_refusal(case: Case) -> None:
    old, _, _ = _two_locks(case)
    broken = case.tmp / "broken.toml"
    broken.write_text("lock-version = [\n")
    result = case.run("diff", old, broken)
    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("error[lock]: ")
    under_json = case.run("diff", old, broken, "--json")
    assert under_json.code == 2
    doc = json.loads(under_json.out)
    assert (doc["schema"], doc["command"]) == ("build-image/error/1", "diff")
    assert (doc["error"]["code"], doc["error"]["exit_code"]) == ("lock", 2)
    missing = case.run("diff", old, case.tmp / "nothing.lock")
    assert (missing.code, missing.err.splitlines()[0]) == (
        2,
        f"error[usage]: {case.tmp / 'nothing.lock'}: no such lock file or directory",
    )


def test_two_images_with_one_lock_differ_by_their_rows() -> None:
    lock = _lock(_pkg("torch", "2.11.0.post2+musa5.2.0", size=5))
    labels = {"org.opencontainers.image.revision": "a" * 40}
    a = DiffSide(name="a", lock=lock, image_id="sha256:" + "1" * 64, labels=labels)
    b = DiffSide(
        name="b",
        lock=lock,
        image_id="sha256:" + "2" * 64,
        labels=labels | {"io.vllm-musa.tooling.revision": "2222"},
        built_from={"vllm": "c" * 40},
    )
    doc = diff_document(a, b)
    assert doc["same"] is False
    assert doc["distributions"] == []
    assert doc["image_differences"] == ["image id", "tooling revision", "source vllm"]
    assert doc["b"]["image"] == {
        "base_image": "(not labelled)",
        "built_from": {"vllm": "c" * 40},
        "image_id": "sha256:" + "2" * 64,
        "labels": {
            "io.vllm-musa.tooling.revision": "2222",
            "org.opencontainers.image.revision": "a" * 40,
        },
        "revision": "a" * 40,
        "tooling_revision": "2222",
    }
    assert diff_document(a, a)["same"] is True
    assert not differs(a, a)
    lock_side = DiffSide(name="lock", lock=lock)
    one = diff_document(a, lock_side)
    assert (one["same"], one["image_differences"], one["b"]["image"]) == (True, [], None)
