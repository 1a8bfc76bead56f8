"""The driven trees of a staged context: PINS and the sdist commit checked before any build,
the record the third-party gate compares the image with, and the sdist unpacking."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from core.errors import SourceError
from images.builder.third_party import check_and_record, record_json
from manifest import parse_manifest
from sources.trees import extract_sdist
from tests.sources.test_third_party_pins_and_patches import OTHER, PATCH, PLAIN, REV, STACK

STACK_WITH_SERIES = STACK.replace(
    "      vllm: {source: vllm, pin: VLLM_COMMIT}\n",
    "      vllm: {source: vllm, pin: VLLM_COMMIT, patches: vllm_musa/patches/series}\n",
)


def _staged(root: Path, *, pins: str = f"VLLM_COMMIT={REV}\n", commit: str = "g2cf0a6915") -> Path:
    sources = root / "sources"
    driver = sources / "vllm-musa"
    (driver / "third_party").mkdir(parents=True)
    (driver / "third_party" / "PINS").write_text(pins)
    series = driver / "vllm_musa" / "patches" / "series"
    series.mkdir(parents=True)
    (series / "0001-envs.patch").write_text(PLAIN)
    (series / "0002-marker.patch").write_text(PATCH)
    tree = driver / "third_party" / "vllm"
    (tree / "vllm" / "__pycache__").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("")
    (tree / "vllm" / "envs.py").write_text("x\n")
    (tree / "vllm" / "_version.py").write_text(f"__commit_id__ = commit_id = '{commit}'\n")
    (tree / "vllm" / "__pycache__" / "envs.cpython-311.pyc").write_bytes(b"\0")
    (tree / "vllm.egg-info").mkdir()
    (tree / "vllm.egg-info" / "top_level.txt").write_text("vllm\n")
    (tree / "setup.py").write_text("")
    return sources


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_record_of_a_driven_tree(tmp_path: Path) -> None:
    m = parse_manifest(STACK_WITH_SERIES, path=tmp_path / "stack.yaml")
    trees = check_and_record(m, _staged(tmp_path))
    assert json.loads(record_json(trees)) == {
        "trees": [
            {
                "source": "vllm",
                "dir": "/vllm-workspace/third_party/vllm",
                "packages": ["vllm"],
                "files": {
                    "vllm/__init__.py": _sha(""),
                    "vllm/_version.py": _sha("__commit_id__ = commit_id = 'g2cf0a6915'\n"),
                    "vllm/envs.py": _sha("x\n"),
                },
                # touched by the series (the marker it adds too), or written by the build
                "exempt": ["vllm/_version.py", "vllm/envs.py", "vllm/platforms/musa_series.py"],
                "series": ["0001-envs.patch", "0002-marker.patch"],
                "pins": [f"VLLM_COMMIT={REV} = sources.vllm.rev"],
            }
        ]
    }


def test_pins_that_disagree_stop_the_build_before_it_starts(tmp_path: Path) -> None:
    m = parse_manifest(STACK_WITH_SERIES, path=tmp_path / "stack.yaml")
    with pytest.raises(SourceError) as err:
        check_and_record(m, _staged(tmp_path, pins=f"VLLM_COMMIT={OTHER}\n"))
    assert err.value.message.startswith(
        f"sources.vllm-musa: third_party/PINS pins VLLM_COMMIT={OTHER}, but sources.vllm.rev is"
    )


def test_an_sdist_of_another_commit_is_refused(tmp_path: Path) -> None:
    m = parse_manifest(STACK_WITH_SERIES, path=tmp_path / "stack.yaml")
    with pytest.raises(SourceError) as err:
        check_and_record(m, _staged(tmp_path, commit="gdeadbeef1"))
    assert err.value.message == (
        f"sources.vllm: the sdist was cut from commit deadbeef1, but sources.vllm.rev is {REV}"
    )


def test_a_driver_without_pins_is_refused(tmp_path: Path) -> None:
    m = parse_manifest(STACK_WITH_SERIES, path=tmp_path / "stack.yaml")
    sources = _staged(tmp_path)
    (sources / "vllm-musa" / "third_party" / "PINS").unlink()
    with pytest.raises(SourceError) as err:
        check_and_record(m, sources)
    assert err.value.message == (
        "sources.vllm-musa: third_party/PINS is not in the tree, so the revisions of vllm "
        "cannot be checked"
    )


def _tar_gz(path: Path, members: dict[str, bytes], *, link: str | None = None) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tar.addfile(ti, io.BytesIO(data))
        if link:
            ti = tarfile.TarInfo(link)
            ti.type = tarfile.SYMTYPE
            ti.linkname = "/etc/passwd"
            tar.addfile(ti)
    return path


def test_an_sdist_unpacks_without_its_top_directory(tmp_path: Path) -> None:
    archive = _tar_gz(
        tmp_path / "vllm-0.28.0.tar.gz",
        {"vllm-0.28.0/setup.py": b"", "vllm-0.28.0/vllm/__init__.py": b"x"},
    )
    extract_sdist(archive, tmp_path / "out", where="sources.vllm")
    assert sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*")) == [
        "setup.py",
        "vllm",
        "vllm/__init__.py",
    ]


def test_an_sdist_with_a_link_or_two_tops_is_refused(tmp_path: Path) -> None:
    linked = _tar_gz(tmp_path / "a.tar.gz", {"a-1/setup.py": b""}, link="a-1/passwd")
    with pytest.raises(SourceError) as err:
        extract_sdist(linked, tmp_path / "out", where="sources.a")
    assert err.value.message == (
        "sources.a: a-1/passwd is a link or a device; an sdist holds files"
    )
    two = _tar_gz(tmp_path / "b.tar.gz", {"b-1/setup.py": b"", "evil/x": b""})
    with pytest.raises(SourceError) as err:
        extract_sdist(two, tmp_path / "out2", where="sources.b")
    assert err.value.message == (
        "sources.b: the sdist has 2 top directories (b-1, evil); an sdist has one"
    )
    assert not (tmp_path / "out2").exists()
