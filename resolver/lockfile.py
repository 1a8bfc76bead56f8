"""The lock model and its files: ``pylock.toml`` (PEP 751), ``requirements.txt``,
``requirements-build.txt`` and ``constraints.txt``, rendered byte-identical run to run,
written atomically as a whole directory, and read back (validated with ``packaging.pylock``).

Three groups: ``runtime`` wheels (``requirements.txt``), ``build`` wheels
(``requirements-build.txt``) and ``source``: the sdists of ``sources.<name>.sdist``, built in
the image, only in ``pylock.toml``. An overridden package carries its reason and the
requirements it ignores, in its tool table and as a comment in ``requirements.txt``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

if sys.version_info >= (3, 11):
    import tomllib
else:  # Ubuntu 22.04's python3.10 runs the tool too
    import tomli as tomllib
from packaging.pylock import Pylock, PylockValidationError
from packaging.utils import NormalizedName, canonicalize_name

from core.errors import EnvironmentFailureError, LockError
from core.filenames import filename_problem, shown
from core.fsutil import replace_directory
from manifest import Target

TOOL = "vllm-musa-image"
PYLOCK = "pylock.toml"
REQUIREMENTS = "requirements.txt"
BUILD_REQUIREMENTS = "requirements-build.txt"
CONSTRAINTS = "constraints.txt"
BUILD_GROUP = "build"
SOURCE_GROUP = "source"
_GROUP_MARKER = re.compile(r"^'([a-z]+)' in dependency_groups$")


@dataclass(frozen=True, kw_only=True)
class LockedPackage:
    name: NormalizedName
    version: str  # the full version, local label included, in normal form
    index: str  # the manifest's index name
    index_url: str  # the effective index URL (no credentials)
    filename: str
    url: str
    sha256: str
    size: int | None
    kind: str  # native | abi3 | pure | other | sdist
    origin: str  # pin | requirement | dependency | line-map | build | override | source
    required_by: tuple[str, ...]
    group: str = "runtime"  # runtime | build | source
    # overrides.<name>: the manifest's reason, and each requirement on this package that the
    # resolver ignored and this version does not satisfy ("vllm 0.28.0 (...) requires ...")
    override_reason: str | None = None
    override_ignores: tuple[str, ...] = ()

    @property
    def is_override(self) -> bool:
        return self.override_reason is not None

    def override_requirements(self) -> tuple[tuple[str, str], ...]:
        """``override_ignores`` as (requirer, requirement) pairs: ``("mistral-common 1.11.6",
        "opencv-python-headless>=4.13.0")``; a source's requirer is ``vllm 0.28.0
        (sources.vllm:requirements/common.txt)`` or ``sources.vllm-musa:requirements/musa.txt``."""
        pairs = (i.rpartition(" requires ") for i in self.override_ignores)
        return tuple((requirer, requirement) for requirer, _, requirement in pairs)

    def override_comment(self) -> str:
        """``override: <reason>; ignores: <requirement>, <requirement>`` (or ``nothing``)."""
        ignores = ", ".join(self.override_ignores) or "nothing"
        return f"override: {self.override_reason}; ignores: {ignores}"


@dataclass(frozen=True, kw_only=True)
class Lock:
    stack: str  # the manifest's name
    target: Target
    lock_inputs_sha256: str
    packages: tuple[LockedPackage, ...]  # sorted by name

    def by_name(self) -> dict[NormalizedName, LockedPackage]:
        return {p.name: p for p in self.packages}

    def runtime(self) -> list[LockedPackage]:
        return [p for p in self.packages if p.group == "runtime"]

    def build_only(self) -> list[LockedPackage]:
        return [p for p in self.packages if p.group == BUILD_GROUP]

    def wheels(self) -> list[LockedPackage]:
        """The wheels (runtime and build): everything but the sources' sdists."""
        return [p for p in self.packages if p.group != SOURCE_GROUP]

    def sources(self) -> list[LockedPackage]:
        """The sdists of ``sources.<name>.sdist`` (``required_by`` names the source)."""
        return [p for p in self.packages if p.group == SOURCE_GROUP]

    def overrides(self) -> dict[NormalizedName, LockedPackage]:
        """The packages of ``overrides``, each with its reason and the requirements it
        ignores (``override_reason``, ``override_ignores``)."""
        return {p.name: p for p in self.packages if p.override_reason is not None}


def _header(lock: Lock, what: str) -> list[str]:
    return [
        f"# {what}",
        f"# stack: {lock.stack}",
        f"# target: {lock.target.describe()}",
        f"# lock-inputs-sha256: {lock.lock_inputs_sha256}",
        f"# written by {TOOL}; do not edit: run `build_image.py lock` instead",
    ]


def render_requirements(lock: Lock, *, group: str = "runtime") -> str:
    packages = lock.runtime() if group == "runtime" else lock.build_only()
    what = (
        "pip install --no-deps --require-hashes --only-binary :all: -r requirements.txt"
        if group == "runtime"
        else "build-stage only: pip install --no-deps --require-hashes -r requirements-build.txt"
    )
    return render_requirement_lines(lock, packages, what=what)


def render_requirement_lines(lock: Lock, packages: Sequence[LockedPackage], *, what: str) -> str:
    """``packages`` of ``lock`` as a hash-checked requirements file, headed by ``what``."""
    lines = _header(lock, what)
    for p in packages:
        if p.is_override:
            lines.append(f"# {p.override_comment()}")
        lines.append(f"{p.name}=={p.version} \\")
        lines.append(f"    --hash=sha256:{p.sha256}")
    return "\n".join(lines) + "\n"


def render_constraints(lock: Lock) -> str:
    lines = _header(lock, "constraints: every locked distribution (runtime and build)")
    lines += [f"{p.name}=={p.version}" for p in lock.wheels()]
    return "\n".join(lines) + "\n"


def constrained_names(directory: Path) -> list[NormalizedName]:
    """The names in the constraints file ``render_constraints`` wrote in ``directory``, read
    without parsing the lock (a hint, never a check: [] when there is no such file)."""
    try:
        text = (directory / CONSTRAINTS).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [canonicalize_name(line.split("==", 1)[0]) for line in text.splitlines() if "==" in line]


def _target_marker(target: Target) -> str:
    return (
        f"python_version == '{target.python_str}' and sys_platform == 'linux' "
        f"and platform_machine == '{target.arch}'"
    )


def _file_table(p: LockedPackage) -> dict[str, Any]:
    table: dict[str, Any] = {"name": p.filename, "url": p.url}
    if p.size is not None:
        table["size"] = p.size
    table["hashes"] = {"sha256": p.sha256}
    return table


def pylock_dict(lock: Lock) -> dict[str, Any]:
    packages: list[dict[str, Any]] = []
    for p in lock.packages:
        entry: dict[str, Any] = {"name": p.name, "version": p.version}
        if p.group != "runtime":
            entry["marker"] = f"'{p.group}' in dependency_groups"
        entry["index"] = p.index_url
        if p.group == SOURCE_GROUP:
            entry["sdist"] = _file_table(p)
        else:
            entry["wheels"] = [_file_table(p)]
        tool: dict[str, Any] = {
            "index-name": p.index,
            "kind": p.kind,
            "origin": p.origin,
            "required-by": list(p.required_by),
        }
        if p.override_reason is not None:
            tool["override"] = {"reason": p.override_reason, "ignores": list(p.override_ignores)}
        entry["tool"] = {TOOL: tool}
        packages.append(entry)
    doc: dict[str, Any] = {
        "lock-version": "1.0",
        "environments": [_target_marker(lock.target)],
        "requires-python": f"=={lock.target.python_str}.*",
    }
    groups = sorted({p.group for p in lock.packages} - {"runtime"})
    if groups:
        doc["dependency-groups"] = groups
        doc["default-groups"] = []
    doc["created-by"] = TOOL
    doc["packages"] = packages
    doc["tool"] = {
        TOOL: {
            "stack": lock.stack,
            "lock-inputs-sha256": lock.lock_inputs_sha256,
            "target": {
                "python": lock.target.python_str,
                "arch": lock.target.arch,
                "glibc": lock.target.glibc_str,
            },
        }
    }
    return doc


def render_pylock(lock: Lock) -> str:
    doc = pylock_dict(lock)
    Pylock.from_dict(doc)  # validate against PEP 751 before anything is written
    header = "\n".join(_header(lock, "PEP 751 lock")) + "\n"
    return header + tomli_w.dumps(doc)


def render_all(lock: Lock) -> dict[str, bytes]:
    files = {
        PYLOCK: render_pylock(lock),
        REQUIREMENTS: render_requirements(lock),
        CONSTRAINTS: render_constraints(lock),
    }
    if lock.build_only():
        files[BUILD_REQUIREMENTS] = render_requirements(lock, group=BUILD_GROUP)
    return {name: text.encode("utf-8") for name, text in files.items()}


LOCK_FILES = frozenset({PYLOCK, REQUIREMENTS, BUILD_REQUIREMENTS, CONSTRAINTS})


def check_lock_dir(directory: Path) -> None:
    """A lock directory is replaced whole; refuse one that holds anything else, a symbolic
    link (it would be replaced, not written through), and a place that cannot be written
    (under a file, in a directory this user may not write): before the work, not after it."""
    if directory.is_symlink():
        raise LockError(
            f"{directory} is a symbolic link (to {directory.readlink()}); writing the lock "
            "replaces the whole directory, so it would replace the link",
            hint="give the real directory as --out, or remove the link",
        )
    if not directory.exists():
        _check_creatable(directory)
        return
    if not directory.is_dir():
        raise EnvironmentFailureError(
            f"{directory} exists and is not a directory", hint="choose another --out"
        )
    others = sorted(p.name for p in directory.iterdir() if p.name not in LOCK_FILES)
    if others:
        shown = ", ".join(others[:5]) + (", ..." if len(others) > 5 else "")
        raise LockError(
            f"{directory} holds files that are not part of a lock ({shown}); writing the lock "
            "replaces the whole directory",
            hint="choose a new or empty --out DIR",
        )


def _check_creatable(directory: Path) -> None:
    """``directory`` can be made: its nearest existing ancestor is a directory we may write."""
    ancestor = directory.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        if ancestor.is_symlink():  # a dangling link on the way
            raise LockError(
                f"{directory} cannot be created: {ancestor} is a symbolic link to "
                f"{ancestor.readlink()}, which does not exist",
                hint="choose another --out DIR, or create the link's target",
            )
        ancestor = ancestor.parent
    if not ancestor.is_dir():  # the environment, not the inputs: exit 2
        raise EnvironmentFailureError(
            f"{directory} cannot be created: {ancestor} is a file, not a directory",
            hint="choose another --out DIR",
        )
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise EnvironmentFailureError(
            f"{directory} cannot be created: this user may not write to {ancestor}",
            hint="choose another --out DIR, or fix the permissions of that directory",
        )


def write_lock(directory: Path, lock: Lock) -> None:
    write_rendered(directory, render_all(lock))


def write_rendered(directory: Path, files: Mapping[str, bytes]) -> None:
    """Replace ``directory`` whole with ``files`` (``render_all`` of a lock)."""
    check_lock_dir(directory)
    replace_directory(directory, files)


# ------------------------------------------------------------------------------ reading


def load_lock(directory: Path) -> Lock:
    path = directory / PYLOCK
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockError(
            f"{path}: no lock", hint="run `build_image.py lock STACK` to write it"
        ) from None
    return parse_pylock(text, where=str(path))


def parse_pylock(text: str, *, where: str) -> Lock:
    try:
        doc = tomllib.loads(text)
        Pylock.from_dict(doc)
    except (tomllib.TOMLDecodeError, PylockValidationError) as exc:
        raise LockError(f"{where}: not a valid pylock.toml: {exc}") from None
    try:
        tool = doc["tool"][TOOL]
        t = tool["target"]
        py = tuple(int(x) for x in t["python"].split("."))
        glibc = tuple(int(x) for x in t["glibc"].split("."))
        target = Target(python=(py[0], py[1]), arch=t["arch"], glibc=(glibc[0], glibc[1]))
        packages = tuple(_package_from(p) for p in doc["packages"])
        return Lock(
            stack=tool["stack"],
            target=target,
            lock_inputs_sha256=tool["lock-inputs-sha256"],
            packages=packages,
        )
    except (KeyError, IndexError) as exc:
        raise LockError(f"{where}: not written by {TOOL} (missing {exc})") from None
    except (TypeError, ValueError) as exc:
        raise LockError(f"{where}: not a valid lock: {exc}") from None


def _package_from(p: Mapping[str, Any]) -> LockedPackage:
    marker = _GROUP_MARKER.match(str(p.get("marker", "")))
    group = marker.group(1) if marker else "runtime"
    if group not in ("runtime", BUILD_GROUP, SOURCE_GROUP):
        raise ValueError(f"{p['name']}: unknown group {group!r}")
    file = p["sdist"] if group == SOURCE_GROUP else p["wheels"][0]
    filename = file["name"]
    problem = filename_problem(filename) if isinstance(filename, str) else "is not a string"
    if problem is not None:
        # a lock's filenames become paths (wheelhouse/runtime/<file>) and Dockerfile lines
        raise ValueError(
            f"{p['name']}: the file name {shown(str(filename))} {problem}; a filename is "
            "data, never a path"
        )
    sha = file["hashes"]["sha256"]
    if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise ValueError(f"sha256 of {file.get('name')!r} is not a hex digest")
    meta = p["tool"][TOOL]
    override = meta.get("override")
    return LockedPackage(
        name=canonicalize_name(p["name"]),
        version=p["version"],
        index=meta["index-name"],
        index_url=p["index"],
        filename=filename,
        url=file["url"],
        sha256=sha,
        size=file.get("size"),
        kind=meta["kind"],
        origin=meta["origin"],
        required_by=tuple(meta["required-by"]),
        group=group,
        override_reason=str(override["reason"]) if override is not None else None,
        override_ignores=tuple(str(i) for i in override["ignores"]) if override else (),
    )


# ------------------------------------------------------------------------------ diff


def diff_locks(old: Lock, new: Lock) -> list[str]:
    """Readable differences between two locks, by distribution (empty when equal): the files
    (name, version, filename, sha256), each one's index by its manifest name, group and
    override. URLs are not compared: the same files with the same hashes at another URL (a
    mirror of the index, ``--index NAME=URL``) are the same lock (``resolver.lock_report``
    calls them moved)."""
    lines: list[str] = []
    if old.lock_inputs_sha256 != new.lock_inputs_sha256:
        lines.append(
            f"manifest inputs changed (lock-inputs-sha256 {old.lock_inputs_sha256[:12]} -> "
            f"{new.lock_inputs_sha256[:12]})"
        )
    a, b = old.by_name(), new.by_name()
    for name in sorted(set(a) | set(b)):
        pa, pb = a.get(name), b.get(name)
        if pa is None and pb is not None:
            lines.append(f"+ {name} {pb.version} ({pb.filename}) new")
        elif pb is None and pa is not None:
            lines.append(f"- {name} {pa.version} ({pa.filename}) gone from the resolve")
        elif pa is not None and pb is not None:
            lines += _package_changes(name, pa, pb)
    return lines


def _package_changes(name: str, pa: LockedPackage, pb: LockedPackage) -> list[str]:
    """How one distribution in both locks changed: its file (version, name or bytes), else
    its index (by manifest name: a mirror is the same index) and group; and its override."""
    lines: list[str] = []
    if (pa.version, pa.filename, pa.sha256) != (pb.version, pb.filename, pb.sha256):
        if pa.version != pb.version:
            lines.append(f"~ {name} {pa.version} -> {pb.version}")
        elif pa.filename != pb.filename:
            lines.append(f"~ {name} {pa.version}: file {pa.filename} -> {pb.filename}")
        else:
            lines.append(
                f"~ {name} {pa.version}: {pa.filename} changed bytes under the same name "
                f"(sha256 {pa.sha256[:16]}... -> {pb.sha256[:16]}...)"
            )
    else:
        if pa.index != pb.index:
            lines.append(f"~ {name} {pa.version}: index {pa.index} -> {pb.index}")
        if pa.group != pb.group:
            lines.append(f"~ {name} {pa.version}: group {pa.group} -> {pb.group}")
    if (pa.override_reason, pa.override_ignores) != (pb.override_reason, pb.override_ignores):
        before = pa.override_comment() if pa.is_override else "no override"
        after = pb.override_comment() if pb.is_override else "no override"
        lines.append(f"~ {name} {pb.version}: {before} -> {after}")
    return lines
