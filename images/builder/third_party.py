"""The driven sources of a staged context: checked before any build, recorded for the gates.

For every source that drives others (``third_party``):

- its ``third_party/PINS`` must name the ``rev`` of each source staged into it, and an sdist
  must be the commit its ``rev`` says;
- each driven tree is recorded for the image (``IMAGE_THIRD_PARTY``): its packages' files with
  their sha256 as staged, the files the patch series touches or the build writes (exempt), and
  the series; the ``third-party`` gate compares the installed tree with it;
- a tree at ``third_party/flashinfer`` is upstream's FlashInfer checkout: its
  ``flashinfer/mamba`` is overlaid into the installed ``flashinfer`` by the final stage
  (``in_image/flashinfer_overlay.py``), as SKIP_THIRD_PARTY=1 turns off upstream's overlay.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import SourceError
from core.file_store import sha256_of
from manifest import PINS_FILE, Manifest, Source
from sources.patches import series_touched
from sources.third_party_pins import check_pins, check_sdist_commit, parse_pins
from sources.trees import read_tree_file

WORKSPACE = "/vllm-workspace"  # upstream's: the driving source's tree, built in place
THIRD_PARTY_RECORD = "third-party.json"  # under the context's tools/
IMAGE_THIRD_PARTY = "/opt/vllm-musa/third-party.json"
# files the build writes into a driven tree (setuptools-scm's version file), per package
GENERATED = ("_version.py",)
MAX_PATCHES = 1000
# upstream's FlashInfer checkout (setup.py's _FLASHINFER_REPO.source_dir, third_party/flashinfer)
FLASHINFER_DIR = "flashinfer"
FLASHINFER_PACKAGE = "flashinfer"
PROVIDER_MARKER = "mamba/MUSA_PROVIDER_COMMIT"  # under the installed package
OVERLAY_SCRIPT = "flashinfer_overlay.py"  # in_image/, copied to the context's tools/


@dataclass(frozen=True, kw_only=True)
class ProviderOverlay:
    """FlashInfer's pure-Python provider, overlaid from the staged checkout into the installed
    ``flashinfer``."""

    source: str  # the driven source staged at third_party/flashinfer
    dir: str  # in the image: /vllm-workspace/third_party/flashinfer
    pin: str  # the PINS key: FLASHINFER_COMMIT
    commit: str  # its value, the source's rev (checked against PINS before any build)
    package: str = FLASHINFER_PACKAGE
    marker: str = PROVIDER_MARKER


def provider_overlay(manifest: Manifest) -> ProviderOverlay | None:
    """The FlashInfer overlay of the driving source; None without ``third_party/flashinfer``."""
    for driver in manifest.sources:
        for t in driver.third_party:
            if t.dir != FLASHINFER_DIR:
                continue
            driven = manifest.source(t.source)
            assert driven is not None
            assert driven.rev is not None
            return ProviderOverlay(
                source=driven.name,
                dir=f"{WORKSPACE}/third_party/{t.dir}",
                pin=t.pin,
                commit=driven.rev,
            )
    return None


@dataclass(frozen=True, kw_only=True)
class DrivenTree:
    source: str  # the driven source's key, also its distribution
    dir: str  # in the image: /vllm-workspace/third_party/vllm
    packages: tuple[str, ...]  # top-level import packages of the tree
    files: Mapping[str, str]  # path under the tree -> sha256, as staged
    exempt: tuple[str, ...]  # touched by the series, or written by the build
    series: tuple[str, ...]  # the patch files, in order
    pins: tuple[str, ...]  # the PINS lines checked


def _packages(tree: Path, source: Source) -> tuple[str, ...]:
    """The top-level packages of a driven tree: its egg-info's top_level.txt, else the name."""
    for info in sorted(tree.glob("*.egg-info")):
        text = read_tree_file(info, "top_level.txt")
        if text:
            return tuple(sorted({line.strip() for line in text.splitlines() if line.strip()}))
    project = source.sdist.project if source.sdist else source.name
    return (project.replace("-", "_"),)


def _series(driver_tree: Path, patches_dir: str | None, where: str) -> tuple[list[str], set[str]]:
    if patches_dir is None:
        return [], set()
    directory = driver_tree / patches_dir
    if not directory.is_dir():
        raise SourceError(
            f"{where}.patches: {patches_dir} is not a directory of the staged tree",
            hint="name the directory of the patch series, e.g. vllm_musa/patches/series",
        )
    names = sorted(p.name for p in directory.glob("*.patch"))[: MAX_PATCHES + 1]
    if len(names) > MAX_PATCHES:
        raise SourceError(f"{where}.patches: more than {MAX_PATCHES} patches")
    texts = [read_tree_file(directory, n, limit=8 << 20) or "" for n in names]
    return names, series_touched(texts)


def check_and_record(manifest: Manifest, sources_dir: Path) -> list[DrivenTree]:
    """Check every driver's PINS and every driven sdist's commit (``SourceError``); describe
    the driven trees."""
    out: list[DrivenTree] = []
    for driver in manifest.sources:
        if not driver.third_party:
            continue
        tree = sources_dir / driver.name
        where = f"sources.{driver.name}"
        text = read_tree_file(tree, PINS_FILE)
        if text is None:
            raise SourceError(
                f"{where}: {PINS_FILE} is not in the tree, so the revisions of "
                f"{', '.join(t.dir for t in driver.third_party)} cannot be checked",
                hint=f"build a revision of {driver.name} that has {PINS_FILE}, or drop "
                f"{where}.third_party",
            )
        pins = check_pins(manifest, driver, parse_pins(text, where=f"{where}: {PINS_FILE}"))
        for t in driver.third_party:
            driven = manifest.source(t.source)
            assert driven is not None
            provider = tree / "third_party" / t.dir / FLASHINFER_PACKAGE / "mamba"
            if t.dir == FLASHINFER_DIR and not provider.is_dir():
                raise SourceError(
                    f"{where}.third_party.{t.dir}: sources.{t.source} as staged has no "
                    f"{FLASHINFER_PACKAGE}/mamba/, the provider upstream's setup.py overlays "
                    "into the installed flashinfer",
                    hint=f"pin a FlashInfer revision with flashinfer/mamba ({t.pin} in "
                    f"{PINS_FILE})",
                )
            if not t.installed:  # only some of its files are compiled into the driver
                continue
            driven_tree = tree / "third_party" / t.dir
            packages = _packages(driven_tree, driven)
            if driven.sdist is not None:
                check_sdist_commit(driven, read_tree_file(driven_tree / packages[0], "_version.py"))
            names, touched = _series(tree, t.patches, f"{where}.third_party.{t.dir}")
            files = {
                str(p.relative_to(driven_tree)): sha256_of(p)
                for pkg in packages
                for p in sorted((driven_tree / pkg).rglob("*"))
                if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts
            }
            generated = {f"{pkg}/{g}" for pkg in packages for g in GENERATED}
            out.append(
                DrivenTree(
                    source=driven.name,
                    dir=f"{WORKSPACE}/third_party/{t.dir}",
                    packages=packages,
                    files=files,
                    exempt=tuple(sorted(touched | (generated & set(files)))),
                    series=tuple(names),
                    pins=tuple(p for p in pins if p.startswith(f"{t.pin}=")),
                )
            )
    return out


def record_json(trees: Sequence[DrivenTree], overlay: ProviderOverlay | None = None) -> str:
    """The record the image keeps at IMAGE_THIRD_PARTY (stable bytes)."""
    data: dict[str, object] = {"trees": [dataclasses.asdict(t) for t in trees]}
    if overlay is not None:
        pin = f"{overlay.pin}={overlay.commit}"
        data["overlays"] = [dataclasses.asdict(overlay) | {"pin": pin}]
    return json.dumps(data, sort_keys=True, indent=1) + "\n"
