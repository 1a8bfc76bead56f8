"""The crates of ``components.vllm-rs``, vendored by ``fetch`` for an ``--offline`` build.

``fetch_cargo_vendor`` runs ``cargo vendor --locked`` on the host over vLLM's Cargo workspace,
with a CARGO_HOME of its own in the cache and crates.io replaced by ``mirrors.cargo`` when set.
The vendored tree and cargo's source replacement are packed into a deterministic tarball in
the cache, recorded by the sha256 of Cargo.lock (``--locked``: the vendored set is a function
of it). ``stage_cargo_vendor`` unpacks it into the context's ``crates/``, which the vllm-rs
stage makes its CARGO_HOME configuration: cargo, offline, reads only those crates, each
checked against its ``.cargo-checksum.json`` and Cargo.lock.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from core.errors import FetchError, OfflineMissingError
from core.file_store import FileStore
from core.fsutil import atomic_write_bytes, atomic_write_text
from core.network import NetworkConfig, NetworkOptions, tool_environment
from images.builder.inputs import FETCH_HINT, recorded_file
from manifest import Mirrors

VENDOR_DIR = "vendor"
CONFIG = "config.toml"


def cargo_home_config(mirrors: Mirrors) -> str:
    if not mirrors.cargo:
        return ""
    return (
        '[source.crates-io]\nreplace-with = "mirror"\n\n'
        f"[source.mirror]\nregistry = {json.dumps('sparse+' + mirrors.cargo)}\n"
    )


def cargo_environment(env: Mapping[str, str], network: NetworkConfig) -> dict[str, str]:
    """The environment of ``cargo vendor``: ``env`` without cargo's own settings, with the
    build's host network (its proxy, NO_PROXY and trust store) and no other proxy."""
    out = tool_environment({k: v for k, v in env.items() if not k.startswith("CARGO")}, network)
    if network.trust.cafile is not None:  # cargo's curl reads its CA file from here
        out["CARGO_HTTP_CAINFO"] = str(network.trust.cafile)
    return out


def _pack(vendor: Path, config: str) -> bytes:
    """A tarball of ``vendor/`` and the config, byte-identical run to run."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))

        add("config.toml", config.encode())
        for path in sorted(vendor.rglob("*")):
            if path.is_file():
                add(f"{VENDOR_DIR}/{path.relative_to(vendor).as_posix()}", path.read_bytes())
    return buf.getvalue()


def fetch_cargo_vendor(
    workspace: Path,
    *,
    cache: FileStore,
    options: NetworkOptions,
    stack: str,
    mirrors: Mirrors,
    cargo: str | None = None,
) -> Path | None:
    """The cached vendor tarball of the Cargo workspace ``workspace`` (made now if missing), or
    None when its Cargo.lock has only path crates."""
    lock = workspace / "Cargo.lock"
    try:
        lock_bytes = lock.read_bytes()
    except FileNotFoundError:
        raise FetchError(
            f"components.vllm-rs: vLLM's tree has no {workspace.name}/Cargo.lock; an offline "
            "build vendors the crates it locks",
            hint="stage a vLLM tree with its Cargo.lock (0.28.0 and later have rust/Cargo.lock)",
        ) from None
    lines = lock_bytes.decode("utf-8", "replace").splitlines()
    if not any(line.startswith("source = ") for line in lines):  # only path crates
        return None
    lock_sha = hashlib.sha256(lock_bytes).hexdigest()
    record = cache.root / "cargo" / f"{lock_sha}.json"
    found = recorded_file(cache, record)
    if found is not None:
        return found
    if options.offline:
        raise OfflineMissingError(
            f"offline build: the crates of components.vllm-rs (Cargo.lock sha256 "
            f"{lock_sha[:16]}...) are not vendored",
            hint=FETCH_HINT.format(stack=stack),
        )
    exe = cargo or shutil.which("cargo")
    if exe is None:
        raise FetchError(
            "components.vllm-rs: `cargo vendor` needs cargo on this machine",
            hint="install cargo (rustup, or apt-get install cargo), then fetch again",
        )
    home = cache.root / "cargo-home"
    home.mkdir(parents=True, exist_ok=True)
    atomic_write_text(home / "config.toml", cargo_home_config(mirrors))
    env = cargo_environment(os.environ, options.network)
    env["CARGO_HOME"] = str(home)
    env["CARGO_NET_RETRY"] = str(max(0, options.attempts - 1))
    with tempfile.TemporaryDirectory(prefix="cargo-vendor-") as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(workspace, work, ignore=shutil.ignore_patterns("target", ".git"))
        res = subprocess.run(
            [exe, "vendor", "--locked", "--respect-source-config", VENDOR_DIR],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        if res.returncode != 0:
            where = f"the mirror {mirrors.cargo}" if mirrors.cargo else "crates.io"
            raise FetchError(
                f"components.vllm-rs: cargo vendor from {where} failed:\n{res.stderr[-3000:]}",
                hint="check mirrors.cargo (--mirror cargo=URL), the proxy and Cargo.lock",
            )
        data = _pack(work / VENDOR_DIR, res.stdout)
    sha = hashlib.sha256(data).hexdigest()
    atomic_write_bytes(cache.file_path(sha), data)
    atomic_write_text(
        record, json.dumps({"cargo_lock_sha256": lock_sha, "sha256": sha}, sort_keys=True) + "\n"
    )
    return cache.file_path(sha)


def stage_cargo_vendor(tarball: Path | None, dest: Path, *, mount: str) -> None:
    """Write the context's ``crates/``: ``vendor/`` and ``config.toml`` naming
    ``mount``/vendor (where the build mounts ``dest``); no tarball: an empty ``config.toml``."""
    dest.mkdir(parents=True)
    if tarball is None:
        (dest / CONFIG).write_text("", encoding="utf-8")
        return
    with tarfile.open(tarball) as tar:
        config = tar.extractfile(CONFIG)
        assert config is not None
        text = config.read().decode("utf-8")
        relative = f'directory = "{VENDOR_DIR}"'
        if text.count(relative) != 1:
            raise FetchError(
                f"components.vllm-rs: the vendored crates' configuration has no single "
                f"{relative} line",
                hint="remove the cache's cargo/ records and fetch again",
            )
        absolute = f"directory = {json.dumps(f'{mount}/{VENDOR_DIR}')}"
        (dest / CONFIG).write_text(text.replace(relative, absolute), encoding="utf-8")
        members = [m for m in tar.getmembers() if m.name.startswith(f"{VENDOR_DIR}/")]
        tar.extractall(dest, members=members, filter="data")
