"""``components:``: the optional parts an image builds beside vLLM, each off (``None``) unless
``enabled: true``.

``vllm-rs`` is built from vLLM's own tree, a source of ``sources`` (``tree``), with a Rust
toolchain from rustup (rustup-init pinned by URL and sha256) or from the distribution (checked
against ``toolchain`` when set). ``mooncake`` is a binary wheel pinned like a ``packages`` pin:
an index and an exact version, so it is locked like one.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from manifest.fields import KeyReader
from manifest.key_shapes import NAME_RE, plain_url
from manifest.lock_keys import parse_pin
from manifest.model import (
    MOONCAKE_PACKAGE,
    RUST_PROVIDERS,
    VLLM_RS_TREE,
    Components,
    IndexSpec,
    Mooncake,
    PinnedFile,
    Source,
    VllmRs,
)

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
TOOLCHAIN_RE = re.compile(
    r"^([0-9]+\.[0-9]+(\.[0-9]+)?|stable|beta|nightly(-[0-9]{4}-[0-9]{2}-[0-9]{2})?)$"
)


def parse_components(
    r: KeyReader, value: object, indexes: Mapping[str, IndexSpec], sources: Sequence[Source]
) -> Components:
    m = r.mapping(value, ["components"])
    r.keys(m, ["components"], "components")
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
    r.keys(m, keypath, "components.vllm-rs")
    if not _enabled(r, m, keypath):
        return None
    provider = r.choice(m.get("provider", "rustup"), [*keypath, "provider"], RUST_PROVIDERS)
    toolchain = None
    if "toolchain" in m:
        toolchain = r.matching(
            TOOLCHAIN_RE,
            r.string(m["toolchain"], [*keypath, "toolchain"], example="1.83.0"),
            [*keypath, "toolchain"],
            "a Rust toolchain version like 1.83.0",
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
        r.keys(ri, rk, "components.vllm-rs.rustup_init")
        sha = r.string(ri["sha256"], [*rk, "sha256"])
        if not SHA256_RE.fullmatch(sha):
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
    r.keys(m, keypath, "components.mooncake")
    if not _enabled(r, m, keypath):
        return None
    for key in ("version", "index"):
        if key not in m:
            raise r.error(keypath, f"missing required key {key!r}")
    key = r.string(m.get("package", MOONCAKE_PACKAGE), [*keypath, "package"])
    if not NAME_RE.fullmatch(key.lower()):
        raise r.error([*keypath, "package"], f"{key!r} is not a valid project name")
    pin = parse_pin(r, key, m, keypath, indexes, wheel=m.get("wheel", "native"), deps=True)
    return Mooncake(pin=pin)
