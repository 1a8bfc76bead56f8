"""``sources:``: where each tree the image builds comes from (git + rev, a directory of the
repository, or an sdist of one of the indexes), with its environment, its requirements files
and the ``third_party`` sources it drives.

At most one source is the product (it names the image). A driven source is another source of
the manifest, has a rev (the commit its driver's ``third_party/PINS`` line is checked
against), is driven by one source only, drives nothing itself and is not the product. Of a
source, the resolver reads its sdist and its requirements files; the rest is the image's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from core.urls import redact
from manifest.fields import KeyReader
from manifest.key_shapes import ENV_NAME_RE, NAME_RE, REL_FILE_RE, repository_path
from manifest.model import (
    DEFAULT_PRODUCT_SOURCE,
    PINS_FILE,
    IndexSpec,
    SdistRef,
    Source,
    ThirdParty,
)

GIT_URL_RE = re.compile(
    r"(https|ssh|file)://[A-Za-z0-9._~/%+=,:@-]+|git@[A-Za-z0-9.-]+:[A-Za-z0-9._~/%+=,-]+"
)
REV_RE = re.compile(r"^[0-9a-f]{40}$")
PIN_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def parse_sources(r: KeyReader, value: object, indexes: Mapping[str, IndexSpec]) -> list[Source]:
    m = r.mapping(value, ["sources"])
    out: list[Source] = []
    for name, spec in m.items():
        keypath = ["sources", name]
        r.matching(NAME_RE, name, keypath, "a valid source name")
        source = parse_source(r, name, spec, keypath, indexes)
        product = next((s for s in out if s.product), None)
        if source.product and product is not None:
            raise r.error(
                [*keypath, "product"],
                f"sources.{product.name} is the product already; one source names the image",
                hint=f"keep product: true on one source (the default is the source named "
                f"{DEFAULT_PRODUCT_SOURCE!r})",
            )
        out.append(source)
    _check_third_party(r, out)
    return out


def _check_third_party(r: KeyReader, sources: list[Source]) -> None:
    """Each third_party entry names another source with a rev, driven by one source only."""
    by_name = {s.name: s for s in sources}
    driver_of: dict[str, str] = {}
    for s in sources:
        for t in s.third_party:
            keypath = ["sources", s.name, "third_party", t.dir, "source"]
            other = by_name.get(t.source)
            if other is None or other is s:
                raise r.error(
                    keypath,
                    f"{t.source!r} is not another source of this manifest",
                    hint=f"one of: {', '.join(n for n in by_name if n != s.name) or '(none)'}",
                )
            if other.rev is None:
                raise r.error(
                    keypath,
                    f"sources.{t.source} has no rev, so third_party/PINS {t.pin} cannot be "
                    "checked against it",
                    hint=f"give sources.{t.source} the commit it is (git + rev, or sdist + rev)",
                )
            if other.third_party:
                raise r.error(keypath, f"sources.{t.source} drives sources itself")
            if t.source in driver_of:
                raise r.error(
                    keypath,
                    f"sources.{t.source} is already driven by sources.{driver_of[t.source]}",
                )
            driver_of[t.source] = s.name
            if other.product:
                raise r.error(
                    ["sources", t.source, "product"],
                    f"sources.{t.source} is built by sources.{s.name}; the driving source is the "
                    "product",
                )


def parse_source(
    r: KeyReader, name: str, spec: object, keypath: list[str], indexes: Mapping[str, IndexSpec]
) -> Source:
    """A ``sources.<name>`` entry."""
    s = r.mapping(spec, keypath)
    r.keys(s, keypath, "sources.<name>")
    product = r.boolean(s["product"], [*keypath, "product"]) if "product" in s else False
    env = r.string_map(s.get("env", {}), [*keypath, "env"])
    for key in env:
        if not ENV_NAME_RE.fullmatch(key):
            raise r.error([*keypath, "env", key], "not a valid environment variable name")
    shell = Source(
        name=name,
        product=product,
        env=env,
        third_party=_parse_third_party(r, s.get("third_party", {}), [*keypath, "third_party"]),
        requirements_files=_relative_files(
            r, s.get("requirements_files", []), [*keypath, "requirements_files"]
        ),
        build_requirements_files=_relative_files(
            r, s.get("build_requirements_files", []), [*keypath, "build_requirements_files"]
        ),
    )
    kinds = [k for k in ("git", "path", "sdist") if k in s]
    if len(kinds) > 1:
        raise r.error(
            keypath, f"a source is one of git + rev, path, or sdist; not {' and '.join(kinds)}"
        )
    rev = None
    if "rev" in s:
        rev = r.matching(
            REV_RE,
            r.string(s["rev"], [*keypath, "rev"]),
            [*keypath, "rev"],
            "a 40-hex commit id",
            hint="branches and tags move; pin the commit (git rev-parse TAG^{commit})",
        )
    if "git" in s:
        git = r.string(s["git"], [*keypath, "git"])
        if not GIT_URL_RE.fullmatch(git) or "@" in git.partition("://")[2].split("/", 1)[0]:
            raise r.error(
                [*keypath, "git"],
                f"{redact(git)!r} is not a git URL this tool clones",
                hint="use https://, ssh:// or file:// (or git@host:path); no credentials, no "
                "ext:: or other transports that run commands",
            )
        if rev is None:
            raise r.error(keypath, "a git source needs rev: a 40-hex commit id")
        return dataclasses.replace(shell, git=git, rev=rev)
    if "sdist" in s:
        sdist = _parse_sdist(r, name, s["sdist"], [*keypath, "sdist"], indexes)
        return dataclasses.replace(shell, sdist=sdist, rev=rev)
    if "path" in s:
        if rev is not None:
            raise r.error([*keypath, "rev"], "a path source has no rev")
        path = repository_path(
            r,
            s["path"],
            [*keypath, "path"],
            hint="a path source is a relative directory inside the repository",
        )
        return dataclasses.replace(shell, path=path)
    raise r.error(keypath, "a source needs git + rev, path, or sdist: {index, version}")


def _parse_third_party(r: KeyReader, value: object, keypath: list[str]) -> tuple[ThirdParty, ...]:
    m = r.mapping(value, keypath)
    out: list[ThirdParty] = []
    for dirname, spec in m.items():
        kp = [*keypath, dirname]
        r.matching(NAME_RE, dirname, kp, "a directory name under third_party/")
        t = r.mapping(spec, kp)
        r.keys(t, kp, "sources.<name>.third_party.<dir>")
        installed = r.boolean(t["installed"], [*kp, "installed"]) if "installed" in t else True
        pin = r.matching(
            PIN_KEY_RE,
            r.string(t["pin"], [*kp, "pin"]),
            [*kp, "pin"],
            f"a {PINS_FILE} key",
            hint="the KEY of a KEY=VALUE line, e.g. VLLM_COMMIT",
        )
        patches = None
        if "patches" in t:
            patches = r.string(t["patches"], [*kp, "patches"])
            if not REL_FILE_RE.fullmatch(patches) or ".." in patches.split("/"):
                raise r.error(
                    [*kp, "patches"],
                    f"{patches!r} is not a relative directory inside the source",
                    hint="e.g. vllm_musa/patches/series",
                )
        out.append(
            ThirdParty(
                dir=dirname,
                source=r.string(t["source"], [*kp, "source"]),
                pin=pin,
                patches=patches,
                installed=installed,
            )
        )
    return tuple(out)


def _parse_sdist(
    r: KeyReader,
    name: str,
    value: object,
    keypath: list[str],
    indexes: Mapping[str, IndexSpec],
) -> SdistRef:
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    m = r.mapping(value, keypath)
    r.keys(m, keypath, "sources.<name>.sdist")
    index = r.index(m["index"], [*keypath, "index"], indexes)
    project = r.string(m.get("project", name), [*keypath, "project"])
    if not NAME_RE.fullmatch(project.lower()):
        raise r.error([*keypath, "project"], f"{project!r} is not a project name")
    text = r.string(m["version"], [*keypath, "version"], example="0.28.0")
    try:
        version = Version(text)
    except InvalidVersion:
        raise r.error([*keypath, "version"], f"{text!r} is not a PEP 440 version") from None
    return SdistRef(
        index=index, project=canonicalize_name(project), version=version, version_text=text
    )


def _relative_files(r: KeyReader, value: object, keypath: list[str]) -> tuple[str, ...]:
    files = r.string_list(value, keypath)
    for i, f in enumerate(files):
        if not REL_FILE_RE.fullmatch(f) or ".." in f.split("/"):
            raise r.error(
                [*keypath, str(i)],
                f"{f!r} is not a relative file path inside the source",
                hint="e.g. requirements/common.txt",
            )
        if f in files[:i]:
            raise r.error([*keypath, str(i)], f"{f} is listed twice")
    return tuple(files)
