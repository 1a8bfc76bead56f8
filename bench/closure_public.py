"""``bench.closure --public-index URL``: the vLLM 0.28.0 closure shape against a real index.

By hand only, never in CI or tests: every run sends a few hundred requests to the index.

The stack has the vendor pins of ``stack/vllm-musa-0.28.0-py312.yaml`` (torch, torch-musa,
torchvision, torchaudio, triton, ...: small stand-in wheels with the real ones' public
requirements, on a vendor-shaped index served by nginx on 127.0.0.1, no hashes, no metadata
files) and ``ROOTS``, 64 public requirements shaped like vLLM 0.28.0's runtime requirements,
taken from the index at URL. Times, in the same run, interleaved (``--repeat``, default 1):

- ``lock --no-verify`` with an empty cache  vs  ``uv pip compile --generate-hashes --no-cache``
- the same lock again, warm                 vs  uv with a ``--cache-dir`` filled by one run

and checks that both closures are equal, name for name and version for version.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from bench import _common as c
from bench.closure import UV_TARGET, pins_of, scratch_line
from testbed.distributions import WheelSpec, build_wheel
from testbed.manifests import stack_text
from testbed.simple_index import Listing, write_simple_index

TORCH = "2.11.0.post2+musa5.2.0"
NATIVE = "cp312-cp312-linux_x86_64"
TORCH_DEPS = ("filelock", "typing-extensions>=4.10.0", "setuptools", "sympy>=1.13.3",
              "networkx>=2.5.1", "jinja2", "fsspec>=0.8.5")  # fmt: skip
VENDOR = {  # name -> (version, tags, requirements), as the vendor publishes them
    "torch": (TORCH, NATIVE, TORCH_DEPS),
    "torch-musa": (TORCH, NATIVE, ("torch==2.11.0.post2", "packaging")),
    "torchvision": ("0.26.0.post2+musa5.2.0", NATIVE, ("numpy", "torch==2.11.0.post2",
                                                        "pillow>=5.3.0,!=8.3.*")),
    "torchaudio": (TORCH, NATIVE, ("torch==2.11.0.post2",)),
    "triton": ("3.2.0", NATIVE, ()),
    "tilelang-musa": ("0.1.12+musa.2", "cp38-abi3-linux_x86_64", ("numpy", "tqdm", "psutil")),
    "mate": ("0.2.7", "py3-none-any", ("einops",)),
    "deep-gemm": ("0.2.7+musa", "py3-none-any", ()),
    "flashinfer-python": ("0.2.7+musa", "py3-none-any", ("ninja", "numpy", "requests")),
}  # fmt: skip
ROOTS = (
    "regex", "cachetools", "psutil", "sentencepiece", "numpy", "requests>=2.26.0", "tqdm",
    "blake3", "py-cpuinfo", "transformers>=4.56.0", "tokenizers>=0.21.1", "protobuf",
    "fastapi[standard]>=0.115.0", "aiohttp", "openai>=1.99.1", "pydantic>=2.12.0",
    "prometheus-client>=0.18.0", "pillow", "prometheus-fastapi-instrumentator>=7.0.0",
    "tiktoken>=0.6.0", "lm-format-enforcer", "llguidance", "outlines-core", "diskcache",
    "lark", "xgrammar", "typing-extensions>=4.10", "filelock>=3.16.1", "partial-json-parser",
    "pyzmq>=25.0.0", "msgspec", "gguf>=0.17.0", "mistral-common[image]>=1.8.5",
    "opencv-python-headless>=4.11.0", "pyyaml", "six>=1.16.0", "setuptools>=77.0.3",
    "einops", "depyf", "cloudpickle", "watchfiles", "python-json-logger", "scipy", "ninja",
    "pybase64", "cbor2", "setproctitle", "openai-harmony>=0.0.3", "anthropic", "mcp",
    "uvicorn", "httpx", "jinja2", "sympy", "networkx", "fsspec", "safetensors",
    "huggingface-hub", "packaging", "pip", "wheel", "mthreads-ml-py>=2.4.1", "rich",
    "click",
)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    url = args.public_index.rstrip("/") + "/"
    tmp = Path(tempfile.mkdtemp(prefix="bench-public-", dir=c.scratch(args.scratch)))
    try:
        c.compile_tool()
        print(f"revision: {c.revision()}; python {sys.version.split()[0]}; index {url}")
        print(scratch_line(tmp))
        vendor_root = tmp / "vendor-index"
        listings = []
        for name, (version, tags, deps) in VENDOR.items():
            w = build_wheel(
                WheelSpec(name=name, version=version, tags=tags, requires_dist=deps),
                tmp / "wheels",
            )
            listings.append(Listing(path=w, hash="none"))
        write_simple_index(vendor_root / "vendor", listings)
        with c.nginx(vendor_root, tmp / "nginx") as srv:
            return _bench(args, tmp, srv.url("vendor/simple/"), url, srv)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(args: argparse.Namespace, tmp: Path, vendor_url: str, url: str, srv: c.Nginx) -> int:
    stack = tmp / "stack" / "public.yaml"
    stack.parent.mkdir(parents=True)
    stack.write_text(
        stack_text(
            name="public-closure",
            release="0.0.0",
            target={"python": "3.12", "arch": "x86_64", "glibc": "2.35"},
            indexes={"mthreads": {"url": vendor_url}, "pypi": {"url": url}},
            packages={
                n: {"version": v, "index": "mthreads", "wheel": _kind(t)}
                for n, (v, t, _) in VENDOR.items()
            },
            requirements=list(ROOTS),
        )
    )
    project = tmp / "uvproject"
    project.mkdir()
    deps = [f"{n}=={v}" for n, (v, _, _) in VENDOR.items()] + list(ROOTS)
    sources = "".join(f'{n} = {{ index = "mthreads" }}\n' for n in VENDOR)
    lines = "".join(f'    "{d}",\n' for d in deps)
    (project / "pyproject.toml").write_text(
        '[project]\nname = "public-closure"\nversion = "0"\nrequires-python = ">=3.12"\n'
        f"dependencies = [\n{lines}]\n\n[tool.uv.sources]\n{sources}\n"
        f'[[tool.uv.index]]\nname = "mthreads"\nurl = "{vendor_url}"\nexplicit = true\n\n'
        f'[[tool.uv.index]]\nname = "pypi"\nurl = "{url}"\ndefault = true\n'
    )
    env = c.clean_env(XDG_CONFIG_HOME=str(tmp / "xdg"), TMPDIR=str(tmp))
    uv = c.tool("uv")
    rows: dict[str, list[float]] = {k: [] for k in ("ours cold", "uv cold", "ours warm", "uv warm")}
    cpu: dict[str, list[float]] = {k: [] for k in rows}
    ours_pins: dict[str, str] = {}
    uv_pins: dict[str, str] = {}
    for i in range(args.repeat):
        cache, uv_cache = tmp / f"cache{i}", tmp / f"uvcache{i}"
        out = tmp / f"lock{i}"
        argv = [c.PYTHON, c.CLI, "lock", str(stack), "--out", str(out), "--no-verify"]
        argv += ["--cache-dir", str(cache)]
        uv_argv = [uv, "pip", "compile", "pyproject.toml", *UV_TARGET, "--generate-hashes"]
        uv_argv += ["--no-header", "--no-annotate", "--quiet", "-o", str(tmp / f"uv{i}.txt")]
        for key, cmd, kw in (
            ("ours cold", argv, {}),
            ("uv cold", [*uv_argv, "--no-cache"], {"cwd": project}),
            ("ours warm", argv, {}),
            (None, [*uv_argv, "--cache-dir", str(uv_cache)], {"cwd": project}),
            ("uv warm", [*uv_argv, "--cache-dir", str(uv_cache)], {"cwd": project}),
        ):
            r = c.must(c.run(cmd, env=env, **kw), str(key or "uv (filling its cache)"))
            if key is not None:
                rows[key].append(r.seconds)
                cpu[key].append(r.cpu)
        ours_pins = pins_of((out / "constraints.txt").read_text())
        uv_pins = pins_of((tmp / f"uv{i}.txt").read_text())
        done = ", ".join(f"{k} {v[-1]:.2f}s" for k, v in rows.items())
        print(f"  run {i + 1}/{args.repeat}: {done}", flush=True)
    med = {k: c.median(v) for k, v in rows.items()}
    print(f"\npublic index {url}: closure of {len(ours_pins)} distributions (ours), "
          f"{len(uv_pins)} (uv); {len(ROOTS)} public roots + {len(VENDOR)} vendor pins "
          f"(nginx on 127.0.0.1); median of {args.repeat}")  # fmt: skip
    table = [[k, f"{med[k]:.3f} s", f"{min(rows[k]):.3f} s", f"{c.median(cpu[k]):.3f} s"]
             for k in rows]  # fmt: skip
    print(c.table(["run", "median", "min", "CPU (median)"], table))
    equal = c.print_closure_equal(ours_pins, uv_pins)
    print(f"  ours/uv cold: {med['ours cold'] / med['uv cold']:.2f}   goal <= 1.0")
    print(f"  ours/uv warm: {med['ours warm'] / med['uv warm']:.2f}   goal <= 1.5")
    print(f"  vendor index requests (nginx): {len(srv.requests_since(0))}")
    return 0 if equal else 1


def _kind(tags: str) -> str:
    if tags.endswith("none-any"):
        return "pure"
    return "abi3" if "-abi3-" in tags else "native"
