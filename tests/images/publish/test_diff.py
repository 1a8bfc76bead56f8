"""Lock diffs by distribution: added, removed, version changed, local label only, same
version with another file; and the rendered diff."""

from __future__ import annotations

from packaging.utils import canonicalize_name

from images.publish.diff import DiffSide, classify_lock_diff, render_diff
from manifest import Target
from resolver.lockfile import Lock, LockedPackage


def _pkg(name: str, version: str, sha: str = "0") -> LockedPackage:
    return LockedPackage(
        name=canonicalize_name(name),
        version=version,
        index="vendor",
        index_url="http://127.0.0.1/simple",
        filename=f"{name}-{version}-py3-none-any.whl",
        url=f"http://127.0.0.1/{name}.whl",
        sha256=sha * 64,
        size=1,
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


def test_classify_lock_diff() -> None:
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
    d = classify_lock_diff(a, b)
    assert d.added == (("new", "2.0"),)
    assert d.removed == (("gone", "1.0"),)
    assert d.version_changed == (("numpy", "1.26.3", "1.26.4"),)
    assert d.label_changed == (("torch", "2.11.0.post2+musa5.2.0", "2.11.0.post2+musa5.2.0s5000"),)
    assert d.file_changed == (
        ("mate", "mate-0.2.7-py3-none-any.whl", "mate-0.2.7-py3-none-any.whl"),
    )


def test_label_gained_or_lost_is_a_label_change() -> None:
    d = classify_lock_diff(_lock(_pkg("mate", "0.2.7")), _lock(_pkg("mate", "0.2.7+musa")))
    assert d.label_changed == (("mate", "0.2.7", "0.2.7+musa"),)
    assert d.version_changed == ()


def test_render_diff_of_two_locks() -> None:
    a = DiffSide(name="a", lock=_lock(_pkg("torch", "2.11.0.post2+musa5.2.0")))
    b = DiffSide(name="b", lock=_lock(_pkg("torch", "2.11.0.post2+musa5.2.0s5000")))
    assert render_diff(a, b) == [
        "--- a",
        "+++ b",
        "local label only (same public version, another build) (1):",
        "  ~ torch 2.11.0.post2+musa5.2.0 -> 2.11.0.post2+musa5.2.0s5000",
    ]
    assert render_diff(a, a)[2:] == [
        "the locks install the same distributions at the same versions"
    ]


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
    assert render_diff(a, b)[3:] == [
        "image (5):",
        f"  image id: sha256:{'1' * 64} -> sha256:{'2' * 64}",
        "  base image: (not labelled) (same)",
        f"  revision: {'a' * 40} (same)",
        "  tooling revision: 1111 -> 2222",
        f"  io.vllm-musa.vllm.revision: {'c' * 40} -> {'d' * 40}",
    ]
    lock_side = DiffSide(name="lock", lock=lock)
    assert render_diff(a, lock_side)[3:] == [
        "image a (the other side is a lock) (4):",
        f"  image id: sha256:{'1' * 64}",
        "  base image: (not labelled)",
        f"  revision: {'a' * 40}",
        "  tooling revision: 1111",
    ]
