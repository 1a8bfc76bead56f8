"""``third_party/PINS`` of a driving source (upstream vllm-musa's KEY=VALUE file), checked
against the manifest before any build: each ``third_party`` entry's ``pin`` must name the
``rev`` of the source the manifest stages there. Pure: text in, values or errors out."""

from __future__ import annotations

import re
from collections.abc import Mapping

from core.errors import SourceError
from manifest import PINS_FILE, Manifest, Source

_LINE_RE = re.compile(r"^(?P<key>[A-Z][A-Z0-9_]*)=(?P<value>\S*)$")
MAX_PINS_BYTES = 64 * 1024


def parse_pins(text: str, *, where: str) -> dict[str, str]:
    """KEY=VALUE lines; blank lines and ``#`` comments skipped; anything else is refused."""
    if len(text) > MAX_PINS_BYTES:
        raise SourceError(f"{where}: {len(text)} bytes; a PINS file is a few KEY=VALUE lines")
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m is None:
            raise SourceError(
                f"{where}:{number}: {raw.strip()[:80]!r} is not a KEY=VALUE line",
                hint="PINS holds lines like VLLM_COMMIT=<40-hex commit>",
            )
        key = m.group("key")
        if key in out:
            raise SourceError(f"{where}:{number}: {key} is set twice")
        out[key] = m.group("value")
    return out


def check_pins(manifest: Manifest, driver: Source, pins: Mapping[str, str]) -> list[str]:
    """The checked lines ("VLLM_COMMIT=2cf0a69... = sources.vllm.rev"); raises a
    ``SourceError`` naming the file, the key and both values on the first disagreement."""
    where = f"sources.{driver.name}: {PINS_FILE}"
    checked: list[str] = []
    for t in driver.third_party:
        driven = manifest.source(t.source)
        assert driven is not None  # the reader checked both
        assert driven.rev is not None
        value = pins.get(t.pin)
        if value is None:
            raise SourceError(
                f"{where} has no {t.pin}, which sources.{driver.name}.third_party.{t.dir}.pin "
                "names",
                hint=f"pin the key {PINS_FILE} has for {t.dir} (keys: "
                f"{', '.join(sorted(pins)) or 'none'})",
            )
        if value != driven.rev:
            raise SourceError(
                f"{where} pins {t.pin}={value}, but sources.{t.source}.rev is {driven.rev}: "
                f"the manifest would stage another {t.dir} than {driver.name} is built against",
                hint=f"set sources.{t.source}.rev to {value}, or move sources.{driver.name} "
                f"to a revision whose {PINS_FILE} pins {driven.rev}",
            )
        checked.append(f"{t.pin}={value} = sources.{t.source}.rev")
    return checked


def check_sdist_commit(source: Source, version_py: str | None) -> str:
    """An sdist source's ``rev`` against the commit its setuptools-scm ``_version.py`` names
    (``__commit_id__ = 'g2cf0a6915'``); "" when the sdist does not say."""
    if version_py is None or source.rev is None:
        return ""
    m = re.search(r"""commit_id\s*=\s*['"]g?([0-9a-f]{7,40})['"]""", version_py)
    if m is None:
        return ""
    short = m.group(1)
    if not source.rev.startswith(short):
        raise SourceError(
            f"sources.{source.name}: the sdist was cut from commit {short}, but "
            f"sources.{source.name}.rev is {source.rev}",
            hint="set rev to the commit the sdist names, or lock the sdist of that commit",
        )
    return short
