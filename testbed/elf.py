"""Minimal ELF shared objects, written deterministically: the same ``SharedObject`` gives the
same bytes on any host (no compiler, no linker), so a stand-in wheel that carries one keeps its
hash.

The object is what the dynamic linker needs to load it and nothing more: the ELF header, a
``PT_LOAD`` segment over the whole file, ``PT_DYNAMIC`` and ``PT_GNU_STACK`` (no executable
stack), a one-bucket ``DT_HASH`` table, a symbol table with the null symbol only, the dynamic
string table and the dynamic section: ``DT_NEEDED`` (each library, in order), ``DT_SONAME``,
``DT_RPATH``, ``DT_RUNPATH`` and ``DT_FLAGS_1`` (``DF_1_NODEFLIB``) when asked for. No section
headers. ``readelf -d`` lists its dynamic section, and glibc's ``dlopen`` loads it when every
library it needs is found. Little-endian, ELF64 or ELF32.

Stdlib only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["EM_386", "EM_AARCH64", "EM_X86_64", "SharedObject", "render_shared_object"]

EM_386 = 3
EM_X86_64 = 62
EM_AARCH64 = 183

_ET_DYN = 3
_PT_LOAD = 1
_PT_DYNAMIC = 2
_PT_GNU_STACK = 0x6474E551
_PF_RW = 4 | 2
_DT_NULL, _DT_NEEDED, _DT_HASH, _DT_STRTAB, _DT_SYMTAB = 0, 1, 4, 5, 6
_DT_STRSZ, _DT_SYMENT, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 10, 11, 14, 15, 29
_DT_FLAGS_1 = 0x6FFFFFFB
_DF_1_NODEFLIB = 0x800


@dataclass(frozen=True, kw_only=True)
class SharedObject:
    """What ``render_shared_object`` writes: the libraries it needs, in order, its soname and
    search paths (``None``: no such entry), the machine and the class (64 or 32)."""

    needed: tuple[str, ...] = ()
    soname: str | None = None
    rpath: str | None = None
    runpath: str | None = None
    nodeflib: bool = False
    machine: int = EM_X86_64
    elf_class: int = 64


def _align(n: int, to: int) -> int:
    return (n + to - 1) // to * to


def render_shared_object(spec: SharedObject) -> bytes:
    """The bytes of the shared object ``spec`` describes."""
    if spec.elf_class not in (32, 64):
        raise ValueError(f"elf_class must be 32 or 64, not {spec.elf_class}")
    wide = spec.elf_class == 64
    word = "Q" if wide else "I"
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    sym_size = 24 if wide else 16

    strings = bytearray(b"\0")
    offsets: dict[str, int] = {}

    def string(text: str) -> int:
        if text not in offsets:
            offsets[text] = len(strings)
            strings.extend(text.encode("utf-8") + b"\0")
        return offsets[text]

    entries = [(_DT_NEEDED, string(name)) for name in spec.needed]
    for tag, value in ((_DT_SONAME, spec.soname), (_DT_RPATH, spec.rpath)):
        if value is not None:
            entries.append((tag, string(value)))
    if spec.runpath is not None:
        entries.append((_DT_RUNPATH, string(spec.runpath)))

    hash_at = _align(ehsize + 3 * phentsize, 8)
    symtab_at = hash_at + 16  # nbucket = nchain = 1, bucket[0] = chain[0] = 0
    strtab_at = symtab_at + sym_size  # the null symbol
    dynamic_at = _align(strtab_at + len(strings), 8)
    entries += [
        (_DT_HASH, hash_at),
        (_DT_STRTAB, strtab_at),
        (_DT_SYMTAB, symtab_at),
        (_DT_STRSZ, len(strings)),
        (_DT_SYMENT, sym_size),
    ]
    if spec.nodeflib:
        entries.append((_DT_FLAGS_1, _DF_1_NODEFLIB))
    entries.append((_DT_NULL, 0))
    dynamic = b"".join(struct.pack(f"<{word.lower()}{word}", t, v) for t, v in entries)
    size = dynamic_at + len(dynamic)

    ident = b"\x7fELF" + bytes([2 if wide else 1, 1, 1, 0]) + bytes(8)
    header = ident + struct.pack(
        f"<HHI{word}{word}{word}IHHHHHH",
        _ET_DYN,
        spec.machine,
        1,  # EV_CURRENT
        0,  # no entry point
        ehsize,  # program headers right after the header
        0,  # no section headers
        0,
        ehsize,
        phentsize,
        3,
        64 if wide else 40,
        0,
        0,
    )
    segments = (
        (_PT_LOAD, 0, size, 0x1000),
        (_PT_DYNAMIC, dynamic_at, len(dynamic), 8),
        (_PT_GNU_STACK, 0, 0, 16),
    )
    phdrs = b""
    for kind, at, length, align in segments:
        if wide:
            phdrs += struct.pack("<IIQQQQQQ", kind, _PF_RW, at, at, at, length, length, align)
        else:
            phdrs += struct.pack("<IIIIIIII", kind, at, at, at, length, length, _PF_RW, align)
    out = bytearray(size)
    out[: len(header)] = header
    out[ehsize : ehsize + len(phdrs)] = phdrs
    out[hash_at:symtab_at] = struct.pack("<IIII", 1, 1, 0, 0)
    out[strtab_at : strtab_at + len(strings)] = strings
    out[dynamic_at:] = dynamic
    return bytes(out)
