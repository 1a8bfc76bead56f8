"""Lock files: round trip through pylock.toml, readable diffs, refusals of broken locks."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from packaging.pylock import Pylock
from packaging.utils import canonicalize_name

from core.errors import LockError, UsageError
from manifest import Target, parse_manifest
from resolver.endpoints import effective_endpoints
from resolver.lock_report import lock_changes, moved_packages
from resolver.lockfile import (
    Lock,
    LockedPackage,
    constrained_names,
    diff_locks,
    parse_pylock,
    render_all,
    render_pylock,
    render_requirements,
    write_lock,
)
from testbed.manifests import stack_text
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, read_toml

TARGET = Target(python=(3, 12), arch="x86_64", glibc=(2, 35))


def pkg(name: str, version: str, **kw: object) -> LockedPackage:
    fields: dict[str, object] = {
        "name": canonicalize_name(name),
        "version": version,
        "index": "pypi",
        "index_url": "https://pypi.org/simple/",
        "filename": f"{name}-{version}-py3-none-any.whl",
        "url": f"https://files.example/{name}-{version}-py3-none-any.whl",
        "sha256": "ab" * 32,
        "size": 10,
        "kind": "pure",
        "origin": "requirement",
        "required_by": ("(requirements)",),
    }
    fields.update(kw)
    return LockedPackage(**fields)  # type: ignore[arg-type]


def lock(*packages: LockedPackage) -> Lock:
    return Lock(stack="t", target=TARGET, lock_inputs_sha256="0" * 64, packages=packages)


def test_the_constraints_file_gives_the_locked_names_without_the_lock_parsed(
    tmp_path: Path,
) -> None:
    assert constrained_names(tmp_path / "none") == []
    write_lock(tmp_path / "lock", lock(pkg("filelock", "3.17.0"), pkg("Zope.Interface", "7.2")))
    assert constrained_names(tmp_path / "lock") == ["filelock", "zope-interface"]


def test_pylock_round_trip() -> None:
    original = lock(pkg("filelock", "3.17.0"), pkg("setuptools", "80.0", group="build"))
    text = render_pylock(original)
    assert parse_pylock(text, where="x") == original
    assert 'dependency-groups = [\n    "build",\n]' in text


def test_diff_names_every_kind_of_change() -> None:
    old = lock(
        pkg("a", "1.0"), pkg("b", "1.0"), pkg("c", "1.0"), pkg("d", "1.0"), pkg("e", "1.0"),
        pkg("g", "1.0"),
    )  # fmt: skip
    new = lock(
        pkg("a", "2.0"),
        dataclasses.replace(pkg("b", "1.0"), sha256="cd" * 32),
        dataclasses.replace(pkg("c", "1.0"), index="vendor"),
        dataclasses.replace(pkg("d", "1.0"), group="build"),
        pkg("f", "1.0"),
        dataclasses.replace(  # the same file through a mirror of the same index
            pkg("g", "1.0"),
            index_url="https://mirror.example/simple/",
            url="https://mirror.example/files/g-1.0-py3-none-any.whl",
        ),
    )
    assert diff_locks(old, new) == [
        "~ a 1.0 -> 2.0",
        "~ b 1.0: b-1.0-py3-none-any.whl changed bytes under the same name "
        "(sha256 abababababababab... -> cdcdcdcdcdcdcdcd...)",
        "~ c 1.0: index pypi -> vendor",
        "~ d 1.0: group runtime -> build",
        "- e 1.0 (e-1.0-py3-none-any.whl) gone from the resolve",
        "+ f 1.0 (f-1.0-py3-none-any.whl) new",
    ]
    assert moved_packages(lock_changes(old, new)) == ["g 1.0"]  # not drift: moved


def test_lock_with_a_bad_hash_is_a_lock_error() -> None:
    text = render_pylock(lock(pkg("a", "1.0"))).replace("ab" * 32, "../../etc/passwd")
    with pytest.raises(LockError) as info:
        parse_pylock(text, where="stack/t.lock/pylock.toml")
    assert info.value.message == (
        "stack/t.lock/pylock.toml: not a valid lock: sha256 of 'a-1.0-py3-none-any.whl' is not a "
        "hex digest"
    )


@pytest.mark.parametrize(
    ("filename", "problem"),
    [
        ("a-1.0-1/../../../../escape-py3-none-any.whl", "holds '/', a path separator"),
        ("a-1.0-1\\..\\escape-py3-none-any.whl", "holds '\\\\', a path separator"),
        ("a-1.0-1$(reboot)-py3-none-any.whl", "holds '$', which no wheel or sdist filename "
         "has (only letters, digits and . _ + ! -)"),
        ("a-1.0-1\x1b[2J-py3-none-any.whl", "holds the control or invisible character U+001B"),
    ],
)  # fmt: skip
def test_a_tampered_lock_with_a_filename_that_is_a_path_is_refused(
    filename: str, problem: str
) -> None:
    text = render_pylock(lock(pkg("a", "1.0")))
    text = text.replace('name = "a-1.0-py3-none-any.whl"', f"name = {json.dumps(filename)}")
    Pylock.from_dict(read_toml(text))  # packaging.pylock accepts these names: we do not
    with pytest.raises(LockError) as info:
        parse_pylock(text, where="stack/t.lock/pylock.toml")
    shown = filename.replace("\\", "\\\\").replace("\x1b", "\\x1b")
    assert info.value.message == (
        f"stack/t.lock/pylock.toml: not a valid lock: a: the file name {shown} {problem}; "
        "a filename is data, never a path"
    )


def test_a_tampered_lock_is_refused_when_it_is_read(case: Case) -> None:
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"))
    stack = case.stack(requirements=["filelock"])
    assert case.run("lock", stack).code == 0
    pylock = case.lock_dir() / "pylock.toml"
    hostile = "filelock-3.17.0-1/../../../../escape-py3-none-any.whl"
    pylock.write_text(pylock.read_text().replace("filelock-3.17.0-py3-none-any.whl", hostile, 1))
    result = case.run("why", stack, "filelock")
    assert (result.code, result.err) == (
        1,
        f"error[lock]: {pylock}: not a valid lock: filelock: the file name {hostile} holds "
        "'/', a path separator; a filename is data, never a path\n",
    )


def test_index_auth_variable_must_be_user_colon_token() -> None:
    m = parse_manifest(stack_text(release="1"), path=Path("stack/t.yaml"))
    with pytest.raises(UsageError) as info:
        effective_endpoints(m, {}, {"BUILD_IMAGE_INDEX_PYPI_AUTH": "just-a-token"})
    assert info.value.message == "BUILD_IMAGE_INDEX_PYPI_AUTH must be user:token"
    assert "just-a-token" not in str(info.value.hint)


def test_lock_out_into_an_existing_directory_keeps_its_other_files(
    case: Case, tmp_path: Path
) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    out = tmp_path / "work"
    out.mkdir()
    (out / "notes.txt").write_text("precious\n")
    result = case.run("lock", case.stack(PIN_TORCH), "--out", out)
    assert (out / "notes.txt").read_text() == "precious\n"
    assert result.code == 1
    assert result.err == (
        f"error[lock]: {out} holds files that are not part of a lock (notes.txt); writing the "
        "lock replaces the whole directory\nhint: choose a new or empty --out DIR\n"
    )


def sdist(name: str, version: str, source: str) -> LockedPackage:
    return pkg(
        name,
        version,
        filename=f"{name}-{version}.tar.gz",
        url=f"https://files.example/{name}-{version}.tar.gz",
        kind="sdist",
        origin="source",
        required_by=(f"(sources.{source})",),
        group="source",
    )


def overridden(name: str, version: str, reason: str, *ignores: str) -> LockedPackage:
    return pkg(
        name,
        version,
        filename=f"{name.replace('-', '_')}-{version}-py3-none-any.whl",
        origin="override",
        required_by=("(overrides)",),
        override_reason=reason,
        override_ignores=ignores,
    )


OPENCV = overridden(
    "opencv-python-headless",
    "4.11.0.86",
    "numpy 1.26 for the MUSA stack",
    "mistral-common 1.11.6 requires opencv-python-headless>=4.13.0",
    "vllm 0.28.0 (sources.vllm:requirements/common.txt) requires opencv-python-headless>=4.13.0",
)


def test_an_sdist_is_locked_in_pylock_only() -> None:
    the_lock = lock(pkg("numpy", "1.26.4"), sdist("vllm", "0.28.0", "vllm"))
    text = render_pylock(the_lock)
    assert parse_pylock(text, where="x") == the_lock
    doc = read_toml(text)
    assert doc["dependency-groups"] == ["source"]
    assert doc["default-groups"] == []
    entry = doc["packages"][1]
    assert entry["marker"] == "'source' in dependency_groups"
    assert "wheels" not in entry
    assert entry["sdist"] == {
        "name": "vllm-0.28.0.tar.gz",
        "url": "https://files.example/vllm-0.28.0.tar.gz",
        "size": 10,
        "hashes": {"sha256": "ab" * 32},
    }
    assert entry["tool"]["vllm-musa-image"] == {
        "index-name": "pypi",
        "kind": "sdist",
        "origin": "source",
        "required-by": ["(sources.vllm)"],
    }
    files = render_all(the_lock)
    assert sorted(files) == ["constraints.txt", "pylock.toml", "requirements.txt"]
    body = {n: [x for x in files[n].decode().splitlines() if not x.startswith("#")] for n in files}
    assert body["constraints.txt"] == ["numpy==1.26.4"]
    assert body["requirements.txt"] == ["numpy==1.26.4 \\", f"    --hash=sha256:{'ab' * 32}"]
    assert [p.name for p in the_lock.sources()] == ["vllm"]
    assert [p.name for p in the_lock.wheels()] == ["numpy"]
    assert [p.name for p in the_lock.runtime()] == ["numpy"]


def test_an_override_is_recorded_in_pylock_and_above_its_requirement() -> None:
    the_lock = lock(pkg("numpy", "1.26.4"), OPENCV)
    text = render_pylock(the_lock)
    assert parse_pylock(text, where="x") == the_lock
    assert (
        "[packages.tool.vllm-musa-image.override]\n"
        'reason = "numpy 1.26 for the MUSA stack"\n'
        "ignores = [\n"
        '    "mistral-common 1.11.6 requires opencv-python-headless>=4.13.0",\n'
        '    "vllm 0.28.0 (sources.vllm:requirements/common.txt) requires '
        'opencv-python-headless>=4.13.0",\n'
        "]\n"
    ) in text
    reqs = render_requirements(the_lock).splitlines()
    assert reqs[5:] == [
        "numpy==1.26.4 \\",
        f"    --hash=sha256:{'ab' * 32}",
        "# override: numpy 1.26 for the MUSA stack; ignores: mistral-common 1.11.6 requires "
        "opencv-python-headless>=4.13.0, vllm 0.28.0 (sources.vllm:requirements/common.txt) "
        "requires opencv-python-headless>=4.13.0",
        "opencv-python-headless==4.11.0.86 \\",
        f"    --hash=sha256:{'ab' * 32}",
    ]
    assert the_lock.overrides() == {"opencv-python-headless": OPENCV}
    assert OPENCV.override_requirements() == (
        ("mistral-common 1.11.6", "opencv-python-headless>=4.13.0"),
        ("vllm 0.28.0 (sources.vllm:requirements/common.txt)", "opencv-python-headless>=4.13.0"),
    )


def test_an_override_that_ignores_nothing_says_so() -> None:
    quiet = overridden("numpy", "1.26.4", "the MUSA stack")
    assert quiet.override_comment() == "override: the MUSA stack; ignores: nothing"


def test_diff_names_a_changed_override() -> None:
    old = lock(OPENCV)
    new = lock(dataclasses.replace(OPENCV, override_ignores=OPENCV.override_ignores[1:]))
    assert diff_locks(old, new) == [
        "~ opencv-python-headless 4.11.0.86: override: numpy 1.26 for the MUSA stack; ignores: "
        "mistral-common 1.11.6 requires opencv-python-headless>=4.13.0, vllm 0.28.0 "
        "(sources.vllm:requirements/common.txt) requires opencv-python-headless>=4.13.0 -> "
        "override: numpy 1.26 for the MUSA stack; ignores: vllm 0.28.0 "
        "(sources.vllm:requirements/common.txt) requires opencv-python-headless>=4.13.0"
    ]


def test_a_lock_written_before_sources_and_overrides_still_reads() -> None:
    text = render_pylock(lock(pkg("filelock", "3.17.0"), pkg("setuptools", "80.0", group="build")))
    assert "override" not in text
    got = parse_pylock(text, where="x")
    assert [(p.name, p.group, p.override_reason, p.override_ignores) for p in got.packages] == [
        ("filelock", "runtime", None, ()),
        ("setuptools", "build", None, ()),
    ]
