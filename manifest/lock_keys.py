"""The lock keys of a stack manifest: ``target``, ``indexes``, ``packages``, ``requirements``,
``rules`` and ``overrides`` (what the resolver reads and the lock records)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from core.urls import redact
from manifest.fields import KeyReader
from manifest.key_shapes import LINE_RE, NAME_RE
from manifest.model import (
    ARCHES,
    GLIBC_HIGHEST,
    GLIBC_LOWEST,
    INDEX_FORMATS,
    PYTHON_VERSIONS,
    WHEEL_KINDS,
    IndexSpec,
    LineMap,
    Override,
    PackagePin,
    Rules,
    Target,
)

INDEX_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]*$")
# an index URL: http(s), a host, an optional port (credentials are refused before this)
INDEX_URL_RE = re.compile(r"^https?://[^/:]+(:[0-9]{1,5})?(/|$)")


def _minor(r: KeyReader, text: str, keypath: list[str], *, major: int, example: str) -> int:
    """The Y of ``MAJOR.Y`` written canonically: ASCII digits, no leading zero."""
    m = re.fullmatch(rf"{major}\.([0-9]+)", text)
    if not m:
        raise r.error(keypath, f"{text!r} is not a {major}.Y version like {example}")
    digits = m.group(1)
    if len(digits) > 1 and digits.startswith("0"):
        raise r.error(
            keypath,
            f"{text!r} has a leading zero",
            hint=f"write the version as {major}.Y without leading zeros, like {example}",
        )
    # more than three digits is past every supported range: no need to convert them all
    return int(digits) if len(digits) <= 3 else 1000


def parse_target(r: KeyReader, value: object) -> Target:
    t = r.mapping(value, ["target"])
    r.keys(t, ["target"], "target")
    python_text = r.string(t["python"], ["target", "python"], example="3.12")
    python = (3, _minor(r, python_text, ["target", "python"], major=3, example='"3.12"'))
    if python not in PYTHON_VERSIONS:
        first, last = PYTHON_VERSIONS[0], PYTHON_VERSIONS[-1]
        raise r.error(
            ["target", "python"],
            f"CPython {python_text} is not supported",
            hint=f"this tool supports CPython {first[0]}.{first[1]} to {last[0]}.{last[1]}",
        )
    arch = r.choice(t["arch"], ["target", "arch"], ARCHES)
    glibc_text = r.string(t["glibc"], ["target", "glibc"], example="2.35")
    glibc = (2, _minor(r, glibc_text, ["target", "glibc"], major=2, example='"2.35"'))
    lowest = GLIBC_LOWEST[arch]
    if not lowest <= glibc <= GLIBC_HIGHEST:
        raise r.error(
            ["target", "glibc"],
            f"glibc {glibc_text} is not supported on {arch}",
            hint=(
                f"{arch} targets glibc {lowest[0]}.{lowest[1]} to "
                f"{GLIBC_HIGHEST[0]}.{GLIBC_HIGHEST[1]}, e.g. 2.35 (Ubuntu 22.04)"
            ),
        )
    return Target(python=python, arch=arch, glibc=glibc)


def parse_indexes(r: KeyReader, value: object) -> dict[str, IndexSpec]:
    raw = r.mapping(value, ["indexes"])
    if not raw:
        raise r.error(["indexes"], "at least one index is required")
    out: dict[str, IndexSpec] = {}
    for name, spec in raw.items():
        keypath = ["indexes", name]
        if not INDEX_NAME_RE.fullmatch(name):
            raise r.error(keypath, "an index name is lowercase letters, digits, '-' and '_'")
        m = r.mapping(spec, keypath)
        r.keys(m, keypath, "indexes.<name>")
        url = r.string(m["url"], [*keypath, "url"])
        if "@" in url.partition("://")[2].split("/", 1)[0]:  # before any message shows the URL
            raise r.error(
                [*keypath, "url"],
                "credentials do not belong in the manifest",
                hint=(
                    f"set BUILD_IMAGE_INDEX_{name.upper().replace('-', '_')}_AUTH=user:token "
                    "in the environment instead"
                ),
            )
        if not INDEX_URL_RE.match(url):
            raise r.error([*keypath, "url"], f"{redact(url)!r} is not an http(s) URL")
        fmt = r.choice(m.get("format", "simple"), [*keypath, "format"], INDEX_FORMATS)
        out[name] = IndexSpec(name=name, url=url, format=fmt)  # type: ignore[arg-type]
    return out


def parse_version(r: KeyReader, value: object, keypath: list[str]) -> tuple[Version, str]:
    text = r.string(value, keypath, example="1.0")
    try:
        version = Version(text)
    except InvalidVersion:
        raise r.error(keypath, f"{text!r} is not a PEP 440 version") from None
    if str(version) != text:
        raise r.error(
            keypath,
            f"{text!r} is not in normal form; write {str(version)!r}",
            hint="the lock compares full versions, local label included, as text",
        )
    return version, text


def parse_packages(
    r: KeyReader, value: object, indexes: Mapping[str, IndexSpec]
) -> dict[NormalizedName, PackagePin]:
    raw = r.mapping(value, ["packages"])
    out: dict[NormalizedName, PackagePin] = {}
    for key, spec in raw.items():
        keypath = ["packages", key]
        if not NAME_RE.fullmatch(key.lower()):
            raise r.error(keypath, f"{key!r} is not a valid project name")
        name = canonicalize_name(key)
        if name in out:
            raise r.error(keypath, f"{key!r} is the same project as {out[name].key!r}")
        m = r.mapping(spec, keypath)
        r.keys(m, keypath, "packages.<name>")
        deps = r.boolean(m.get("deps", True), [*keypath, "deps"])
        out[name] = parse_pin(r, key, m, keypath, indexes, wheel=m["wheel"], deps=deps)
    return out


def parse_pin(
    r: KeyReader,
    key: str,
    m: Mapping[str, Any],
    keypath: list[str],
    indexes: Mapping[str, IndexSpec],
    *,
    wheel: object,
    deps: bool,
) -> PackagePin:
    """An exact pin bound to one index with its wheel kind (``packages.X`` and mooncake)."""
    version, version_text = parse_version(r, m["version"], [*keypath, "version"])
    index = r.index(m["index"], [*keypath, "index"], indexes)
    kind = r.choice(wheel, [*keypath, "wheel"], WHEEL_KINDS)
    return PackagePin(
        name=canonicalize_name(key),
        key=key,
        version=version,
        version_text=version_text,
        index=index,
        wheel=kind,
        deps=deps,
    )


def parse_requirements(r: KeyReader, value: object, keypath: list[str]) -> list[Requirement]:
    out: list[Requirement] = []
    seen: dict[NormalizedName, int] = {}
    for i, text in enumerate(r.string_list(value, keypath)):
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise r.error(
                [*keypath, str(i)], f"{text!r} is not a PEP 508 requirement: {exc}"
            ) from None
        if req.url:
            raise r.error(
                [*keypath, str(i)],
                f"{text!r} is a direct URL; only index requirements are locked",
            )
        name = canonicalize_name(req.name)
        if name in seen and not req.marker:
            raise r.error([*keypath, str(i)], f"{req.name} is already listed at item {seen[name]}")
        seen[name] = i
        out.append(req)
    return out


def parse_rules(
    r: KeyReader, value: object, packages: Mapping[NormalizedName, PackagePin]
) -> Rules:
    m = r.mapping(value, ["rules"])
    r.keys(m, ["rules"], "rules")
    same: list[tuple[NormalizedName, ...]] = []
    groups = m.get("same_line", [])
    if not isinstance(groups, list):
        raise r.error(["rules", "same_line"], "must be a list of lists of package names")
    for i, group in enumerate(groups):
        names = r.string_list(group, ["rules", "same_line", str(i)])
        if len(names) < 2:
            raise r.error(["rules", "same_line", str(i)], "a group needs at least two packages")
        same.append(tuple(canonicalize_name(n) for n in names))
    maps: list[LineMap] = []
    raw_maps = r.mapping(m.get("line_map", {}), ["rules", "line_map"])
    for key, spec in raw_maps.items():
        keypath = ["rules", "line_map", key]
        mm = r.mapping(spec, keypath)
        r.keys(mm, keypath, "rules.line_map.<name>")
        follows = canonicalize_name(r.string(mm["follows"], [*keypath, "follows"]))
        if canonicalize_name(key) in packages:
            raise r.error(
                keypath,
                f"{key} is pinned under packages; line_map chooses its version itself",
                hint="remove one of the two",
            )
        versions = r.mapping(mm["versions"], [*keypath, "versions"])
        if not versions:
            raise r.error([*keypath, "versions"], "needs at least one line")
        chosen: dict[str, str] = {}
        for line, ver in versions.items():
            r.matching(LINE_RE, line, [*keypath, "versions", line], "a MAJOR.MINOR line")
            _, text = parse_version(r, ver, [*keypath, "versions", line])
            chosen[line] = text
        maps.append(LineMap(name=canonicalize_name(key), follows=follows, versions=chosen))
    return Rules(same_line=tuple(same), line_map=tuple(maps))


def parse_overrides(
    r: KeyReader,
    value: object,
    indexes: Mapping[str, IndexSpec],
    packages: Mapping[NormalizedName, PackagePin],
) -> dict[NormalizedName, Override]:
    """``overrides:`` name -> {version, reason, index?}: an exact version the stack keeps
    against the requirements of others, with the reason recorded in the lock. On a name
    pinned under ``packages`` it declares the pin's own departure: the same version, and the
    pin's index (the pin keeps its wheel kind and deps)."""
    m = r.mapping(value, ["overrides"])
    out: dict[NormalizedName, Override] = {}
    for key, spec in m.items():
        keypath = ["overrides", key]
        o = r.mapping(spec, keypath)
        r.keys(o, keypath, "overrides.<name>")
        name = canonicalize_name(key)
        pin = packages.get(name)
        if pin is not None and "index" in o:
            raise r.error(
                [*keypath, "index"],
                f"{key} is pinned under packages.{pin.key}, which binds it to index {pin.index}",
                hint=f"remove overrides.{key}.index: an override of a pin declares why the pin "
                "departs from what others require, the pin decides where it comes from",
            )
        if pin is not None and r.string(o["version"], [*keypath, "version"]) != pin.version_text:
            raise r.error(
                [*keypath, "version"],
                f"{o['version']!r} is not the version packages.{pin.key} pins "
                f"({pin.version_text!r}); an override of a pin declares the pin's own version",
                hint=f"make the two equal: packages.{pin.key}.version decides what is installed, "
                f"overrides.{key} says why it departs from what others require",
            )
        if name in out:
            raise r.error(keypath, f"{key} and {out[name].key} name the same package")
        text = r.string(o["version"], [*keypath, "version"], example="4.11.0.86")
        try:
            version = Version(text)
        except InvalidVersion:
            raise r.error([*keypath, "version"], f"{text!r} is not a PEP 440 version") from None
        reason = r.string(o["reason"], [*keypath, "reason"]).strip()
        if not reason or "\n" in reason:
            raise r.error(
                [*keypath, "reason"],
                "the reason is one non-empty line",
                hint='e.g. "numpy 1.26 for the MUSA stack"',
            )
        index = r.index(o["index"], [*keypath, "index"], indexes) if "index" in o else None
        out[name] = Override(
            name=name, key=key, version=version, version_text=text, reason=reason, index=index
        )
    return out
