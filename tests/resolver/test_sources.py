"""Sources in the lock, end to end through the CLI on real HTTP indexes: an sdist locked by its
hash, requirements files as roots, the sdist's project provided by the image."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import pytest

import resolver.source_inputs
from manifest import lock_inputs_sha256, parse_manifest
from resolver.lockfile import load_lock
from testbed.simple_index import Listing
from tests.sources.sdistgen import write_sdist
from tests.support.gitrepo import git as run_git
from tests.support.lockcase import NATIVE, Case, read_toml, refused

COMMON = "requirements/common.txt"
BUILD = "requirements/build/cuda.txt"
VLLM_SDIST = (
    '  vllm: {sdist: {index: pypi, version: "0.28.0"}, '
    f"requirements_files: [{COMMON}], build_requirements_files: [{BUILD}]}}\n"
)


def vllm_sdist(case: Case, common: str = "numpy\n", build: str = "cmake>=3.26\n") -> Path:
    return write_sdist(
        case.wheels, "vllm-0.28.0.tar.gz", {COMMON: common, BUILD: build, "setup.py": ""}
    )


def body(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if not line.startswith("#")]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def publish_basics(case: Case) -> None:
    case.publish(
        case.pypi,
        case.wheel("numpy", "1.26.4", NATIVE),
        case.wheel("cmake", "3.31.0", "py3-none-manylinux_2_17_x86_64"),
    )


# ----------------------------------------------------------------------------- sdists


def test_the_sdist_is_locked_by_hash_and_kept_out_of_the_pip_files(case: Case) -> None:
    sdist = vllm_sdist(case)
    publish_basics(case)
    case.publish(case.pypi, sdist, case.wheel("vllm", "0.28.0", "cp38-abi3-manylinux1_x86_64"))
    stack = case.stack(extra="sources:\n" + VLLM_SDIST)
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    lock_dir = case.lock_dir()
    assert body(lock_dir / "requirements.txt") == [
        "numpy==1.26.4 \\",
        f"    --hash=sha256:{sha256(case.wheels / 'numpy-1.26.4-cp312-cp312-linux_x86_64.whl')}",
    ]
    assert body(lock_dir / "constraints.txt") == ["cmake==3.31.0", "numpy==1.26.4"]
    assert [x for x in body(lock_dir / "requirements-build.txt") if "==" in x] == [
        "cmake==3.31.0 \\"
    ]
    doc = read_toml((lock_dir / "pylock.toml").read_text())
    entry = next(p for p in doc["packages"] if p["name"] == "vllm")
    assert entry == {
        "name": "vllm",
        "version": "0.28.0",
        "marker": "'source' in dependency_groups",
        "index": case.pypi.simple_url,
        "sdist": {
            "name": "vllm-0.28.0.tar.gz",
            "url": f"{case.pypi.url}/files/vllm-0.28.0.tar.gz",
            "size": sdist.stat().st_size,
            "hashes": {"sha256": sha256(sdist)},
        },
        "tool": {
            "vllm-musa-image": {
                "index-name": "pypi",
                "kind": "sdist",
                "origin": "source",
                "required-by": ["(sources.vllm)"],
            }
        },
    }
    numpy = next(p for p in doc["packages"] if p["name"] == "numpy")
    assert numpy["tool"]["vllm-musa-image"]["required-by"] == [
        "(sources.vllm:requirements/common.txt)"
    ]
    lock = load_lock(lock_dir)
    assert [(p.name, p.filename, p.sha256) for p in lock.sources()] == [
        ("vllm", "vllm-0.28.0.tar.gz", sha256(sdist))
    ]
    assert case.run("lock", stack, "--check").code == 0


def test_an_index_without_hashes_still_locks_the_downloaded_bytes(case: Case) -> None:
    sdist = vllm_sdist(case)
    publish_basics(case)
    case.publish(case.pypi, Listing(path=sdist, hash="none"))
    result = case.run("lock", case.stack(extra="sources:\n" + VLLM_SDIST), "--no-verify")
    assert result.code == 0, result.err
    (vllm,) = load_lock(case.lock_dir()).sources()
    assert (vllm.sha256, vllm.size) == (sha256(sdist), sdist.stat().st_size)


def test_a_tampered_sdist_is_refused_naming_the_file(case: Case) -> None:
    sdist = vllm_sdist(case)
    publish_basics(case)
    case.publish(case.pypi, sdist)
    advertised = sha256(sdist)
    tampered = vllm_sdist(case, common="numpy\nevil-package\n")
    case.pypi.replace(f"/files/{sdist.name}", tampered.read_bytes())
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        f"error[hash-mismatch]: sources.vllm.sdist: index pypi gives sha256={advertised} for "
        f"vllm-0.28.0.tar.gz, but the downloaded bytes hash to {sha256(tampered)}\n"
        "hint: the index serves other bytes than it advertises; do not use them until the "
        "index owner explains the change\n"
    )
    assert not any(case.cache.glob("files/sha256/*/*"))


def test_a_cached_sdist_that_changed_is_removed_and_fetched_again(case: Case) -> None:
    sdist = vllm_sdist(case)
    publish_basics(case)
    case.publish(case.pypi, sdist)
    stack = case.stack(extra="sources:\n" + VLLM_SDIST)
    assert case.run("lock", stack).code == 0
    before = (case.lock_dir() / "pylock.toml").read_bytes()
    sha = sha256(sdist)
    cached = case.cache / "files" / "sha256" / sha[:2] / sha
    cached.chmod(0o600)  # cached files are read-only
    cached.write_bytes(vllm_sdist(case, common="evil\n").read_bytes())
    evil = sha256(cached)
    case.pypi.clear_requests()
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == (
        f"note: the cached file {cached} does not hash to its name (its bytes hash to {evil}); "
        "removed it from the cache\n"
    )
    assert case.pypi.paths().count(f"/files/{sdist.name}") == 1
    assert sha256(cached) == sha
    assert (case.lock_dir() / "pylock.toml").read_bytes() == before


def test_no_sdist_of_that_version(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        write_sdist(case.wheels, "vllm-0.27.0.tar.gz", {COMMON: ""}),
        write_sdist(case.wheels, "vllm-0.28.0.zip", {COMMON: ""}),
        case.wheel("vllm", "0.28.0", "cp38-abi3-manylinux1_x86_64"),
        Listing(path=write_sdist(case.wheels, "vLLM-0.28.0.tar.gz", {COMMON: ""}), yanked="bad"),
    )
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        "error[resolution]: sources.vllm.sdist: no sdist vllm-0.28.0.tar.gz of vllm 0.28.0 on "
        f"index pypi ({case.pypi.simple_url}vllm/)\n"
        "  vLLM-0.28.0.tar.gz: yanked from the index: bad\n"
        "  other sdists on the index: vllm-0.27.0.tar.gz\n"
        "  and 1 wheel, which a source never uses\n"
        "hint: pin sources.vllm.sdist.version to a version the index publishes as an sdist "
        "(.tar.gz), or set sources.vllm.sdist.index to the index that has it\n"
    )


def test_no_sdist_counts_the_wheels_the_target_cannot_run_too(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        write_sdist(case.wheels, "vllm-0.27.0.tar.gz", {COMMON: ""}),
        case.wheel("vllm", "0.28.0", "cp312-cp312-win_amd64"),
        case.wheel("vllm", "0.28.0", "cp38-abi3-macosx_11_0_arm64"),
    )
    stack = case.stack(extra="sources:\n" + VLLM_SDIST)
    for _ in range(2):  # the page parsed, then its parse for the target read from the cache
        assert refused(case, stack) == (
            "error[resolution]: sources.vllm.sdist: no sdist vllm-0.28.0.tar.gz of vllm 0.28.0 "
            f"on index pypi ({case.pypi.simple_url}vllm/)\n"
            "  other sdists on the index: vllm-0.27.0.tar.gz\n"
            "  and 2 wheels, which a source never uses\n"
            "hint: pin sources.vllm.sdist.version to a version the index publishes as an sdist "
            "(.tar.gz), or set sources.vllm.sdist.index to the index that has it\n"
        )


def test_two_sdists_of_one_version(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        vllm_sdist(case),
        write_sdist(case.wheels, "vLLM-0.28.0.tar.gz", {COMMON: ""}),
    )
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        f"error[resolution]: sources.vllm.sdist: index pypi ({case.pypi.simple_url}vllm/) lists "
        "2 sdists of vllm 0.28.0:\n  vLLM-0.28.0.tar.gz\n  vllm-0.28.0.tar.gz\n"
        "hint: the index must publish one sdist per version; ask its owner to remove one\n"
    )


def test_the_sdist_is_looked_up_on_its_own_index_only(case: Case) -> None:
    publish_basics(case)
    case.publish(case.vendor, vllm_sdist(case))  # the right file on another index
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        "error[resolution]: sources.vllm.sdist: vllm is not on index pypi "
        f"({case.pypi.simple_url}vllm/: HTTP 404)\n"
        "hint: an sdist is looked up on its index only; check sources.vllm.sdist.project, or "
        "set sources.vllm.sdist.index to the index that publishes it\n"
    )


def test_an_sdist_larger_than_the_limit_is_refused_before_download(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    sdist = vllm_sdist(case)
    publish_basics(case)
    case.publish(case.pypi, sdist, json=True)  # PEP 691 pages give the size
    monkeypatch.setattr(resolver.source_inputs, "MAX_SDIST_BYTES", 100)
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        f"error[index]: sources.vllm.sdist: vllm-0.28.0.tar.gz on index pypi has "
        f"{sdist.stat().st_size} bytes or more, more than the 100 this file may have\n"
    )
    assert not [p for p in case.pypi.paths() if p.startswith("/files/")]


# ----------------------------------------------------------------------------- provided


def test_a_requirement_on_the_built_project_is_checked_against_the_sdist(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        vllm_sdist(case, common="numpy\nvllm-plugin\n"),
        case.wheel("vllm-plugin", "1.0", requires_dist=("vllm>=0.28",)),
        case.wheel("vllm", "0.29.0", "cp38-abi3-manylinux1_x86_64"),  # never used
    )
    result = case.run("lock", case.stack(extra="sources:\n" + VLLM_SDIST))
    assert result.code == 0, result.err
    assert body(case.lock_dir() / "constraints.txt") == [
        "cmake==3.31.0",
        "numpy==1.26.4",
        "vllm-plugin==1.0",
    ]
    assert not any(p.endswith(".whl") and "/vllm-0" in p for p in case.pypi.paths())


def test_a_requirement_the_sdist_version_does_not_satisfy_names_both_ends(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        vllm_sdist(case, common="numpy\nvllm-plugin\n"),
        case.wheel("vllm-plugin", "1.0", requires_dist=("vllm>=0.29",)),
        case.wheel("vllm", "0.29.0", "cp38-abi3-manylinux1_x86_64"),
    )
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        "error[resolution]: the dependencies cannot be satisfied together:\n"
        "  sources.vllm:requirements/common.txt:2 -> vllm-plugin==1.0 requires vllm>=0.29; but "
        "vllm is built in the image at 0.28.0 (sources.vllm.sdist), never taken from an index\n"
        "hint: if the stack must have these versions anyway, one possible fix is an override "
        'with its reason: overrides: {vllm-plugin: {version: "...", reason: "..."}}; every '
        "requirement on an overridden package is ignored, and each one its version does not "
        "satisfy is recorded in the lock\n"
    )


def test_the_built_project_cannot_also_be_pinned(case: Case) -> None:
    publish_basics(case)
    case.publish(case.pypi, vllm_sdist(case), case.wheel("vllm", "0.28.0", NATIVE))
    stack = case.stack(
        '  vllm: {version: "0.28.0", index: pypi, wheel: native}',
        extra="sources:\n" + VLLM_SDIST,
    )
    err = refused(case, stack)
    assert err == (
        "error[resolution]: packages.vllm: vllm is built in the image from sources.vllm.sdist "
        "(0.28.0); it cannot also be pinned as a wheel\nhint: remove packages.vllm\n"
    )


# ----------------------------------------------------------------------------- requirements files


def test_path_source_requirements_with_an_include_and_markers(case: Case) -> None:
    tree = case.tmp / "demo" / "vllm-musa" / "requirements"
    tree.mkdir(parents=True)
    (tree / "musa.txt").write_text(
        "# the plugin's runtime requirements\n"
        "-r common.txt\n"
        "mthreads-ml-py >= 2.4.1\n"
        "only-windows; sys_platform == 'win32'\n"
    )
    (tree / "common.txt").write_text(
        "six; python_version >= '3.12'\nold-only; python_version < '3.12'\n"
    )
    case.publish(
        case.pypi,
        case.wheel("mthreads-ml-py", "2.4.1"),
        case.wheel("mthreads-ml-py", "2.3.0"),
        case.wheel("six", "1.17.0"),
        case.wheel("only-windows", "1.0"),
        case.wheel("old-only", "1.0"),
    )
    stack = case.stack(
        extra="sources:\n"
        "  vllm-musa: {path: demo/vllm-musa, requirements_files: [requirements/musa.txt]}\n"
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert body(case.lock_dir() / "constraints.txt") == ["mthreads-ml-py==2.4.1", "six==1.17.0"]
    six = next(p for p in load_lock(case.lock_dir()).packages if p.name == "six")
    assert six.required_by == ("(sources.vllm-musa:requirements/common.txt)",)
    assert six.origin == "requirement"
    why = case.run("why", stack, "six")
    assert why.out == "sources.vllm-musa:requirements/common.txt: six 1.17.0\n"


def test_git_source_requirements_are_read_at_the_pinned_commit(case: Case) -> None:
    repo = case.tmp / "upstream"
    repo.mkdir()
    git = functools.partial(run_git, repo)

    git("init", "-q")
    (repo / "requirements.txt").write_text("six\n")
    git("add", "-A")
    git("commit", "-qm", "pinned")
    rev = git("rev-parse", "HEAD")
    (repo / "requirements.txt").write_text("numpy\n")
    git("commit", "-qam", "later")
    case.publish(case.pypi, case.wheel("six", "1.17.0"), case.wheel("numpy", "1.26.4", NATIVE))
    stack = case.stack(
        extra=f'sources:\n  lib: {{git: "file://{repo}", rev: "{rev}", '
        "requirements_files: [requirements.txt]}\n"
    )
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert body(case.lock_dir() / "constraints.txt") == ["six==1.17.0"]


def test_an_extra_index_url_line_is_refused_end_to_end(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        vllm_sdist(case, common="numpy\n--extra-index-url https://flashinfer.ai/whl/\n"),
    )
    err = refused(case, case.stack(extra="sources:\n" + VLLM_SDIST))
    assert err == (
        "error[source]: sources.vllm: requirements/common.txt:2: --extra-index-url "
        "https://flashinfer.ai/whl/: a requirements file cannot add or change an index; the "
        "indexes come from the manifest, and ignoring the line would lock something else than "
        "the file says\n"
        "hint: bind the packages that need that index under packages (with an index of the "
        "manifest), or list requirements files without index options\n"
    )


def test_a_file_requirement_against_a_pin_names_the_line_and_the_pin(case: Case) -> None:
    publish_basics(case)
    case.publish(
        case.pypi,
        vllm_sdist(case, common="# numpy 2 only\nnumpy>=2\n"),
        case.wheel("numpy", "2.1.0", NATIVE),
    )
    stack = case.stack(
        '  numpy: {version: "1.26.4", index: pypi, wheel: native}',
        extra="sources:\n" + VLLM_SDIST,
    )
    err = refused(case, stack)
    # an sdist's files come from its index: they are checked as soon as they are read, before
    # the search (a git or a path source's, before any index is asked: test_contradictions.py)
    assert err == (
        f"error[resolution]: {stack}:10: packages.numpy.version: numpy 1.26.4 is not allowed "
        "by sources.vllm:requirements/common.txt:2: numpy>=2\n"
        "hint: numpy: follow the file (change packages.numpy.version to a version `numpy>=2` "
        "allows), or declare the departure with its reason: overrides.numpy: {version: "
        '"1.26.4", reason: "<why, citing requirements/common.txt>"} beside packages.numpy\n'
    )


def test_lock_inputs_change_with_the_requirements_files(tmp_path: Path) -> None:
    base = (
        'schema: 1\nname: t\nrelease: "0.28.0"\n'
        'target: {python: "3.12", arch: x86_64, glibc: "2.35"}\n'
        'indexes: {pypi: {url: "https://pypi.org/simple/"}}\ndefault_index: pypi\n'
        "sources:\n"
    )
    texts = [
        base + '  vllm: {sdist: {index: pypi, version: "0.28.0"}}\n',
        base + '  vllm: {sdist: {index: pypi, version: "0.28.0"}, requirements_files: [a.txt]}\n',
        base + '  vllm: {sdist: {index: pypi, version: "0.28.0"}, requirements_files: [b.txt]}\n',
        base + '  vllm: {sdist: {index: pypi, version: "0.28.0"}, build_requirements_files: '
        "[a.txt]}\n",
        base + '  vllm: {sdist: {index: pypi, version: "0.28.1"}, requirements_files: [a.txt]}\n',
    ]
    shas = [lock_inputs_sha256(parse_manifest(t, path=tmp_path / "t.yaml")) for t in texts]
    assert len(set(shas)) == len(texts)
    env = texts[1].replace('version: "0.28.0"}', 'version: "0.28.0"}, env: {A: "1"}')
    assert lock_inputs_sha256(parse_manifest(env, path=tmp_path / "t.yaml")) == shas[1]


def test_a_pin_refusal_and_an_sdist_refusal_are_reported_together(case: Case) -> None:
    publish_basics(case)
    case.publish(case.vendor, case.wheel("mate", "0.2.7"))
    stack = case.stack(
        '  torch: {version: "2.11.0", index: mthreads, wheel: native}',
        extra="sources:\n" + VLLM_SDIST,
    )
    err = refused(case, stack)
    assert err == (
        "error[resolution]: packages.torch: torch is not on index mthreads "
        f"({case.vendor.simple_url}torch/: HTTP 404)\n"
        "sources.vllm.sdist: vllm is not on index pypi "
        f"({case.pypi.simple_url}vllm/: HTTP 404)\n"
        "hint: a package bound to an index is looked up there only; check the name, or bind it "
        "to the index that publishes it\n"
        "an sdist is looked up on its index only; check sources.vllm.sdist.project, or set "
        "sources.vllm.sdist.index to the index that publishes it\n"
    )
