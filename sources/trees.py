"""Source trees at their pinned revisions: a git commit (from a cache clone), a directory of
the repository, or (``sources.sdist``) a verified source distribution.

The resolver reads requirements files from these trees; the image side stages them into the
build context. Git sources are cloned or fetched into a cache, checked out at their 40-hex
rev, and refused unless ``git rev-parse HEAD`` equals it; a path source must resolve inside
the repository.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from core.errors import ContextError, OfflineMissingError, SourceError
from core.network import NetworkConfig, tool_environment
from manifest import Source
from sources.sdist import MAX_MEMBERS, MAX_UNPACKED_BYTES

PATH_SOURCE_IGNORE = shutil.ignore_patterns(
    ".git", "__pycache__", "*.egg-info", "build", "dist", "*.so", "*.o"
)


def run_git(
    args: list[str], *, cwd: Path | None = None, network: NetworkConfig | None = None
) -> subprocess.CompletedProcess[str]:
    """git, local; with ``network``, a clone or fetch through its proxies and trust store
    (``core.network.tool_environment``) and no other."""
    env = dict(os.environ) if network is None else tool_environment(os.environ, network)
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**env, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"},
    )


def git_cache_dir(git_cache: Path, url: str) -> Path:
    return git_cache / hashlib.sha256(url.encode()).hexdigest()[:24]


def ensure_git_rev(
    source: Source,
    git_cache: Path,
    *,
    where: str,
    offline_hint: str | None = None,
    network: NetworkConfig | None = None,
) -> Path:
    """The cache clone of ``source.git`` holding the commit ``source.rev`` (fetched if not,
    through ``network``'s proxy; None: the environment's)."""
    assert source.git is not None
    assert source.rev is not None
    repo = git_cache_dir(git_cache, source.git)
    if offline_hint is not None:
        have = (repo / ".git").is_dir() and (
            run_git(["cat-file", "-e", f"{source.rev}^{{commit}}"], cwd=repo).returncode == 0
        )
        if not have:
            raise OfflineMissingError(
                f"offline build: source {where} ({source.git} @ {source.rev}) is not fetched",
                hint=offline_hint,
            )
        return repo
    if not (repo / ".git").is_dir():
        repo.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=repo.parent, prefix=".clone-"))
        res = run_git(
            ["clone", "--quiet", "--no-checkout", "--", source.git, str(tmp)], network=network
        )
        if res.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise SourceError(
                f"{where}: cannot clone {source.git}: {res.stderr.strip()}",
                hint="check the URL and that this machine can reach it (directly, or through "
                "--proxy URL, HTTPS_PROXY or mirrors.proxy)",
            )
        tmp.replace(repo)
    if run_git(["cat-file", "-e", f"{source.rev}^{{commit}}"], cwd=repo).returncode != 0:
        res = run_git(["fetch", "--quiet", "origin", source.rev], cwd=repo, network=network)
        if res.returncode != 0:
            raise SourceError(
                f"{where}: rev {source.rev} cannot be fetched from {source.git}: "
                f"{res.stderr.strip()}",
                hint="pin a commit that exists in the repository (git rev-parse TAG^{commit})",
            )
    return repo


def checkout_git_source(
    source: Source,
    git_cache: Path,
    dest: Path,
    *,
    where: str | None = None,
    offline_hint: str | None = None,
    network: NetworkConfig | None = None,
) -> None:
    """Fetch ``source.rev`` into the cache clone (through ``network``'s proxy), check it out,
    verify HEAD, export the tree."""
    where = where or f"sources.{source.name}"
    repo = ensure_git_rev(
        source, git_cache, where=where, offline_hint=offline_hint, network=network
    )
    assert source.rev is not None
    res = run_git(["checkout", "--quiet", "--detach", "--force", source.rev], cwd=repo)
    if res.returncode != 0:
        raise SourceError(
            f"{where}: cannot check out {source.rev}: {res.stderr.strip()}",
            hint="pin a commit id (git rev-parse TAG^{commit}), not a tag or tree object",
        )
    head = run_git(["rev-parse", "HEAD"], cwd=repo).stdout.strip()
    if head != source.rev:
        raise SourceError(
            f"{where}: after checking out {source.rev}, HEAD is {head}; the rev is not a commit "
            "id (an annotated tag object?)",
            hint=f"pin the commit itself: rev: {head!r} if that is the commit you mean",
        )
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as fh:
        proc = subprocess.run(
            ["git", "archive", "--format=tar", head], cwd=repo, stdout=fh, check=False
        )
        if proc.returncode != 0:
            raise SourceError(f"{where}: git archive {head} failed in {repo}")
        fh.seek(0)
        with tarfile.open(fileobj=fh) as tar:
            tar.extractall(dest, filter="data")


def path_source_dir(source: Source, repo_root: Path, *, where: str) -> Path:
    """The directory of the path source ``source``, resolved: it must be a directory inside
    the repository ``repo_root`` (a symlink out of it is refused)."""
    assert source.path is not None
    root = repo_root.resolve()
    path = (repo_root / source.path).resolve()
    if not path.is_relative_to(root):
        raise SourceError(
            f"{where}: path {source.path!r} resolves to {path}, outside the repository {root}",
            hint="a path source is a directory inside the repository (no symlink out of it)",
        )
    if not path.is_dir():
        raise SourceError(
            f"{where}: path {source.path!r} is not a directory in {root}",
            hint=f"create it or fix {where}.path in the manifest",
        )
    return path


def stage_path_source(
    source: Source, repo_root: Path, dest: Path, *, where: str | None = None
) -> None:
    """Copy the path source into ``dest``; a symlink in it that leads out of the repository
    is refused."""
    where = where or f"sources.{source.name}"
    root = repo_root.resolve()
    path = path_source_dir(source, repo_root, where=where)
    for link in sorted(p for p in path.rglob("*") if p.is_symlink()):
        resolved = link.resolve()
        if not resolved.is_relative_to(root):
            raise ContextError(
                f"{where}: {link.relative_to(root)} is a symlink to {resolved}, outside the "
                f"repository {root}",
                hint="a path source may only hold files of the repository; copy the file in, "
                "or remove the link",
            )
    shutil.copytree(path, dest, ignore=PATH_SOURCE_IGNORE, symlinks=False)


def extract_sdist(archive: Path, dest: Path, *, where: str) -> None:
    """Unpack a verified ``.tar.gz`` sdist into ``dest``, its one top directory stripped.

    Refused: more than one top directory, links or devices, absolute or ``..`` paths (the
    tarfile ``data`` filter), more than ``MAX_MEMBERS`` members or
    ``MAX_UNPACKED_BYTES`` bytes unpacked (counted from the headers before anything is
    written)."""
    try:
        with tarfile.open(archive, mode="r:gz") as tar:
            members = []
            total = 0
            tops: set[str] = set()
            for i, member in enumerate(tar):
                if i >= MAX_MEMBERS:
                    raise SourceError(f"{where}: more than {MAX_MEMBERS} files in the sdist")
                if not (member.isfile() or member.isdir()):
                    raise SourceError(
                        f"{where}: {member.name} is a link or a device; an sdist holds files",
                        hint="lock another sdist, or build from git + rev",
                    )
                total += max(member.size, 0)
                if total > MAX_UNPACKED_BYTES:
                    raise SourceError(
                        f"{where}: the sdist unpacks to more than {MAX_UNPACKED_BYTES} bytes"
                    )
                top, _, rest = member.name.lstrip("./").partition("/")
                tops.add(top)
                if rest:
                    member.name = rest
                    members.append(member)
            if len(tops) != 1:
                raise SourceError(
                    f"{where}: the sdist has {len(tops)} top directories "
                    f"({', '.join(sorted(tops)[:5])}); an sdist has one"
                )
            dest.mkdir(parents=True, exist_ok=True)
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise SourceError(f"{where}: cannot unpack {archive.name}: {exc}") from None


def read_tree_file(tree: Path, relpath: str, *, limit: int = 1 << 20) -> str | None:
    """A text file of a staged tree, or None when it is not there (a link is refused)."""
    path = tree / relpath
    if path.is_symlink() or not path.is_file():
        return None
    with path.open("rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{path}: larger than {limit} bytes")
    return data.decode("utf-8", errors="replace")
