"""Requirements files of a source (``requirements_files``, ``build_requirements_files``),
parsed without touching the file system: the caller passes a function that reads a file of
the tree (a path source, a git commit, a verified sdist) by its POSIX path inside the tree.

What a line may be, and what becomes of it:

- blank lines and comments (``#`` at the start or after whitespace) are skipped; a line
  ending with ``\\`` continues on the next;
- ``-r FILE`` / ``--requirement FILE`` includes another file of the same tree, relative to the
  including file; an include that leaves the tree is refused, and a file already read (an
  include cycle, or two files including a third) is read once;
- a PEP 508 requirement, markers kept (the resolver evaluates them for the target);
- refused, naming the source, the file and the line: index options (``--index-url``,
  ``--extra-index-url``, ``--no-index``, ``-f``/``--find-links``, ``--trusted-host``: the
  lock's indexes come from the manifest, and a lock that silently dropped them would not be
  what the file says), constraints files (``-c``), editables, direct URLs and paths, options
  after a requirement (``--hash``, ``--config-settings``) and every other option.

``BUILD_DROPPED``: from build requirements files, requirements on ``torch``, ``torchvision``
and ``torchaudio`` are dropped. Upstream does the same before it installs vLLM's build
requirements (``python use_existing_torch.py``, then ``pip install -r
requirements/build/cuda.txt``): the image's torch is the MUSA build the manifest pins, never
the CUDA version the file names.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name

from core.errors import SourceError
from core.urls import redact

# reads a file of the tree by its POSIX path inside it; None when there is no such file
ReadFile = Callable[[str], bytes | None]

MAX_FILE_BYTES = 1 << 20  # a requirements file larger than this is not one
BUILD_DROPPED: frozenset[NormalizedName] = frozenset(
    canonicalize_name(n) for n in ("torch", "torchvision", "torchaudio")
)

_COMMENT_RE = re.compile(r"(^|\s+)#.*$")
_INCLUDE = ("-r", "--requirement")
_INDEX_OPTIONS = (
    "-i",
    "--index-url",
    "--extra-index-url",
    "--no-index",
    "-f",
    "--find-links",
    "--trusted-host",
)
_CONSTRAINT = ("-c", "--constraint")
_EDITABLE = ("-e", "--editable")


@dataclass(frozen=True, kw_only=True)
class FileRequirement:
    """One requirement line of a requirements file: ``file`` is its path inside the tree,
    ``text`` the line as written (comments stripped, continuations joined), ``via`` the
    ``-r`` lines that included ``file``, from a listed file down (``musa.txt:2``)."""

    requirement: Requirement
    file: str
    line: int
    text: str = ""
    via: tuple[str, ...] = ()

    @property
    def name(self) -> NormalizedName:
        return canonicalize_name(self.requirement.name)

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True, kw_only=True)
class RequirementsRead:
    """The requirements of a list of files (includes followed), in reading order, and the
    ones dropped (``BUILD_DROPPED``)."""

    requirements: tuple[FileRequirement, ...]
    dropped: tuple[FileRequirement, ...] = ()


@dataclass(frozen=True)
class _Line:
    number: int  # the first physical line
    text: str  # comments stripped, continuations joined, whitespace trimmed


def logical_lines(text: str) -> Iterator[_Line]:
    """The logical lines of a requirements file: continuations joined, comments and blank
    lines dropped."""
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        comment = _COMMENT_RE.match(raw) is not None
        if raw.endswith("\\") and not comment:  # a comment line never continues
            pending.append(raw[:-1])
            continue
        pending.append(" " + raw if comment else raw)
        joined = "".join(pending)
        pending = []
        line = _COMMENT_RE.sub("", joined).strip()
        if line:
            yield _Line(start, line)
    if pending:
        line = _COMMENT_RE.sub("", "".join(pending)).strip()
        if line:
            yield _Line(start, line)


def _option(text: str) -> tuple[str, str]:
    """``--opt=value`` / ``--opt value`` / ``-rvalue`` / ``-r value`` -> (option, value)."""
    head, _, rest = text.partition(" ")
    rest = rest.strip()
    if head.startswith("--"):
        name, eq, value = head.partition("=")
        return name, (value + (" " + rest if rest else "")).strip() if eq else rest
    if len(head) > 2:  # -rfile
        return head[:2], (head[2:] + (" " + rest if rest else "")).strip()
    return head, rest


def _split_options(text: str) -> tuple[str, str]:
    """A requirement line's requirement and the options after it (as pip splits them: at
    the first word that starts with ``-``)."""
    words = text.split(" ")
    for i, word in enumerate(words):
        if word.startswith("-"):
            return " ".join(words[:i]).strip(), " ".join(words[i:]).strip()
    return text, ""


def read_requirements(
    read: ReadFile,
    files: Sequence[str],
    *,
    where: str,
    drop: frozenset[NormalizedName] = frozenset(),
) -> RequirementsRead:
    """The requirements of ``files`` (paths inside the tree ``read`` reads), includes
    followed. ``where`` names the tree in messages (``sources.vllm``); requirements on a
    name in ``drop`` are left out and returned as dropped."""
    seen: set[str] = set()
    kept: list[FileRequirement] = []
    dropped: list[FileRequirement] = []

    def visit(path: str, chain: tuple[str, ...]) -> None:
        if path in seen:
            return
        seen.add(path)
        data = read(path)
        if data is None:
            via = f" (included from {chain[-1]})" if chain else ""
            raise SourceError(
                f"{where}: {path}: no such file in the source{via}",
                hint=f"fix the file name under {where}, or pin the revision that has it",
            )
        if len(data) > MAX_FILE_BYTES:
            raise too_large(where, path, len(data))
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise SourceError(f"{where}: {path}: not UTF-8 text ({exc.reason})") from None
        for line in logical_lines(text):
            at = f"{where}: {path}:{line.number}"
            if line.text.startswith("-"):
                option, value = _option(line.text)
                if option in _INCLUDE:
                    visit(_include_path(path, value, at=at), (*chain, f"{path}:{line.number}"))
                    continue
                _refuse_option(option, value, at=at)
            req = _requirement(line.text, at=at)
            item = FileRequirement(
                requirement=req, file=path, line=line.number, text=line.text, via=chain
            )
            (dropped if item.name in drop else kept).append(item)

    for path in files:
        visit(path, ())
    return RequirementsRead(requirements=tuple(kept), dropped=tuple(dropped))


def too_large(where: str, path: str, size: int) -> SourceError:
    """The error for a requirements file over ``MAX_FILE_BYTES`` (found before reading it)."""
    return SourceError(
        f"{where}: {path}: {size} bytes, more than a requirements file may have ({MAX_FILE_BYTES})"
    )


def _include_path(including: str, value: str, *, at: str) -> str:
    if not value:
        raise SourceError(f"{at}: -r without a file name")
    if "://" in value or value.startswith("/") or "\\" in value:
        raise SourceError(
            f"{at}: -r {redact(value)}: only a relative file of the same source can be included",
        )
    path = posixpath.normpath(posixpath.join(posixpath.dirname(including), value))
    if path == ".." or path.startswith("../"):
        raise SourceError(
            f"{at}: -r {value} leaves the source tree",
            hint="a requirements file may include files of its own source only",
        )
    return path


def _refuse_option(option: str, value: str, *, at: str) -> None:
    shown = f"{option} {redact(value)}".strip()
    if option in _INDEX_OPTIONS:
        raise SourceError(
            f"{at}: {shown}: a requirements file cannot add or change an index; the indexes "
            "come from the manifest, and ignoring the line would lock something else than the "
            "file says",
            hint="bind the packages that need that index under packages (with an index of "
            "the manifest), or list requirements files without index options",
        )
    if option in _CONSTRAINT:
        raise SourceError(
            f"{at}: {shown}: constraints files are not read; the lock's versions come from "
            "the manifest",
            hint="put the constraint in the manifest (requirements, packages or overrides)",
        )
    if option in _EDITABLE:
        raise SourceError(
            f"{at}: {shown}: an editable or direct reference; the lock takes every "
            "distribution from an index of the manifest",
            hint="build it as a source of the manifest instead",
        )
    raise SourceError(
        f"{at}: {shown}: option {option} is not supported in a requirements file the lock reads",
        hint="only requirements and -r includes are read; the other settings come from the "
        "manifest",
    )


def _requirement(text: str, *, at: str) -> Requirement:
    spec, options = _split_options(text)
    if options:
        option = options.split(" ", 1)[0].partition("=")[0]
        raise SourceError(
            f"{at}: {spec} {option}: options after a requirement are not supported",
            hint="the lock records its own hashes and build settings; remove the option",
        )
    try:
        req = Requirement(spec)
    except InvalidRequirement as exc:
        raise SourceError(
            f"{at}: {redact(spec)!r} is not a PEP 508 requirement ({exc})",
            hint="a path, a URL or an archive cannot be locked; only name[extras] "
            "specifiers ; markers",
        ) from None
    if req.url:
        raise SourceError(
            f"{at}: {req.name} @ {redact(req.url)}: a direct URL; the lock takes every "
            "distribution from an index of the manifest",
            hint=f"publish {req.name} on an index of the manifest, or pin it under packages",
        )
    return req
