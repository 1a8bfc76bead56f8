"""The resolver end to end through the CLI, against real wheels on real HTTP indexes.

Every refusal asserts the exact message and that no lock directory was written.
"""

from __future__ import annotations

import gc
import hashlib
import os
import time
from pathlib import Path

import pytest

from resolver.lock import LockResult, StackLocker
from resolver.lockfile import load_lock
from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case, read_toml, refused


def head(case: Case, name: str = "torch", version: str = TORCH, kind: str = "native") -> str:
    return (
        f"error[resolution]: packages.{name}: no acceptable wheel for {name}=={version} ({kind}) "
        f"on index mthreads ({case.vendor.simple_url}{name}/) for CPython 3.12 (cp312), "
        "linux x86_64, glibc 2.35:\n"
    )


# ----------------------------------------------------------------------------- success


def test_lock_writes_three_files_with_hashes(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, requires_dist=("filelock",))
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"), case.wheel("numpy", "1.26.4", NATIVE))
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    lock = case.lock_dir()
    assert sorted(p.name for p in lock.iterdir()) == [
        "constraints.txt",
        "pylock.toml",
        "requirements.txt",
    ]
    sha = hashlib.sha256(torch.read_bytes()).hexdigest()
    reqs = (lock / "requirements.txt").read_text()
    assert f"torch=={TORCH} \\\n    --hash=sha256:{sha}\n" in reqs
    constraints = (lock / "constraints.txt").read_text().splitlines()
    assert [c for c in constraints if not c.startswith("#")] == [
        "filelock==3.17.0",
        "numpy==1.26.4",
        f"torch=={TORCH}",
    ]
    doc = read_toml((lock / "pylock.toml").read_text())
    torch_entry = next(p for p in doc["packages"] if p["name"] == "torch")
    assert torch_entry["index"] == case.vendor.simple_url
    assert torch_entry["wheels"][0]["hashes"] == {"sha256": sha}
    assert torch_entry["wheels"][0]["size"] == torch.stat().st_size
    assert torch_entry["tool"]["vllm-musa-image"]["kind"] == "native"
    filelock = next(p for p in doc["packages"] if p["name"] == "filelock")
    assert filelock["tool"]["vllm-musa-image"]["required-by"] == ["torch"]
    assert "sdist" not in torch_entry


def test_two_runs_give_identical_bytes(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    assert case.run("lock", stack).code == 0
    first = {p.name: p.read_bytes() for p in case.lock_dir().iterdir()}
    (case.cache).rename(case.tmp / "old-cache")  # a cold second run
    assert case.run("lock", stack).code == 0
    second = {p.name: p.read_bytes() for p in case.lock_dir().iterdir()}
    assert first == second


@pytest.mark.parametrize(
    "tags",
    ["py3-none-any", "cp312-cp312-win_amd64"],  # also when the target can run none of its files
)
def test_bound_name_also_on_public_index_is_reported_not_chosen(case: Case, tags: str) -> None:
    mate = case.wheel("mate", "0.2.7")
    case.publish(case.vendor, Listing(path=mate, hash="none"))
    case.publish(case.pypi, case.wheel("mate", "9.9.9", tags))
    stack = case.stack('  mate: {version: "0.2.7", index: mthreads, wheel: pure}')
    result = case.run("lock", stack)
    assert result.code == 0, result.err
    assert result.err == (
        "note: mate is bound to index mthreads; index pypi also has a project named mate, "
        "which this stack never uses\n"
    )
    assert "mate==0.2.7" in (case.lock_dir() / "constraints.txt").read_text()


def test_warm_relock_downloads_nothing(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    assert case.run("lock", stack).code == 0
    case.vendor.clear_requests()
    case.pypi.clear_requests()
    assert case.run("lock", stack).code == 0
    # the hashed public file is never fetched again; the unhashed vendor file is revalidated
    assert [p for p in case.pypi.paths() if p.startswith("/files/")] == []
    for request in case.vendor.requests:
        if request.path.startswith("/files/"):
            assert "If-None-Match" in request.headers
    # one conditional GET serves the metadata and the verification (a run revalidates a file
    # once), and it is not retried (a kept-alive connection with an unread 304 once broke the
    # next request and cost a backoff)
    file_gets = [p for p in case.vendor.paths() if p.startswith("/files/")]
    assert len(file_gets) == 1, file_gets


def test_no_verify_downloads_only_what_has_no_hash(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, Listing(path=case.wheel("numpy", "1.26.4", NATIVE), metadata=True))
    stack = case.stack(PIN_TORCH, ["numpy==1.26.4"])
    result = case.run("lock", stack, "--no-verify")
    assert result.code == 0, result.err
    assert [p for p in case.pypi.paths() if p.startswith("/files/") and p.endswith(".whl")] == []
    assert any(p.endswith(".whl") for p in case.vendor.paths())


def test_check_passes_when_current_and_reports_a_reupload(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    stack = case.stack(PIN_TORCH)
    assert case.run("lock", stack).code == 0
    before = (case.lock_dir() / "pylock.toml").read_bytes()
    ok = case.run("lock", stack, "--check")
    assert (ok.code, ok.out) == (0, f"{case.lock_dir()}: current (1 packages)\n")
    case.vendor.replace(f"/files/{torch.name}", torch.read_bytes() + b"\0")
    drift = case.run("lock", stack, "--check")
    assert drift.code == 1
    assert drift.err.startswith(f"error[lock]: {case.lock_dir()} is not current for {stack}:\n")
    assert f"~ torch {TORCH}: {torch.name} changed bytes under the same name" in drift.err
    assert (case.lock_dir() / "pylock.toml").read_bytes() == before


def test_check_through_a_mirror_of_the_index_is_not_drift(case: Case) -> None:
    """The same files with the same hashes under another URL (a site mirror of the vendor index,
    `--index NAME=URL`) are the lock it has: only the files, hashes and index names count."""
    torch = case.wheel("torch", TORCH, NATIVE, requires_dist=("filelock>=3",))
    filelock = case.wheel("filelock", "3.17.0")
    case.publish(case.vendor, Listing(path=torch, hash="none"))
    case.publish(case.pypi, filelock)
    stack = case.stack(PIN_TORCH)
    assert case.run("lock", stack).code == 0
    before = (case.lock_dir() / "pylock.toml").read_bytes()
    with IndexServer(case.tmp / "mirror-index") as mirror:
        mirror.add(Listing(path=torch, hash="none"))
        assert mirror.simple_url != case.vendor.simple_url
        case.vendor.clear_requests()
        ok = case.run("lock", stack, "--check", "--index", f"mthreads={mirror.simple_url}")
        assert (ok.code, ok.out, ok.err) == (
            0,
            f"{case.lock_dir()}: current (2 packages)\n",
            "note: 1 of the locked files were found at other URLs than the lock records (an "
            f"index mirror?): the same files with the same sha256, so not drift (torch {TORCH})\n",
        )
        assert f"/files/{torch.name}" in mirror.paths()  # the check read the mirror's bytes
        assert case.vendor.paths() == []
        mirror.replace(f"/files/{torch.name}", torch.read_bytes() + b"\0")
        drift = case.run("lock", stack, "--check", "--index", f"mthreads={mirror.simple_url}")
    assert drift.code == 1
    assert f"~ torch {TORCH}: {torch.name} changed bytes under the same name" in drift.err
    assert (case.lock_dir() / "pylock.toml").read_bytes() == before


def test_pep691_json_index_and_metadata_files(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE, requires_dist=("filelock>=3",))
    case.publish(case.vendor, Listing(path=torch, metadata=True), json=True)
    case.publish(
        case.pypi, Listing(path=case.wheel("filelock", "3.17.0"), metadata=True), json=True
    )
    stack = case.stack(PIN_TORCH)
    result = case.run("lock", stack, "--no-verify")
    assert result.code == 0, result.err
    accepts = [
        r.headers.get("Accept") or "" for r in case.vendor.requests if r.path.startswith("/simple/")
    ]
    assert all(a.startswith("application/vnd.pypi.simple.v1+json") for a in accepts)
    assert any(p.endswith(".whl.metadata") for p in case.pypi.paths())
    assert not any(p.endswith(".whl") for p in case.pypi.paths())


def test_find_links_index(case: Case) -> None:
    torch = case.wheel("torch", TORCH, NATIVE)
    url = case.vendor.add_find_links(torch, case.wheel("mate", "0.2.7"))
    stack = (
        case.stack(PIN_TORCH)
        .read_text()
        .replace(
            f'mthreads: {{url: "{case.vendor.simple_url}"}}',
            f'mthreads: {{url: "{url}", format: find-links}}',
        )
    )
    path = case.tmp / "stack" / "t.yaml"
    path.write_text(stack)
    result = case.run("lock", path)
    assert result.code == 0, result.err
    assert f"torch=={TORCH}" in (case.lock_dir() / "constraints.txt").read_text()


def test_index_override_replaces_the_url(case: Case) -> None:
    case.publish(case.pypi, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    stack = case.stack(PIN_TORCH)
    result = case.run("lock", stack, "--index", f"mthreads={case.pypi.simple_url}")
    assert result.code == 0, result.err
    doc = read_toml((case.lock_dir() / "pylock.toml").read_text())
    assert doc["packages"][0]["index"] == case.pypi.simple_url


def test_credentials_from_environment_never_reach_the_lock(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.vendor.require_auth("robot", "s3cret-token")
    stack = case.stack(PIN_TORCH)
    denied = case.run("lock", stack)
    assert denied.code == 1
    assert denied.err == (
        f"error[index]: index mthreads: GET {case.vendor.simple_url}torch/ answered HTTP 401\n"
        "hint: the index wants credentials: set BUILD_IMAGE_INDEX_MTHREADS_AUTH=user:token\n"
    )
    monkeypatch.setenv("BUILD_IMAGE_INDEX_MTHREADS_AUTH", "robot:s3cret-token")
    ok = case.run("lock", stack)
    assert ok.code == 0, ok.err
    for f in case.lock_dir().iterdir():
        assert "s3cret" not in f.read_text()


def test_credentials_in_index_override_are_redacted(case: Case) -> None:
    case.vendor.require_auth("robot", "right")
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    stack = case.stack(PIN_TORCH)
    url = case.vendor.simple_url.replace("http://", "http://robot:wrong@")
    result = case.run("lock", stack, "--index", f"mthreads={url}")
    assert result.code == 1
    assert "wrong" not in result.err
    ok = case.run("lock", stack, "--index", f"mthreads={url.replace('wrong', 'right')}")
    assert ok.code == 0, ok.err
    assert "right@" not in (case.lock_dir() / "pylock.toml").read_text()


def test_a_percent_encoded_password_in_an_index_url_is_decoded_as_pip_does(case: Case) -> None:
    case.vendor.require_auth("robot", "p@ss:w/rd")
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    url = case.vendor.simple_url.replace("http://", "http://robot:p%40ss%3Aw%2Frd@")
    ok = case.run("lock", case.stack(PIN_TORCH), "--index", f"mthreads={url}")
    assert ok.code == 0, ok.err
    assert "p%40ss" not in (case.lock_dir() / "pylock.toml").read_text()


# ----------------------------------------------------------------------------- refusals


def test_wrong_python_tag(case: Case) -> None:
    cp310 = case.wheel("torch", TORCH, "cp310-cp310-linux_x86_64")
    case.publish(case.vendor, Listing(path=cp310, hash="none"))
    case.publish(case.pypi, case.wheel("torch", "2.11.0", "cp312-cp312-manylinux_2_28_x86_64"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err == head(case) + (
        f"  {cp310.name}: wrong Python tag: built for CPython 3.10 (cp310-cp310); the target is "
        "CPython 3.12 (cp312)\n"
        f"hint: the index has no cp312 build of torch {TORCH}; `build_image.py explain "
        f"{case.tmp}/stack/t.yaml torch` lists every file with its reason\n"
    )


def test_wrong_abi(case: Case) -> None:
    w = case.wheel("torch", TORCH, "cp312-cp312d-linux_x86_64")
    case.publish(case.vendor, Listing(path=w, hash="none"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        head(case) + f"  {w.name}: wrong ABI: ABI cp312d is not cp312, abi3 or none"
    )


def test_wrong_platform(case: Case) -> None:
    w = case.wheel("torch", TORCH, "cp312-cp312-manylinux_2_39_x86_64")
    case.publish(case.vendor, Listing(path=w, hash="none"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        head(case) + f"  {w.name}: wrong platform: platform manylinux_2_39_x86_64 does not run on "
        "linux x86_64 with glibc 2.35"
    )


def test_wrong_kind(case: Case) -> None:
    w = case.wheel("tilelang-musa", "0.1.12+musa.2", "cp38-abi3-linux_x86_64")
    case.publish(case.vendor, Listing(path=w, hash="none"))
    err = refused(
        case,
        case.stack('  tilelang-musa: {version: "0.1.12+musa.2", index: mthreads, wheel: pure}'),
    )
    assert err.startswith(
        head(case, "tilelang-musa", "0.1.12+musa.2", "pure")
        + f"  {w.name}: wrong kind: a abi3 wheel (cp38-abi3-linux_x86_64); the manifest requires "
        "pure (py3-none-any)\n"
    )


def test_other_local_label_is_never_matched(case: Case) -> None:
    s5000 = case.wheel("torch", TORCH + "s5000", NATIVE)
    case.publish(case.vendor, Listing(path=s5000, hash="none"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err == head(case) + (
        f"  {s5000.name}: other local label: local label +musa5.2.0s5000 is not the pinned "
        f"+musa5.2.0 ({TORCH})\n"
        f"hint: this version exists only as {TORCH}s5000; a local label is a different build, so "
        f"pin it explicitly if it is the one you want; `build_image.py explain {case.tmp}/stack/t.yaml "
        "torch` lists every file with its reason\n"
    )


def test_yanked(case: Case) -> None:
    w = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=w, hash="none", yanked="bad build"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(head(case) + f"  {w.name}: yanked: yanked from the index: bad build\n")


def test_requires_python(case: Case) -> None:
    w = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=w, hash="none", requires_python=">=3.13"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        head(case) + f"  {w.name}: Requires-Python: Requires-Python >=3.13 excludes 3.12\n"
    )


def test_sdist_is_never_a_fallback(case: Case) -> None:
    from testbed.distributions import build_sdist

    sdist = build_sdist("torch", TORCH, case.wheels)
    case.publish(case.vendor, Listing(path=sdist, hash="none"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        head(case) + f"  {sdist.name}: sdist: a source distribution; only wheels are locked\n"
    )


def test_not_a_wheel(case: Case) -> None:
    egg = case.wheels / f"torch-{TORCH}-py3.12.egg"
    egg.parent.mkdir(parents=True, exist_ok=True)
    egg.write_bytes(b"egg")
    case.publish(case.vendor, Listing(path=egg, hash="none", project="torch"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        head(case) + f"  {egg.name}: not a wheel: a .egg file; only wheels are locked\n"
    )


def test_404_on_bound_index_never_falls_through(case: Case) -> None:
    case.publish(case.vendor, case.wheel("mate", "0.2.7"))
    case.publish(case.pypi, case.wheel("torch", TORCH, NATIVE))  # the right file, wrong index
    err = refused(case, case.stack(PIN_TORCH))
    assert err == (
        f"error[resolution]: packages.torch: torch is not on index mthreads "
        f"({case.vendor.simple_url}torch/: HTTP 404)\n"
        "hint: a package bound to an index is looked up there only; check the name, or bind it "
        "to the index that publishes it\n"
    )


def test_hash_mismatch(case: Case) -> None:
    w = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=w, hash="wrong"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith("error[hash-mismatch]: torch: index mthreads gives sha256=")
    assert (
        f"for {w.name}, but the downloaded bytes hash to {hashlib.sha256(w.read_bytes()).hexdigest()}\n"
        in err
    )
    assert not any(case.cache.glob("files/sha256/*/*"))


def test_metadata_disagreeing_with_filename(case: Case) -> None:
    w = case.wheel("torch", TORCH, NATIVE, metadata_version=TORCH + "s5000")
    case.publish(case.vendor, Listing(path=w, hash="none"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err == (
        f"error[metadata]: {w.name} on index mthreads: METADATA says Version {TORCH}s5000, the "
        f"filename says {TORCH}\n"
        "hint: a renamed wheel is not the build its name claims; do not use it\n"
    )


def test_tie_between_two_files(case: Case) -> None:
    a = case.wheel("torch", TORCH, NATIVE, build="1")
    b = case.wheel("torch", TORCH, NATIVE, build="2")
    case.publish(case.vendor, Listing(path=a, hash="none"), Listing(path=b, hash="none"))
    err = refused(case, case.stack(PIN_TORCH))
    assert err.startswith(
        f"error[resolution]: packages.torch: torch=={TORCH} on index mthreads "
        f"({case.vendor.simple_url}torch/): two different files rank equally for CPython 3.12 "
        f"(cp312), linux x86_64, glibc 2.35:\n  {a.name}\n  {b.name}\n"
    )


def test_plain_http_to_a_remote_host_is_refused(case: Case) -> None:
    stack = case.stack(PIN_TORCH)
    stack.write_text(
        stack.read_text().replace(case.vendor.simple_url, "http://vendor.example/simple/")
    )
    result = case.run("lock", stack)
    assert result.code == 2
    assert result.err == (
        "error[usage]: index mthreads: http://vendor.example/simple/ uses plain http:// on a "
        "non-loopback host; anyone on the path could swap the wheels\n"
        "hint: use https://, or serve the index on 127.0.0.1 for local testing\n"
    )


def test_unknown_index_override_is_a_usage_error(case: Case) -> None:
    result = case.run("lock", case.stack(PIN_TORCH), "--index", "vendor=http://127.0.0.1:1/")
    assert result.code == 2
    assert result.err == (
        "error[usage]: --index vendor=...: the manifest has no index named 'vendor'\n"
        "hint: its indexes are: mthreads, pypi\n"
    )


def test_retries_then_succeeds_on_503(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.vendor.fail("/simple/torch/", status=503, times=2, retry_after=0)
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "2")
    assert result.code == 0, result.err


def test_persistent_503_names_the_index(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.vendor.fail("/simple/torch/", status=503, times=10, retry_after=0)
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "2")
    assert result.code == 1
    assert result.err == (
        f"error[index]: index mthreads: GET {case.vendor.simple_url}torch/ failed after 3 attempts "
        "(HTTP 503)\nhint: check that the index is up and reachable; nothing was written\n"
    )
    assert not case.lock_dir().exists()


def test_timeout_is_bounded(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.vendor.delay("/simple/torch/", 3.0, times=5)
    result = case.run("lock", case.stack(PIN_TORCH), "--retries", "0", "--timeout", "0.3")
    assert result.code == 1
    assert result.err.startswith(
        f"error[index]: index mthreads: GET {case.vendor.simple_url}torch/ failed after 1 attempts (ReadTimeout"
    )


def test_failed_relock_leaves_the_old_lock_untouched(case: Case) -> None:
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    stack = case.stack(PIN_TORCH)
    assert case.run("lock", stack).code == 0
    before = {p.name: p.read_bytes() for p in case.lock_dir().iterdir()}
    stack.write_text(stack.read_text().replace(TORCH, TORCH + "s5000"))
    assert case.run("lock", stack).code == 1
    assert {p.name: p.read_bytes() for p in case.lock_dir().iterdir()} == before


def test_explain_lists_every_file(case: Case) -> None:
    good = case.wheel("torch", TORCH, NATIVE)
    cp310 = case.wheel("torch", TORCH, "cp310-cp310-linux_x86_64")
    other = case.wheel("torch", TORCH + "s5000", NATIVE)
    case.publish(case.vendor, *(Listing(path=p, hash="none") for p in (good, cp310, other)))
    stack = case.stack(PIN_TORCH)
    result = case.run("explain", stack, "torch")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0] == f"torch on index mthreads ({case.vendor.simple_url}torch/)"
    assert lines[1] == f"wanted: =={TORCH} (native), pinned at packages.torch"
    body = "\n".join(lines[3:])
    assert good.name in body
    assert "accepted" in body
    assert "wrong Python tag" in body
    assert "other local label" in body
    js = case.run("explain", stack, "torch", "--json")
    assert '"reason": "wrong Python tag"' in js.out


def test_hash_that_is_not_a_hex_digest_is_a_broken_page(case: Case) -> None:
    w = case.wheel("torch", TORCH, NATIVE)
    case.publish(case.vendor, Listing(path=w, hash="none"))
    page = case.vendor.root / "simple" / "torch" / "index.html"
    page.write_text(page.read_text().replace('.whl"', '.whl#sha256=../../outside/pwned"'))
    err = refused(case, case.stack(PIN_TORCH))
    assert err == (
        f"error[index]: index mthreads: {case.vendor.simple_url}torch/: {w.name}: sha256 hash "
        "'../../outside/pwned' is not a hex digest\n"
    )
    assert not (case.tmp / "outside").exists()


def test_forged_metadata_file_is_caught_by_the_wheel_itself(case: Case) -> None:
    w = case.wheel("torch", TORCH, NATIVE, requires_dist=("filelock",))
    case.publish(case.vendor, Listing(path=w, metadata=True))
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"))
    meta = case.vendor.root / "files" / f"{w.name}.metadata"
    forged = meta.read_bytes().replace(b"Requires-Dist: filelock\n", b"")
    page = case.vendor.root / "simple" / "torch" / "index.html"
    old, new = hashlib.sha256(meta.read_bytes()).hexdigest(), hashlib.sha256(forged).hexdigest()
    meta.write_bytes(forged)
    page.write_text(page.read_text().replace(old, new))
    case.vendor.delay(f"/files/{w.name}", 0.5)  # the search reads the metadata file first
    err = refused(case, case.stack(PIN_TORCH))
    assert err == (
        f"error[metadata]: torch: the metadata index mthreads serves for {w.name} differs from the "
        "METADATA inside the wheel (Requires-Dist or Requires-Python)\n"
        "hint: the index's PEP 658 metadata file is stale or forged; report it to the index owner\n"
    )


def test_the_cycle_collector_waits_for_the_lock_and_runs_again_after_it(
    case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    during: list[bool] = []
    run = StackLocker.run

    def watched(locker: StackLocker) -> LockResult:
        during.append(gc.isenabled())
        return run(locker)

    monkeypatch.setattr(StackLocker, "run", watched)
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    assert case.run("lock", case.stack(requirements=["numpy==9.9"]), "--retries", "0").code == 1
    assert (during, gc.isenabled()) == ([False], True)  # a refusal
    assert case.run("lock", case.stack(requirements=["numpy==1.26.4"])).code == 0
    assert (during, gc.isenabled()) == ([False, False], True)


def test_pages_a_server_calls_fresh_are_not_revalidated_unless_refreshed(case: Case) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    case.pypi.cache_control = "max-age=600"
    stack = case.stack(requirements=["numpy==1.26.4"])
    assert case.run("lock", stack).code == 0
    case.pypi.clear_requests()
    assert case.run("lock", stack).code == 0
    assert case.pypi.paths() == []  # fresh pages, a hashed file already in the cache
    assert case.run("lock", stack, "--refresh").code == 0
    assert case.pypi.paths() == ["/simple/numpy/"]
    case.pypi.clear_requests()
    assert case.run("lock", stack, "--check").code == 0  # a drift check always revalidates
    assert case.pypi.paths() == ["/simple/numpy/"]


def _settle(server_root: Path, seconds: float) -> None:
    """Date every page under ``server_root`` ``seconds`` back: pages unchanged since then."""
    when = time.time() - seconds
    for page in (server_root / "simple").rglob("index.*"):
        os.utime(page, (when, when))


def test_settled_pages_without_cache_headers_are_fresh_for_a_tenth_of_their_age(
    case: Case,
) -> None:
    case.publish(case.pypi, case.wheel("numpy", "1.26.4", NATIVE))
    stack = case.stack(requirements=["numpy==1.26.4"])
    assert case.run("lock", stack).code == 0  # pages modified seconds ago: revalidated
    case.pypi.clear_requests()
    assert case.run("lock", stack).code == 0
    assert case.pypi.paths() == ["/simple/numpy/"]
    _settle(case.pypi.root, 2 * 3600)  # unchanged for two hours: fresh for ten minutes
    assert case.run("lock", stack).code == 0  # revalidated once more, learns the new age
    case.pypi.clear_requests()
    assert case.run("lock", stack).code == 0
    assert case.pypi.paths() == []
    assert case.run("lock", stack, "--refresh").code == 0
    assert case.pypi.paths() == ["/simple/numpy/"]


def test_metadata_by_range_requests_when_no_metadata_file(case: Case) -> None:
    big = case.wheel("numpy", "1.26.4", NATIVE, payload_bytes=2_000_000)
    case.publish(case.pypi, big)  # a sha256 fragment, no PEP 658 file
    result = case.run("lock", case.stack(requirements=["numpy==1.26.4"]), "--no-verify")
    assert result.code == 0, result.err
    wheel_requests = [r for r in case.pypi.requests if r.path.endswith(".whl")]
    assert wheel_requests
    assert all("Range" in r.headers for r in wheel_requests)
    assert not any(case.cache.glob("files/sha256/*/*"))  # the 2 MB wheel was never downloaded


def test_metadata_falls_back_to_the_whole_wheel_when_ranges_are_ignored(case: Case) -> None:
    case.pypi.ranges = False
    w = case.wheel("numpy", "1.26.4", NATIVE)
    case.publish(case.pypi, w)
    result = case.run("lock", case.stack(requirements=["numpy==1.26.4"]), "--no-verify")
    assert result.code == 0, result.err
    sha = hashlib.sha256(w.read_bytes()).hexdigest()
    assert (case.cache / "files" / "sha256" / sha[:2] / sha).is_file()  # kept, never fetched twice


def test_placeholder_vendor_url_asks_for_an_index_override(case: Case) -> None:
    stack = case.stack(PIN_TORCH)
    stack.write_text(
        stack.read_text().replace(case.vendor.simple_url, "https://vendor-index.invalid/simple/")
    )
    result = case.run("lock", stack)
    assert result.code == 2
    assert result.err == (
        "error[usage]: index mthreads: https://vendor-index.invalid/simple/ is a placeholder (the "
        ".invalid domain never resolves)\nhint: pass --index mthreads=URL with your site's index or mirror\n"
    )


def test_index_url_with_a_broken_port_is_a_usage_error(case: Case) -> None:
    stack = case.stack(PIN_TORCH)
    result = case.run("lock", stack, "--index", "mthreads=http://127.0.0.1:80vendor/simple/")
    assert (result.code, result.err) == (
        2,
        "error[usage]: index mthreads: http://127.0.0.1:80vendor/simple/ is not a valid URL (its "
        "port is not a number from 0 to 65535)\nhint: write an index URL as https://HOST[:PORT]/PATH/, "
        "with any credentials as USER:TOKEN@ before HOST\n",
    )
    stack.write_text(
        stack.read_text().replace(case.vendor.simple_url, "http://127.0.0.1:80vendor/simple/")
    )
    bad = case.run("lock", stack)
    assert bad.code == 2
    assert bad.err.startswith(f"error[manifest]: {stack}:6: indexes.mthreads.url: ")


def test_a_relock_asks_for_the_previous_locks_pages_at_once_and_a_stale_one_is_no_error(
    case: Case,
) -> None:
    """The previous lock's names are fetched from the start of a re-lock; one the manifest no
    longer needs costs a request, and its page failing is no error."""
    case.publish(case.vendor, Listing(path=case.wheel("torch", TORCH, NATIVE), hash="none"))
    case.publish(case.pypi, case.wheel("filelock", "3.17.0"), case.wheel("six", "1.16.0"))
    assert case.run("lock", case.stack(PIN_TORCH, ["filelock", "six"])).code == 0
    case.pypi.clear_requests()
    case.pypi.fail("/simple/six/", 404, times=5)
    result = case.run("lock", case.stack(PIN_TORCH, ["filelock"]))
    assert result.code == 0, result.err
    assert "/simple/six/" in case.pypi.paths()  # asked for, from the previous lock
    names = [p.name for p in load_lock(case.lock_dir()).packages]
    assert names == ["filelock", "torch"]
