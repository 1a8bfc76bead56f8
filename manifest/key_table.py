"""The one table of the manifest's keys.

For each mapping whose keys the reader checks (by its key path; ``<name>`` where the user
chooses the name, ``<n>`` for a list item), its keys in order, each with its type, whether it is
required, its default, its meaning, and the JSON Schema keywords of its value: enums, patterns
and bounds made from the validators' own constants. Three things are made from it:

- the reader's unknown-key and missing-key checks (``KeyReader.keys``, given a section name);
- the JSON Schema of a manifest (``manifest.schema.render_schema``);
- the key tables of docs/manifest.md (``manifest.schema.reference_tables``).

What the key parsers check beyond a key's name (a value's shape, a rule between sections, a
name that must refer to another key) stays with them; the schema states what it can of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from manifest.component_keys import SHA256_RE, TOOLCHAIN_RE
from manifest.image_keys import DIST_RE, LICENSES_RE, MAX_DESCRIPTION, MODULE_RE, SONAME_RE
from manifest.key_rows import Key, Section, numbers, one_of, pattern, section, when
from manifest.key_shapes import (
    DEB_NAME_RE,
    ENV_NAME_RE,
    LINE_RE,
    NAME_RE,
    REL_FILE_RE,
    STACK_NAME_RE,
)
from manifest.lock_keys import INDEX_NAME_RE, INDEX_URL_RE
from manifest.model import (
    ARCHES,
    GLIBC_HIGHEST,
    GLIBC_LOWEST,
    INDEX_FORMATS,
    PLAIN_URL_RE,
    PYTHON_PROVIDERS,
    PYTHON_VERSIONS,
    RUST_PROVIDERS,
    SCHEMA_VERSION,
    SDK_FROM,
    TAG_FIELDS,
    WHEEL_KINDS,
)
from manifest.platform_keys import (
    APT_WORD_RE,
    DEB_PIN_RE,
    DIR_RE,
    GPU_ARCH_RE,
    MUSA_ENV,
    SDK_COMMAND_RE,
    SDK_LIBRARY_RE,
    VISIBLE_RE,
)
from manifest.serving import (
    AB_ORDERS,
    IPC_MODES,
    LAUNCH_ENV_RE,
    LIFETIMES,
    MODEL_NAME_RE,
    NETWORKS,
    RUNTIME_RE,
    SIZE_RE,
)
from manifest.source_keys import GIT_URL_RE, PIN_KEY_RE, REV_RE


def _glibc(lowest: int) -> dict[str, Any]:
    """``2.Y`` from ``2.lowest`` to the highest glibc the tool computes tags for."""
    return {"pattern": f"^2\\.{numbers(lowest, GLIBC_HIGHEST[1])}$"}


# a version as packaging writes it (str(Version(text)) == text): what an exact pin must be
NORMAL_VERSION = (
    r"^(?:[1-9][0-9]*!)?(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*"
    r"(?:(?:a|b|rc)(?:0|[1-9][0-9]*))?(?:\.post(?:0|[1-9][0-9]*))?(?:\.dev(?:0|[1-9][0-9]*))?"
    r"(?:\+(?:0|[1-9][0-9]*|[a-z0-9]*[a-z][a-z0-9]*)(?:\.(?:0|[1-9][0-9]*|[a-z0-9]*[a-z][a-z0-9]*))*)?$"
)
_URL = {"pattern": pattern(PLAIN_URL_RE)}
_PROJECT = {"pattern": pattern(NAME_RE).replace("a-z", "A-Za-z")}  # matched lowercased
_PINNED_VERSION = {"pattern": NORMAL_VERSION}
_FINGERPRINT = {"pattern": "^ *(?:[0-9A-Fa-f] *){40}$"}  # 40 hex, spaces allowed
_NO_DOTDOT = {"not": {"pattern": "(?:^|/)\\.\\.(?:/|$)"}}
_RELATIVE_FILE = {"pattern": pattern(REL_FILE_RE), **_NO_DOTDOT}
# under the repository root (key_shapes.repository_path): not absolute, no `..` part
_REPOSITORY_PATH = {"not": {"anyOf": [{"pattern": "^/"}, _NO_DOTDOT["not"]]}}
_IMAGE_DIR = {"pattern": pattern(DIR_RE), "allOf": [_NO_DOTDOT, {"not": {"enum": ["/", "."]}}]}
_ABSOLUTE_DIR = {**_IMAGE_DIR, "pattern": "^/" + pattern(DIR_RE)[1:].removeprefix("/?")}
_CONTAINER_PATH = {"pattern": "^/[^:,]*$"}  # absolute, no ':' or ',' (a mount, a device)
_WHEEL = {"enum": list(WHEEL_KINDS)}
_ENV = {"pattern": pattern(ENV_NAME_RE)}


def _sdk_from(origin: str) -> dict[str, Any]:
    return {
        "properties": {"sdk": {"properties": {"from": {"const": origin}}, "required": ["from"]}},
        "required": ["sdk"],
    }


# The mappings of a manifest by key path, each key in the order of the reference's table.
# fmt: off
TABLE: Mapping[str, Section] = {
    "": section(
        Key("schema", "integer", "yes", "The manifest format. Must be `1`.",
            schema={"const": SCHEMA_VERSION}),
        Key("name", "string", "yes", "The stack's name: letters, digits, `.`, `_`, `-`. Names the "
            "lock, the reports and the image labels.",
            schema={"pattern": pattern(STACK_NAME_RE)}),
        Key("release", "string", "yes", 'The vLLM release this stack builds, e.g. `"0.28.0"`. '
            "Used in the image labels and in tag templates (`{release}`)."),
        Key("target", "mapping", "yes", "The interpreter inside the image (below). Never read "
            "from the host."),
        Key("indexes", "mapping", "yes", "The Python package indexes, by name (below). At least "
            "one.", schema={"minProperties": 1}, names={"pattern": pattern(INDEX_NAME_RE)}),
        Key("default_index", "string", "yes", "The index for every project that is not pinned "
            "under `packages`: the requirements and their dependencies. One of the `indexes` "
            "names."),
        Key("packages", "mapping", "no", "Exact pins, each bound to one index (below).",
            default={}, names=_PROJECT),
        Key("requirements", "list of strings", "no", "The roots of the runtime closure, as PEP "
            "508 requirements (`numpy==1.26.4`, `mthreads-ml-py>=2.4.1`). Resolved on "
            "`default_index`. No direct URLs; a project pinned under `packages` must not be "
            "listed again.", default=[]),
        Key("rules", "mapping", "no", "Checks the lock must pass (below).", default={}),
        Key("overrides", "mapping", "no", "Exact versions the stack keeps although some "
            "requirement excludes them, each with its reason (below).", default={}),
        Key("base_image", "string", "for `render`/`build`", "The image the build starts `FROM`, "
            'e.g. `"registry.example/musa-sdk:5.2.0-ubuntu22.04"`; pin `@sha256:<digest>` for '
            "releases. `build --base-image REF` replaces it."),
        Key("python_install", "mapping", "no", "How CPython is installed in the image (below).",
            default={"provider": "distro"}),
        Key("sdk_apt", "mapping", "no", "A signed vendor apt repository to install the MUSA SDK "
            "packages from (below).", note="none"),
        Key("sdk", "mapping", "no", "Where the MUSA SDK comes from (`from: base` or `from: apt`) "
            "and what the build checks of it (below). Without it nothing about the SDK is "
            "checked.", note="none"),
        Key("sources", "mapping", "no", "Source trees built inside the image, by name (below).",
            default={}, names={"pattern": pattern(NAME_RE)}),
        Key("build", "mapping", "no", "The build stage: build requirements, build arguments, apt "
            "packages (below).", default={}),
        Key("gates", "mapping", "no", "Acceptance checks run in the built image before any tag "
            "(below).", default={}),
        Key("image", "mapping", "for `publish`", "The repository and tag templates the image is "
            "published under (below).", note="none"),
        Key("components", "mapping", "no", "Optional parts of the image, each off by default "
            "(below).", default={}),
        Key("mirrors", "mapping", "no", "Mirrors the build uses instead of the upstream URLs "
            "(below).", default={}),
        Key("musa", "mapping", "no", "The MUSA environment of the image: `MUSA_HOME`, `PATH`, "
            "`LD_LIBRARY_PATH`, the GPU architecture variables, `MTHREADS_VISIBLE_DEVICES` "
            "(below).", note="none"),
        Key("runtime", "mapping", "no", "What the image needs at run time beyond the interpreter: "
            "apt packages and library links (below).", default={}),
        Key("serving", "mapping", "for `serve-check`/`ab`", "How the image's server is launched, "
            "what its semantic check asks, and the A/B contract (below). Not a lock input; "
            "`--profile FILE` holds the same keys in a file of its own.", note="none"),
        rules={"allOf": [  # rules across sections
            {"if": _sdk_from("apt"), "then": {"required": ["sdk_apt"]}},
            {"if": _sdk_from("base"), "then": {"not": {"required": ["sdk_apt"]}}},
            {  # musa: sets these in the image, so no build argument may name them
                "if": {"required": ["musa"]},
                "then": {"properties": {"build": {"properties": {
                    "args": {"propertyNames": {"not": {"enum": list(MUSA_ENV)}}}
                }}}},
            },
        ]},
    ),
    "target": section(
        Key("python", "string", "yes", 'CPython `3.Y`, e.g. `"3.12"`: one of 3.8 to 3.14, written '
            'without leading zeros (`"3.012"` is refused, not read as 3.12). Wheels must carry a '
            "matching tag (`cp312`, `abi3`, `py3`).",
            schema={"enum": [f"{major}.{minor}" for major, minor in PYTHON_VERSIONS]}),
        Key("arch", "string", "yes", "`x86_64` or `aarch64`.", schema={"enum": list(ARCHES)}),
        Key("glibc", "string", "yes", 'The glibc of the image, `2.Y`, e.g. `"2.35"` (Ubuntu '
            "22.04): 2.5 to 2.99 on `x86_64`, 2.17 to 2.99 on `aarch64` (its first glibc), "
            "without leading zeros. `manylinux_2_Z` wheels with Z above it are refused.",
            schema=_glibc(min(GLIBC_LOWEST.values())[1])),
        rules={"allOf": [
            when("arch", arch, {"properties": {"glibc": _glibc(GLIBC_LOWEST[arch][1])}})
            for arch in ARCHES
        ]},
    ),
    "indexes.<name>": section(
        Key("url", "string", "yes", "An http(s) URL without credentials. Plain `http://` is "
            "fetched only from a loopback host. `--index NAME=URL` (or `mirrors.indexes.<name>`) "
            "replaces it for one run.",
            # credentials go in the environment
            schema={"pattern": INDEX_URL_RE.pattern, "not": {"pattern": "^https?://[^/]*@"}}),
        Key("format", "string", "no", "`simple` (a PEP 503/691 simple index) or `find-links` (one "
            "HTML page of links to files).", default="simple",
            schema={"enum": list(INDEX_FORMATS)}),
    ),
    "packages.<name>": section(
        Key("version", "string", "yes", "The exact version, in PEP 440 normal form, local label "
            'included (`"2.11.0.post2+musa5.2.0"`). The lock compares it as text.',
            schema=_PINNED_VERSION),
        Key("index", "string", "yes", "One of the `indexes` names."),
        Key("wheel", "string", "yes", "The wheel kind that must be chosen: `native` "
            "(`cpXY-cpXY-<platform>`), `abi3` (`cpXY-abi3-<platform>`) or `pure` "
            "(`py3-none-any`).", schema=_WHEEL),
        Key("deps", "boolean", "no", "`false`: the pin's own Requires-Dist is not followed (for a "
            "package whose metadata would pull in a conflicting stack).", default=True),
    ),
    "rules": section(
        Key("same_line", "list of lists of strings", "no", "Groups of packages whose locked "
            "versions must share MAJOR.MINOR (the same torch line). Each group has at least two "
            "names, and every name must be in the lock.", default=[], items={"minItems": 2}),
        Key("line_map", "mapping", "no", "Packages whose version is chosen by the line of another "
            "package (below).", default={}),
    ),
    "rules.line_map.<name>": section(
        Key("follows", "string", "yes", "The package whose MAJOR.MINOR line decides; it must be "
            "in the lock."),
        Key("versions", "mapping of strings", "yes", 'Line (`"2.11"`) to the exact version of '
            "`<name>` for that line. The chosen version is locked like a pin; a line that is not "
            "listed is an error. `<name>` must not also be pinned under `packages`.",
            schema={"minProperties": 1}, names={"pattern": pattern(LINE_RE)},
            items=_PINNED_VERSION),
    ),
    "overrides.<name>": section(
        Key("version", "string", "yes", "The exact version, local label included, as under "
            "`packages`."),
        Key("reason", "string", "yes", "Why the stack keeps this version: one non-empty line, "
            "recorded in the lock."),
        Key("index", "string", "no", "One of the `indexes` names; the override is looked up there "
            "only.", note="`default_index`"),
    ),
    "python_install": section(
        Key("provider", "string", "no", "`distro`: the base image's own `python3.Y`. "
            "`deadsnakes`: CPython from a Deadsnakes apt archive, verified by key fingerprint.",
            default="distro", schema={"enum": list(PYTHON_PROVIDERS)}),
        Key("mirror", "string", "with `deadsnakes`", "The archive URL (plain http(s), no "
            "credentials). Only for `deadsnakes`. `mirrors.deadsnakes` replaces it.", schema=_URL),
        Key("key_fingerprint", "string", "with `deadsnakes`", "The 40-hex OpenPGP fingerprint of "
            "the archive's signing key (spaces allowed). The fetched key is refused unless it has "
            "this fingerprint.", schema=_FINGERPRINT),
        Key("key_url", "string", "no", "Where the build fetches that key (plain http(s)).",
            note="the Ubuntu keyserver", schema=_URL),
        rules=when("provider", "deadsnakes", {"required": ["mirror", "key_fingerprint"]}, {
            "not": {"anyOf": [{"required": [k]} for k in ("mirror", "key_fingerprint", "key_url")]}
        }),
    ),
    "sdk_apt": section(
        Key("url", "string", "yes", "The repository URL (plain http(s)). `mirrors.sdk-apt` "
            "replaces it.", schema=_URL),
        Key("suite", "string", "yes", "The apt suite, e.g. `jammy`.",
            schema={"pattern": pattern(APT_WORD_RE)}),
        Key("component", "string", "yes", "The apt component, e.g. `main`.",
            schema={"pattern": pattern(APT_WORD_RE)}),
        Key("key_fingerprint", "string", "yes", "The 40-hex fingerprint of the repository's "
            "signing key.", schema=_FINGERPRINT),
        Key("key_url", "string", "no", "Where the key is fetched from (plain http(s)).",
            note="the Ubuntu keyserver", schema=_URL),
        Key("packages", "list of strings", "yes", "The Debian packages to install, in one apt "
            "transaction; at least one. `name` or `name=version`. With `sdk: {from: apt}` each is "
            "pinned to `sdk.runtime` (below).", schema={"minItems": 1},
            items={"pattern": pattern(DEB_PIN_RE)}),
    ),
    "sdk": section(
        Key("from", "string", "yes", "`base`: the base image's SDK (then `sdk_apt` is refused, "
            "and `sdk.runtime`). `apt`: `sdk_apt.packages` (then `sdk_apt` is required).",
            schema={"enum": list(SDK_FROM)}),
        Key("runtime", "string", "with `from: apt`", 'The MUSA runtime line, `"5.2"`. Every '
            "`sdk_apt` package must carry its suffix (`musart-5-2`) or an explicit `=version` "
            "(`mtml=2.4.1`); a package with neither is refused, by name.",
            schema={"pattern": pattern(LINE_RE)}),
        Key("commands", "list of strings", "no", "Commands that must be on `PATH`.",
            default=["mcc"], items={"pattern": pattern(SDK_COMMAND_RE)}),
        Key("libraries", "list of strings", "no", "Shared libraries the dynamic linker must know. "
            "With `from: base`, `commands` and `libraries` may not both be empty.",
            default=["libmusart.so"], items={"pattern": pattern(SDK_LIBRARY_RE)}),
        rules={"allOf": [
            when("from", "apt", {"required": ["runtime"]}, {"not": {"required": ["runtime"]}}),
            when("from", "base", {"not": {  # from: base checks something of the base's SDK
                "properties": {"commands": {"maxItems": 0}, "libraries": {"maxItems": 0}},
                "required": ["commands", "libraries"],
            }}),
        ]},
    ),
    "sources.<name>": section(
        Key("git", "string", "with `rev`", "An `https://`, `ssh://` or `file://` URL (or "
            "`git@host:path`), without credentials.",
            schema={"pattern": pattern(GIT_URL_RE), "not": {"pattern": "^[a-z]+://[^/]*@"}}),
        Key("rev", "string", "with `git`; optional with `sdist`", "The 40-hex commit id. Branches "
            "and tags move, so they are refused. With `sdist`: the commit the sdist was cut from "
            "(what a `third_party` pin is checked against); it does not change what is read, "
            "which is the sdist's own files. A path source has no `rev`.",
            schema={"pattern": pattern(REV_RE)}),
        Key("sdist", "mapping", "instead of `git`/`path`", "A source distribution on a manifest "
            "index, locked by its hash like a wheel (below)."),
        Key("requirements_files", "list of strings", "no", "Files of the source (paths inside it, "
            "e.g. `requirements/common.txt`) whose requirements are roots of the runtime closure "
            "(below).", default=[], schema={"uniqueItems": True}, items=_RELATIVE_FILE),
        Key("build_requirements_files", "list of strings", "no", "The same for the `build` group "
            "(like `build.requirements`); requirements on `torch`, `torchvision` and `torchaudio` "
            "are dropped from them (below).", default=[], schema={"uniqueItems": True},
            items=_RELATIVE_FILE),
        Key("path", "string", "instead of `git`", "A relative directory inside the repository. A "
            "symlink in it that points outside the repository is refused when staging.",
            schema=_REPOSITORY_PATH),
        Key("env", "mapping of strings", "no", "Environment variables for building this source "
            "(`VLLM_TARGET_DEVICE: empty`).", default={}, names=_ENV),
        Key("product", "boolean", "no", "This source is the image's product: the image's `source` "
            "and `revision` labels name it (below). At most one source says `true`; when none "
            "does, the source named `vllm-musa` is the product, and without one the image has no "
            "product source.", default=False),
        Key("third_party", "mapping", "no", "`<dir>` -> the source staged into the driving "
            "source's `third_party/<dir>` before its build.", default={},
            names={"pattern": pattern(NAME_RE)}),
        rules={**one_of("git", "path", "sdist"), "allOf": [  # an sdist may have a rev
            {"if": {"required": ["git"]}, "then": {"required": ["rev"]}},
            {"if": {"required": ["path"]}, "then": {"not": {"required": ["rev"]}}},
        ]},
    ),
    "sources.<name>.sdist": section(
        Key("index", "string", "yes", "One of the `indexes` names; the sdist is looked up there "
            "only."),
        Key("project", "string", "no", "The project name on the index.", note="`<name>`",
            schema=_PROJECT),
        Key("version", "string", "yes", 'The exact version of the sdist, e.g. `"0.28.0"`.'),
    ),
    "sources.<name>.third_party.<dir>": section(
        Key("source", "string", "yes", "Another source of the manifest, with a `rev` (git, or an "
            "sdist with the commit it was cut from). It is not built on its own."),
        Key("pin", "string", "yes", "The key of the driving tree's `third_party/PINS` "
            "(`KEY=VALUE` lines) that must equal that source's `rev`; a mismatch, a missing key "
            "or a missing PINS stops the build before it starts, naming both values.",
            schema={"pattern": pattern(PIN_KEY_RE)}),
        Key("patches", "string", "no", "The driving tree's directory of the patch series applied "
            "to this tree (`vllm_musa/patches/series`): the files its patches touch are the only "
            "ones the `third-party` gate lets differ from the staged tree.",
            schema=_RELATIVE_FILE),
        Key("installed", "boolean", "no", "The driving build installs the tree as a distribution "
            "(vLLM). `false` when it only compiles some of its files (upstream's FlashInfer "
            "kernels): no distribution and no gate then.", default=True),
    ),
    "build": section(
        Key("requirements", "list of strings", "no", "PEP 508 requirements of the build stage "
            "(`setuptools>=77`, `wheel`), locked in the `build` group and installed with "
            "`--no-build-isolation`. Part of the lock inputs.", default=[]),
        Key("args", "mapping of strings", "no", "Build arguments declared in the Dockerfile "
            '(`MAX_JOBS: "8"`). Optional components are switched under `components`, and the '
            "variables `musa` sets (`MTGPU_TARGET`, ...) under `musa`, not here.", default={},
            names=_ENV),
        Key("apt_packages", "list of strings", "no", "Debian packages the build stage installs on "
            "top of its fixed toolchain (`gcc-12`, `pkg-config`).", default=[],
            items={"pattern": pattern(DEB_NAME_RE)}),
    ),
    "musa": section(
        Key("gpu_arch", "string", "yes", "The GPU architecture, `mp_XY`: `mp_31` (S5000) or "
            "`mp_22`. Sets `MTGPU_TARGET=mp_XY`, `TORCH_MUSA_ARCH_LIST=XY` and "
            "`MATE_MUSA_ARCH_LIST=X.Y` (the vllm-musa JIT reads it at run time).",
            schema={"pattern": pattern(GPU_ARCH_RE)}),
        Key("home", "string", "no", "`MUSA_HOME`, an absolute directory.",
            default="/usr/local/musa", schema=_ABSOLUTE_DIR),
        Key("visible_devices", "string", "no", "`MTHREADS_VISIBLE_DEVICES` of the final image: "
            "`all`, `none` or device numbers (`0,1`).", default="all",
            schema={"pattern": pattern(VISIBLE_RE)}),
        Key("path", "list of strings", "no", "Directories put in front of `PATH`, in this order; "
            "a relative one is under `musa.home` (`bin` is `/usr/local/musa/bin`).", default=[],
            items=_IMAGE_DIR),
        Key("library_path", "list of strings", "no", "Directories put in front of "
            "`LD_LIBRARY_PATH` (relative ones under `musa.home`), and listed in "
            "`/etc/ld.so.conf.d/musa-runtime.conf` for processes started without it.", default=[],
            items=_IMAGE_DIR),
    ),
    "runtime": section(
        Key("apt_packages", "list of strings", "no", "Debian packages of the image (MKL, libomp, "
            "OpenBLAS, numa, rdma, openmpi for the real stacks).", default=[],
            items={"pattern": pattern(DEB_NAME_RE)}),
        Key("library_links", "mapping of strings", "no", "`LINK: TARGET`, absolute paths: "
            "symlinks made after the packages are installed, then `ldconfig` (the MKL `.so.2` "
            "names the MUSA torch wheel links against). The build fails when a target is not in "
            "the image.", default={}, names=_ABSOLUTE_DIR, items=_ABSOLUTE_DIR),
        Key("host_libraries", "mapping of strings", "no", "`SONAME: REASON`: shared libraries the "
            "host provides at run time, not the image, each with why (a GPU driver's library, "
            "which its container runtime injects: `libmusa.so.1`, the MUSA driver's, by the "
            "mthreads runtime). The `linkage` gate accepts a need on one of them that the image "
            "cannot satisfy, and lists it as host-provided. A reason is required.", default={},
            names={"pattern": pattern(SONAME_RE)}),
    ),
    "gates": section(
        Key("imports", "list of strings", "no", "Modules imported in the built image; each must "
            "import without error. List the modules that import on a CPU-only machine (torch, "
            "torch_musa, vllm, vllm_musa, ...).", default=[], schema={"uniqueItems": True},
            items={"pattern": pattern(MODULE_RE)}),
        Key("find_spec", "list of strings", "no", "Modules located with "
            "`importlib.util.find_spec`, never imported (no code of theirs runs; a dotted name is "
            "searched without importing its parents): the GPU-bound ones whose import needs a "
            "device (mate, flash_mla, tilelang, triton, ...). A module listed in both `imports` "
            "and `find_spec` is an error.", default=[], schema={"uniqueItems": True},
            items={"pattern": pattern(MODULE_RE)}),
        Key("versions", "mapping of strings", "no", "Distribution name -> the exact version it "
            "must be installed as, compared with `importlib.metadata` in the image (PEP 440 "
            "equality of the whole version, local label included: `0.28.0` is not "
            "`0.28.0+empty`). Meant for the built `sources`, whose versions the lock cannot know, "
            'e.g. `{vllm: "0.28.0"}`. Each value must be a PEP 440 version; two spellings of one '
            "distribution are an error.", default={}, names={"pattern": pattern(DIST_RE)}),
        Key("libraries", "list of strings", "no", "Shared-library sonames the dynamic linker must "
            "find in the image (`ldconfig -p`, then `LD_LIBRARY_PATH`), e.g. `libmkl_core.so.2`, "
            "which the MUSA torch wheel links against. Nothing is loaded. Every missing one is "
            "named.", default=[], schema={"uniqueItems": True},
            items={"pattern": pattern(SONAME_RE)}),
        Key("markers", "mapping of strings", "no", "Distribution -> a file that a patch of the "
            "series adds, relative to where its top-level package is found (`{vllm: "
            "vllm/platforms/musa_series.py}`): proof that the installed tree is the patched one, "
            "checked without importing it.", default={}, names={"pattern": pattern(DIST_RE)},
            items=_RELATIVE_FILE),
    ),
    "image": section(
        Key("repository", "string", "yes", "The registry repository, e.g. "
            "`registry.example/inference/vllm`. `publish --repository` replaces it."),
        Key("release_tags", "list of strings", "no", "Tag templates of a release. A release tag "
            "is never moved once published.", default=[]),
        Key("nightly_tags", "list of strings", "no", "Tag templates of a nightly; these move.",
            default=[]),
        Key("variables", "mapping of strings", "no", "More `{fields}` for the templates. The "
            "built-in fields are `{release}`, `{python}`, `{arch}` and `{date}`, and cannot be "
            "redefined; an unknown field is an error.", default={},
            names={"not": {"enum": list(TAG_FIELDS)}}),
        Key("licenses", "string", "no", "The licenses of the image's software as an SPDX license "
            "expression (`Apache-2.0 AND LicenseRef-MooreThreads`): the "
            "`org.opencontainers.image.licenses` label and the SBOM's image component. Without "
            "`image:`, the default.", default="Apache-2.0",
            schema={"pattern": pattern(LICENSES_RE)}),
        Key("description", "string", "no", "One line, at most 512 characters: the "
            "`org.opencontainers.image.description` label and the SBOM's image component.",
            note="`vLLM <release> for Moore Threads GPUs (vLLM-MUSA), stack <name>`",
            schema={"maxLength": MAX_DESCRIPTION}),
        Key("require_signature", "boolean", "no", "A release of this stack must be signed: "
            "`publish --release` without `--sign-key` is refused before anything is pushed, and "
            "`verify` refuses an unsigned release. Nightlies are not affected. Needs "
            "`public_key`.", default=False),
        Key("public_key", "string", "with `require_signature`", "The PEM public key "
            "(`cosign.pub`, `-----BEGIN PUBLIC KEY-----`) that `verify` and `verify-pins` check "
            "the signatures with: a relative path inside the repository, e.g. "
            "`keys/cosign.pub`.", schema=_REPOSITORY_PATH),
        rules=when("require_signature", True, {"required": ["public_key"]}),
    ),
    "components": section(
        Key("vllm-rs", "mapping", "no", "vLLM's Rust frontend, built from vLLM's tree by vLLM's "
            "own entry and installed into the `vllm` package (below).", note="off"),
        Key("mooncake", "mapping", "no", "Mooncake's transfer engine, one more hash-locked wheel, "
            "gated on its version (below).", note="off"),
    ),
    "components.vllm-rs": section(
        Key("enabled", "boolean", "no", "Build it.", default=False),
        Key("tree", "string", "no", "The source that is vLLM's tree. A tree a driving source "
            "stages under `third_party/` is built as that build left it (patched); it must be "
            "installed.", default="vllm", schema={"pattern": pattern(NAME_RE)}),
        Key("provider", "string", "no", "`rustup`: rustup-init (pinned below), then the tree's "
            "`build_rust.sh`, which installs the toolchain of its `rust-toolchain.toml`. "
            "`distro`: the base distribution's rustc and cargo, then the script's build step, "
            "`tools/build_rust.py --release`.", default="rustup",
            schema={"enum": list(RUST_PROVIDERS)}),
        Key("toolchain", "string", "no", "`distro` only: the rustc version the build requires "
            "(`1.63`, `1.83.0`, `stable`...); the build refuses another one.", note="any",
            schema={"pattern": pattern(TOOLCHAIN_RE)}),
        Key("rustup_init", "mapping", "with `rustup`", "The rustup-init download. Only for the "
            "`rustup` provider."),
        # rustup-init is pinned for the rustup provider (the default), refused for distro,
        # which alone takes toolchain (rustup's is the tree's rust-toolchain.toml)
        rules=when("enabled", True, when(
            "provider", "distro", {"not": {"required": ["rustup_init"]}},
            {"required": ["rustup_init"], "not": {"required": ["toolchain"]}},
        )),
    ),
    "components.vllm-rs.rustup_init": section(
        Key("url", "string", "yes", "Where rustup-init is downloaded from (plain http(s)).",
            schema=_URL),
        Key("sha256", "string", "yes", "Its sha256, 64 lowercase hex; the download is refused "
            "unless it matches.", schema={"pattern": pattern(SHA256_RE)}),
    ),
    "components.mooncake": section(
        Key("enabled", "boolean", "no", "Install it.", default=False),
        Key("package", "string", "no", "The project name of the wheel. It must not also be under "
            "`packages` or `requirements`.", default="mooncake-transfer-engine-musa",
            schema=_PROJECT),
        Key("version", "string", "when enabled", "The exact version, as for "
            "`packages.<name>.version`.", schema=_PINNED_VERSION),
        Key("index", "string", "when enabled", "One of the `indexes` names."),
        Key("wheel", "string", "no", "The wheel kind, as for `packages.<name>.wheel`.",
            default="native", schema=_WHEEL),
        rules=when("enabled", True, {"required": ["version", "index"]}),
    ),
    "mirrors": section(
        Key("deadsnakes", "string", "no", "The Deadsnakes archive.",
            note="`python_install.mirror`", schema=_URL),
        Key("apt", "string", "no", "The distribution's apt archive.",
            note="the base image's sources", schema=_URL),
        Key("sdk-apt", "string", "no", "The vendor SDK apt repository.", note="`sdk_apt.url`",
            schema=_URL),
        Key("rustup", "string", "no", "`RUSTUP_DIST_SERVER`.", note="upstream", schema=_URL),
        Key("rustup-update-root", "string", "no", "`RUSTUP_UPDATE_ROOT`.", note="upstream",
            schema=_URL),
        Key("cargo", "string", "no", "A sparse cargo registry replacing crates.io.",
            note="crates.io", schema=_URL),
        Key("proxy", "string", "no", "The one HTTP proxy the build's `RUN` steps use, on purpose; "
            "also the host's own proxy for a build when neither `--proxy` nor "
            '`HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` names one (README, "Behind a proxy").',
            note="no proxy", schema=_URL),
        Key("indexes", "mapping of strings", "no", "`mirrors.indexes.<name>`: a URL per Python "
            "index, like `--index NAME=URL` (which wins). `<name>` must be one of the `indexes`.",
            default={}, items=_URL),
    ),
    "serving": section(
        Key("model", "mapping", "yes", "The model: `path`, `mount`, `name`."),
        Key("launch", "mapping", "no", "How the server container runs, the same for both sides of "
            "an A/B.", default={}),
        Key("health", "mapping", "no", "How long the server may take to come up.", default={}),
        Key("check", "mapping", "no", "What `serve-check` asks of the server.", default={}),
        Key("preflight", "mapping", "no", "What the A/B checks before any server starts, beyond "
            "the pinned control and the devices no other container holds.", default={}),
        Key("ab", "mapping", "no", "The A/B contract: the workload, the order of the server "
            "lifetimes, the thresholds.", default={}),
    ),
    "serving.model": section(
        Key("path", "string", "yes", "The model's directory on the Docker host, mounted "
            "read-only. Relative: under the repository around the file (the demo's); "
            "`--model-path PATH` replaces it.",
            schema={"pattern": "^[^:,]+$", "allOf": [{"pattern": "\\S"}]}),
        Key("mount", "string", "no (yes for a relative path)", "Where the model is in the "
            "container (`vllm serve`'s model argument).", note="`model.path`",
            schema=_CONTAINER_PATH),
        Key("name", "string", "yes", "`--served-model-name`, and the `model` of every request.",
            schema={"pattern": pattern(MODEL_NAME_RE)}),
        rules={  # a relative path (the demo's) stays under the repository
            "if": {"properties": {"path": {"pattern": "^[^/]"}}, "required": ["path"]},
            "then": {"required": ["mount"], "properties": {"path": _NO_DOTDOT}},
        },
    ),
    "serving.launch": section(
        Key("args", "list of strings", "no", "More `vllm serve` arguments (`--max-model-len`, "
            "`--tensor-parallel-size`, ...). `--host`, `--port` and `--served-model-name` are the "
            "tool's.", default=[]),
        Key("port", "integer", "no", "The server's port in the container (on the host with "
            "`network: host`).", default=8000, schema={"minimum": 1, "maximum": 65535}),
        Key("env", "mapping of strings", "no", "The environment of both sides, e.g. "
            '`{VLLM_USE_RUST_FRONTEND: "0", MTHREADS_VISIBLE_DEVICES: "0"}`.', default={},
            names={"pattern": pattern(LAUNCH_ENV_RE)}),
        Key("runtime", "string", "no", "The container runtime (`mthreads` on MUSA hosts).",
            note="the daemon's", schema={"pattern": pattern(RUNTIME_RE)}),
        Key("devices", "list of strings", "no", "Host device paths passed as `--device` "
            "(`/dev/mtgpu.0`, ...). The preflight refuses a device another container holds.",
            default=[], items=_CONTAINER_PATH),
        Key("ipc", "string", "no", "`host` for `--ipc=host`, as vLLM's tensor-parallel workers "
            "want.", default="private", schema={"enum": list(IPC_MODES)}),
        Key("network", "string", "no", "`bridge` publishes the port (on 127.0.0.1 for a local "
            "daemon, on every interface of a remote one); `host` uses the host's network.",
            default="bridge", schema={"enum": list(NETWORKS)}),
        Key("shm_size", "string", "no", "`--shm-size`, e.g. `16g`.", note="the daemon's",
            schema={"pattern": pattern(SIZE_RE).replace("[bkmg]", "[bkmgBKMG]")}),
    ),
    "serving.health": section(
        Key("deadline", "number", "no", "Seconds until `/health` answers 200 and `/v1/models` "
            "lists the model; else the check fails with the log tail.", default=900,
            schema={"minimum": 1}),
    ),
    "serving.check": section(
        Key("requests", "list of mappings", "no", "The semantic requests, sent streaming and "
            "greedy, each as below.", default=[]),
        Key("log_patterns", "list of strings", "no", "Regular expressions the server's log must "
            "match (e.g. the attention backend `FLASH_ATTN` and the compilation mode "
            "`FULL_AND_PIECEWISE`).", default=[]),
    ),
    "serving.check.requests.<n>": section(
        Key("name", "string", "yes", "Names the request in messages and the bundle; unique."),
        Key("chat", "string", "one of the two", "A user message, sent to `/v1/chat/completions`."),
        Key("prompt", "string", "one of the two", "A prompt, sent to `/v1/completions`."),
        Key("max_tokens", "integer", "no", "The most tokens of the answer.", default=64,
            schema={"minimum": 1}),
        Key("contains", "string", "no", "A substring the answer must contain, e.g. `Beijing`."),
        Key("finish_reason", "string", "no", "The `finish_reason` the answer must end with, e.g. "
            "`stop`."),
        rules=one_of("chat", "prompt"),
    ),
    "serving.preflight": section(
        Key("probe", "mapping", "no", "A device probe (`mthreads-gmi`), run in a container of the "
            "candidate with the devices and the host's PID namespace.", note="none"),
    ),
    "serving.preflight.probe": section(
        Key("command", "list of strings", "yes", "The probe's command line. It must exit 0.",
            schema={"minItems": 1}),
        Key("busy", "string", "yes", "A regular expression: a line of the probe's output that "
            "matches it is a foreign process on the device, and the A/B does not start."),
    ),
    "serving.ab": section(
        Key("input_len", "integer", "no", "Prompt tokens of each request: random token ids, the "
            "same prompts for both images.", default=512, schema={"minimum": 1}),
        Key("output_len", "integer", "no", "Output tokens of each request (`ignore_eos`: exactly "
            "that many).", default=128, schema={"minimum": 2}),
        Key("concurrency", "list of integers", "no", "The concurrency levels: requests in flight "
            "at a time.", default=[1, 4, 16, 64], schema={"minItems": 1, "uniqueItems": True},
            items={"minimum": 1, "maximum": 4096}),
        Key("warmups", "integer", "no", "Warmup runs per lifetime and level, not measured.",
            default=2, schema={"minimum": 0}),
        Key("runs", "integer", "no", "Measured runs per lifetime and level.", default=3,
            schema={"minimum": 1}),
        Key("requests_per_run", "integer", "no", "Requests per run.", default=64,
            schema={"minimum": 1}),
        Key("order", "list of strings", "no", "The server lifetimes in order; A is the control, B "
            "the candidate. `[A1, B1, B2, A2]` adds a reversed pair, pooled with the first.",
            default=["A1", "B1"], schema={"enum": [list(order) for order in AB_ORDERS]},
            items={"enum": list(LIFETIMES)}),
        Key("thresholds", "mapping", "no", "When the candidate is refused, in percent against the "
            "control, at any level.", default={}),
        Key("bootstrap", "mapping", "no", "The bootstrap of each delta's interval.", default={}),
        Key("request_timeout", "number", "no", "Seconds one request may take; a slower one fails "
            "and is counted.", default=600, schema={"minimum": 1}),
    ),
    "serving.ab.thresholds": section(
        Key("throughput_delta", "number", "no", "Refused when the output tok/s delta is below "
            "this.", default=-2.0),
        Key("p99_e2e_delta", "number", "no", "Refused when the p99 E2E latency delta is above "
            "this.", default=5.0),
    ),
    "serving.ab.bootstrap": section(
        Key("resamples", "integer", "no", "Draws (at least 100).", default=2000,
            schema={"minimum": 100}),
        Key("confidence", "number", "no", "The interval's level, in [0.5, 1).", default=0.95,
            schema={"minimum": 0.5, "exclusiveMaximum": 1}),
        Key("seed", "integer", "no", "Seeds the draws and the prompts: the same runs give the "
            "same report.", default=0, schema={"minimum": 0}),
    ),
}
# fmt: on
