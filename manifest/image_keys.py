"""The image keys of a stack manifest: ``base_image``, ``python_install``, ``sdk_apt``,
``sdk``, ``sources``, ``components``, ``mirrors``, ``build``, ``gates``, ``image``, ``musa`` and
``runtime`` (what the image side reads; none of them changes the lock except
``build.requirements`` and what the resolver reads of ``sources``: an sdist and the
requirements files)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from core.urls import redact
from manifest.fields import KeyReader
from manifest.lock_keys import parse_pin, parse_requirements
from manifest.model import (
    COMPONENTS,
    DEFAULT_IMAGE_LICENSES,
    DEFAULT_PRODUCT_SOURCE,
    MIRROR_INDEXES,
    MOONCAKE_PACKAGE,
    MUSA_HOME,
    PINS_FILE,
    PLAIN_URL_RE,
    PYTHON_PROVIDERS,
    RUST_PROVIDERS,
    SDK_COMMANDS,
    SDK_FROM,
    SDK_LIBRARIES,
    TAG_FIELDS,
    VLLM_RS_TREE,
    BuildSettings,
    Components,
    Gates,
    ImageSettings,
    IndexSpec,
    Mirrors,
    Mooncake,
    Musa,
    PinnedFile,
    PythonInstall,
    Runtime,
    SdistRef,
    Sdk,
    SdkApt,
    Source,
    ThirdParty,
    VllmRs,
)
from manifest.names import MIRROR_NAMES

_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_TOOLCHAIN_RE = re.compile(
    r"^([0-9]+\.[0-9]+(\.[0-9]+)?|stable|beta|nightly(-[0-9]{4}-[0-9]{2}-[0-9]{2})?)$"
)
_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GIT_URL_RE = re.compile(
    r"(https|ssh|file)://[A-Za-z0-9._~/%+=,:@-]+|git@[A-Za-z0-9.-]+:[A-Za-z0-9._~/%+=,-]+"
)
_REV_RE = re.compile(r"^[0-9a-f]{40}$")
_FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}$")
_DEB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")
# an sdk_apt package: a name, or name=version (apt's exact-version pin)
_DEB_PIN_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9.+-]+)(=(?P<version>[0-9][A-Za-z0-9.+~:-]*))?$")
_SDK_RUNTIME_RE = re.compile(r"^[0-9]+\.[0-9]+$")
_SDK_COMMAND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
_SDK_LIBRARY_RE = re.compile(r"^lib[A-Za-z0-9._+-]*\.so(\.[0-9]+)*$")
_APT_WORD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_TAG_FIELD_RE = re.compile(r"\{([^{}]*)\}")
# image.licenses: SPDX identifiers (and LicenseRef-...), WITH, AND, OR and parentheses
_LICENSES_RE = re.compile(r"[A-Za-z0-9(][A-Za-z0-9.+:() -]{0,199}")
MAX_DESCRIPTION = 512  # image.description: one line, as an OCI label and in the SBOM
_DIST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")


def parse_python_install(r: KeyReader, value: object) -> PythonInstall:
    m = r.mapping(value, ["python_install"])
    keypath = ["python_install"]
    r.keys(m, keypath, optional=("provider", "mirror", "key_fingerprint", "key_url"))
    provider = r.string(m.get("provider", "distro"), [*keypath, "provider"])
    if provider not in PYTHON_PROVIDERS:
        raise r.error(
            [*keypath, "provider"], f"{provider!r} is not one of {', '.join(PYTHON_PROVIDERS)}"
        )
    mirror = r.string(m["mirror"], [*keypath, "mirror"]) if "mirror" in m else None
    fingerprint = None
    if "key_fingerprint" in m:
        fingerprint = _fingerprint(r, m["key_fingerprint"], [*keypath, "key_fingerprint"])
    key_url = r.string(m["key_url"], [*keypath, "key_url"]) if "key_url" in m else None
    for key, url in (("mirror", mirror), ("key_url", key_url)):
        if url is not None and not PLAIN_URL_RE.fullmatch(url):
            raise r.error(
                [*keypath, key],
                f"{redact(url)!r} is not an http(s) URL without credentials",
                hint="apt and the key fetch take a plain http(s) URL; the key is checked "
                "against key_fingerprint",
            )
    if provider == "deadsnakes":
        if mirror is None:
            raise r.error(keypath, "the deadsnakes provider needs a mirror URL")
        if fingerprint is None:
            raise r.error(
                keypath,
                "a mirror without a key_fingerprint cannot be verified",
                hint="add key_fingerprint: the 40-hex fingerprint of the archive's signing key",
            )
    elif mirror is not None or fingerprint is not None or key_url is not None:
        raise r.error(
            keypath, "mirror, key_fingerprint and key_url only apply to the deadsnakes provider"
        )
    return PythonInstall(
        provider=provider,  # type: ignore[arg-type]
        mirror=mirror,
        key_fingerprint=fingerprint,
        key_url=key_url,
    )


def _fingerprint(r: KeyReader, value: object, keypath: list[str]) -> str:
    fingerprint = r.string(value, keypath).replace(" ", "").upper()
    if not _FINGERPRINT_RE.fullmatch(fingerprint):
        raise r.error(keypath, "must be a 40-hex-digit OpenPGP fingerprint")
    return fingerprint


def parse_sdk_apt(r: KeyReader, value: object) -> SdkApt:
    keypath = ["sdk_apt"]
    m = r.mapping(value, keypath)
    r.keys(
        m,
        keypath,
        required=("url", "suite", "component", "key_fingerprint", "packages"),
        optional=("key_url",),
    )
    url = plain_url(r, m["url"], [*keypath, "url"])
    words = {}
    for key in ("suite", "component"):
        word = r.string(m[key], [*keypath, key])
        if not _APT_WORD_RE.fullmatch(word):
            raise r.error([*keypath, key], f"{word!r} is not an apt {key} name")
        words[key] = word
    fingerprint = _fingerprint(r, m["key_fingerprint"], [*keypath, "key_fingerprint"])
    key_url = plain_url(r, m["key_url"], [*keypath, "key_url"]) if "key_url" in m else None
    packages = r.string_list(m["packages"], [*keypath, "packages"])
    if not packages:
        raise r.error([*keypath, "packages"], "needs at least one package")
    for i, pkg in enumerate(packages):
        if not _DEB_PIN_RE.fullmatch(pkg):
            raise r.error([*keypath, "packages", str(i)], f"{pkg!r} is not a Debian package name")
    return SdkApt(
        url=url,
        suite=words["suite"],
        component=words["component"],
        key_fingerprint=fingerprint,
        key_url=key_url,
        packages=tuple(packages),
    )


def parse_sdk(r: KeyReader, value: object, sdk_apt: SdkApt | None) -> Sdk:
    """``sdk:``, checked against ``sdk_apt:`` (``from: apt`` needs it, ``from: base`` refuses
    it, and every package is pinned to ``runtime`` or to an explicit version)."""
    keypath = ["sdk"]
    m = r.mapping(value, keypath)
    r.keys(m, keypath, required=("from",), optional=("runtime", "commands", "libraries"))
    origin = r.string(m["from"], [*keypath, "from"], example="base")
    if origin not in SDK_FROM:
        raise r.error(
            [*keypath, "from"],
            f"{origin!r} is not one of {', '.join(SDK_FROM)}",
            hint="base: the base image's SDK, checked; apt: sdk_apt's packages",
        )
    checks: dict[str, tuple[str, ...]] = {}
    for key, default, pattern, what in (
        ("commands", SDK_COMMANDS, _SDK_COMMAND_RE, "a command name"),
        ("libraries", SDK_LIBRARIES, _SDK_LIBRARY_RE, "a shared library name like libmusart.so"),
    ):
        items = r.string_list(m[key], [*keypath, key]) if key in m else list(default)
        for i, item in enumerate(items):
            if not pattern.fullmatch(item):
                raise r.error([*keypath, key, str(i)], f"{item!r} is not {what}")
        checks[key] = tuple(items)
    if origin == "base" and not (checks["commands"] or checks["libraries"]):
        raise r.error(
            keypath,
            "from: base with no commands and no libraries checks nothing of the base image's SDK",
            hint=f"keep the defaults (commands: [{', '.join(SDK_COMMANDS)}], libraries: "
            f"[{', '.join(SDK_LIBRARIES)}])",
        )
    runtime = None
    if "runtime" in m:
        runtime = r.string(m["runtime"], [*keypath, "runtime"], example="5.2")
        if not _SDK_RUNTIME_RE.fullmatch(runtime):
            raise r.error(
                [*keypath, "runtime"], f'{runtime!r} is not a MUSA runtime line like "5.2"'
            )
    sdk = Sdk(
        origin=origin,  # type: ignore[arg-type]
        runtime=runtime,
        commands=checks["commands"],
        libraries=checks["libraries"],
    )
    if origin == "base":
        if runtime is not None:
            raise r.error(
                [*keypath, "runtime"],
                "only applies to from: apt (the base image's SDK is whatever line it has)",
                hint="remove sdk.runtime, or install the SDK with from: apt",
            )
        if sdk_apt is not None:
            raise r.error(
                ["sdk_apt"],
                "sdk.from is base, so the base image's SDK is kept and sdk_apt would install "
                "a second one over it",
                hint="set sdk.from: apt to install sdk_apt's packages, or remove sdk_apt",
            )
        return sdk
    if sdk_apt is None:
        raise r.error(
            [*keypath, "from"],
            "apt installs the SDK from sdk_apt, which the manifest does not have",
            hint="add sdk_apt: (the vendor repository, its key fingerprint, the packages), or "
            "use from: base with a MUSA SDK base image",
        )
    if runtime is None:
        raise r.error(
            keypath,
            "from: apt needs runtime: the one MUSA runtime line every sdk_apt package is pinned to",
            hint='add runtime: "5.2" (package names ending in -5-2, or name=version)',
        )
    suffix = sdk.package_suffix
    for i, pkg in enumerate(sdk_apt.packages):
        name, pinned, _version = pkg.partition("=")
        if not pinned and not name.endswith(suffix):
            raise r.error(
                ["sdk_apt", "packages", str(i)],
                f"{pkg!r} is not pinned to the runtime line {runtime} of sdk.runtime",
                hint=f"name the line's package ({name}{suffix}) or pin a version ({name}=VERSION)",
            )
    return sdk


def parse_sources(
    r: KeyReader, value: object, indexes: Mapping[str, IndexSpec] | None = None
) -> list[Source]:
    m = r.mapping(value, ["sources"])
    out: list[Source] = []
    for name, spec in m.items():
        keypath = ["sources", name]
        if not _NAME_RE.fullmatch(name):
            raise r.error(keypath, f"{name!r} is not a valid source name")
        source = parse_source(r, name, spec, keypath, indexes=indexes)
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


_REL_FILE_RE = re.compile(r"^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")
_PIN_KEY_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def _relative_files(r: KeyReader, value: object, keypath: list[str]) -> tuple[str, ...]:
    files = r.string_list(value, keypath)
    for i, f in enumerate(files):
        if not _REL_FILE_RE.fullmatch(f) or ".." in f.split("/"):
            raise r.error(
                [*keypath, str(i)],
                f"{f!r} is not a relative file path inside the source",
                hint="e.g. requirements/common.txt",
            )
        if f in files[:i]:
            raise r.error([*keypath, str(i)], f"{f} is listed twice")
    return tuple(files)


def _parse_sdist(
    r: KeyReader,
    name: str,
    value: object,
    keypath: list[str],
    indexes: Mapping[str, IndexSpec] | None,
) -> SdistRef:
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    m = r.mapping(value, keypath)
    r.keys(m, keypath, required=("index", "version"), optional=("project",))
    index = r.string(m["index"], [*keypath, "index"])
    if indexes is not None and index not in indexes:
        raise r.error(
            [*keypath, "index"],
            f"{index!r} is not one of the indexes ({', '.join(sorted(indexes))})",
        )
    project = r.string(m.get("project", name), [*keypath, "project"])
    if not _NAME_RE.fullmatch(project.lower()):
        raise r.error([*keypath, "project"], f"{project!r} is not a project name")
    text = r.string(m["version"], [*keypath, "version"], example="0.28.0")
    try:
        version = Version(text)
    except InvalidVersion:
        raise r.error([*keypath, "version"], f"{text!r} is not a PEP 440 version") from None
    return SdistRef(
        index=index, project=canonicalize_name(project), version=version, version_text=text
    )


def _parse_third_party(r: KeyReader, value: object, keypath: list[str]) -> tuple[ThirdParty, ...]:
    m = r.mapping(value, keypath)
    out: list[ThirdParty] = []
    for dirname, spec in m.items():
        kp = [*keypath, dirname]
        if not _NAME_RE.fullmatch(dirname):
            raise r.error(kp, f"{dirname!r} is not a directory name under third_party/")
        t = r.mapping(spec, kp)
        r.keys(t, kp, required=("source", "pin"), optional=("patches", "installed"))
        installed = r.boolean(t["installed"], [*kp, "installed"]) if "installed" in t else True
        pin = r.string(t["pin"], [*kp, "pin"])
        if not _PIN_KEY_RE.fullmatch(pin):
            raise r.error(
                [*kp, "pin"],
                f"{pin!r} is not a {PINS_FILE} key",
                hint="the KEY of a KEY=VALUE line, e.g. VLLM_COMMIT",
            )
        patches = None
        if "patches" in t:
            patches = r.string(t["patches"], [*kp, "patches"])
            if not _REL_FILE_RE.fullmatch(patches) or ".." in patches.split("/"):
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


def parse_source(
    r: KeyReader,
    name: str,
    spec: object,
    keypath: list[str],
    *,
    indexes: Mapping[str, IndexSpec] | None = None,
) -> Source:
    """A ``sources.<name>`` entry."""
    s = r.mapping(spec, keypath)
    r.keys(
        s,
        keypath,
        optional=(
            "git",
            "rev",
            "path",
            "env",
            "sdist",
            "product",
            "third_party",
            "requirements_files",
            "build_requirements_files",
        ),
    )
    product = r.boolean(s["product"], [*keypath, "product"]) if "product" in s else False
    env = r.string_map(s.get("env", {}), [*keypath, "env"])
    for key in env:
        if not _ENV_NAME_RE.fullmatch(key):
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
        rev = r.string(s["rev"], [*keypath, "rev"])
        if not _REV_RE.fullmatch(rev):
            raise r.error(
                [*keypath, "rev"],
                f"{rev!r} is not a 40-hex commit id",
                hint="branches and tags move; pin the commit (git rev-parse TAG^{commit})",
            )
    if "git" in s:
        git = r.string(s["git"], [*keypath, "git"])
        if not _GIT_URL_RE.fullmatch(git) or "@" in git.partition("://")[2].split("/", 1)[0]:
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
        path = r.string(s["path"], [*keypath, "path"])
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise r.error(
                [*keypath, "path"],
                f"{path!r} is outside the repository",
                hint="a path source is a relative directory inside the repository",
            )
        return dataclasses.replace(shell, path=path)
    raise r.error(keypath, "a source needs git + rev, path, or sdist: {index, version}")


def plain_url(r: KeyReader, value: object, keypath: list[str]) -> str:
    url = r.string(value, keypath)
    if not PLAIN_URL_RE.fullmatch(url):
        raise r.error(
            keypath,
            f"{redact(url)!r} is not an http(s) URL without credentials",
            hint="credentials never go in the manifest; a mirror is a plain http(s) URL",
        )
    return url


def parse_components(
    r: KeyReader, value: object, indexes: Mapping[str, IndexSpec], sources: Sequence[Source]
) -> Components:
    m = r.mapping(value, ["components"])
    r.keys(m, ["components"], optional=COMPONENTS)
    vllm_rs = None
    mooncake = None
    if "vllm-rs" in m:
        vllm_rs = parse_vllm_rs(r, m["vllm-rs"], sources)
    if "mooncake" in m:
        mooncake = parse_mooncake(r, m["mooncake"], indexes)
    return Components(vllm_rs=vllm_rs, mooncake=mooncake)


def _enabled(r: KeyReader, m: Mapping[str, Any], keypath: list[str]) -> bool:
    return r.boolean(m.get("enabled", False), [*keypath, "enabled"])


def parse_vllm_rs(r: KeyReader, value: object, sources: Sequence[Source]) -> VllmRs | None:
    keypath = ["components", "vllm-rs"]
    m = r.mapping(value, keypath)
    for gone in ("source", "binaries"):
        if gone in m and _enabled(r, m, keypath):
            raise r.error(
                [*keypath, gone],
                "vllm-rs is built from vLLM's own tree, not from a source of its own",
                hint="remove it: vLLM's tools/build_rust.py builds the tree's rust/ workspace "
                "into its vllm package (the vllm-rs binary and the _rust_*.so modules); "
                f"tree names that source (default {VLLM_RS_TREE!r})",
            )
    r.keys(m, keypath, optional=("enabled", "tree", "toolchain", "provider", "rustup_init"))
    if not _enabled(r, m, keypath):
        return None
    provider = r.string(m.get("provider", "rustup"), [*keypath, "provider"])
    if provider not in RUST_PROVIDERS:
        raise r.error(
            [*keypath, "provider"], f"{provider!r} is not one of {', '.join(RUST_PROVIDERS)}"
        )
    toolchain = None
    if "toolchain" in m:
        toolchain = r.string(m["toolchain"], [*keypath, "toolchain"], example="1.83.0")
        if not _TOOLCHAIN_RE.fullmatch(toolchain):
            raise r.error(
                [*keypath, "toolchain"],
                f"{toolchain!r} is not a Rust toolchain version like 1.83.0",
                hint="omit it to take any rustc the distribution has",
            )
        if provider == "rustup":
            raise r.error(
                [*keypath, "toolchain"],
                "only applies to the distro provider",
                hint="rustup installs the toolchain of the tree's rust-toolchain.toml "
                "(build_rust.sh reads its channel): remove toolchain",
            )
    rustup_init = None
    if "rustup_init" in m:
        rk = [*keypath, "rustup_init"]
        ri = r.mapping(m["rustup_init"], rk)
        r.keys(ri, rk, required=("url", "sha256"))
        sha = r.string(ri["sha256"], [*rk, "sha256"])
        if not _SHA256_RE.fullmatch(sha):
            raise r.error([*rk, "sha256"], "must be 64 lowercase hex digits")
        rustup_init = PinnedFile(url=plain_url(r, ri["url"], [*rk, "url"]), sha256=sha)
    if provider == "rustup" and rustup_init is None:
        raise r.error(
            keypath,
            "the rustup provider needs rustup_init: {url, sha256}",
            hint="every download is pinned: give the rustup-init URL and its sha256",
        )
    if provider == "distro" and rustup_init is not None:
        raise r.error([*keypath, "rustup_init"], "only applies to the rustup provider")
    tree = r.string(m.get("tree", VLLM_RS_TREE), [*keypath, "tree"])
    names = [s.name for s in sources]
    if tree not in names:
        close = difflib.get_close_matches(tree, names, n=1)
        raise r.error(
            [*keypath, "tree"] if "tree" in m else keypath,
            f"vllm-rs is built from vLLM's tree, the source {tree!r}, but sources has no "
            f"{tree!r} ({', '.join(names) or 'no sources'})",
            hint=f"did you mean {close[0]!r}?" if close else "add vLLM's source under sources",
        )
    return VllmRs(
        tree=tree,
        toolchain=toolchain,
        provider=provider,  # type: ignore[arg-type]
        rustup_init=rustup_init,
    )


def parse_mooncake(
    r: KeyReader, value: object, indexes: Mapping[str, IndexSpec]
) -> Mooncake | None:
    keypath = ["components", "mooncake"]
    m = r.mapping(value, keypath)
    r.keys(m, keypath, optional=("enabled", "package", "version", "index", "wheel"))
    if not _enabled(r, m, keypath):
        return None
    for key in ("version", "index"):
        if key not in m:
            raise r.error(keypath, f"missing required key {key!r}")
    key = r.string(m.get("package", MOONCAKE_PACKAGE), [*keypath, "package"])
    if not _NAME_RE.fullmatch(key.lower()):
        raise r.error([*keypath, "package"], f"{key!r} is not a valid project name")
    pin = parse_pin(r, key, m, keypath, indexes, wheel=m.get("wheel", "native"), deps=True)
    return Mooncake(pin=pin)


def parse_mirrors(r: KeyReader, value: object, indexes: Mapping[str, IndexSpec]) -> Mirrors:
    m = r.mapping(value, ["mirrors"])
    r.keys(m, ["mirrors"], optional=(*MIRROR_NAMES, MIRROR_INDEXES))
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


_COMPONENT_SWITCHES = {"BUILD_VLLM_RS": "vllm-rs", "BUILD_MOONCAKE": "mooncake"}


def parse_build(r: KeyReader, value: object) -> BuildSettings:
    m = r.mapping(value, ["build"])
    if "compiler" in m:
        raise r.error(
            ["build", "compiler"],
            "the build stage has no compiler setting: the source builds pick their compilers",
            hint="remove build.compiler: gcc, g++, cc and c++ run through ccache in the build "
            "stage (/usr/lib/ccache first on PATH), and the vllm-musa build runs mcc itself "
            "(its ccache reads VLLM_MUSA_CCACHE_DIR)",
        )
    r.keys(m, ["build"], optional=("requirements", "args", "apt_packages"))
    reqs = parse_requirements(r, m.get("requirements", []), ["build", "requirements"])
    args = r.string_map(m.get("args", {}), ["build", "args"])
    for key in args:
        if not _ENV_NAME_RE.fullmatch(key):
            raise r.error(["build", "args", key], "not a valid build argument name")
        if key in _COMPONENT_SWITCHES:
            # the old switches were plain build args; a "1" here would build nothing new
            raise r.error(
                ["build", "args", key],
                "optional components are switched in the manifest, not by a build argument",
                hint=f"use components.{_COMPONENT_SWITCHES[key]}.enabled: true",
            )
    apt = r.string_list(m.get("apt_packages", []), ["build", "apt_packages"])
    for i, pkg in enumerate(apt):
        if not _DEB_NAME_RE.fullmatch(pkg):
            raise r.error(
                ["build", "apt_packages", str(i)], f"{pkg!r} is not a Debian package name"
            )
    return BuildSettings(requirements=tuple(reqs), args=args, apt_packages=tuple(apt))


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_SONAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\.so(\.[0-9]+)*")


def _gate_modules(r: KeyReader, m: Mapping[str, Any], key: str) -> list[str]:
    modules = r.string_list(m.get(key, []), ["gates", key])
    for i, mod in enumerate(modules):
        if not _MODULE.fullmatch(mod):
            raise r.error(["gates", key, str(i)], f"{mod!r} is not a module name")
        if mod in modules[:i]:
            raise r.error(["gates", key, str(i)], f"{mod} is listed twice")
    return modules


def parse_gates(r: KeyReader, value: object) -> Gates:
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    m = r.mapping(value, ["gates"])
    r.keys(m, ["gates"], optional=("imports", "find_spec", "versions", "libraries", "markers"))
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
        if not _DIST_RE.fullmatch(dist):
            raise r.error(["gates", "versions", dist], f"{dist!r} is not a distribution name")
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
        if not _SONAME.fullmatch(lib):
            raise r.error(
                ["gates", "libraries", str(i)],
                f"{lib!r} is not a shared-library soname",
                hint="the file name the dynamic linker looks up, e.g. libmkl_core.so.2",
            )
        if lib in libraries[:i]:
            raise r.error(["gates", "libraries", str(i)], f"{lib} is listed twice")
    markers = r.string_map(m.get("markers", {}), ["gates", "markers"])
    for dist, path in markers.items():
        if not _DIST_RE.fullmatch(dist):
            raise r.error(["gates", "markers", dist], f"{dist!r} is not a distribution name")
        if not _REL_FILE_RE.fullmatch(path) or ".." in path.split("/"):
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


def parse_image(r: KeyReader, value: object, release: str) -> ImageSettings:
    m = r.mapping(value, ["image"])
    r.keys(
        m,
        ["image"],
        required=("repository",),
        optional=("release_tags", "nightly_tags", "variables", "licenses", "description"),
    )
    repository = r.string(m["repository"], ["image", "repository"])
    licenses = r.string(m.get("licenses", DEFAULT_IMAGE_LICENSES), ["image", "licenses"])
    if not _LICENSES_RE.fullmatch(licenses):
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
            for fieldname in _TAG_FIELD_RE.findall(template):
                if fieldname not in known:
                    close = difflib.get_close_matches(fieldname, sorted(known), n=1)
                    raise r.error(
                        ["image", kind, str(i)],
                        f"unknown variable {{{fieldname}}} in {template!r}",
                        hint=(f"did you mean {{{close[0]}}}? " if close else "")
                        + f"known: {', '.join(sorted(known))}",
                    )
        tags[kind] = tuple(items)
    return ImageSettings(
        repository=repository,
        release_tags=tags["release_tags"],
        nightly_tags=tags["nightly_tags"],
        variables=variables,
        licenses=licenses,
        description=description,
    )


# musa: the environment variables it sets (in the image, so never a build argument too)
MUSA_ENV = (
    "MUSA_HOME",
    "PATH",
    "LD_LIBRARY_PATH",
    "MTGPU_TARGET",
    "TORCH_MUSA_ARCH_LIST",
    "MATE_MUSA_ARCH_LIST",
    "MTHREADS_VISIBLE_DEVICES",
)
_GPU_ARCH_RE = re.compile(r"^mp_[0-9]{2}$")
_DIR_RE = re.compile(r"^/?[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*/?$")
_VISIBLE_RE = re.compile(r"^(all|none|[0-9]+(,[0-9]+)*)$")


def _directory(
    r: KeyReader, value: object, keypath: list[str], *, home: str | None, kind: str = "directory"
) -> str:
    """A path of the image: absolute, or relative to ``home`` when one is given."""
    text = r.string(value, keypath)
    if not _DIR_RE.fullmatch(text) or ".." in text.split("/") or text in ("/", "."):
        raise r.error(
            keypath,
            f"{text!r} is not a {kind} path",
            hint="letters, digits, '.', '_', '+', '-' and '/'; no '..', no variables",
        )
    if text.startswith("/"):
        return text.rstrip("/") or "/"
    if home is None:
        raise r.error(keypath, f"{text!r} is not an absolute path")
    return f"{home}/{text.rstrip('/')}"


def parse_musa(r: KeyReader, value: object, build: BuildSettings) -> Musa:
    keypath = ["musa"]
    m = r.mapping(value, keypath)
    r.keys(
        m,
        keypath,
        required=("gpu_arch",),
        optional=("home", "visible_devices", "path", "library_path"),
    )
    gpu_arch = r.string(m["gpu_arch"], [*keypath, "gpu_arch"], example="mp_31")
    if not _GPU_ARCH_RE.fullmatch(gpu_arch):
        raise r.error(
            [*keypath, "gpu_arch"],
            f"{gpu_arch!r} is not a MUSA GPU architecture like mp_31",
            hint="mp_31 (S5000) or mp_22; it sets MTGPU_TARGET, TORCH_MUSA_ARCH_LIST and "
            "MATE_MUSA_ARCH_LIST",
        )
    home = MUSA_HOME
    if "home" in m:
        home = _directory(r, m["home"], [*keypath, "home"], home=None)
    visible = r.string(m.get("visible_devices", "all"), [*keypath, "visible_devices"])
    if not _VISIBLE_RE.fullmatch(visible):
        raise r.error(
            [*keypath, "visible_devices"],
            f"{visible!r} is not all, none or a list of device numbers like 0,1",
        )
    dirs: dict[str, tuple[str, ...]] = {}
    for key in ("path", "library_path"):
        items = r.string_list(m.get(key, []), [*keypath, key])
        dirs[key] = tuple(
            _directory(r, item, [*keypath, key, str(i)], home=home) for i, item in enumerate(items)
        )
    for name in MUSA_ENV:
        if name in build.args:
            raise r.error(
                ["build", "args", name],
                f"{name} is set by musa: an ENV of the image, which a build argument of the "
                "same name cannot change",
                hint=f"remove build.args.{name}"
                + (
                    "; musa.gpu_arch sets the architecture"
                    if "ARCH" in name or "MTGPU" in name
                    else ""
                ),
            )
    return Musa(
        gpu_arch=gpu_arch,
        home=home,
        visible_devices=visible,
        path=dirs["path"],
        library_path=dirs["library_path"],
    )


def parse_runtime(r: KeyReader, value: object) -> Runtime:
    keypath = ["runtime"]
    m = r.mapping(value, keypath)
    r.keys(m, keypath, optional=("apt_packages", "library_links"))
    apt = r.string_list(m.get("apt_packages", []), [*keypath, "apt_packages"])
    for i, pkg in enumerate(apt):
        if not _DEB_NAME_RE.fullmatch(pkg):
            raise r.error(
                [*keypath, "apt_packages", str(i)], f"{pkg!r} is not a Debian package name"
            )
    raw = r.string_map(m.get("library_links", {}), [*keypath, "library_links"])
    links: list[tuple[str, str]] = []
    for link, target in raw.items():
        where = [*keypath, "library_links", link]
        links.append(
            (
                _directory(r, link, where, home=None, kind="file"),
                _directory(r, target, where, home=None, kind="file"),
            )
        )
    return Runtime(apt_packages=tuple(apt), library_links=tuple(links))
