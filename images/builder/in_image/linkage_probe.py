"""The linkage probe: runs inside a built image and prints, as JSON, every shared library that
an ELF file of an installed distribution needs and the dynamic linker would not find.

Standalone: standard library only, any CPython >= 3.8; ``images/engine/`` runs it as
``python3.X -c <this file> [--host-library=SONAME...]``. It judges nothing:
``images/builder/linkage_gate.py`` does, purely.

It reads the files each installed distribution's RECORD lists; of an ELF file for this
interpreter's machine and class only the header, the program headers, ``PT_DYNAMIC`` and the
strings its entries name, every read bounded; a file it cannot read is a fact, never a crash.
It resolves each ``DT_NEEDED`` name in glibc ld.so's order, nothing loaded (docs/design.md,
"The linkage gate", gives the order, what counts as found and what is not followed).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import BinaryIO

HOST_LIBRARY = "--host-library="  # a soname the host provides at run time (runtime.host_libraries)
LISTED = 200  # unresolved needs listed; the rest are counted
MALFORMED_LISTED = 50
ELSEWHERE_LISTED = 3
HOST_FILES_LISTED = 3
MAX_PROGRAM_HEADERS = 4096
MAX_DYNAMIC_BYTES = 1 << 20
MAX_STRING = 4096
MAX_NEEDED = 1024
MAX_CACHE_BYTES = 64 << 20
LD_SO_CACHE = "/etc/ld.so.cache"
CACHE_MAGIC = b"glibc-ld.so.cache1.1"
SYSTEM_PATH = "(system search path)"  # how ld.so --help marks the system directories
# the system directories when ld.so does not list them (glibc before 2.33)
MULTIARCH = {3: "i386-linux-gnu", 62: "x86_64-linux-gnu", 183: "aarch64-linux-gnu"}

_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ = 0, 1, 5, 10
_DT_SONAME, _DT_RPATH, _DT_RUNPATH, _DT_FLAGS_1 = 14, 15, 29, 0x6FFFFFFB
_DF_1_NODEFLIB = 0x800


class ElfError(Exception):
    """A file that starts like an ELF file but cannot be read as one."""


@dataclass(frozen=True)
class Elf:
    """What the probe reads of an ELF file (keyword-only in spirit; 3.8 has no kw_only)."""

    elf_class: int  # 32 or 64
    little: bool  # False: big-endian, whose other fields are not read
    machine: int = 0
    needed: tuple[str, ...] = ()
    soname: str | None = None
    rpath: str | None = None
    runpath: str | None = None
    nodeflib: bool = False
    interp: str | None = None

    @property
    def kind(self) -> tuple[int, int] | None:
        """(class, machine) of a little-endian file, what ld.so matches; None otherwise."""
        return (self.elf_class, self.machine) if self.little else None


def _read(fh: BinaryIO, size: int, offset: int, length: int, what: str) -> bytes:
    if offset < 0 or length < 0 or offset + length > size:
        raise ElfError(f"{what} at offset {offset} ({length} bytes) is past the end ({size} bytes)")
    fh.seek(offset)
    data = fh.read(length)
    if len(data) != length:
        raise ElfError(f"{what} at offset {offset}: read {len(data)} of {length} bytes")
    return data


def _string(fh: BinaryIO, size: int, base: int, strsz: int, offset: int) -> str:
    if not 0 <= offset < strsz:
        raise ElfError(f"a string offset {offset} is outside the string table ({strsz} bytes)")
    length = min(MAX_STRING, strsz - offset, size - (base + offset))
    data = _read(fh, size, base + offset, max(length, 0), "a dynamic string")
    end = data.find(b"\0")
    if end < 0:
        raise ElfError(f"a dynamic string at offset {offset} has no end in {length} bytes")
    return data[:end].decode("utf-8", "replace")


def _program_headers(
    fh: BinaryIO, size: int, *, wide: bool, at: int, entsize: int, count: int
) -> list[tuple[int, int, int, int]]:
    """(type, file offset, vaddr, file size) of each program header."""
    layout = "<IIQQQQQQ" if wide else "<IIIIIIII"
    if count > MAX_PROGRAM_HEADERS:
        raise ElfError(f"{count} program headers (at most {MAX_PROGRAM_HEADERS} are read)")
    if count and entsize < struct.calcsize(layout):
        raise ElfError(f"program header entries of {entsize} bytes")
    out = []
    for i in range(count):
        raw = _read(fh, size, at + i * entsize, struct.calcsize(layout), f"program header {i}")
        p = struct.unpack(layout, raw)
        out.append((p[0], p[2], p[3], p[5]) if wide else (p[0], p[1], p[2], p[4]))
    return out


def _dynamic(body: bytes, wide: bool) -> tuple[list[int], dict[int, int], bool]:
    """The string offsets of the DT_NEEDED entries, in order; the first value of each other
    tag the probe reads (DT_SONAME, DT_RPATH, DT_RUNPATH, DT_STRTAB, DT_STRSZ); and whether
    DT_FLAGS_1 has DF_1_NODEFLIB. Up to DT_NULL."""
    needed: list[int] = []
    named: dict[int, int] = {}
    nodeflib = False
    for tag, value in struct.iter_unpack("<qQ" if wide else "<iI", body):
        if tag == _DT_NULL:
            break
        if tag == _DT_NEEDED:
            needed.append(value)
            if len(needed) > MAX_NEEDED:
                raise ElfError(f"more than {MAX_NEEDED} DT_NEEDED entries")
        elif tag in (_DT_SONAME, _DT_RPATH, _DT_RUNPATH, _DT_STRTAB, _DT_STRSZ):
            named.setdefault(tag, value)
        elif tag == _DT_FLAGS_1:
            nodeflib = bool(value & _DF_1_NODEFLIB)
    return needed, named, nodeflib


def read_elf_file(fh: BinaryIO, size: int) -> Elf:
    """The ELF file open in ``fh`` (``size`` bytes), read from its header to the strings its
    dynamic entries name, every read bounded. Raises ElfError."""
    ident = _read(fh, size, 0, 16, "the ELF identification")
    if ident[:4] != b"\x7fELF":
        raise ElfError("no ELF magic")
    if ident[4] not in (1, 2):
        raise ElfError(f"unknown ELF class {ident[4]}")
    wide = ident[4] == 2
    elf_class = 64 if wide else 32
    if ident[5] != 1:  # big-endian (or unknown): ld.so of a little-endian machine never loads it
        return Elf(elf_class, little=False)
    layout = "<HHIQQQIHHHHHH" if wide else "<HHIIIIIHHHHHH"
    header = struct.unpack(layout, _read(fh, size, 16, struct.calcsize(layout), "the ELF header"))
    machine = header[1]
    segments = _program_headers(
        fh, size, wide=wide, at=header[4], entsize=header[8], count=header[9]
    )
    interp = next(((off, sz) for kind, off, _, sz in segments if kind == _PT_INTERP), None)
    dynamic = next(((off, sz) for kind, off, _, sz in segments if kind == _PT_DYNAMIC), None)
    path = None
    if interp is not None:
        data = _read(fh, size, interp[0], min(interp[1], MAX_STRING), "PT_INTERP")
        path = data.split(b"\0", 1)[0].decode("utf-8", "replace")
    if dynamic is None:  # static, or not a loadable object
        return Elf(elf_class, True, machine, interp=path)
    if dynamic[1] > MAX_DYNAMIC_BYTES:
        raise ElfError(f"PT_DYNAMIC of {dynamic[1]} bytes (at most {MAX_DYNAMIC_BYTES} are read)")
    step = 16 if wide else 8
    body = _read(fh, size, dynamic[0], dynamic[1] - dynamic[1] % step, "PT_DYNAMIC")
    needed, named, nodeflib = _dynamic(body, wide)
    strtab, strsz = named.pop(_DT_STRTAB, None), named.pop(_DT_STRSZ, None)
    strings: dict[int, str] = {}
    if needed or named:
        if strtab is None or strsz is None:
            raise ElfError("DT_NEEDED, DT_SONAME or a search path without DT_STRTAB and DT_STRSZ")
        loads = [(va, off, sz) for kind, off, va, sz in segments if kind == _PT_LOAD]
        base = next((off + strtab - va for va, off, sz in loads if va <= strtab < va + sz), None)
        if base is None:
            raise ElfError(f"DT_STRTAB {strtab:#x} is in no PT_LOAD segment of the file")
        for offset in sorted({*needed, *named.values()}):
            strings[offset] = _string(fh, size, base, strsz, offset)
    return Elf(
        elf_class,
        True,
        machine,
        needed=tuple(strings[o] for o in needed),
        soname=strings[named[_DT_SONAME]] if _DT_SONAME in named else None,
        rpath=strings[named[_DT_RPATH]] if _DT_RPATH in named else None,
        runpath=strings[named[_DT_RUNPATH]] if _DT_RUNPATH in named else None,
        nodeflib=nodeflib,
        interp=path,
    )


def read_elf(path: str) -> Elf | None:
    """The ELF file at ``path``; None when it is not one (no ``\\x7fELF``). Raises ElfError for
    an ELF file it cannot read, OSError for a file it cannot open."""
    with Path(path).open("rb") as fh:
        if fh.read(4) != b"\x7fELF":
            return None
        return read_elf_file(fh, os.fstat(fh.fileno()).st_size)


@dataclass
class SearchEnv:
    """Where ld.so looks besides a file's own paths: LD_LIBRARY_PATH, the ld.so cache (soname ->
    paths, and where it was read from: "" for none), the system directories (and where they
    came from), and how ld.so expands ``$LIB`` and ``$PLATFORM``."""

    ld_library_path: list[str]
    cache: dict[str, list[str]]
    cache_source: str
    system: list[str]
    system_source: str
    lib: str
    platform: str
    _kinds: dict[str, tuple[int, int] | None] = field(default_factory=dict)

    def kind(self, path: str) -> tuple[int, int] | None:
        """(class, machine) of the little-endian ELF file at ``path``; None for anything else
        (no file, not ELF, unreadable), as ld.so skips it."""
        if path not in self._kinds:
            try:
                elf = read_elf(path) if Path(path).is_file() else None
            except (OSError, ElfError):
                elf = None
            self._kinds[path] = elf.kind if elf is not None else None
        return self._kinds[path]


def expand(entry: str, origin: str, env: SearchEnv) -> str:
    """``entry`` of a DT_RPATH or DT_RUNPATH with its dynamic string tokens expanded."""
    for token, value in (("ORIGIN", origin), ("LIB", env.lib), ("PLATFORM", env.platform)):
        entry = entry.replace("${" + token + "}", value).replace("$" + token, value)
    return entry


def _paths(kind: str, value: str, origin: str, env: SearchEnv) -> tuple[list[str], str]:
    dirs = [expand(e, origin, env) for e in value.split(":") if e]
    expanded = ":".join(dirs)
    return dirs, f"{kind} {value}" + (f" ({expanded})" if expanded != value else "")


def resolve(soname: str, elf: Elf, path: str, env: SearchEnv) -> tuple[str | None, list[str]]:
    """Where ld.so finds ``soname`` for the ELF file ``elf`` at ``path`` (None: nowhere), and
    what was searched, in ld.so's order, as the gate shows it."""
    want = elf.kind
    if "/" in soname:
        found = soname if soname.startswith("/") and env.kind(soname) == want else None
        return found, [f"the path {soname}"]
    origin = str(Path(path).parent)
    groups: list[tuple[list[str], str]] = []
    if elf.runpath is None and elf.rpath:
        groups.append(_paths("RPATH", elf.rpath, origin, env))
    if env.ld_library_path:
        groups.append((env.ld_library_path, "LD_LIBRARY_PATH " + ":".join(env.ld_library_path)))
    if elf.runpath:
        groups.append(_paths("RUNPATH", elf.runpath, origin, env))
    searched = [shown for _, shown in groups]
    for dirs, _ in groups:
        for d in dirs:
            if env.kind(f"{d.rstrip('/')}/{soname}") == want:
                return f"{d.rstrip('/')}/{soname}", searched
    if elf.nodeflib:
        return None, [*searched, "not the ld.so cache nor the system directories (-z nodeflib)"]
    searched.append("the ld.so cache" if env.cache_source else "no ld.so cache")
    for candidate in env.cache.get(soname, []):
        if env.kind(candidate) == want:
            return candidate, searched
    searched += env.system
    for d in env.system:
        if env.kind(f"{d.rstrip('/')}/{soname}") == want:
            return f"{d.rstrip('/')}/{soname}", searched
    return None, searched


def parse_ld_so_cache(data: bytes) -> dict[str, list[str]]:
    """soname -> paths of glibc's ld.so cache (the format glibc 2.32 and later write alone).
    Raises ValueError for another format or a damaged file."""
    if not data.startswith(CACHE_MAGIC) or len(data) < 48:
        raise ValueError("not a glibc-ld.so.cache1.1 file")
    (nlibs,) = struct.unpack_from("<I", data, 20)
    if 48 + nlibs * 24 > len(data):
        raise ValueError(f"{nlibs} entries do not fit in {len(data)} bytes")

    def text(offset: int) -> str:
        end = data.find(b"\0", offset, offset + MAX_STRING) if offset < len(data) else -1
        if end < 0:
            raise ValueError(f"the string at offset {offset} has no end")
        return data[offset:end].decode("utf-8", "replace")

    out: dict[str, list[str]] = {}
    for i in range(nlibs):
        _, key, value = struct.unpack_from("<iII", data, 48 + i * 24)
        out.setdefault(text(key), []).append(text(value))
    return out


def parse_ldconfig_p(text: str) -> dict[str, list[str]]:
    """soname -> paths of ``ldconfig -p`` output."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines()[1:]:
        name, sep, target = line.strip().partition(" => ")
        if sep:
            out.setdefault(name.split(" (", 1)[0].strip(), []).append(target.strip())
    return out


def ld_so_cache() -> tuple[dict[str, list[str]], str]:
    """The ld.so cache and where it was read from ("" when the image has none)."""
    try:
        with Path(LD_SO_CACHE).open("rb") as fh:
            data = fh.read(MAX_CACHE_BYTES + 1)
    except FileNotFoundError:
        return {}, ""
    except OSError:
        data = b""
    if len(data) <= MAX_CACHE_BYTES:
        try:
            return parse_ld_so_cache(data), LD_SO_CACHE
        except ValueError:
            pass  # another format, or damaged: ldconfig reads it, or says nothing
    ldconfig = next((p for p in ("/sbin/ldconfig", "/usr/sbin/ldconfig") if Path(p).exists()), "")
    try:
        proc = subprocess.run(
            [ldconfig or "ldconfig", "-p"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return {}, ""
    return parse_ldconfig_p(proc.stdout), "ldconfig -p"


def system_dirs(interp: str, elf_class: int, machine: int) -> tuple[list[str], str]:
    """The system search path of ld.so (``ld.so --help``, glibc 2.33 and later), else the
    usual directories of the machine; and where they came from."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    found: list[str] = []
    if interp:
        try:
            proc = subprocess.run(
                [interp, "--help"], capture_output=True, text=True, timeout=60, env=env, check=False
            )
            found = [
                line.strip()[: -len(SYSTEM_PATH)].strip()
                for line in proc.stdout.splitlines()
                if line.strip().endswith(SYSTEM_PATH)
            ]
        except (OSError, subprocess.SubprocessError):
            found = []
    if found:
        return found, f"{interp} --help"
    triplet = MULTIARCH.get(machine)
    dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}"] if triplet else []
    dirs += ["/lib", "/usr/lib"] + (["/lib64", "/usr/lib64"] if elf_class == 64 else [])
    return dirs, "assumed"


def search_env(interpreter: Elf) -> SearchEnv:
    """The search environment of this image, for ELF files of the interpreter's kind."""
    system, system_source = system_dirs(
        interpreter.interp or "", interpreter.elf_class, interpreter.machine
    )
    triplet = MULTIARCH.get(interpreter.machine, "")
    if f"/lib/{triplet}" in system:
        lib = f"lib/{triplet}"
    else:
        lib = "lib64" if "/lib64" in system else "lib"
    cache, cache_source = ld_so_cache()
    raw = os.environ.get("LD_LIBRARY_PATH", "")
    return SearchEnv(
        ld_library_path=[d for d in raw.replace(";", ":").split(":") if d],
        cache=cache,
        cache_source=cache_source,
        system=system,
        system_source=system_source,
        lib=lib,
        platform=os.uname().machine,
    )


@dataclass(frozen=True)
class Scanned:
    """An ELF file of the kind the probe checks: as its RECORD lists it, where it is, whose."""

    shown: str
    path: str
    distribution: str
    version: str
    elf: Elf

    def where(self) -> dict[str, object]:
        return {
            "file": self.shown,
            "path": self.path,
            "distribution": self.distribution,
            "version": self.version,
        }

    @property
    def label(self) -> str:
        return f"{self.path} ({self.distribution} {self.version})"


def read_all(
    dists: list[tuple[str, str, list[tuple[str, str]]]], want: tuple[int, int]
) -> tuple[list[Scanned], dict[str, int], list[dict[str, object]]]:
    """Every ELF file of ``dists`` (name, version, [(as listed, path)]) of the kind ``want``
    (class, machine), each file once; the counts of files read and of ELF files of another
    kind; and the files that start like ELF but cannot be read."""
    seen: set[str] = set()
    counts = {"files": 0, "other_machine": 0}
    found: list[Scanned] = []
    malformed: list[dict[str, object]] = []
    for name, version, entries in dists:
        for shown, path in entries:
            real = os.path.realpath(path)
            if real in seen or not Path(real).is_file():
                continue
            seen.add(real)
            counts["files"] += 1
            try:
                elf = read_elf(path)
            except (OSError, ElfError) as exc:
                where = {"file": shown, "path": path, "distribution": name, "version": version}
                malformed.append({**where, "error": str(exc)})
                continue
            if elf is not None and elf.kind == want:
                found.append(Scanned(shown, path, name, version, elf))
            elif elf is not None:
                counts["other_machine"] += 1
    return found, counts, malformed


def through_loaders(
    soname: str, item: Scanned, loaders: dict[str, list[Scanned]], env: SearchEnv
) -> str | None:
    """Where ld.so finds ``soname`` for ``item`` in the DT_RPATH of the objects that load it,
    and of theirs, up the chain (each with its own $ORIGIN), as it does for an object without
    DT_RUNPATH: auditwheel's grafted libraries find their siblings so. None: nowhere."""
    if item.elf.runpath is not None:
        return None
    queue = list(loaders.get(os.path.realpath(item.path), []))
    visited: set[str] = set()
    while queue:
        loader = queue.pop(0)
        if loader.path in visited:
            continue
        visited.add(loader.path)
        if loader.elf.rpath and loader.elf.runpath is None:
            dirs, _ = _paths("RPATH", loader.elf.rpath, str(Path(loader.path).parent), env)
            for d in dirs:
                candidate = f"{d.rstrip('/')}/{soname}"
                if env.kind(candidate) == item.elf.kind:
                    return candidate
        queue += loaders.get(os.path.realpath(loader.path), [])
    return None


def scan(
    dists: list[tuple[str, str, list[tuple[str, str]]]],
    env: SearchEnv,
    want: tuple[int, int],
    host: list[str],
) -> dict[str, object]:
    """The facts of every ELF file of ``dists`` (name, version, [(as listed, path)]) of the
    kind ``want`` (class, machine): each need ld.so would not find (the first LISTED); the
    needs on ``host`` libraries, and those only a library of another distribution that has
    that soname satisfies once loaded, apart; the files it could not read; and counts."""
    found, counts, malformed = read_all(dists, want)
    loaders: dict[str, list[Scanned]] = {}  # a file's real path -> the files that load it
    pending: list[tuple[Scanned, str, list[str]]] = []
    needs = resolved = 0
    for item in found:
        for soname in item.elf.needed:
            needs += 1
            path, searched = resolve(soname, item.elf, item.path, env)
            if path is None:
                pending.append((item, soname, searched))
            else:
                resolved += 1
                loaders.setdefault(os.path.realpath(path), []).append(item)
    progress = True
    while progress:  # a library found through its loaders may in turn load others
        progress = False
        for entry in list(pending):
            path = through_loaders(entry[1], entry[0], loaders, env)
            if path is not None:
                pending.remove(entry)
                resolved += 1
                loaders.setdefault(os.path.realpath(path), []).append(entry[0])
                progress = True
    by_soname: dict[str, list[Scanned]] = {}
    by_name: dict[str, list[Scanned]] = {}
    for item in found:
        by_name.setdefault(Path(item.path).name, []).append(item)
        if item.elf.soname:
            by_soname.setdefault(item.elf.soname, []).append(item)
    missing: list[dict[str, object]] = []
    loaded_first: list[dict[str, object]] = []
    host_needs: dict[str, int] = {}
    host_files: dict[str, list[str]] = {}
    for item, soname, searched in pending:
        provider = next(
            (p for p in by_soname.get(soname, []) if p.distribution != item.distribution), None
        )
        if soname in host:
            host_needs[soname] = host_needs.get(soname, 0) + 1
            listed = host_files.setdefault(soname, [])
            if len(listed) < HOST_FILES_LISTED:
                listed.append(item.shown)
        elif provider is not None:
            loaded_first.append({**item.where(), "soname": soname, "provider": provider.label})
        else:
            named = by_soname.get(soname, []) + by_name.get(soname, [])
            elsewhere = list(dict.fromkeys(p.label for p in named if p.path != item.path))
            missing.append(
                {
                    **item.where(),
                    "soname": soname,
                    "searched": searched,
                    "elsewhere": elsewhere[:ELSEWHERE_LISTED],
                }
            )
    return {
        **counts,
        "elf_files": len(found),
        "needs": needs,
        "resolved": resolved,
        "missing": missing[:LISTED],
        "missing_total": len(missing),
        "loaded_first": loaded_first[:LISTED],
        "loaded_first_total": len(loaded_first),
        "host_provided": {s: {"needs": n, "files": host_files[s]} for s, n in host_needs.items()},
        "malformed": malformed[:MALFORMED_LISTED],
        "malformed_total": len(malformed),
    }


def installed() -> tuple[list[tuple[str, str, list[tuple[str, str]]]], list[str]]:
    """Every installed distribution with the files its RECORD lists (as listed, and where they
    are), sorted; and the distributions that list none."""
    dists: list[tuple[str, str, list[tuple[str, str]]]] = []
    unlisted = set()
    for dist in metadata.distributions():
        name, version = str(dist.metadata["Name"]), str(dist.version)
        listed = dist.files
        if listed is None:
            unlisted.add(f"{name} {version}")
            continue
        dists.append((name, version, sorted((str(f), str(dist.locate_file(f))) for f in listed)))
    return sorted(dists), sorted(unlisted)


def main(args: list[str]) -> int:
    host = [a[len(HOST_LIBRARY) :] for a in args if a.startswith(HOST_LIBRARY)]
    facts: dict[str, object] = {"interpreter": sys.executable}
    try:
        interpreter = read_elf(os.path.realpath(sys.executable))
    except (OSError, ElfError) as exc:
        interpreter, problem = None, str(exc)
    else:
        problem = "not a little-endian ELF file"
    if interpreter is None or interpreter.kind is None:
        facts["error"] = f"cannot read the interpreter {sys.executable}: {problem}"
    else:
        env = search_env(interpreter)
        dists, unlisted = installed()
        facts.update(scan(dists, env, interpreter.kind, host))
        search = {
            "ld_library_path": env.ld_library_path,
            "cache": env.cache_source,
            "system": env.system,
            "system_source": env.system_source,
            "lib": env.lib,
            "platform": env.platform,
        }
        facts.update(distributions=len(dists), unlisted=unlisted, search=search)
    sys.stdout.write(json.dumps({"linkage": facts}, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
