"""Each stage tier's time is the newest of its inputs in git, bounded by the build's time: a
commit that changes none of a tier's inputs leaves its time, and so its layers, as they were."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from images.builder.stage_times import package_lines, stage_times, tier_times
from images.builder.workspace import Workspace

T0 = 1_760_000_000
EPOCH = 1_800_000_000
REQS = b"# lock-inputs-sha256: aaaa\nnumpy==1.26.4 \\\n    --hash=sha256:11\n"


def _commit(root: Path, when: int, message: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": f"@{when} +0000",
        "GIT_COMMITTER_DATE": f"@{when} +0000",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    for argv in (["add", "-A"], ["commit", "-q", "--allow-empty", "-m", message]):
        subprocess.run(["git", *argv], cwd=root, env=env, check=True, capture_output=True)


def _repo(tmp_path: Path) -> Workspace:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "Dockerfile.j2").write_text("FROM x\n")
    (tmp_path / "images" / "builder" / "in_image").mkdir(parents=True)
    (tmp_path / "images" / "builder" / "in_image" / "gate.py").write_text("print()\n")
    (tmp_path / "stack.yaml").write_text("name: s\n")
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "requirements.txt").write_bytes(REQS)
    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "setup.py").write_text("1\n")
    _commit(tmp_path, T0, "start")
    return Workspace(tmp_path)


def _times(ws: Workspace, epoch: int = EPOCH) -> tuple[int, int]:
    root = ws.root
    times = stage_times(
        epoch=epoch,
        workspace=ws,
        manifest_path=root / "stack.yaml",
        lock_requirements=root / "lock" / "requirements.txt",
        build_requirements=None,
        path_sources=[root / "plugin"],
        tool=ws,
    )
    return times.deps, times.sources


def test_the_tiers_are_bounded_by_the_build_time_and_ordered() -> None:
    times = tier_times(100, deps_inputs=(50, 70), source_inputs=(60,))
    assert (times.deps, times.sources) == (70, 70)  # never earlier than the deps tier
    times = tier_times(100, deps_inputs=(50, None), source_inputs=(60,))
    assert (times.deps, times.sources) == (100, 100)  # an input of unknown time: the build's
    times = tier_times(100, deps_inputs=(500,), source_inputs=(900,))
    assert (times.deps, times.sources) == (100, 100)
    assert times.build_args() == {"DEPS_TIME": "100", "SOURCES_TIME": "100"}


def test_a_commit_that_touches_no_input_moves_no_tier(tmp_path: Path) -> None:
    ws = _repo(tmp_path)
    assert _times(ws) == (T0, T0)
    (tmp_path / "README.md").write_text("docs\n")
    _commit(tmp_path, T0 + 100, "a README")
    assert _times(ws) == (T0, T0)


def test_a_plugin_change_moves_the_sources_tier_only(tmp_path: Path) -> None:
    ws = _repo(tmp_path)
    (tmp_path / "plugin" / "setup.py").write_text("2\n")
    (tmp_path / "stack.yaml").write_text("name: s\nrev: 2\n")
    (tmp_path / "lock" / "requirements.txt").write_bytes(REQS.replace(b"aaaa", b"bbbb"))
    _commit(tmp_path, T0 + 200, "the plugin, its pin, and the lock's header")
    assert _times(ws) == (T0, T0 + 200)  # the lock's packages did not change


def test_a_locked_package_change_moves_both_tiers(tmp_path: Path) -> None:
    ws = _repo(tmp_path)
    (tmp_path / "lock" / "requirements.txt").write_bytes(REQS.replace(b"1.26.4", b"1.26.5"))
    _commit(tmp_path, T0 + 300, "numpy")
    assert _times(ws) == (T0 + 300, T0 + 300)


def test_uncommitted_inputs_take_the_build_time(tmp_path: Path) -> None:
    ws = _repo(tmp_path)
    (tmp_path / "Dockerfile.j2").write_text("FROM y\n")
    assert _times(ws) == (EPOCH, EPOCH)
    assert _times(ws, epoch=T0 - 5) == (T0 - 5, T0 - 5)


def test_outside_git_every_tier_is_the_build_time(tmp_path: Path) -> None:
    (tmp_path / "stack.yaml").write_text("name: s\n")
    (tmp_path / "lock").mkdir()
    (tmp_path / "lock" / "requirements.txt").write_bytes(REQS)
    assert _times(Workspace(tmp_path)) == (EPOCH, EPOCH)


def test_package_lines_leave_out_comments_and_blank_lines() -> None:
    assert package_lines(REQS + b"\n# more\n") == b"numpy==1.26.4 \\\n    --hash=sha256:11"
