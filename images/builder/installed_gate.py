"""The installed-equals-lock gate, judged purely from the probe's facts: the distributions in
the image are exactly the lock's, the sources built into it, and the base image's own as the
build recorded them before it installed anything (``in_image/installed.py base``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from manifest import Manifest
from resolver.lockfile import Lock


def norm_version(text: str) -> str:
    try:
        return str(Version(text))
    except InvalidVersion:
        return text


def same_version(a: str, b: str) -> bool:
    """PEP 440 equality of the whole version, the local label included (``0.28.0`` is not
    ``0.28.0+empty``; ``0.28.0.0+DEMO`` is ``0.28.0+demo``)."""
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def built_versions(facts: Mapping[str, Any]) -> dict[str, str]:
    """Source-built distributions recorded in the image's SBOM: name -> version."""
    sbom = facts.get("sbom") or {}
    out: dict[str, str] = {}
    for comp in sbom.get("components", []) if isinstance(sbom, Mapping) else []:
        props = {p.get("name"): p.get("value") for p in comp.get("properties", [])}
        if "vllm-musa:built-from" in props:
            out[canonicalize_name(comp["name"])] = str(comp["version"])
    return out


# installed.py base's record in the image (images/builder/render.py IMAGE_BASE_DISTRIBUTIONS)
BASE_RECORD = "/opt/vllm-musa/base-distributions.json"


@dataclass(frozen=True, kw_only=True)
class BaseDistribution:
    """A distribution the base image had for the target interpreter (installed.py base)."""

    name: str
    version: str
    location: str  # the site directory of its metadata

    def describe(self) -> str:
        return f"{self.name} {self.version} ({self.location})"


def base_distributions(facts: Mapping[str, Any]) -> tuple[list[BaseDistribution], list[str]]:
    """The base image's distributions as the build recorded them, and what is wrong with the
    record (an older probe's facts have none; no record in the image fails closed)."""
    record = facts.get("base_distributions", [])
    if record is None:
        return [], [
            f"the image has no record of its base image's distributions ({BASE_RECORD}); "
            "build it again with this tool"
        ]
    if not isinstance(record, list):
        error = record.get("error") if isinstance(record, dict) else record
        return [], [
            f"the record of the base image's distributions ({BASE_RECORD}) is unreadable: {error}"
        ]
    out: list[BaseDistribution] = []
    for entry in record:
        try:
            out.append(
                BaseDistribution(**{k: str(entry[k]) for k in ("name", "version", "location")})
            )
        except (KeyError, TypeError):
            return [], [
                f"the record of the base image's distributions ({BASE_RECORD}) has "
                f"an entry that is not {{name, version, location}}: {entry!r}"
            ]
    return out, []


def _at(location: str) -> str:
    return f" ({location})" if location else ""


def _pin_problems(manifest: Manifest, expected: Mapping[str, tuple[str, str]]) -> list[str]:
    """Every pin of the manifest is in the lock at its full version (local label included)."""
    problems: list[str] = []
    for pin in manifest.packages.values():
        locked = expected.get(pin.name)
        if locked is None:
            problems.append(
                f"{pin.key} {pin.version_text} is pinned in the manifest but is not in the lock"
            )
        elif norm_version(locked[0]) != norm_version(pin.version_text):
            problems.append(
                f"{pin.key} is pinned {pin.version_text} in the manifest, but the lock has "
                f"{locked[0]}"
            )
    return problems


def _source_problems(
    manifest: Manifest, built: Mapping[str, str], expected: dict[str, tuple[str, str]]
) -> list[str]:
    """Every installed source was built into the image; each is added to ``expected``."""
    problems: list[str] = []
    for source in manifest.installed_sources():
        key = canonicalize_name(source.name)
        if key not in built:
            problems.append(f"source {source.name} was not built into the image (no SBOM entry)")
        else:
            expected[key] = (built[key], f"source {source.name}")
    return problems


def _shadowed_problems(
    base_by_name: Mapping[str, BaseDistribution], expected: Mapping[str, tuple[str, str]]
) -> list[str]:
    """A base distribution the lock or a source installs again: shadowed, or standing in."""
    problems: list[str] = []
    for base_key, dist in sorted(base_by_name.items()):
        if base_key in expected:
            want, where = expected[base_key]
            problems.append(
                f"{dist.describe()} is from the base image, but {where} has {base_key} {want}: "
                "the base's copy is shadowed by (or stands in for) that one; remove it from "
                "the base image"
            )
    return problems


@dataclass(frozen=True, kw_only=True)
class _Allowed:
    """What the image may hold: the lock's and the sources' distributions (name -> (version,
    where from)), the base image's own, and not the build-stage ones."""

    installs: Mapping[str, tuple[str, str]]
    build_only: Mapping[str, str]
    base_by_name: Mapping[str, BaseDistribution]
    has_base: bool  # the build recorded any base distribution

    def judge(self, name: str, entries: list[tuple[str, str]]) -> tuple[list[str], bool]:
        """The problems of ``name`` installed as ``entries`` ((version, location), in import
        order), and whether it is the base image's own as recorded."""
        problems: list[str] = []
        if len(entries) > 1:
            shown = ", ".join(f"{v}{_at(loc)}" for v, loc in entries)
            problems.append(f"{name} is installed {len(entries)} times: {shown}")
        version, location = entries[0]
        recorded = self.base_by_name.get(name)
        if name in self.installs:
            want, where = self.installs[name]
            if norm_version(version) != norm_version(want):
                problems.append(
                    f"{name} {version}{_at(location)} is installed, but {where} has {want}"
                )
        elif name in self.build_only:
            problems.append(
                f"{name} {version}{_at(location)} is a build-stage package "
                "(requirements-build.txt) and must not be in the image"
            )
        elif (
            recorded is not None
            and recorded.version == version
            and (not location or recorded.location == location)
        ):
            return problems, True
        elif recorded is not None:
            problems.append(
                f"{name} {version}{_at(location)} is installed, but the base image had "
                f"{recorded.describe()}; it is not in the lock nor built from a source"
            )
        elif self.has_base:
            problems.append(
                f"{name} {version}{_at(location)} is installed but is not in the lock, not "
                "from the base image and not built from a source"
            )
        else:
            problems.append(f"{name} {version}{_at(location)} is installed but is not in the lock")
        return problems, False


def _installed(facts: Mapping[str, Any]) -> dict[str, list[tuple[str, str]]]:
    """Canonical name -> (version, location) of each installed copy, in import order; location
    "" when the facts do not say (an older probe's)."""
    located = facts.get("distribution_locations")
    if not isinstance(located, list):
        located = [(n, v, "") for n, v in facts.get("distributions", [])]
    installed: dict[str, list[tuple[str, str]]] = {}
    for name, version, location in located:
        installed.setdefault(canonicalize_name(str(name)), []).append((str(version), str(location)))
    return installed


def installed_problems(
    facts: Mapping[str, Any], manifest: Manifest, lock: Lock
) -> tuple[list[str], str]:
    """Installed == the lock, the built sources and the base image's own distributions (as
    recorded before anything was installed: same name, version and location). Refused: one
    that is none of the three, a locked or built name at another version, and a base
    distribution whose name the lock or a source installs (shadowed)."""
    expected: dict[str, tuple[str, str]] = {p.name: (p.version, "the lock") for p in lock.runtime()}
    base, problems = base_distributions(facts)
    problems += _pin_problems(manifest, expected)
    problems += _source_problems(manifest, built_versions(facts), expected)
    base_by_name: dict[str, BaseDistribution] = {}
    for dist in base:
        base_by_name.setdefault(canonicalize_name(dist.name), dist)
    problems += _shadowed_problems(base_by_name, expected)
    allowed = _Allowed(
        installs=expected,
        build_only={p.name: p.version for p in lock.build_only()},
        base_by_name=base_by_name,
        has_base=bool(base),
    )
    installed = _installed(facts)
    from_base: list[BaseDistribution] = []
    for name, entries in sorted(installed.items()):
        found, is_base = allowed.judge(name, entries)
        problems += found
        if is_base:
            from_base.append(base_by_name[name])
    for name in sorted(set(expected) - set(installed)):
        want, where = expected[name]
        problems.append(f"{name} {want} is in {where} but not installed")
    ok_text = f"{len(installed)} distributions, exactly the lock and the sources"
    if from_base:
        ok_text += f", and {len(from_base)} from the base image: " + ", ".join(
            d.describe() for d in from_base
        )
    return problems, ok_text
