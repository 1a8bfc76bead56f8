"""The files of an index page as the readers leave them: rows, and ``IndexFile`` records.

A page of thousands of files is kept as ``ListedFile`` tuples; ``ProjectPage`` makes an
``IndexFile`` of a row only when that file is read, and makes each one once. A page parsed
for a target holds only the files that target may run and counts the ones it left out;
``whole_page`` and ``listed`` see past that to every file the page lists.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload


@dataclass(frozen=True, kw_only=True)
class IndexFile:
    """One file listed on an index page."""

    filename: str
    url: str  # absolute, without the hash fragment
    hashes: Mapping[str, str] = field(default_factory=dict)
    requires_python: str | None = None
    yanked: bool = False
    yanked_reason: str = ""
    # PEP 658/714: None when no metadata file is offered; else its hashes (may be empty)
    metadata_hashes: Mapping[str, str] | None = None
    size: int | None = None
    upload_time: str | None = None
    # why this listing can never be used: its filename is not a plain file name (then
    # ``filename`` is the name as ``core.filenames.shown`` prints it); None for a usable one
    problem: str | None = None

    @property
    def metadata_url(self) -> str:
        return self.url + ".metadata"

    @staticmethod
    def from_row(row: ListedFile) -> IndexFile:
        return _record(row)


# One file of a page as the parser leaves it, in the order of ``IndexFile``'s fields:
# (filename, url, hashes, requires_python, yanked, yanked_reason, metadata_hashes, size,
# upload_time, problem). A page of thousands of files is kept as these tuples, and an
# ``IndexFile`` is made only for a file that is looked at (``ProjectPage``).
ListedFile = tuple[
    str,
    str,
    Mapping[str, str],
    str | None,
    bool,
    str,
    Mapping[str, str] | None,
    int | None,
    str | None,
    str | None,
]


def _record(row: ListedFile) -> IndexFile:
    name, url, hashes, requires_python, yanked, reason, metadata, size, upload, problem = row
    return IndexFile(
        filename=name,
        url=url,
        hashes=hashes,
        requires_python=requires_python,
        yanked=yanked,
        yanked_reason=reason,
        metadata_hashes=metadata,
        size=size,
        upload_time=upload,
        problem=problem,
    )


class ProjectPage(Sequence[IndexFile]):
    """The files of one page, in page order: rows, each made an ``IndexFile`` the first time
    it is read (a real page lists thousands of files; a search reads a few of them).

    ``filename(i)`` reads a file's name without making its record.

    A page parsed for a target (``target`` is its key, ``resolver.target.TargetTags.key``)
    holds only the files that target may run: ``dropped`` wheels none of whose tags it
    accepts were left out. ``whole()`` is the page with every file it lists, parsed again
    from the same bytes, for what shows every file (``explain``, a refusal).

    ``digest``: the sha256 the index client computed over the page's URL, content type and
    body (what a search record compares), None when it was not computed."""

    __slots__ = ("_full", "_made", "_whole", "digest", "dropped", "rows", "target")

    def __init__(
        self,
        rows: Sequence[ListedFile],
        *,
        target: str | None = None,
        dropped: int = 0,
        whole: Callable[[], ProjectPage] | None = None,
        digest: str | None = None,
    ) -> None:
        self.rows = rows
        self.digest = digest
        self._made: dict[int, IndexFile] = {}
        self.target = target
        self.dropped = dropped
        self._whole = whole
        self._full: ProjectPage | None = None

    def whole(self) -> ProjectPage:
        """Every file the page lists: this page itself unless it was parsed for a target."""
        if self._whole is None:
            return self
        if self._full is None:
            self._full = self._whole()
        return self._full

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> IndexFile: ...

    @overload
    def __getitem__(self, i: slice) -> list[IndexFile]: ...

    def __getitem__(self, i: int | slice) -> IndexFile | list[IndexFile]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.rows)))]
        if i < 0:
            i += len(self.rows)
        made = self._made.get(i)
        if made is None:
            made = self._made.setdefault(i, _record(self.rows[i]))
        return made

    def __iter__(self) -> Iterator[IndexFile]:
        for i in range(len(self.rows)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (ProjectPage, list)):
            return list(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.target is None:
            return f"ProjectPage({len(self.rows)} files)"
        return f"ProjectPage({len(self.rows)} files for {self.target}, {self.dropped} dropped)"

    def filename(self, i: int) -> str:
        return self.rows[i][0]


def whole_page(files: Sequence[IndexFile]) -> Sequence[IndexFile]:
    """Every file of ``files``: the whole page when it is a page parsed for a target."""
    return files.whole() if isinstance(files, ProjectPage) else files


def listed(files: Sequence[IndexFile]) -> int:
    """How many files the page lists, counting those a parse for a target left out."""
    return len(files) + (files.dropped if isinstance(files, ProjectPage) else 0)


# which plain file names a parse makes rows of (``TargetTags.may_run``); None: every one
Keep = Callable[[str], bool] | None
