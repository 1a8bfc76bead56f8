"""Generate a realistic two-index world: a public index with a dependency graph of many projects,
several versions each, and a vendor index with pinned native wheels carrying local labels.

Deterministic for a seed. Used by the uv comparison test and the closure benchmarks.

Shape (close to the real vLLM 0.28.0 closure of ~200 distributions):
- mostly pure wheels, some native cp3XX manylinux wheels next to wheels for other Pythons and
  platforms (macOS, Windows, musllinux, cp310/cp313) that must be refused;
- lower-bound and occasional upper-bound specifiers, markers that exclude a dependency on the
  target (``sys_platform == "win32"``, ``python_version < "3.10"``), extras;
- older versions with ``Requires-Python`` that excludes the target;
- PEP 658 metadata files on the public index, none on the vendor index (which has no hashes).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from testbed.distributions import WheelSpec, build_wheel
from testbed.manifests import stack_text
from testbed.simple_index import Listing, write_simple_index

OTHER_TAGS = (
    "cp312-cp312-macosx_11_0_arm64",
    "cp312-cp312-win_amd64",
    "cp312-cp312-musllinux_1_2_x86_64",
    "cp310-cp310-manylinux_2_17_x86_64.manylinux2014_x86_64",
    "cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64",
)


@dataclass
class World:
    public_root: Path
    vendor_root: Path
    roots: list[str]  # requirement strings for `requirements`
    pins: dict[str, str]  # vendor name -> full version
    projects: int
    files: int
    public_wheels: list[Path] = field(default_factory=list)
    vendor_wheels: list[Path] = field(default_factory=list)

    def manifest(self, vendor_url: str, public_url: str, *, python: str = "3.12") -> str:
        return stack_text(
            name="generated",
            release="0.0.0",
            target={"python": python, "arch": "x86_64", "glibc": "2.35"},
            indexes={"mthreads": {"url": vendor_url}, "pypi": {"url": public_url}},
            packages={
                n: {"version": v, "index": "mthreads", "wheel": "native"}
                for n, v in sorted(self.pins.items())
            },
            requirements=list(self.roots),
        )

    def uv_pyproject(self, vendor_url: str, public_url: str) -> str:
        deps = [f"{n}=={v}" for n, v in sorted(self.pins.items())] + self.roots
        sources = "".join(f'{n} = {{ index = "mthreads" }}\n' for n in sorted(self.pins))
        dep_lines = "".join(f"    {d!r},\n" for d in deps).replace("'", '"')
        return (
            '[project]\nname = "generated-stack"\nversion = "0"\nrequires-python = ">=3.12"\n'
            f"dependencies = [\n{dep_lines}]\n\n"
            f"[tool.uv.sources]\n{sources}\n"
            f'[[tool.uv.index]]\nname = "mthreads"\nurl = "{vendor_url}"\nexplicit = true\n\n'
            f'[[tool.uv.index]]\nname = "pypi"\nurl = "{public_url}"\ndefault = true\n'
        )


# the vendor stack: torch-like pins with local labels, depending on public projects
PINS = {
    "vtorch": "2.11.0.post2+musa5.2.0",
    "vtorch-musa": "2.11.0.post2+musa5.2.0",
    "vtriton": "3.2.0",
}


def project_name(i: int) -> str:
    """The name of the ``i``-th generated project (``abab-000``, ``corab-001``, ...)."""
    syllables = ["ab", "cor", "dex", "fen", "gal", "hut", "ion", "jor", "kel", "lum", "mox", "nar"]
    return f"{syllables[i % 12]}{syllables[(i // 12) % 12]}-{i:03d}"


def generate(
    out: Path,
    *,
    projects: int = 200,
    seed: int = 7,
    python: str = "3.12",
    upper_bounds: bool = True,
    roots: int = 3,
) -> World:
    """Write the two index trees under ``out``.

    ``upper_bounds=False`` leaves one solution (every newest version that fits), so two
    correct resolvers must agree; with upper bounds, backtracking order may pick another
    valid set."""
    rng = random.Random(seed)
    cp = "cp" + python.replace(".", "")
    wheels_dir = out / "wheels"
    names = [project_name(i) for i in range(projects)]
    versions: dict[str, list[str]] = {}
    for n in names:
        count = rng.randint(2, 6)
        major = rng.randint(0, 4)
        versions[n] = [f"{major}.{minor}.{rng.randint(0, 3)}" for minor in range(count)]
    public_wheels: list[Path] = []
    public_listings: list[Listing] = []
    for i, n in enumerate(names):
        native = rng.random() < 0.2
        tags = f"{cp}-{cp}-manylinux_2_17_x86_64.manylinux2014_x86_64" if native else "py3-none-any"
        for vi, v in enumerate(versions[n]):
            deps = _dependencies(rng, names, versions, i, upper_bounds=upper_bounds)
            requires_python = ">=3.8"
            if vi == len(versions[n]) - 1 and rng.random() < 0.1:
                requires_python = ">=3.13"  # the newest version dropped the target
            wspec = WheelSpec(
                name=n,
                version=v,
                tags=tags,
                requires_dist=tuple(deps),
                requires_python=requires_python,
            )
            w = build_wheel(wspec, wheels_dir)
            public_wheels.append(w)
            public_listings.append(Listing(path=w, metadata=True, requires_python=requires_python))
            if native:
                public_listings.extend(_other_platforms(n, v, deps, wheels_dir))
    vendor_wheels = _vendor_wheels(names, versions, cp, wheels_dir)
    write_simple_index(out / "public", public_listings)
    write_simple_index(out / "vendor", [Listing(path=w, hash="none") for w in vendor_wheels])
    root_reqs = [f"{names[0]}", f"{names[1]}[fast]>={versions[names[1]][0]}"]
    root_reqs += [names[i] for i in range(2, max(3, roots))]
    return World(
        public_root=out / "public",
        vendor_root=out / "vendor",
        roots=root_reqs,
        pins=dict(PINS),
        projects=projects + len(PINS),
        files=len(public_listings) + len(vendor_wheels),
        public_wheels=public_wheels,
        vendor_wheels=vendor_wheels,
    )


def _dependencies(
    rng: random.Random,
    names: list[str],
    versions: dict[str, list[str]],
    i: int,
    *,
    upper_bounds: bool,
) -> list[str]:
    """The Requires-Dist of one version of project ``i``: a few later projects (a DAG), mostly
    lower bounds, and some behind markers that exclude them on the target or need an extra."""
    projects = len(names)
    deps: list[str] = []
    for j in sorted(rng.sample(range(i + 1, projects), k=min(projects - i - 1, rng.randint(0, 3)))):
        dn = names[j]
        lo = rng.choice(versions[dn][: max(1, len(versions[dn]) - 1)])
        spec = f">={lo}"
        if upper_bounds and rng.random() < 0.1 and len(versions[dn]) > 2:
            spec += f",<{versions[dn][-1]}"
        deps.append(f"{dn}{spec}")
    for chance, marker in _MARKED:
        if rng.random() < chance and i + 1 < projects:
            deps.append(f"{names[rng.randrange(i + 1, projects)]}; {marker}")
    return deps


# dependencies behind a marker: (how often, the marker)
_MARKED = (
    (0.3, "sys_platform == 'win32'"),
    (0.2, "python_version < '3.10'"),
    (0.15, "extra == 'fast'"),
)


def _other_platforms(name: str, version: str, deps: list[str], wheels_dir: Path) -> list[Listing]:
    """The wheels of a native project's version for other Pythons and platforms, all refused on
    the target."""
    listings: list[Listing] = []
    for other in OTHER_TAGS:
        ow = build_wheel(
            WheelSpec(name=name, version=version, tags=other, requires_dist=tuple(deps)),
            wheels_dir,
        )
        listings.append(Listing(path=ow, metadata=True))
    return listings


def _vendor_wheels(
    names: list[str], versions: dict[str, list[str]], cp: str, wheels_dir: Path
) -> list[Path]:
    """The vendor's wheels of ``PINS``: each local version, and a second local label of it."""
    wheels: list[Path] = []
    for k, (n, v) in enumerate(PINS.items()):
        deps = [f"{names[k * 7 + 1]}>={versions[names[k * 7 + 1]][0]}"]
        if n == "vtorch-musa":
            deps.append("vtorch==2.11.0.post2")
        for ver in (v, v + "s5000") if "+" in v else (v,):
            w = build_wheel(
                WheelSpec(
                    name=n, version=ver, tags=f"{cp}-{cp}-linux_x86_64", requires_dist=tuple(deps)
                ),
                wheels_dir,
            )
            wheels.append(w)
    return wheels
