"""The apt steps of a render, and the fetched ``.deb`` files that let them run offline.

``apt_plan`` (pure) lists every ``apt-get install`` the Dockerfile runs and which apt sources
each step sees; the template renders its apt lines from it and ``fetch`` downloads the same
steps' closures inside the base image, so the two cannot drift.

A fetch's index is ``<cache>/apt/<key>.json``, ``plan_key`` covering the base image's id and
the steps (not the mirror URLs, which change where files come from, not what they are). apt
downloads with its own signature checks (``signed-by`` the pinned keys, never ``trusted=yes``);
an ``--offline`` build installs the files by path after ``sha256sum -c`` against what apt
verified (a ``deb file:`` repository would need ``trusted=yes``).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import RenderError
from manifest import Manifest

# the apt sources a step sees: the base image's own (0), and
LEVEL_SDK = 1  # + the vendor SDK repository (sdk_apt), when there is one
LEVEL_DEADSNAKES = 2  # + Deadsnakes (python_install.provider: deadsnakes)

# The runtime of every image, as upstream's final image has it: while serving, Triton and
# Inductor compile C against Python.h, and the vllm-musa JIT runs ninja and `$CXX or c++`.
RUNTIME_TOOLCHAIN = ("build-essential", "ninja-build")
# The build stage's toolchain, as upstream's image has it (git: vllm-musa's setup.py applies
# its patch series with `git apply`); build.apt_packages come after it.
BUILD_TOOLCHAIN = ("build-essential", "ccache", "cmake", "git", "ninja-build", "patchelf")

SDK_LIST = "vendor-musa-sdk.list"  # apt-get.sh keeps vendor-*.list as is under a mirror
DEADSNAKES_LIST = "deadsnakes.list"

_DEB_FILE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+~%_-]*\.deb")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_WORD_RE = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space
_URIS_RE = re.compile(r"^'(?P<uri>[^']+)' (?P<file>\S+) (?P<size>\d+)(?: (?P<hash>\S*))?$")


@dataclass(frozen=True, kw_only=True)
class AptStep:
    name: str  # also the name of its file list in the context: apt/<name>.sha256
    what: str  # for messages: "the build stage"
    level: int  # the sources it sees (LEVEL_*)
    packages: tuple[str, ...]

    @property
    def words(self) -> str:
        return " ".join(self.packages)


@dataclass(frozen=True, kw_only=True)
class AptPlan:
    """Every apt install of the render, by stage; None where the stage runs none."""

    sdk: AptStep | None
    python_ca: AptStep | None  # deadsnakes: ca-certificates before its https source
    python: AptStep
    runtime: AptStep  # the python stage, so the final image: what serving compiles and loads
    build: AptStep
    vllm_rs: AptStep | None

    def steps(self) -> tuple[AptStep, ...]:
        stages = (self.sdk, self.python_ca, self.python, self.runtime, self.build, self.vllm_rs)
        return tuple(s for s in stages if s is not None)


def apt_plan(manifest: Manifest) -> AptPlan:
    python = manifest.target.python_str
    deadsnakes = manifest.python_install.provider == "deadsnakes"
    sdk = None
    if manifest.sdk_apt is not None:
        sdk = AptStep(
            name="sdk", what="sdk_apt", level=LEVEL_SDK, packages=manifest.sdk_apt.packages
        )
    top = LEVEL_DEADSNAKES if deadsnakes else LEVEL_SDK
    vllm_rs = None
    rs = manifest.components.vllm_rs
    if rs is not None:
        # on the build stage (its C toolchain); protoc for the server crate's build.rs (the
        # distribution's, signed by its archive, where upstream's install_protoc.sh downloads
        # a release unpinned)
        toolchain = ("rustc", "cargo") if rs.provider == "distro" else ()
        vllm_rs = AptStep(
            name="vllm-rs",
            what="components.vllm-rs",
            level=top,
            packages=("ca-certificates", "protobuf-compiler", *toolchain),
        )
    python_ca = None
    if deadsnakes:  # ca-certificates before its https source
        python_ca = AptStep(
            name="python-ca",
            what="the python stage",
            level=LEVEL_SDK,
            packages=("ca-certificates",),
        )
    return AptPlan(
        sdk=sdk,
        python_ca=python_ca,
        python=AptStep(
            name="python", what="the python stage", level=top, packages=(f"python{python}",)
        ),
        runtime=AptStep(
            name="runtime",
            what="the runtime packages (python stage)",
            level=top,
            packages=(f"python{python}-dev", *RUNTIME_TOOLCHAIN, *manifest.runtime.apt_packages),
        ),
        build=AptStep(
            name="build",
            what="the build stage",
            level=top,
            packages=(*BUILD_TOOLCHAIN, *manifest.build.apt_packages),
        ),
        vllm_rs=vllm_rs,
    )


@dataclass(frozen=True, kw_only=True)
class ArchiveKey:
    """The OpenPGP key an apt source is signed-by: fetched on the host from ``url`` and
    refused unless its primary fingerprint is ``fingerprint``."""

    label: str  # for messages: "the Deadsnakes key"
    keypath: str  # the manifest key of the fingerprint: "sdk_apt.key_fingerprint"
    url: str  # the manifest's key_url, else the Ubuntu keyserver by fingerprint
    fingerprint: str
    file: str  # its name in the build context, under LAYOUT.inputs


@dataclass(frozen=True, kw_only=True)
class AptSource:
    """An extra apt source of the render and the fetch: a ``.list`` line signed-by one key."""

    level: int
    list_name: str  # the file in /etc/apt/sources.list.d/
    url: str  # the mirror when one is set, else the manifest's URL
    suite: str  # "" : the base's VERSION_CODENAME
    component: str
    key: ArchiveKey


def plan_key(plan: AptPlan, sources: tuple[AptSource, ...], base_image_id: str) -> str:
    """The cache key of one fetch: what is installed, on what, from which signed suites."""
    data = {
        "base_image_id": base_image_id,
        "steps": [[s.name, s.level, list(s.packages)] for s in plan.steps()],
        "sources": [
            [s.level, s.suite, s.component, s.key.fingerprint]
            for s in sorted(sources, key=lambda x: x.level)
        ],
        "v": 1,
    }
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def index_path(cache_root: Path, key: str) -> Path:
    return cache_root / "apt" / f"{key}.json"


@dataclass(frozen=True, kw_only=True)
class DebFile:
    file: str  # the archive file name apt gave it
    sha256: str
    uri: str


def render_fetch_plan(plan: AptPlan, sources: tuple[AptSource, ...]) -> str:
    """The plan file ``in_image/apt-fetch.sh`` reads: ``source LEVEL LIST_NAME KEY_FILE URL
    SUITE COMPONENT`` (SUITE ``-``: the codename) and ``step NAME LEVEL PACKAGE...`` lines."""
    lines = [
        _words(
            "source",
            str(s.level),
            s.list_name,
            key_file_name(s),
            s.url,
            s.suite or "-",
            s.component,
        )
        for s in sorted(sources, key=lambda x: x.level)
    ]
    lines += [_words("step", s.name, str(s.level), *s.packages) for s in plan.steps()]
    return "\n".join(lines) + "\n"


def _words(*words: str) -> str:
    """One line of the plan; the container splits it on whitespace, so each value is a word."""
    for word in words:
        if not _WORD_RE.fullmatch(word):
            raise RenderError(
                f"the apt fetch plan: {word[:60]!r} (in a {words[0]} line) is not one word",
                hint="an apt package, suite, component or URL of the manifest holds a space "
                "or a line break; remove it",
            )
    return " ".join(words)


def key_file_name(source: AptSource) -> str:
    return f"{source.list_name.removesuffix('.list')}.asc"


def parse_print_uris(text: str, *, step: str) -> list[tuple[str, str, int, str]]:
    """``apt-get --print-uris`` output -> [(uri, file, size, "sha256:hex" / "sha512:hex" / "")].

    "" where apt prints no such hash (apt 2.6 prints ``MD5Sum:`` or nothing; MD5 is never
    trusted): apt itself refuses a download that differs from the signed index, and the size
    is checked here in any case.
    """
    out: list[tuple[str, str, int, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        m = _URIS_RE.match(line)
        if not m:
            raise ValueError(f"step {step}: unexpected apt-get --print-uris line: {line!r}")
        algo, _, digest = (m.group("hash") or "").partition(":")
        algo = algo.lower()
        hashspec = ""
        if algo in ("sha256", "sha512") and re.fullmatch(r"[0-9a-f]+", digest):
            hashspec = f"{algo}:{digest}"
        if not _DEB_FILE_RE.fullmatch(m.group("file")):
            raise ValueError(f"step {step}: {m.group('file')!r} is not a .deb file name")
        out.append((m.group("uri"), m.group("file"), int(m.group("size")), hashspec))
    return out


def index_data(
    base_image: str, base_image_id: str, steps: dict[str, list[DebFile]]
) -> dict[str, Any]:
    return {
        "base_image": base_image,
        "base_image_id": base_image_id,
        "steps": {
            name: [{"file": d.file, "sha256": d.sha256, "uri": d.uri} for d in files]
            for name, files in sorted(steps.items())
        },
    }


def parse_index(data: Any) -> dict[str, list[DebFile]]:
    """The steps of a fetch index; ValueError unless every name is a .deb file name and every
    hash a sha256 (the names become paths in the build context, the hashes cache paths)."""
    try:
        raw = data["steps"]
        steps: dict[str, list[DebFile]] = {}
        for name, files in raw.items():
            out: list[DebFile] = []
            for f in files:
                file, sha, uri = f["file"], f["sha256"], f["uri"]
                if not (isinstance(file, str) and _DEB_FILE_RE.fullmatch(file)):
                    raise ValueError(f"apt index: {file!r} is not a .deb file name")
                if not (isinstance(sha, str) and _SHA256_RE.fullmatch(sha)):
                    raise ValueError(f"apt index: {sha!r} is not a sha256")
                out.append(DebFile(file=file, sha256=sha, uri=str(uri)))
            steps[str(name)] = out
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"apt index: not an index ({exc!r})") from None
    return steps


def sha256sum_lines(files: list[DebFile]) -> str:
    """A step's list in the context: ``sha256sum -c`` input, relative to apt/debs/."""
    return "".join(f"{d.sha256}  {d.file}\n" for d in files)
