"""Record and replay of a lock's searches, over the cache's search record
(``resolver.search_record`` encodes it and says what it holds): the one wrapper around the
search, whose steps the lock calls (``start``, ``start_pins``, ``search``, ``finish``).

- ``load_record``: the entries a previous lock of the same slot kept. A record is untrusted
  input: any problem with it only means there is none, and the search runs.
- ``SearchReplay.revalidate_ahead``: every page the record lists is asked for again (a
  conditional GET each, on the read-ahead threads), and the METADATA of the files it chose
  read, beside the pins' selection.
- ``SearchReplay.replay``: the recorded outcome of a search whose fingerprint (``fingerprint``
  of its inputs and of the code that decides it) is the one recorded, when every page it read
  has the same digest now (a 404 still a 404) and every METADATA it read whose sha256 its page
  does not give still has the same sha256; else None. A replay reads no page body.
- ``SearchReplay.add`` keeps what a search that ran read and chose; ``save`` writes this run's
  searches as the slot's record, unless one cannot be told by digests (a find-links page), or
  the record already says exactly this. A record that cannot be written is no error.
- ``SearchReplay.summary``: the ``-v`` line, ``search: replayed (...)`` or ``search: ran (why)``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import KW_ONLY, dataclass

from packaging.utils import NormalizedName
from packaging.version import Version

from core.errors import BuildImageError
from resolver import search_record
from resolver.cache import Cache
from resolver.closure import Candidate, Req
from resolver.fetcher import Fetcher
from resolver.index_client import IndexEndpoint
from resolver.search import RecordingSource, Roots, SearchOutcome, run_search
from resolver.search_record import ChosenRecord, MetadataRead, PageRead, RecordedSearch
from resolver.simple_page import IndexFile, ListedFile, ProjectPage
from resolver.wheel_metadata import CoreMetadata
from resolver.wheel_select import Verdict, evaluate

_Keys = set[tuple[str, NormalizedName]]


@dataclass(frozen=True)
class PreviousRecord:
    """The search record a previous lock kept in this slot, as read."""

    entries: tuple[RecordedSearch, ...] | None  # None: no usable record
    why_none: str  # "no record", "the record is unusable"; "" when there are entries
    payload: object = None  # the record as read, when usable

    def pages(self, endpoints: Mapping[str, IndexEndpoint]) -> list[tuple[str, NormalizedName]]:
        """The pages the record lists on this run's indexes, sorted."""
        return sorted(
            {(p.index, p.name) for e in self.entries or () for p in e.pages if p.index in endpoints}
        )


def load_record(cache: Cache, slot: str) -> PreviousRecord:
    """The entries of ``slot``'s record, or why there are none."""
    raw = cache.get_search(slot, max_bytes=search_record.MAX_RECORD_BYTES)
    if raw is None:
        found = cache.search_path(slot).exists()
        return PreviousRecord(None, "the record is unusable" if found else "no record")
    entries = search_record.decode(raw)
    if entries is None:
        return PreviousRecord(None, "the record is unusable")
    return PreviousRecord(entries, "", raw)


@dataclass(eq=False)
class SearchReplay:
    """The searches of one lock run, replayed from the previous record or recorded; the
    run's pins, indexes, target and cache are its fetcher's."""

    previous: PreviousRecord
    _: KW_ONLY
    slot: str
    fetcher: Fetcher

    def __post_init__(self) -> None:
        self.fixed = self.fetcher.fixed
        self.m = self.fixed.m
        self.pages = self.previous.pages(self.fetcher.endpoints)  # asked for from the start
        self._entries: list[RecordedSearch | None] = []  # this run's searches; None: not recordable
        self._outcomes: list[str | None] = []  # per search: why it ran; None: replayed

    # ------------------------------------------------------------------ the lock's steps

    def start(self, hints: Iterable[NormalizedName]) -> None:
        """Before the pins are chosen: a re-lock revalidates the pages its record lists from
        the start (no crawl: a replayed search reads no more), else crawls from ``hints``
        (the previous lock's names)."""
        if self.pages:
            self.revalidate_ahead()
        else:
            self.fetcher.prefetch(hints, ahead=True)

    def start_pins(self) -> None:
        """Once the pins are chosen: a replay reads their METADATA again; a search that runs
        crawls from them."""
        pins = self.fixed.pins
        if not self.pages:
            self.fetcher.prefetch(pins)
            return
        for pin in pins.values():
            if pin.deps:
                self.fetcher.metadata(pin.name, pin.verdict)

    def search(self, roots: Roots) -> SearchOutcome:
        """The outcome of a search of ``roots``: replayed when the record allows, else run
        and recorded."""
        fingerprint = self.fingerprint(roots)
        replayed = self.replay(fingerprint)
        if replayed is not None:
            return replayed
        outcome, reads = run_search(roots, self.fetcher, self.fixed, self.fetcher.environment)
        self.add(fingerprint, reads, outcome)
        return outcome

    def finish(self) -> str:
        """Save this run's record; the ``-v`` line."""
        self.save()
        return self.summary()

    # ------------------------------------------------------------------ before the search

    def revalidate_ahead(self) -> None:
        """Ask for every page the record lists again, and read the METADATA of the files it
        chose, on the read-ahead threads."""
        for index, name in self.pages:  # a conditional GET each
            self.fetcher.page_digest(index, name, ahead=True)
        self.fetcher.submit(self._read_recorded_metadata, ahead=True)

    def _read_recorded_metadata(self) -> None:
        """The METADATA of the files the record chose, read one after another on this one
        thread (from the cache, mostly) while the pages revalidate: a replay checks them
        next. One a replay does not use cost a cache read, never a wrong answer (a METADATA
        is checked on its file's hash from the page, and kept by the file's URL)."""
        entries = self.previous.entries
        assert entries is not None
        keys = {(p.index, p.name) for e in entries for p in e.pages}
        for entry in entries:
            for c in entry.chosen:
                if self.fetcher.closing:
                    return
                if c.row is None or c.name in self.m.packages:
                    continue
                verdict = self._recorded_verdict(c.name, c.row, keys)
                if verdict is not None:
                    self.fetcher.metadata_here(c.name, verdict)

    def fingerprint(self, roots: Roots) -> str:
        """The fingerprint of a search of ``roots`` in this run."""
        return search_record.fingerprint(self._search_inputs(roots))

    def _search_inputs(self, roots: Roots) -> object:
        """Everything the search reads besides the pages and METADATA, as JSON types."""

        def req(r: Req) -> list[object]:
            return [r.name, sorted(r.extras), str(r.specifier), r.parent, r.origin]

        def row(f: IndexFile) -> list[object]:
            meta = None if f.metadata_hashes is None else dict(f.metadata_hashes)
            return [f.url, f.filename, dict(f.hashes), meta, f.requires_python, f.yanked]

        m = self.m
        return {
            "target": [list(m.target.python), m.target.arch, list(m.target.glibc)],
            "environment": self.fetcher.environment,
            "python": m.target.python_str,
            "default_index": m.default_index,
            "runtime": [req(r) for r in roots.runtime],
            "build": [req(r) for r in roots.build],
            "ignored": [[who, *req(r)] for who, r in roots.ignored],
            "pins": {
                n: [str(p.version), p.index, p.origin, p.deps, p.verdict.kind, row(p.verdict.file)]
                for n, p in sorted(self.fixed.pins.items())
            },
            "provided": {n: str(p.version) for n, p in sorted(self.fixed.provided.items())},
            "overrides": {n: [str(o.version), o.index] for n, o in sorted(m.overrides.items())},
        }

    # ------------------------------------------------------------------ replay

    def replay(self, fingerprint: str) -> SearchOutcome | None:
        """The recorded outcome of a search of these inputs, when every page and METADATA it
        read is unchanged in this run; else None (and why, for the -v line)."""
        entries = self.previous.entries
        if entries is None:
            self._outcomes.append(self.previous.why_none)
            return None
        entry = next((e for e in entries if e.fingerprint == fingerprint), None)
        if entry is None:
            self._outcomes.append("inputs changed")
            return None
        why = self._changed(entry)
        outcome = self._replayed(entry) if why is None else None
        if outcome is None:
            self._outcomes.append(why or "the record is unusable")
            return None
        self._entries.append(entry)
        self._outcomes.append(None)
        return outcome

    def _changed(self, entry: RecordedSearch) -> str | None:
        """What changed of what ``entry`` read, in words; None when nothing did."""
        if any(p.index not in self.fetcher.endpoints for p in entry.pages):
            return "the record is unusable"
        asked = [(p, self.fetcher.page_digest(p.index, p.name)) for p in entry.pages]  # in flight
        changed = 0
        for p, fut in asked:
            try:
                digest = fut.result()
            except BuildImageError:  # the search, if it runs, says it
                changed += 1
                continue
            changed += digest != p.digest
        if changed:
            return f"{changed} page{'s' if changed != 1 else ''} changed"
        return self._metadata_changed(entry)

    def _metadata_changed(self, entry: RecordedSearch) -> str | None:
        """How many METADATA ``entry`` read differ now, in words; None when none does."""
        keys = {(p.index, p.name) for p in entry.pages}
        loading: list[tuple[MetadataRead, Verdict, Future[CoreMetadata]]] = []
        for m in entry.metadata:
            verdict = self._recorded_verdict(m.name, m.row, keys)
            if verdict is None:
                return "the record is unusable"
            if (verdict.file.metadata_hashes or {}).get("sha256") == m.sha256:
                continue  # the page gives that sha256 now (a record made before said not)
            loading.append((m, verdict, self.fetcher.metadata(m.name, verdict)))
        differ = 0
        for m, verdict, meta in loading:
            try:
                meta.result()
            except BuildImageError:
                differ += 1
                continue
            differ += self.fetcher.metadata_sha(verdict.file.url) != m.sha256
        if differ:
            return f"the METADATA of {differ} file{'s' if differ != 1 else ''} changed"
        return None

    def _recorded_verdict(
        self, name: NormalizedName, row: ListedFile | None, keys: _Keys
    ) -> Verdict | None:
        """The verdict on the file a record names: a pin's (``row`` None), or the file of
        ``row`` of the name's page. The page it is on is the one recorded (the same digest)
        and was parsed by the same code (the fingerprint), so its rows are not read again.
        None when the file is not one the record could name."""
        if row is None:
            pin = self.fixed.pins.get(name)
            return None if pin is None else pin.verdict
        if name in self.fixed.pins or name in self.fixed.provided:
            return None
        if (self.m.index_of(name), name) not in keys:
            return None
        tags = self.fetcher.target_tags
        verdict = evaluate(IndexFile.from_row(row), project=name, target_tags=tags)
        if verdict is None or not verdict.accepted or verdict.version is None:
            return None
        return verdict

    def _replayed(self, entry: RecordedSearch) -> SearchOutcome | None:
        """The ``SearchOutcome`` ``entry`` records, with its files as the record keeps them."""
        keys = {(p.index, p.name) for p in entry.pages}
        chosen: dict[NormalizedName, Candidate] = {}
        for c in entry.chosen:
            version = Version(c.version)
            if c.row is None:
                pin = self.fixed.pins.get(c.name)
                if pin is None or pin.version != version:
                    return None
                chosen[c.name] = Candidate(c.name, pin.version, verdict=pin.verdict, pinned=True)
                continue
            verdict = self._recorded_verdict(c.name, c.row, keys)
            if verdict is None or verdict.version != version:
                return None
            chosen[c.name] = Candidate(c.name, version, verdict=verdict)
        if len(chosen) != len(entry.chosen):
            return None
        return SearchOutcome(
            chosen,
            dict(entry.required_by),
            entry.runtime,
            dict(entry.ignores),
            entry.roots,
        )

    # ------------------------------------------------------------------ record

    def add(self, fingerprint: str, reads: RecordingSource, outcome: SearchOutcome) -> None:
        """Keep what a search that ran read (``reads``) and decided."""
        self._entries.append(self._entry(fingerprint, reads, outcome))

    def _entry(
        self, fingerprint: str, reads: RecordingSource, outcome: SearchOutcome
    ) -> RecordedSearch | None:
        """What a search that ran read and chose, for the record; None when something it
        read cannot be told by a digest (a find-links page)."""
        pages: list[PageRead] = []
        found: dict[tuple[str, str], ProjectPage] = {}
        for index, name in sorted(reads.pages):
            files = self.fetcher.files(index, name)
            if files is None:
                pages.append(PageRead(index, name, None))
                continue
            if not isinstance(files, ProjectPage) or files.digest is None:
                return None
            found[(index, name)] = files
            pages.append(PageRead(index, name, files.digest))
        rows = _Rows(self.m.index_of, found)
        metadata = self._metadata_reads(reads, rows)
        if metadata is None:
            return None
        chosen = _chosen_records(outcome, rows)
        if chosen is None:
            return None
        return RecordedSearch(
            fingerprint=fingerprint,
            pages=tuple(pages),
            metadata=tuple(metadata),
            chosen=tuple(chosen),
            required_by=outcome.required_by,
            runtime=outcome.runtime,
            ignores=outcome.ignores,
            roots=outcome.roots,
        )

    def _metadata_reads(self, reads: RecordingSource, rows: _Rows) -> list[MetadataRead] | None:
        """Each METADATA the search read whose sha256 its page does not give; None when one
        is not on a page the search read (or was not read whole)."""
        metadata: list[MetadataRead] = []
        for url, (name, verdict) in sorted(reads.metadata.items()):
            pin = self.fixed.pins.get(name)
            pos = -1 if pin is not None and pin.verdict is verdict else rows.pos_of(name, verdict)
            sha = self.fetcher.metadata_sha(url)
            if pos is None or sha is None:
                return None
            if (verdict.file.metadata_hashes or {}).get("sha256") == sha:
                continue  # the page gives that sha256: the page's digest covers it
            metadata.append(
                MetadataRead(name, pos, None if pos == -1 else rows.row(name, pos), sha)
            )
        return metadata

    def save(self) -> None:
        """Keep this run's searches as the slot's record (unless one is not recordable, or
        the record already says exactly this)."""
        entries = [e for e in self._entries if e is not None]
        if not entries or len(entries) != len(self._entries):
            return
        payload = search_record.encode(entries)
        if payload == self.previous.payload:
            return
        # a record that cannot be written costs the next re-lock its search, nothing else
        with contextlib.suppress(OSError):
            self.fetcher.client.cache.put_search(self.slot, payload)

    def summary(self) -> str:
        """Whether this run's searches ran (and why the first did) or were replayed."""
        ran = [why for why in self._outcomes if why is not None]
        if ran:
            return f"search: ran ({ran[0]})"
        n = len({(p.index, p.name) for e in self._entries if e is not None for p in e.pages})
        if n == 0:
            return "search: replayed (it read no index page)"
        pages = "page it read is" if n == 1 else "pages it read are"
        return f"search: replayed (the {n} {pages} unchanged)"


class _Rows:
    """Where a file is on its name's page as the search read it: the position of its row."""

    def __init__(
        self,
        index_of: Callable[[NormalizedName], str],
        found: Mapping[tuple[str, str], ProjectPage],
    ) -> None:
        self.index_of = index_of
        self.found = found
        self._where: dict[tuple[str, str], dict[str, list[int]]] = {}

    def pos_of(self, name: NormalizedName, verdict: Verdict) -> int | None:
        """The position of ``verdict``'s file on ``name``'s page; None when it is not there."""
        file = verdict.file
        key = (self.index_of(name), name)
        files = self.found.get(key)
        if files is None:
            return None
        table = self._where.get(key)
        if table is None:
            table = self._where[key] = {}
            for i, r in enumerate(files.rows):
                table.setdefault(r[1], []).append(i)
        return next((i for i in table.get(file.url, ()) if files[i] is file), None)

    def row(self, name: NormalizedName, pos: int) -> ListedFile:
        return self.found[(self.index_of(name), name)].rows[pos]


def _chosen_records(outcome: SearchOutcome, rows: _Rows) -> list[ChosenRecord] | None:
    """Each version the search chose, with its file's row (a pin's: none); None when a file
    is not on a page the search read."""
    chosen: list[ChosenRecord] = []
    for name, cand in sorted(outcome.chosen.items()):
        if cand.pinned:
            chosen.append(ChosenRecord(name, str(cand.version), -1, None))
            continue
        assert cand.verdict is not None
        pos = rows.pos_of(name, cand.verdict)
        if pos is None:
            return None
        chosen.append(ChosenRecord(name, str(cand.version), pos, rows.row(name, pos)))
    return chosen
