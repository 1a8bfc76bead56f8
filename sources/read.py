"""Files of a source at its pinned revision, read without checking the tree out, and the
requirements files of a source read through them.

- a path source: from the directory under the repository root (the git top level around the
  manifest, else the directory two levels up, as the image side stages it); a file must stay
  inside that directory, symlinks resolved;
- a git source: ``git ls-tree`` + ``git cat-file`` at ``rev`` in the cache clone
  (``sources.trees.ensure_git_rev``); a symlink or submodule entry is refused;
- an sdist: from the verified archive (``sources.sdist.SdistArchive``).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import SourceError
from core.network import NetworkConfig
from manifest import Source
from sources.requirements_files import (
    BUILD_DROPPED,
    MAX_FILE_BYTES,
    ReadFile,
    RequirementsRead,
    read_requirements,
    too_large,
)
from sources.sdist import SdistArchive
from sources.trees import ensure_git_rev, path_source_dir, run_git


def repo_root(manifest_path: Path) -> Path:
    """The repository a manifest's path sources are relative to: the git top level around
    the manifest, else the parent of the manifest's directory."""
    directory = manifest_path.resolve().parent
    return git_toplevel(directory) or directory.parent


def git_toplevel(directory: Path) -> Path | None:
    """The top level of the git checkout around ``directory``; None outside one."""
    res = run_git(["rev-parse", "--show-toplevel"], cwd=directory)
    top = res.stdout.strip()
    return Path(top) if res.returncode == 0 and top else None


def path_reader(source: Source, root: Path, *, where: str) -> ReadFile:
    """Reads files of the path source ``source`` under the repository ``root``."""
    tree = path_source_dir(source, root, where=where)

    def read(path: str) -> bytes | None:
        full = (tree / path).resolve()
        if not full.is_relative_to(tree):
            raise SourceError(
                f"{where}: {path} resolves to {full}, outside the source {tree}",
                hint="a requirements file is a file of its own source; copy it in",
            )
        if not full.is_file():
            return None
        size = full.stat().st_size
        if size > MAX_FILE_BYTES:
            raise too_large(where, path, size)
        return full.read_bytes()

    return read


def _git_bytes(args: list[str], repo: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", *args],
        cwd=repo,
        capture_output=True,
        check=False,
        env={**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
    )


def git_reader(
    source: Source, git_cache: Path, *, where: str, network: NetworkConfig | None = None
) -> ReadFile:
    """Reads files of the git source ``source`` at its ``rev`` from the cache clone (fetched
    through ``network``'s proxy when it lacks the commit)."""
    assert source.rev is not None
    repo = ensure_git_rev(source, git_cache, where=where, network=network)
    rev = source.rev

    def read(path: str) -> bytes | None:
        listed = _git_bytes(["ls-tree", "-z", rev, "--", path], repo)
        if listed.returncode != 0:
            raise SourceError(
                f"{where}: git ls-tree {rev} {path} failed: "
                f"{listed.stderr.decode(errors='replace').strip()}"
            )
        entry = listed.stdout.split(b"\0", 1)[0].decode(errors="replace")
        if not entry:
            return None
        meta, _, name = entry.partition("\t")
        mode, kind, obj = [*meta.split(" "), "", "", ""][:3]
        if name != path:
            return None
        if kind != "blob" or mode not in ("100644", "100755"):
            what = {"120000": "a symlink", "160000": "a submodule"}.get(mode, f"a {kind}")
            raise SourceError(
                f"{where}: {path} at {rev} is {what}, not a regular file",
                hint="requirements files are read from regular files of the commit only",
            )
        sized = _git_bytes(["cat-file", "-s", obj], repo)
        size = int(sized.stdout.strip() or 0) if sized.returncode == 0 else 0
        if size > MAX_FILE_BYTES:
            raise too_large(where, path, size)
        blob = _git_bytes(["cat-file", "blob", obj], repo)
        if blob.returncode != 0:
            raise SourceError(f"{where}: cannot read {path} at {rev} in the cache clone")
        return blob.stdout

    return read


def sdist_reader(archive: SdistArchive) -> ReadFile:
    """Reads files of a verified sdist (by their path inside the project)."""
    return archive.read


@dataclass(frozen=True, kw_only=True)
class SourceRequirements:
    """What the resolver takes from one source: its runtime and build requirements."""

    source: str
    runtime: RequirementsRead
    build: RequirementsRead

    @property
    def where(self) -> str:
        return f"sources.{self.source}"


def read_source_requirements(
    source: Source, read: ReadFile, *, prime: SdistArchive | None = None
) -> SourceRequirements:
    """``source.requirements_files`` and ``source.build_requirements_files`` read through
    ``read``; from the build files, ``BUILD_DROPPED`` is left out (as upstream's
    ``use_existing_torch.py`` does). ``prime``: read the sdist's directories in one pass."""
    where = f"sources.{source.name}"
    files: Sequence[str] = (*source.requirements_files, *source.build_requirements_files)
    if prime is not None:
        prime.prime(files)
    return SourceRequirements(
        source=source.name,
        runtime=read_requirements(read, source.requirements_files, where=where),
        build=read_requirements(
            read, source.build_requirements_files, where=where, drop=BUILD_DROPPED
        ),
    )
