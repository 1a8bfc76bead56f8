"""The image's system layer: ``python_install`` (the distribution's Python, or deadsnakes
from a mirror), ``sdk_apt`` and ``sdk`` (the MUSA SDK: the base image's, checked by its
commands and libraries, or the vendor's apt packages, each pinned to one runtime line),
``musa`` (the MUSA environment the image sets) and ``runtime`` (apt packages and library links
of the final image).

An apt archive is only taken with the fingerprint of its signing key; a URL is plain http(s)
without credentials; a path of the image is plain, without ``..`` or variables; a variable
that ``musa`` sets in the image is refused as a build argument. None of these keys changes the
lock.
"""

from __future__ import annotations

import re

from core.urls import redact
from manifest.fields import KeyReader
from manifest.image_keys import SONAME_RE
from manifest.key_shapes import DEB_NAME_RE, LINE_RE, plain_url
from manifest.model import (
    MUSA_HOME,
    PLAIN_URL_RE,
    PYTHON_PROVIDERS,
    SDK_COMMANDS,
    SDK_FROM,
    SDK_LIBRARIES,
    BuildSettings,
    Musa,
    PythonInstall,
    Runtime,
    Sdk,
    SdkApt,
)

_FINGERPRINT_RE = re.compile(r"^[0-9A-F]{40}$")
# an sdk_apt package: a name, or name=version (apt's exact-version pin)
DEB_PIN_RE = re.compile(r"^(?P<name>[a-z0-9][a-z0-9.+-]+)(=(?P<version>[0-9][A-Za-z0-9.+~:-]*))?$")
APT_WORD_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
SDK_COMMAND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
SDK_LIBRARY_RE = re.compile(r"^lib[A-Za-z0-9._+-]*\.so(\.[0-9]+)*$")
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
GPU_ARCH_RE = re.compile(r"^mp_[0-9]{2}$")
DIR_RE = re.compile(r"^/?[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*/?$")
VISIBLE_RE = re.compile(r"^(all|none|[0-9]+(,[0-9]+)*)$")


def parse_python_install(r: KeyReader, value: object) -> PythonInstall:
    m = r.mapping(value, ["python_install"])
    keypath = ["python_install"]
    r.keys(m, keypath, "python_install")
    provider = r.choice(m.get("provider", "distro"), [*keypath, "provider"], PYTHON_PROVIDERS)
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
    r.keys(m, keypath, "sdk_apt")
    url = plain_url(r, m["url"], [*keypath, "url"])
    words = {}
    for key in ("suite", "component"):
        word = r.string(m[key], [*keypath, key])
        words[key] = r.matching(APT_WORD_RE, word, [*keypath, key], f"an apt {key} name")
    fingerprint = _fingerprint(r, m["key_fingerprint"], [*keypath, "key_fingerprint"])
    key_url = plain_url(r, m["key_url"], [*keypath, "key_url"]) if "key_url" in m else None
    packages = r.string_list(m["packages"], [*keypath, "packages"])
    if not packages:
        raise r.error([*keypath, "packages"], "needs at least one package")
    for i, pkg in enumerate(packages):
        r.matching(DEB_PIN_RE, pkg, [*keypath, "packages", str(i)], "a Debian package name")
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
    r.keys(m, keypath, "sdk")
    origin = r.string(m["from"], [*keypath, "from"], example="base")
    if origin not in SDK_FROM:
        raise r.error(
            [*keypath, "from"],
            f"{origin!r} is not one of {', '.join(SDK_FROM)}",
            hint="base: the base image's SDK, checked; apt: sdk_apt's packages",
        )
    checks: dict[str, tuple[str, ...]] = {}
    for key, default, pattern, what in (
        ("commands", SDK_COMMANDS, SDK_COMMAND_RE, "a command name"),
        ("libraries", SDK_LIBRARIES, SDK_LIBRARY_RE, "a shared library name like libmusart.so"),
    ):
        items = r.string_list(m[key], [*keypath, key]) if key in m else list(default)
        for i, item in enumerate(items):
            r.matching(pattern, item, [*keypath, key, str(i)], what)
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
        r.matching(LINE_RE, runtime, [*keypath, "runtime"], 'a MUSA runtime line like "5.2"')
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


def parse_musa(r: KeyReader, value: object, build: BuildSettings) -> Musa:
    keypath = ["musa"]
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "musa")
    gpu_arch = r.matching(
        GPU_ARCH_RE,
        r.string(m["gpu_arch"], [*keypath, "gpu_arch"], example="mp_31"),
        [*keypath, "gpu_arch"],
        "a MUSA GPU architecture like mp_31",
        hint="mp_31 (S5000) or mp_22; it sets MTGPU_TARGET, TORCH_MUSA_ARCH_LIST and "
        "MATE_MUSA_ARCH_LIST",
    )
    home = MUSA_HOME
    if "home" in m:
        home = _directory(r, m["home"], [*keypath, "home"], home=None)
    visible = r.matching(
        VISIBLE_RE,
        r.string(m.get("visible_devices", "all"), [*keypath, "visible_devices"]),
        [*keypath, "visible_devices"],
        "all, none or a list of device numbers like 0,1",
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


def _directory(
    r: KeyReader, value: object, keypath: list[str], *, home: str | None, kind: str = "directory"
) -> str:
    """A path of the image: absolute, or relative to ``home`` when one is given."""
    text = r.string(value, keypath)
    if not DIR_RE.fullmatch(text) or ".." in text.split("/") or text in ("/", "."):
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


def parse_runtime(r: KeyReader, value: object) -> Runtime:
    keypath = ["runtime"]
    m = r.mapping(value, keypath)
    r.keys(m, keypath, "runtime")
    apt = r.string_list(m.get("apt_packages", []), [*keypath, "apt_packages"])
    for i, pkg in enumerate(apt):
        r.matching(DEB_NAME_RE, pkg, [*keypath, "apt_packages", str(i)], "a Debian package name")
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
    host = r.string_map(m.get("host_libraries", {}), [*keypath, "host_libraries"])
    for soname in host:
        r.matching(
            SONAME_RE,
            soname,
            [*keypath, "host_libraries", soname],
            "a shared-library soname",
            hint="the name a DT_NEEDED entry gives and the dynamic linker looks up, e.g. "
            "libmusa.so.1",
        )
    return Runtime(apt_packages=tuple(apt), library_links=tuple(links), host_libraries=host)
