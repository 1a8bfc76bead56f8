"""What a workspace install added, carried from the build stage to the final image.

Standalone: standard library only, any CPython >= 3.8. The build stage runs it around the
driving source's ``pip install -e .`` (upstream's install in /vllm-workspace), and the python
stage, before anything is pip-installed, records the base image's own distributions:

    python3.X installed.py snapshot BEFORE.json
    python3.X installed.py pack --since BEFORE.json --out INSTALLED.tar --list INSTALLED.json
    python3.X installed.py base /opt/vllm-musa/base-distributions.json

``pack`` archives the files the RECORD of every distribution new or changed since the snapshot
lists (dist-info, ``.pth`` and finder modules of editable installs, console scripts), by
absolute path, with fixed owners and times: the final stage unpacks it at ``/``, and copies
the tree the editable installs point at (/vllm-workspace) as is.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import sys
import tarfile
from importlib import metadata
from pathlib import Path


def _dists() -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for dist in metadata.distributions():
        path = getattr(dist, "_path", None)
        out[str(path)] = {"name": dist.metadata["Name"], "version": dist.version}
    return out


def _record_files(info: Path) -> list[Path]:
    record = info / "RECORD"
    files = []
    with record.open(encoding="utf-8", newline="") as fh:
        for row in csv.reader(fh):
            if not row or not row[0]:
                continue
            path = Path(os.path.normpath(info.parent / row[0]))
            if path.is_file() or path.is_symlink():
                files.append(path)
    return files


def base_distributions() -> list[dict[str, str]]:
    """Every distribution the interpreter sees, as {name, version, location}: location is the
    site directory that holds its metadata (``/usr/lib/python3/dist-packages``)."""
    out = []
    for dist in metadata.distributions():
        path = getattr(dist, "_path", None)
        location = str(Path(str(path)).parent) if path is not None else ""
        out.append(
            {"name": str(dist.metadata["Name"]), "version": dist.version, "location": location}
        )
    return sorted(out, key=lambda d: (d["name"].lower(), d["version"], d["location"]))


def base(out: Path) -> int:
    dists = base_distributions()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(dists, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for d in dists:
        sys.stdout.write(f"from the base image: {d['name']} {d['version']} ({d['location']})\n")
    if not dists:
        sys.stdout.write("from the base image: no Python distribution\n")
    return 0


def snapshot(out: Path) -> int:
    out.write_text(json.dumps(_dists(), sort_keys=True), encoding="utf-8")
    return 0


def pack(since: Path, out: Path, listing: Path) -> int:
    before = json.loads(since.read_text(encoding="utf-8"))
    added = {p: d for p, d in _dists().items() if before.get(p) != d}
    if not added:
        sys.stderr.write("error[workspace-install]: the install added no distribution\n")
        return 1
    files: set[Path] = set()
    for info in list(added):
        if not (Path(info) / "RECORD").is_file():
            # metadata lying in a source tree on sys.path (an sdist's egg-info), not an install
            sys.stdout.write(f"not an install (no RECORD), left out: {info}\n")
            del added[info]
            continue
        files.update(_record_files(Path(info)))
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(files):
            ti = tar.gettarinfo(str(path), arcname=str(path).lstrip("/"))
            ti.uid = ti.gid = 0
            ti.uname = ti.gname = "root"
            ti.mtime = 0
            if ti.isfile():
                with path.open("rb") as fh:
                    tar.addfile(ti, io.BytesIO(fh.read()))
            else:
                tar.addfile(ti)
    dists = sorted(added.values(), key=lambda d: d["name"].lower())
    listing.write_text(json.dumps(dists, sort_keys=True) + "\n", encoding="utf-8")
    for d in dists:
        sys.stdout.write(f"installed from the workspace: {d['name']} {d['version']}\n")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="installed.py")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("snapshot", "base"):
        sub.add_parser(command).add_argument("out", type=Path)
    p = sub.add_parser("pack")
    for option in ("--since", "--out", "--list"):
        p.add_argument(option, type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "pack":
        return pack(args.since, args.out, args.list)
    return snapshot(args.out) if args.command == "snapshot" else base(args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
