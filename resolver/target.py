"""What the target interpreter accepts: its wheel tags, in priority order, and its markers.

Everything here is computed from ``manifest.Target``; nothing is read from the host.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property

from packaging import tags

from manifest import Target, target_problem


def wheel_parts(filename: str) -> list[str] | None:
    """``name, version[, build], tags`` of a wheel name as ``parse_wheel_filename`` splits
    it (``tags`` still joined: ``cp312-cp312-manylinux_2_17_x86_64``), or None when it can
    never be a usable wheel (not .whl, a wrong number of parts)."""
    if not filename.endswith(".whl"):
        return None
    stem = filename[:-4]
    dashes = stem.count("-")
    if dashes not in (4, 5):
        return None
    return stem.split("-", dashes - 2)


def platforms(target: Target) -> list[str]:
    """``manylinux_X_Y_<arch>`` from ``target.glibc`` down to 2.17 (x86_64: down to 2.5), with
    the legacy aliases at their place, then ``linux_<arch>``. No musllinux.

    At most about a hundred: a ``Target`` holds only a supported glibc (2.99 at most), and
    this checks it again rather than enumerate whatever it is handed."""
    problem = target_problem(target.python, target.arch, target.glibc)
    if problem:
        raise ValueError(problem)
    arch = target.arch
    legacy = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
    lowest = 5 if arch == "x86_64" else 17
    out: list[str] = []
    for minor in range(target.glibc[1], lowest - 1, -1):
        out.append(f"manylinux_2_{minor}_{arch}")
        alias = legacy.get((2, minor))
        if alias and (arch == "x86_64" or alias == "manylinux2014"):
            out.append(f"{alias}_{arch}")
    out.append(f"linux_{arch}")
    return out


@dataclass(frozen=True)
class TargetTags:
    """The ordered tag list for a target, with the lookups wheel selection needs."""

    target: Target

    @cached_property
    def ordered(self) -> tuple[tags.Tag, ...]:
        plats = platforms(self.target)
        version = self.target.python
        cp = self.target.cp_tag
        found = list(tags.cpython_tags(python_version=version, abis=[cp], platforms=plats))
        found += list(tags.compatible_tags(python_version=version, interpreter=cp, platforms=plats))
        return tuple(dict.fromkeys(found))  # in order, each tag once

    @cached_property
    def rank(self) -> dict[tags.Tag, int]:
        """Tag -> priority (0 is best)."""
        return {tag: i for i, tag in enumerate(self.ordered)}

    @cached_property
    def interpreters(self) -> frozenset[str]:
        return frozenset(t.interpreter for t in self.ordered)

    @cached_property
    def tag_fits(self) -> dict[str, bool]:
        """Memo of ``may_run``: a wheel's tag string (``cp312-cp312-manylinux_2_17_x86_64``)
        -> whether any of its tags is in ``rank``. Tag strings repeat across the releases and
        projects of a run, so each is read once."""
        return {}

    @cached_property
    def python_abi_pairs(self) -> frozenset[tuple[str, str]]:
        return frozenset((t.interpreter, t.abi) for t in self.ordered)

    @cached_property
    def key(self) -> str:
        """A short name of this tag list, for what is kept per target (a page's parse): the
        target in words, and a digest of every tag in order, so that a change of the list
        is a change of the key."""
        target = self.target
        listed = hashlib.sha256("\n".join(str(t) for t in self.ordered).encode()).hexdigest()
        glibc = f"{target.glibc[0]}_{target.glibc[1]}"
        return f"{target.cp_tag}-{target.arch}-glibc{glibc}-{listed[:12]}"

    @cached_property
    def _triples(self) -> frozenset[tuple[str, str, str]]:
        return frozenset((t.interpreter, t.abi, t.platform) for t in self.ordered)

    @cached_property
    def _parts(self) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
        return (
            self.interpreters,
            frozenset(t.abi for t in self.ordered),
            frozenset(t.platform for t in self.ordered),
        )

    def may_run(self, filename: str) -> bool:
        """False only for a wheel none of whose tags is one of ``ordered`` (one wheel
        selection refuses for its tags); True for every other file, a name ``packaging``
        would refuse included. The tag set is read as ``parse_wheel_filename`` reads it, once
        per distinct tag string; only the components the target knows are combined, so a
        huge compressed set costs its length, not its product."""
        parts = wheel_parts(filename)
        if parts is None:
            return True
        text = parts[-1]
        tag = text.split("-")
        fits = self.tag_fits.get(text)
        if fits is None:
            fits = self.tag_fits.setdefault(text, self._tags_fit(tag))
        return fits

    def _tags_fit(self, tag: list[str]) -> bool:
        components = [part.split(".") for part in tag]
        if any("" in parts for parts in components):
            return True  # packaging refuses the name: the file is kept for the refusal
        if not all(interpreter.isidentifier() for interpreter in components[0]):
            return True
        known = self._parts
        interpreters, abis, plats = (
            {p.lower() for p in parts} & allowed
            for parts, allowed in zip(components, known, strict=True)
        )
        triples = self._triples
        return any((i, a, p) in triples for i in interpreters for a in abis for p in plats)


def marker_environment(target: Target) -> dict[str, str]:
    """A complete PEP 508 environment for the target (no host value leaks in)."""
    python = target.python_str
    return {
        "implementation_name": "cpython",
        "implementation_version": f"{python}.0",
        "os_name": "posix",
        "platform_machine": target.arch,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": f"{python}.0",
        "python_version": python,
        "sys_platform": "linux",
    }
