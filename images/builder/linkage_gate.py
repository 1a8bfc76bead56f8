"""The linkage gate: every shared library an installed ELF file needs is found by ld.so in the
image, or is declared as the host's (``runtime.host_libraries``).

``in_image/linkage_probe.py`` reads every ELF file the installed distributions' RECORDs list
(headers only); ``linkage_problems`` judges its facts and names, for each missing library, the
runtime packages that give it (``soname_packages.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from images.builder.soname_packages import hint_for
from manifest import Manifest

LINKAGE_PROBE = Path(__file__).with_name("in_image") / "linkage_probe.py"
HOST_LIBRARY = "--host-library="  # the probe's argument (in_image/linkage_probe.py)
LOADED_FIRST_SHOWN = 10  # needs found once another library is loaded, listed in the output
DECLARE = (
    "add one to runtime.apt_packages, or declare it under runtime.host_libraries if the host "
    "provides it at run time"
)


def linkage_probe_args(manifest: Manifest) -> list[str]:
    """The probe's arguments: the libraries the host provides, whose needs it counts apart."""
    return [f"{HOST_LIBRARY}{soname}" for soname in manifest.runtime.host_libraries]


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def advice(soname: str) -> str:
    """What gives ``soname``, and what to do about it."""
    hint = hint_for(soname)
    if hint is not None and hint.host:
        return f"it is {hint.host}: declare it under runtime.host_libraries"
    if hint is not None and hint.packages:
        listed = ", ".join(f"{package} ({where})" for package, where in hint.packages)
        return f"runtime packages that give it: {listed}; {DECLARE}"
    return (
        f"no runtime package is known to give it: find one with `apt-file search {soname}` "
        f"on the target distribution; {DECLARE}"
    )


def _missing_line(entry: Mapping[str, Any]) -> str:
    soname = str(entry.get("soname"))
    where = f"{entry.get('file')} ({entry.get('distribution')} {entry.get('version')})"
    searched = ", ".join(str(s) for s in entry.get("searched") or []) or "nothing"
    elsewhere = [str(e) for e in entry.get("elsewhere") or []]
    seen = (
        f"; the image has that name at {', '.join(elsewhere)}, where ld.so does not look for "
        "this file"
        if elsewhere
        else ""
    )
    return (
        f"{where}: needs {soname}, which the image does not have (searched: {searched}){seen}; "
        f"{advice(soname)}"
    )


def linkage_problems(facts: Mapping[str, Any], manifest: Manifest) -> tuple[list[str], str]:
    """One problem per unresolved need and per unreadable file, and the output of a pass."""
    info = facts.get("linkage")
    if not isinstance(info, Mapping):
        return ["the linkage of the installed ELF files was not probed"], ""
    if info.get("error"):
        return [f"the linkage probe could not read the image: {info['error']}"], ""
    host = manifest.runtime.host_libraries
    provided: dict[str, tuple[int, list[str]]] = {
        str(soname): (int(entry.get("needs", 0)), [str(f) for f in entry.get("files") or []])
        for soname, entry in (info.get("host_provided") or {}).items()
    }
    problems: list[str] = []
    listed = list(info.get("missing") or [])
    for entry in listed:
        soname = str(entry.get("soname"))
        if soname in host:  # the probe was not told: the host provides it all the same
            needs, files = provided.get(soname, (0, []))
            provided[soname] = (needs + 1, [*files, str(entry.get("file"))])
        else:
            problems.append(_missing_line(entry))
    for soname in [s for s in provided if s not in host]:  # told to the probe, not declared
        needs, files = provided.pop(soname)
        problems.append(
            f"{', '.join(files)}{', ...' if needs > len(files) else ''}: "
            f"{_count(needs, 'need')} on {soname}, which the image does not have, and "
            f"runtime.host_libraries does not declare it; {advice(soname)}"
        )
    left = int(info.get("missing_total", len(listed))) - len(listed)
    if left > 0:
        problems.append(
            f"and {_count(left, 'more need')} the image does not have (the probe lists the "
            f"first {len(listed)})"
        )
    malformed = list(info.get("malformed") or [])
    problems += [
        f"{m.get('file')} ({m.get('distribution')} {m.get('version')}): cannot be read as an "
        f"ELF file ({m.get('error')}), so what it needs is unknown; reinstall its "
        "distribution from an undamaged wheel"
        for m in malformed
    ]
    left = int(info.get("malformed_total", len(malformed))) - len(malformed)
    if left > 0:
        problems.append(f"and {_count(left, 'more file')} that cannot be read as ELF files")
    return problems, _ok_output(info, provided, host)


def _ok_output(
    info: Mapping[str, Any], provided: Mapping[str, tuple[int, list[str]]], host: Mapping[str, str]
) -> str:
    needs, resolved = int(info.get("needs", 0)), int(info.get("resolved", 0))
    on_host = sum(n for n, _ in provided.values())
    first: Sequence[Mapping[str, Any]] = info.get("loaded_first") or []
    first_total = int(info.get("loaded_first_total", len(first)))
    lines = [
        f"{_count(int(info.get('elf_files', 0)), 'ELF file')} of "
        f"{_count(int(info.get('distributions', 0)), 'distribution')} read: ld.so finds "
        f"{resolved} of their {_count(needs, 'needed library', 'needed libraries')}"
        + (f", {first_total} once another distribution's library is loaded" if first_total else "")
        + (f", the host provides {on_host}" if on_host else "")
    ]
    lines += [
        f"found once loaded first: {e.get('file')} ({e.get('distribution')} {e.get('version')}) "
        f"needs {e.get('soname')}, which {e.get('provider')} has as its soname; ld.so takes "
        "a loaded library of that soname (the provider's package must be imported first)"
        for e in first[:LOADED_FIRST_SHOWN]
    ]
    listed = min(len(first), LOADED_FIRST_SHOWN)
    if first_total > listed:
        lines.append(f"and {_count(first_total - listed, 'more need')} found once loaded first")
    for soname, reason in host.items():
        count, files = provided.get(soname, (0, []))
        shown = ", ".join(files) + (", ..." if count > len(files) else "")
        users = f"needed by {_count(count, 'file')} ({shown})" if count else "needed by none"
        lines.append(f"host-provided (runtime.host_libraries): {soname}, {users}: {reason}")
    other = int(info.get("other_machine", 0))
    if other:
        lines.append(
            f"{_count(other, 'ELF file')} for another machine or class, which ld.so does not "
            "load here: not read further"
        )
    unlisted: Sequence[str] = info.get("unlisted") or []
    if unlisted:
        lines.append(f"not read (no RECORD lists their files): {', '.join(unlisted)}")
    return "\n".join(lines)
