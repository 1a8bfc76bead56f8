"""Helpers for lock tests: real wheels, two real index servers, a stack file, the CLI in-process.

The ``case`` fixture (tests/conftest.py) opens a ``Case`` in ``tmp_path``.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from build_image import main
from testbed.distributions import WheelSpec, build_wheel
from testbed.index_server import IndexServer
from testbed.simple_index import Listing

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

NATIVE = "cp312-cp312-linux_x86_64"
TORCH = "2.11.0.post2+musa5.2.0"
PIN_TORCH = f'  torch: {{version: "{TORCH}", index: mthreads, wheel: native}}'


def read_toml(text: str) -> dict[str, Any]:
    """TOML text (a written lock, pyproject.toml) as plain data."""
    data: dict[str, Any] = tomllib.loads(text)
    return data


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Case:
    """A temporary world: a vendor index, a public index, a cache, a stack directory."""

    tmp: Path
    vendor: IndexServer
    pypi: IndexServer
    wheels: Path = field(init=False)

    def __post_init__(self) -> None:
        self.wheels = self.tmp / "wheels"

    @property
    def cache(self) -> Path:
        return self.tmp / "cache"

    def wheel(self, name: str, version: str, tags: str = "py3-none-any", **kw: object) -> Path:
        return build_wheel(WheelSpec(name=name, version=version, tags=tags, **kw), self.wheels)  # type: ignore[arg-type]

    def publish(self, server: IndexServer, *items: Path | Listing, json: bool = False) -> None:
        server.add(*items, json=json)

    def stack(
        self,
        packages: str = "",
        requirements: Sequence[str] = (),
        rules: str = "",
        *,
        python: str = "3.12",
        name: str = "t",
        extra: str = "",
    ) -> Path:
        reqs = "".join(f"  - {r!r}\n" for r in requirements) if requirements else " []\n"
        # written out line by line: tests edit this text and assert the line numbers in messages
        text = (
            "schema: 1\n"
            f"name: {name}\n"
            'release: "0.28.0"\n'
            f'target: {{python: "{python}", arch: x86_64, glibc: "2.35"}}\n'
            "indexes:\n"
            f'  mthreads: {{url: "{self.vendor.simple_url}"}}\n'
            f'  pypi: {{url: "{self.pypi.simple_url}"}}\n'
            "default_index: pypi\n"
            "packages:"
            + (("\n" + packages.rstrip() + "\n") if packages else " {}\n")
            + "requirements:"
            + ("\n" + reqs if requirements else reqs)
            + (("rules:\n" + rules.rstrip() + "\n") if rules else "")
            + extra
        )
        path = self.tmp / "stack" / f"{name}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run(self, *argv: str | Path) -> Result:
        out, err = io.StringIO(), io.StringIO()
        args = [str(a) for a in argv]
        if args and args[0] in ("lock", "explain") and "--cache-dir" not in args:
            args += ["--cache-dir", str(self.cache)]
        code = main(args, out=out, err=err)
        return Result(code, out.getvalue(), err.getvalue())

    def lock_dir(self, name: str = "t") -> Path:
        return self.tmp / "stack" / f"{name}.lock"


def open_case(tmp: Path) -> Iterator[Case]:
    with ExitStack() as stack:
        vendor = stack.enter_context(IndexServer(tmp / "vendor-index"))
        pypi = stack.enter_context(IndexServer(tmp / "pypi-index"))
        yield Case(tmp, vendor, pypi)


def refused(case: Case, stack: Path, *extra: str) -> str:
    """Run lock, expect exit 1 with nothing written, return stderr."""
    result = case.run("lock", stack, "--retries", "0", *extra)
    assert result.code == 1, result.err
    assert not case.lock_dir().exists()
    assert not any(p.name.startswith(".t.lock") for p in case.lock_dir().parent.iterdir())
    return result.err


def numpy_world(case: Case) -> dict[str, Path]:
    """The vendor torch, numpy 1.26.4 and filelock published on real indexes, and numpy
    1.26.5 built but not yet published (a test publishes it to move numpy on)."""
    wheels = {
        "torch": case.wheel("torch", TORCH, NATIVE),
        "numpy-1.26.4": case.wheel("numpy", "1.26.4", NATIVE),
        "numpy-1.26.5": case.wheel("numpy", "1.26.5", NATIVE),
        "filelock": case.wheel("filelock", "3.17.0"),
    }
    case.publish(case.vendor, Listing(path=wheels["torch"], hash="none"))
    case.publish(case.pypi, wheels["numpy-1.26.4"], wheels["filelock"])
    return wheels
