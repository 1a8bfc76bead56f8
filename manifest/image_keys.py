"""How the image is built, checked and named: ``mirrors`` (plain URLs that stand in for the
upstream hosts and indexes during the build), ``build`` (the build requirements, the build
arguments and the build stage's apt packages), ``gates`` (the imports, versions, libraries and
marker files the built image must show before it is tagged) and ``image`` (the repository, the
tag templates, the licenses and the description of its labels, and whether a release must be
signed, with the public key its signatures are verified with).

Of these, only ``build.requirements`` changes the lock; the rest is the image's. A tag
template names only built-in fields and ``image.variables``.

The other image keys have rooms of their own: ``manifest.source_keys`` (``sources``),
``manifest.component_keys`` (``components``) and ``manifest.platform_keys``
(``python_install``, ``sdk_apt``, ``sdk``, ``musa``, ``runtime``).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from manifest.fields import KeyReader
from manifest.key_shapes import DEB_NAME_RE, ENV_NAME_RE, REL_FILE_RE, plain_url, repository_path
from manifest.lock_keys import parse_requirements
from manifest.model import (
    DEFAULT_IMAGE_LICENSES,
    MIRROR_INDEXES,
    TAG_FIELD_RE,
    TAG_FIELDS,
    BuildSettings,
    Gates,
    ImageSettings,
    IndexSpec,
    Mirrors,
)
from manifest.names import MIRROR_NAMES

DIST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
# image.licenses: SPDX identifiers (and LicenseRef-...), WITH, AND, OR and parentheses
LICENSES_RE = re.compile(r"[A-Za-z0-9(][A-Za-z0-9.+:() -]{0,199}")
MAX_DESCRIPTION = 512  # image.description: one line, as an OCI label and in the SBOM
MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
SONAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\.so(\.[0-9]+)*")


def parse_mirrors(r: KeyReader, value: object, indexes: Mapping[str, IndexSpec]) -> Mirrors:
    m = r.mapping(value, ["mirrors"])
    r.keys(m, ["mirrors"], "mirrors")
    values: dict[str, Any] = {
        name.replace("-", "_"): plain_url(r, m[name], ["mirrors", name])
        for name in MIRROR_NAMES
        if name in m
    }
    if MIRROR_INDEXES in m:
        keypath = ["mirrors", MIRROR_INDEXES]
        raw = r.mapping(m[MIRROR_INDEXES], keypath)
        urls: dict[str, str] = {}
        for name, url in raw.items():
            if name not in indexes:
                close = difflib.get_close_matches(name, list(indexes), n=1)
                raise r.error(
                    [*keypath, name],
                    f"{name!r} is not one of the indexes ({', '.join(sorted(indexes))})",
                    hint=f"did you mean {close[0]!r}?" if close else None,
                )
            urls[name] = plain_url(r, url, [*keypath, name])
        values["indexes"] = urls
    return Mirrors(**values)


def parse_build(r: KeyReader, value: object) -> BuildSettings:
    m = r.mapping(value, ["build"])
    r.keys(m, ["build"], "build")
    reqs = parse_requirements(r, m.get("requirements", []), ["build", "requirements"])
    args = r.string_map(m.get("args", {}), ["build", "args"])
    for key in args:
        if not ENV_NAME_RE.fullmatch(key):
            raise r.error(["build", "args", key], "not a valid build argument name")
    apt = r.string_list(m.get("apt_packages", []), ["build", "apt_packages"])
    for i, pkg in enumerate(apt):
        r.matching(DEB_NAME_RE, pkg, ["build", "apt_packages", str(i)], "a Debian package name")
    return BuildSettings(requirements=tuple(reqs), args=args, apt_packages=tuple(apt))


def parse_gates(r: KeyReader, value: object) -> Gates:
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    m = r.mapping(value, ["gates"])
    r.keys(m, ["gates"], "gates")
    imports = _gate_modules(r, m, "imports")
    find_spec = _gate_modules(r, m, "find_spec")
    for i, mod in enumerate(find_spec):
        if mod in imports:
            raise r.error(
                ["gates", "find_spec", str(i)],
                f"{mod} is also in gates.imports; a module is either imported or only located",
                hint="keep it in gates.imports if it imports without a GPU, "
                "else in gates.find_spec only",
            )
    versions = r.string_map(m.get("versions", {}), ["gates", "versions"])
    seen: dict[str, str] = {}
    for dist, text in versions.items():
        r.matching(DIST_RE, dist, ["gates", "versions", dist], "a distribution name")
        key = canonicalize_name(dist)
        if key in seen:
            raise r.error(
                ["gates", "versions", dist], f"{dist} and {seen[key]} name the same distribution"
            )
        seen[key] = dist
        try:
            Version(text)
        except InvalidVersion:
            raise r.error(
                ["gates", "versions", dist],
                f"{text!r} is not a PEP 440 version",
                hint='the exact version the distribution installs as, e.g. "0.28.0"',
            ) from None
    libraries = r.string_list(m.get("libraries", []), ["gates", "libraries"])
    for i, lib in enumerate(libraries):
        r.matching(
            SONAME_RE,
            lib,
            ["gates", "libraries", str(i)],
            "a shared-library soname",
            hint="the file name the dynamic linker looks up, e.g. libmkl_core.so.2",
        )
        if lib in libraries[:i]:
            raise r.error(["gates", "libraries", str(i)], f"{lib} is listed twice")
    markers = r.string_map(m.get("markers", {}), ["gates", "markers"])
    for dist, path in markers.items():
        r.matching(DIST_RE, dist, ["gates", "markers", dist], "a distribution name")
        if not REL_FILE_RE.fullmatch(path) or ".." in path.split("/"):
            raise r.error(
                ["gates", "markers", dist],
                f"{path!r} is not a relative file path",
                hint="the file a patch of the series adds, under the package root, "
                "e.g. vllm/platforms/musa_series.py",
            )
    return Gates(
        imports=tuple(imports),
        find_spec=tuple(find_spec),
        versions=versions,
        libraries=tuple(libraries),
        markers=markers,
    )


def _gate_modules(r: KeyReader, m: Mapping[str, Any], key: str) -> list[str]:
    modules = r.string_list(m.get(key, []), ["gates", key])
    for i, mod in enumerate(modules):
        r.matching(MODULE_RE, mod, ["gates", key, str(i)], "a module name")
        if mod in modules[:i]:
            raise r.error(["gates", key, str(i)], f"{mod} is listed twice")
    return modules


def parse_image(r: KeyReader, value: object, release: str) -> ImageSettings:
    m = r.mapping(value, ["image"])
    r.keys(m, ["image"], "image")
    repository = r.string(m["repository"], ["image", "repository"])
    licenses = r.string(m.get("licenses", DEFAULT_IMAGE_LICENSES), ["image", "licenses"])
    if not LICENSES_RE.fullmatch(licenses):
        raise r.error(
            ["image", "licenses"],
            f"{licenses[:80]!r} is not an SPDX license expression",
            hint='e.g. "Apache-2.0", "Apache-2.0 AND BSD-3-Clause" or '
            '"Apache-2.0 AND LicenseRef-MooreThreads"',
        )
    description = ""
    if "description" in m:
        description = r.string(m["description"], ["image", "description"])
        if len(description) > MAX_DESCRIPTION or not description.isprintable():
            raise r.error(
                ["image", "description"],
                f"must be one line of at most {MAX_DESCRIPTION} printable characters",
            )
    variables = r.string_map(m.get("variables", {}), ["image", "variables"])
    for key in variables:
        if key in TAG_FIELDS:
            raise r.error(["image", "variables", key], f"{key!r} is a built-in tag field")
    known = {*TAG_FIELDS, *variables}
    tags: dict[str, tuple[str, ...]] = {}
    for kind in ("release_tags", "nightly_tags"):
        items = r.string_list(m.get(kind, []), ["image", kind])
        for i, template in enumerate(items):
            for fieldname in TAG_FIELD_RE.findall(template):
                if fieldname not in known:
                    close = difflib.get_close_matches(fieldname, sorted(known), n=1)
                    raise r.error(
                        ["image", kind, str(i)],
                        f"unknown variable {{{fieldname}}} in {template!r}",
                        hint=(f"did you mean {{{close[0]}}}? " if close else "")
                        + f"known: {', '.join(sorted(known))}",
                    )
        tags[kind] = tuple(items)
    require_signature = False
    if "require_signature" in m:
        require_signature = r.boolean(m["require_signature"], ["image", "require_signature"])
    public_key = None
    if "public_key" in m:
        public_key = repository_path(
            r,
            m["public_key"],
            ["image", "public_key"],
            hint="the public key is a file inside the repository, e.g. keys/cosign.pub",
        )
    if require_signature and public_key is None:
        raise r.error(
            ["image"],
            "require_signature: true needs public_key: the key a release's signatures are "
            "verified with",
            hint="add image.public_key: the path of the public key that verifies the releases",
        )
    return ImageSettings(
        repository=repository,
        release_tags=tags["release_tags"],
        nightly_tags=tags["nightly_tags"],
        variables=variables,
        licenses=licenses,
        description=description,
        require_signature=require_signature,
        public_key=public_key,
    )
