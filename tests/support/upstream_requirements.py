"""vllm-musa's real requirements files, as test fixtures (facts, not examples).

``tests/sources/fixtures/vllm-musa-1df06c8/requirements/`` holds upstream's files verbatim,
each under a header of ``#@`` lines naming its repository, path and commit, and what is
known to differ at the release commit. ``body`` strips that header, so what a test reads is
upstream's bytes with upstream's line numbers (``numpy==1.26`` is common.txt:4).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from manifest import Manifest
from sources.contradictions import ExactVersion
from sources.requirements_files import ReadFile

FIXTURE = Path(__file__).resolve().parents[1] / "sources" / "fixtures" / "vllm-musa-1df06c8"
REPOSITORY = "MooreThreads/vllm-musa"
RELEASE_COMMIT = "070c0ea09ec266972fd6097937fde97d400d70ed"  # v0.28.0: none of these files
# the files, as the source names them, and the commit each was copied at
COMMITS = {
    "requirements/common.txt": "1df06c8aa819004c6d4e7da7d926507eaa10201c",
    "requirements/musa.txt": "bb151ba6042776d07c673d4f70cf786eab1b184a",
    "requirements/musa_private.txt": "078be0e7c285b1171d424f7f9ce1d757f78d4f6f",
    "requirements/test.txt": "5b4450984f0956f57eb17dfa083c9c0632adac9e",
    "requirements/vllm_common.txt": "9bae603eb9894e6a6e72d06043b0c8d88cfc2486",
}

_HEADER = "#@"
_FIELD_RE = re.compile(r"^#@ (repository|path|commit|body): +(.*)$")


@dataclass(frozen=True)
class UpstreamFile:
    path: str  # as the source names it: requirements/common.txt
    header: dict[str, str]  # repository, path, commit, body (the header's fields)
    body: bytes  # upstream's bytes

    @property
    def blob(self) -> str:
        """``git hash-object`` of the body."""
        return hashlib.sha1(b"blob %d\0" % len(self.body) + self.body).hexdigest()  # noqa: S324 - git's object id


def upstream_file(path: str) -> UpstreamFile:
    raw = (FIXTURE / path).read_bytes()
    lines = raw.splitlines(keepends=True)
    n = 0
    header: dict[str, str] = {}
    while n < len(lines) and lines[n].decode().startswith(_HEADER):
        m = _FIELD_RE.match(lines[n].decode().rstrip("\n"))
        if m:
            header.setdefault(m.group(1), m.group(2).strip())
        n += 1
    return UpstreamFile(path=path, header=header, body=b"".join(lines[n:]))


def fixture_reader() -> ReadFile:
    """Reads the fixture tree as a source's files, headers stripped (None: no such file)."""

    def read(path: str) -> bytes | None:
        if not (FIXTURE / path).is_file():
            return None
        return upstream_file(path).body

    return read


def override_versions(m: Manifest) -> tuple[ExactVersion, ...]:
    """The versions ``overrides`` declares, as exact versions: ``find_contradictions`` with
    these lists the lines each override departs from (the lock records them as ignored)."""
    out: list[ExactVersion] = []
    for name, o in m.overrides.items():
        keypath = ("overrides", o.key, "version")
        where = f"{m.path}:{m.key_lines[keypath]}"
        text = f"{o.key} {o.version_text}"
        out.append(
            ExactVersion(
                name=name, key=o.key, version=o.version, keypath=keypath, where=where, text=text
            )
        )
    return tuple(out)
