"""Where the pipeline keeps its files: under the git-ignored ``build/`` of the repository
around a stack manifest (``build/context/``, ``build/reports/``, ``build/images/``,
``build/serve-check/``, ``build/ab/``), but for the committed ``releases/<stack name>.json``.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sources.read import git_toplevel, repo_root


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def of(cls, manifest_path: Path) -> Workspace:
        """The git top level around the manifest, else the parent of its directory."""
        return cls(repo_root(manifest_path))

    @classmethod
    def here(cls) -> Workspace:
        """The git top level around the current directory, else the current directory."""
        return cls(git_toplevel(Path.cwd()) or Path.cwd())

    def context_dir(self, stem: str, target: str) -> Path:
        return self.root / "build" / "context" / f"{stem}-{target}"

    def report_path(self, stem: str, target: str) -> Path:
        return self.root / "build" / "reports" / f"{stem}-{target}.json"

    def image_layout(self, stem: str, target: str) -> Path:
        return self.root / "build" / "images" / f"{stem}-{target}"

    def serve_check_dir(self, image_id: str) -> Path:
        """``build/serve-check/<hex of the image id>/``."""
        return self.root / "build" / "serve-check" / image_id.removeprefix("sha256:")

    def ab_dir(self, run_id: str) -> Path:
        return self.root / "build" / "ab" / run_id

    def release_record(self, stack_name: str) -> Path:
        return self.root / "releases" / f"{stack_name}.json"

    def relative(self, path: Path) -> str:
        """``path`` relative to the root (POSIX), for reports: no path of this machine; a
        path outside the root is named by its file name."""
        resolved = path.resolve()
        root = self.root.resolve()
        return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else path.name

    def _run_git(self, *argv: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(["git", *argv], cwd=self.root, capture_output=True, check=False)

    def _git(self, *argv: str) -> str:
        res = self._run_git(*argv)
        return res.stdout.decode("utf-8", "replace").strip() if res.returncode == 0 else ""

    def vcs_ref(self) -> str:
        """The commit checked out at the root, or "unknown" outside a git repository."""
        return self._git("rev-parse", "HEAD") or "unknown"

    def commit_time(self) -> str:
        """The committer time of that commit (ISO 8601), or "" outside git."""
        return self._git("log", "-1", "--format=%cI")

    def _committed(self, paths: Sequence[Path]) -> list[str] | None:
        """``paths`` relative to the root, when each is inside it and all is committed."""
        root = self.root.resolve()
        rel = []
        for path in paths:
            resolved = path.resolve()
            if not resolved.is_relative_to(root):
                return None
            rel.append(resolved.relative_to(root).as_posix() or ".")
        listed = self._run_git("status", "--porcelain", "--untracked-files=all", "--", *rel)
        return rel if listed.returncode == 0 and not listed.stdout.strip() else None

    def paths_time(self, paths: Sequence[Path]) -> int | None:
        """The committer time (seconds) of the newest commit that touched any of ``paths``;
        None when one of them has uncommitted changes, or outside git."""
        rel = self._committed(paths)
        if rel is None:
            return None
        text = self._git("log", "-1", "--format=%ct", "--", *rel)
        return int(text) if text.isdigit() else None

    def content_time(
        self, path: Path, *, same: Callable[[bytes, bytes], bool], limit: int = 200
    ) -> int | None:
        """The committer time of the commit that gave ``path`` its present content as ``same``
        compares it; None when the file has uncommitted changes, or outside git."""
        rel = self._committed([path])
        if rel is None or not path.is_file():
            return None
        now = path.read_bytes()
        found: int | None = None
        for line in self._git("log", f"-{limit}", "--format=%H %ct", "--", rel[0]).splitlines():
            commit, _, when = line.partition(" ")
            then = self._run_git("show", f"{commit}:{rel[0]}")
            if then.returncode != 0 or not same(then.stdout, now):
                break
            found = int(when)
        return found
