"""testbed.distributions: wheels and sdists are valid, deterministic and install with pip."""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
from packaging.metadata import Metadata
from packaging.tags import parse_tag
from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import Version

from core.errors import MetadataError
from resolver.wheel_metadata import check_matches_filename, parse_core_metadata
from testbed.distributions import (
    WheelFactory,
    WheelSpec,
    build_sdist,
    build_wheel,
    read_wheel_metadata,
)
from tests.testbed.common import MATE, TILELANG, TORCH


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
