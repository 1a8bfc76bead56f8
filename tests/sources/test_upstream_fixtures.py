"""vllm-musa's real requirements files (tests/sources/fixtures/vllm-musa-1df06c8/): each is
upstream's bytes under a header naming where it comes from, and reads as upstream's pip
reads it (``-r`` includes followed, upstream's line numbers)."""

from __future__ import annotations

import pytest

from sources.requirements_files import read_requirements
from tests.support.upstream_requirements import (
    COMMITS,
    FIXTURE,
    REPOSITORY,
    fixture_reader,
    upstream_file,
)


@pytest.mark.parametrize("path", sorted(COMMITS))
def test_each_fixture_names_its_repository_path_and_commit(path: str) -> None:
    got = upstream_file(path)
    assert got.header["repository"] == REPOSITORY
    assert got.header["path"] == path
    assert got.header["commit"] == COMMITS[path]
    # the body is the copy the header was written for, byte for byte
    assert got.header["body"] == f"git blob {got.blob}"
    assert not got.body.startswith(b"#@")
    header = (FIXTURE / path).read_text().split(got.body.decode(), 1)[0]
    assert "070c0ea09ec266972fd6097937fde97d400d70ed" in header  # what differs at the release


def test_the_tree_is_the_one_the_fixtures_say() -> None:
    assert sorted(str(p.relative_to(FIXTURE)) for p in FIXTURE.rglob("*") if p.is_file()) == sorted(
        COMMITS
    )


def test_musa_txt_includes_the_three_files_and_has_no_pins_of_its_own() -> None:
    assert upstream_file("requirements/musa.txt").body == (
        b"# Common dependencies\n-r common.txt\n-r vllm_common.txt\n-r musa_private.txt\n"
    )
    got = read_requirements(fixture_reader(), ["requirements/musa.txt"], where="sources.vllm-musa")
    files = {r.file for r in got.requirements}
    assert files == {
        "requirements/common.txt",
        "requirements/vllm_common.txt",
        "requirements/musa_private.txt",
    }
    assert len(got.requirements) == 8 + 58 + 16


def test_the_pins_this_stack_departs_from_are_where_upstream_has_them() -> None:
    got = read_requirements(fixture_reader(), ["requirements/musa.txt"], where="sources.vllm-musa")
    at = {(str(r.name), r.location): (r.text, r.via) for r in got.requirements}
    assert at[("torchada", "requirements/common.txt:2")] == (
        "torchada==0.1.81",
        ("requirements/musa.txt:2",),
    )
    assert at[("numpy", "requirements/common.txt:4")] == (
        "numpy==1.26",
        ("requirements/musa.txt:2",),
    )
    assert at[("numpy", "requirements/vllm_common.txt:7")] == (
        "numpy",
        ("requirements/musa.txt:3",),
    )
    assert at[("opencv-python-headless", "requirements/vllm_common.txt:39")] == (
        "opencv-python-headless >= 4.13.0",
        ("requirements/musa.txt:3",),
    )
    assert at[("torch", "requirements/musa_private.txt:15")] == (
        "torch==2.11.0.post2+musa5.2.0",
        ("requirements/musa.txt:4",),
    )
