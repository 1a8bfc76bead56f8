"""Image delivery at the real image's scale: build + publish against a multi-GB SDK base.

    .venv/bin/python -m bench.image_delivery [--base-gb 4] [--own-gb 1] [--rebuild-base] [--keep]

A synthetic SDK base (``--base-gb``: three layers of /dev/urandom and one of copied system
libraries, FROM debian:bookworm-slim) is pushed to 127.0.0.1:5000/bench/sdk:5.2 and pinned by
digest; it is kept across runs. The demo stack, its vendor wheels (torch, torch-musa, triton)
made real-sized (``--own-gb`` in all, 3/4 incompressible payload like .so files, 1/4 text), is
built on it in a scratch git clone (``/tmp/bench-delivery/work/repo``: the stage times come from
its commits), then published, in these scenarios:

a. cold: BuildKit cache pruned, empty layer cache and base store, build + publish;
b. plugin-only: one line of demo/vllm-musa committed, rebuild + publish as a new nightly;
c. no-change nightly: an empty commit, rebuild + publish; and the same on a fresh builder
   (``--no-cache`` and no cache mounts: a new CI runner);
d. the normalize step of a cold build on the plain debian base (pinned the same way).

Upstream's path runs in the same scenarios: ``DOCKER_BUILDKIT=1 docker build`` of the context
our build staged (its Dockerfile, with the defaults it declares for its args), then
``docker push``. Bytes a node re-pulls are the new manifest's layer blobs that the previous
one did not list. The results are printed and written to /tmp/bench-delivery/result.json.
Ours goes to bench/vllm-musa-<run>, upstream's to bench/upstream-<run>; without ``--keep`` the
run then removes their tags, its images, the BuildKit cache and its scratch directory.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench._common import PYTHON, ROOT, Run, clean_env, must, run, table
from demo.make_index import FLASHINFER_SRC, FLASHINFER_SRC_FILES, STAND_INS, bootstrap_wheels
from testbed.distributions import WheelSpec, build_sdist, build_wheel
from testbed.index_server import IndexServer
from testbed.simple_index import write_simple_index

DOCKER = "/usr/bin/docker"
SKOPEO = "skopeo"
REGISTRY = "127.0.0.1:5000"
STORAGE = Path("/var/lib/vllm-musa-ci/registry-5000/storage")
OUT = Path("/tmp/bench-delivery")
BASE_REPO = f"{REGISTRY}/bench/sdk:5.2"
SMALL_BASE_REPO = f"{REGISTRY}/bench/small-base:12"
BASE_LABEL = "io.vllm-musa.bench.base-bytes"
STEM, SMALL_STEM = "bench-delivery", "bench-delivery-small"
PLUGIN_FILE = "demo/vllm-musa/vllm_musa/platform.py"
GB = 10**9
STEPS = ("context", "build", "save", "normalize", "load", "gates")
SHARES = {"torch": 0.6, "torch-musa": 0.2, "triton": 0.2}  # of --own-gb
TEXT_SHARE = 0.25  # of each big wheel: headers and Python, the rest .so-like payload
ENV = clean_env(DOCKER_BUILDKIT="1", BUILD_IMAGE_DOCKER=DOCKER)
ENV.pop("SOURCE_DATE_EPOCH", None)  # the build's time is the clone's commit


@dataclass(frozen=True)
class Layer:
    digest: str
    size: int


def log(line: str) -> None:
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {line}\n")
    sys.stderr.flush()


def call(argv: list[str], what: str, *, cwd: Path | None = None) -> Run:
    """Run ``argv`` (timed), keep its output under OUT/logs, stop the bench if it fails."""
    log(f"{what}: {' '.join(argv[:6])}{' ...' if len(argv) > 6 else ''}")
    r = run(argv, env=ENV, cwd=cwd)
    logs = OUT / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    name = "".join(c if c.isalnum() else "-" for c in what)[:60]
    (logs / f"{time.strftime('%H%M%S')}-{name}.log").write_text(f"{r.out}\n----\n{r.err}")
    log(f"{what}: {r.seconds:.1f} s, exit {r.code}")
    return must(r, what)


def quiet(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=ENV).stdout


# ------------------------------------------------------------------------------ registry


def raw_manifest(ref: str) -> bytes:
    """The manifest ``ref`` names (``repo:tag``, ``repo@digest``; skopeo takes no tag with a
    digest, so a tag before a digest is left out)."""
    name, at, digest = ref.partition("@")
    if at and ":" in name.rsplit("/", 1)[-1]:
        ref = f"{name.rsplit(':', 1)[0]}@{digest}"
    argv = [SKOPEO, "inspect", "--tls-verify=false", "--raw", f"docker://{ref}"]
    return subprocess.run(argv, capture_output=True, check=True, timeout=120).stdout


def layers_of(ref: str) -> tuple[Layer, ...]:
    doc = json.loads(raw_manifest(ref))
    return tuple(Layer(x["digest"], int(x["size"])) for x in doc["layers"])


def pinned(ref: str) -> str:
    return f"{ref}@sha256:{hashlib.sha256(raw_manifest(ref)).hexdigest()}"


def registry_bytes() -> int:
    out = quiet("du", "-sb", str(STORAGE))
    return int(out.split()[0]) if out else 0


def delete_repository(repo: str) -> None:
    """Every tag of ``repo`` deleted (its manifests; blobs stay until the registry's GC)."""
    listed = quiet(SKOPEO, "list-tags", "--tls-verify=false", f"docker://{repo}")
    for tag in json.loads(listed or '{"Tags": []}').get("Tags") or []:
        quiet(SKOPEO, "delete", "--tls-verify=false", f"docker://{repo}:{tag}")


# ---------------------------------------------------------------------------------- base


def base_dockerfile(total: int) -> str:
    part = total // 4
    random = "\n".join(
        f"RUN head -c {part} /dev/urandom > /opt/musa/lib/libmusa_part{i}.so" for i in (1, 2, 3)
    )
    return f"""FROM debian:bookworm-slim
LABEL {BASE_LABEL}="{total}"
RUN mkdir -p /opt/musa/lib /opt/musa/compat
{random}
RUN i=0; while [ "$(du -sb /opt/musa/compat | cut -f1)" -lt {part} ]; do \\
      cp -a /usr/lib/x86_64-linux-gnu /opt/musa/compat/lib$i; i=$((i+1)); done
ENV MUSA_HOME=/opt/musa
"""


def ensure_base(total: int, *, rebuild: bool) -> tuple[str, float]:
    """The SDK base of ``total`` bytes in the registry, pinned; and the seconds it took to
    build and push it (0: reused)."""
    labels = quiet(DOCKER, "image", "inspect", "--format", "{{json .Config.Labels}}", BASE_REPO)
    label = str((json.loads(labels.strip() or "null") or {}).get(BASE_LABEL, ""))
    served = quiet(SKOPEO, "inspect", "--tls-verify=false", f"docker://{BASE_REPO}")
    if not rebuild and label.strip() == str(total) and f'"{BASE_LABEL}": "{total}"' in served:
        log(f"reusing {BASE_REPO} ({total / GB:.2f} GB)")
        return pinned(BASE_REPO), 0.0
    old = quiet(DOCKER, "image", "inspect", "--format", "{{.Id}}", BASE_REPO).strip()
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        (Path(tmp) / "Dockerfile").write_text(base_dockerfile(total))
        built = call([DOCKER, "build", "--progress", "plain", "-t", BASE_REPO, tmp], "base build")
    pushed = call([DOCKER, "push", BASE_REPO], "base push")
    if old:  # the base an earlier run made, if nothing else uses it
        quiet(DOCKER, "rmi", old)
    return pinned(BASE_REPO), built.seconds + pushed.seconds


def ensure_small_base() -> str:
    """debian:bookworm-slim under a layer of its own, pushed and pinned: never the image
    itself, whose push would give it a repository digest (the demo's base has none)."""
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        (Path(tmp) / "Dockerfile").write_text("FROM debian:bookworm-slim\nRUN echo small > /base\n")
        call([DOCKER, "build", "-q", "-t", SMALL_BASE_REPO, tmp], "small base build")
    call([DOCKER, "push", SMALL_BASE_REPO], "small base push")
    return pinned(SMALL_BASE_REPO)


# --------------------------------------------------------------------------------- index


def header_text(name: str, size: int) -> str:
    """Deterministic C-header-like text of about ``size`` bytes (gzip: about 4 to 1)."""
    lines: list[str] = []
    total = i = 0
    while total < size:
        line = f"MUSA_API int {name}_k{i}(const float *x, float *y, int n); /* {i * 2654435761 % 2**32:08x} */\n"  # noqa: E501
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)


def big(spec: WheelSpec, size: int) -> WheelSpec:
    text = int(size * TEXT_SHARE)
    modules = dict(spec.modules) or {
        f"{spec.package}/__init__.py": f'__version__ = "{spec.version}"\n'
    }
    modules[f"{spec.package}/include/kernels.h"] = header_text(spec.package, text)
    return replace(spec, modules=modules, payload_bytes=size - text)


def write_index(out: Path, own: int) -> Path:
    """The demo index with torch, torch-musa and triton at real sizes (``own`` bytes)."""
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=OUT) as tmp:
        files = Path(tmp)
        specs = [big(s, int(own * SHARES[s.name])) if s.name in SHARES else s for s in STAND_INS]
        wheels = [build_wheel(s, files) for s in specs]
        wheels.append(build_sdist(*FLASHINFER_SRC, files, extra=FLASHINFER_SRC_FILES))
        for src in bootstrap_wheels(ROOT / "build" / "demo" / "bootstrap"):
            wheels.append(Path(shutil.copyfile(src, files / src.name)))
        write_simple_index(out, wheels)
    return out


# --------------------------------------------------------------------------------- clone


@dataclass
class Clone:
    """The scratch clone the bench commits in (at the real time: after HEAD's commits)."""

    root: Path
    nightlies: int = 0  # the nightlies published so far: the n-th is dated today + n days

    def git(self, *argv: str) -> str:
        argv2 = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *argv]
        r = subprocess.run(
            argv2, cwd=self.root, env=ENV, capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            raise SystemExit(f"git {' '.join(argv)} failed: {r.stderr}")
        return r.stdout.strip()

    def commit(self, message: str, *, empty: bool = False) -> None:
        time.sleep(1)  # a later second than the commit before
        self.git("add", "-A")
        self.git("commit", "-q", *(["--allow-empty"] if empty else []), "-m", message)

    def next_date(self) -> str:
        self.nightlies += 1
        day = dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=self.nightlies)
        return day.strftime("%Y%m%d")


def bench_stack(base: str, *, name: str, repository: str) -> str:
    text = (ROOT / "stack" / "demo.yaml").read_text()
    head, rest = text.split("\nimage:", 1)
    _, tail = rest.split("\ngates:", 1)
    image = (
        f'\nimage:\n  repository: "{repository}"\n'
        '  nightly_tags: ["final:nightly-{date}", "final:nightly"]\n'
    )
    new = (head + image + "gates:" + tail).replace("name: vllm-musa-demo\n", f"name: {name}\n")
    new = new.replace('base_image: "debian:bookworm-slim"', f'base_image: "{base}"')
    assert new.count(base) == 1, "stack/demo.yaml changed shape: base_image"
    assert f"name: {name}\n" in new, "stack/demo.yaml changed shape: name"
    return new


# ----------------------------------------------------------------------------- deliveries


@dataclass(kw_only=True)
class Delivery:
    """One image built and published by one side in one scenario."""

    build_s: float  # the build command's wall time (ours: build_image.py build, gates included)
    publish_s: float  # build_image.py publish / docker push
    layers: tuple[Layer, ...]  # of the manifest the registry serves
    own: tuple[Layer, ...]  # the layers above the base's
    uploaded: int  # layer bytes the registry did not have before (base's and earlier pushes)
    repull: int | None  # layer bytes a node holding the previous release pulls
    growth: int  # the registry's storage growth (du; other users of the registry add noise)
    steps: dict[str, float] = field(default_factory=dict)  # ours: the report's durations_s
    upload: dict[str, int] | None = None  # ours: publish --json's upload

    def summary(self) -> dict[str, Any]:
        own = sum(x.size for x in self.own)
        return {
            "build_s": round(self.build_s, 3),
            "publish_s": round(self.publish_s, 3),
            "total_s": round(self.build_s + self.publish_s, 3),
            "own_layer_bytes": own,
            "own_layers": len(self.own),
            "uploaded_layer_bytes": self.uploaded,
            "repull_bytes": self.repull,
            "repull_fraction": None if self.repull is None else self.repull / own,
            "registry_growth_bytes": self.growth,
            "durations_s": self.steps,
            "upload": self.upload,
        }


@dataclass
class Side:
    """What one side pushed so far: for the bytes uploaded and re-pulled."""

    base: tuple[Layer, ...]
    known: set[str] = field(default_factory=set)
    previous: tuple[Layer, ...] | None = None

    def delivered(self, layers: tuple[Layer, ...], **kw: Any) -> Delivery:
        known = self.known | {x.digest for x in self.base}
        before = None if self.previous is None else {x.digest for x in self.previous}
        d = Delivery(
            layers=layers,
            own=layers[len(self.base) :],
            uploaded=sum(x.size for x in layers if x.digest not in known),
            repull=None
            if before is None
            else sum(x.size for x in layers if x.digest not in before),
            **kw,
        )
        self.known |= {x.digest for x in layers}
        self.previous = layers
        return d


@dataclass
class Bench:
    clone: Clone
    cache: Path
    index_url: str
    ours_repo: str
    upstream_repo: str
    ours: Side
    upstream: Side
    reports: list[dict[str, Any]] = field(default_factory=list)

    def tool(self, what: str, *argv: str) -> Run:
        cli = str(self.clone.root / "build_image.py")
        return call([PYTHON, cli, *argv], what, cwd=self.clone.root)

    def build(self, stem: str, what: str, *, no_cache: bool = False) -> tuple[Run, dict[str, Any]]:
        argv = ["build", f"stack/{stem}.yaml", "--target", "final", "--cache-dir", str(self.cache)]
        argv += ["--index", f"demo={self.index_url}", "--json", "--progress", "plain"]
        built = self.tool(what, *argv, *(["--no-cache"] if no_cache else []))
        doc: dict[str, Any] = json.loads(built.out)
        self.reports.append(doc)
        return built, doc

    def deliver_ours(self, scenario: str, *, no_cache: bool = False) -> Delivery:
        built, doc = self.build(STEM, f"ours {scenario} build", no_cache=no_cache)
        date = self.clone.next_date()
        before = registry_bytes()
        argv = ["publish", f"stack/{STEM}.yaml", "--target", "final", "--nightly", "--json"]
        argv += ["--date", date, "--record", str(self.cache.parent / "releases.json")]
        published = self.tool(f"ours {scenario} publish", *argv)
        growth = registry_bytes() - before
        return self.ours.delivered(
            layers_of(f"{self.ours_repo}:nightly-{date}"),
            build_s=built.seconds,
            publish_s=published.seconds,
            growth=growth,
            steps=dict(doc["durations_s"]),
            upload=json.loads(published.out).get("upload"),
        )

    def deliver_upstream(self, scenario: str, *, no_cache: bool = False) -> Delivery:
        context = self.clone.root / "build" / "context" / f"{STEM}-final"
        tag = f"{self.upstream_repo}:{scenario}"
        argv = [DOCKER, "build", "--progress", "plain", "--target", "final", "-t", tag]
        argv += ["-f", str(context / "Dockerfile"), *(["--no-cache"] if no_cache else [])]
        built = call([*argv, str(context)], f"upstream {scenario} build")
        before = registry_bytes()
        pushed = call([DOCKER, "push", tag], f"upstream {scenario} push")
        growth = registry_bytes() - before
        return self.upstream.delivered(
            layers_of(tag), build_s=built.seconds, publish_s=pushed.seconds, growth=growth
        )


# ---------------------------------------------------------------------------- scenarios


def wait_idle(limit: float = 600.0) -> None:
    """No container running (nothing else should be building) before the BuildKit cache goes."""
    deadline = time.monotonic() + limit
    while quiet(DOCKER, "ps", "-q").strip():
        if time.monotonic() > deadline:
            log("containers still running: pruning the build cache anyway")
            return
        time.sleep(10)


def prune(*, mounts_only: bool) -> None:
    """The whole BuildKit cache, or (``mounts_only``) what is not a build's result: the cache
    mounts (apt's) and the contexts BuildKit keeps, so a second build of a context transfers
    it whole again."""
    wait_idle()
    if not mounts_only:
        call([DOCKER, "builder", "prune", "-f", "-a"], "prune build cache")
        return
    for kind in ("exec.cachemount", "source.local"):
        call([DOCKER, "builder", "prune", "-f", "--filter", f"type={kind}"], f"prune {kind}")


def cold(b: Bench) -> dict[str, Delivery]:
    for sub in ("layers", "base-images"):
        shutil.rmtree(b.cache / sub, ignore_errors=True)
    prune(mounts_only=False)
    ours = b.deliver_ours("cold")
    prune(mounts_only=True)  # upstream's chain is its own (other args); the apt caches are not
    return {"ours": ours, "upstream": b.deliver_upstream("cold")}


def plugin_only(b: Bench) -> dict[str, Delivery]:
    path = b.clone.root / PLUGIN_FILE
    path.write_text(path.read_text() + f'\nBENCH_NIGHTLY = "{time.time_ns()}"\n')
    b.clone.commit("vllm-musa: one line")
    return {"ours": b.deliver_ours("plugin"), "upstream": b.deliver_upstream("plugin")}


def no_change(b: Bench, *, fresh: bool) -> dict[str, Delivery]:
    b.clone.commit("tooling: nothing the image uses", empty=True)
    name = "fresh" if fresh else "nochange"
    if fresh:
        prune(mounts_only=True)
    ours = b.deliver_ours(name, no_cache=fresh)
    if fresh:
        prune(mounts_only=True)
    return {"ours": ours, "upstream": b.deliver_upstream(name, no_cache=fresh)}


def small_base(b: Bench) -> dict[str, Any]:
    """A cold build of the same stack on the plain debian base: its normalize time."""
    for sub in ("layers", "base-images"):
        shutil.rmtree(b.cache / sub, ignore_errors=True)
    _, doc = b.build(SMALL_STEM, "ours small-base build")
    return {"durations_s": doc["durations_s"], "layers": len(doc["layers"])}


# ------------------------------------------------------------------------------- output


def mb(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{n:,} B"


def seconds(x: float) -> str:
    return f"{x:.1f} s"


def own_bytes(d: Delivery) -> int:
    return sum(x.size for x in d.own)


def scenario_table(title: str, pair: dict[str, Delivery]) -> str:
    o, u = pair["ours"], pair["upstream"]
    other = o.steps.get("total", 0.0) - sum(v for k, v in o.steps.items() if k != "total")
    up = o.upload or {}
    b_o, b_u, p_o, p_u = o.build_s, u.build_s, o.publish_s, u.publish_s
    total_o, total_u = b_o + p_o, b_u + p_u
    rows: list[tuple[str, str, str, float, float]] = [
        ("build (ours: the build command)", seconds(b_o), seconds(b_u), b_o, b_u),
        *[(f"  ours: {k}", seconds(o.steps.get(k, 0.0)), "-", 0, 0) for k in STEPS],
        ("  ours: total - the above", seconds(other), "-", 0, 0),
        ("publish / docker push", seconds(p_o), seconds(p_u), p_o, p_u),
        ("build + publish", seconds(total_o), seconds(total_u), total_o, total_u),
        ("own layers (compressed)", mb(own_bytes(o)), mb(own_bytes(u)), own_bytes(o), own_bytes(u)),
        ("layer bytes uploaded", mb(o.uploaded), mb(u.uploaded), o.uploaded, u.uploaded),
        ("  publish --json: uploaded", mb(up.get("bytes_uploaded")), "-", 0, 0),
        ("  publish --json: mounted", mb(up.get("bytes_mounted")), "-", 0, 0),
        ("layer bytes a node re-pulls", mb(o.repull), mb(u.repull), o.repull or 0, u.repull or 0),
        ("registry growth (du)", mb(o.growth), mb(u.growth), o.growth, u.growth),
    ]
    body = [[r, a, c, f"{x / y:.2f}" if x > 0 and y > 0 else ""] for r, a, c, x, y in rows]
    return f"{title}\n" + table(["", "ours", "upstream", "ours/upstream"], body)


def goals(result: dict[str, Any]) -> str:
    s = result["scenarios"]
    cold_o, cold_u = s["a_cold"]["ours"]["total_s"], s["a_cold"]["upstream"]["total_s"]
    nightly = s["c_no_change"]["ours"]["uploaded_layer_bytes"]
    fresh = s["c_no_change_fresh_builder"]["ours"]["uploaded_layer_bytes"]
    frac_o = s["b_plugin_only"]["ours"]["repull_fraction"]
    frac_u = s["b_plugin_only"]["upstream"]["repull_fraction"]
    ours_buildkit, up_buildkit = (
        s["a_cold"]["ours"]["durations_s"]["build"],
        s["a_cold"]["upstream"]["build_s"],
    )
    same = up_buildkit + cold_o - ours_buildkit  # ours with upstream's BuildKit time
    big_n = s["a_cold"]["ours"]["durations_s"]["normalize"]
    small_n = s["d_small_base"]["durations_s"]["normalize"]
    met = {True: "met", False: "NOT met"}
    return "\n".join(
        [
            "goals:",
            f"  cold build+publish ours/upstream: {cold_o:.1f} s / {cold_u:.1f} s = "
            f"{cold_o / cold_u:.2f}  goal <= 1.10  {met[cold_o <= 1.10 * cold_u]}",
            f"    with upstream's BuildKit time on both sides ({up_buildkit:.1f} s, ours "
            f"{ours_buildkit:.1f} s): {same:.1f} s / {cold_u:.1f} s = {same / cold_u:.2f}",
            f"  no-change nightly, layer bytes uploaded (ours): {nightly} (fresh builder: "
            f"{fresh})  goal 0  {met[nightly == 0]}",
            f"  plugin-only re-pull fraction: ours {frac_o:.3%}, upstream {frac_u:.3%}  "
            f"goal <= 10%  {met[frac_o <= 0.10]}",
            f"  normalize, cold layer cache: {big_n:.1f} s on the {result['base_gb']} GB base, "
            f"{small_n:.1f} s on debian:bookworm-slim",
        ]
    )


# --------------------------------------------------------------------------------- main


def setup(args: argparse.Namespace, work: Path, base: str, small: str, url: str) -> Bench:
    run_id = time.strftime("r%Y%m%d%H%M%S")
    repo = work / "repo"
    call(["git", "clone", "-q", str(ROOT), str(repo)], "clone")
    head = quiet("git", "-C", str(repo), "rev-parse", "--short", "HEAD").strip()
    clone = Clone(repo)
    ours_repo = f"{REGISTRY}/bench/vllm-musa-{run_id}"
    upstream_repo = f"{REGISTRY}/bench/upstream-{run_id}"
    for stem, ref in ((STEM, base), (SMALL_STEM, small)):
        text = bench_stack(ref, name=f"vllm-musa-{stem}", repository=ours_repo)
        (repo / "stack" / f"{stem}.yaml").write_text(text)
    cache = work / "cache"
    sides = Side(layers_of(base)), Side(layers_of(base))
    b = Bench(clone, cache, url, ours_repo, upstream_repo, *sides)
    for stem in (STEM, SMALL_STEM):
        argv = ["lock", f"stack/{stem}.yaml", "--index", f"demo={url}", "--cache-dir", str(cache)]
        b.tool(f"lock {stem}", *argv)
    clone.commit("bench stacks and their locks")
    argv = [PYTHON, "-m", "compileall", "-q", "build_image.py", "core", "manifest", "sources"]
    call([*argv, "resolver", "images"], "compile the tool", cwd=repo)
    args.head = head
    return b


def cleanup(b: Bench, work: Path) -> None:
    """The run's tags, images, BuildKit cache (GBs of installed wheels) and scratch directory
    go; the base images stay for the next run."""
    for repo in (b.ours_repo, b.upstream_repo):
        delete_repository(repo)
    ids = {str(r["image_id"]) for r in b.reports}
    for image in [*ids, *quiet(DOCKER, "images", "-q", b.upstream_repo).split()]:
        quiet(DOCKER, "rmi", "-f", image)
    prune(mounts_only=False)
    shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-gb", type=float, default=4.0)
    parser.add_argument("--own-gb", type=float, default=1.0)
    parser.add_argument("--rebuild-base", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir and images")
    args = parser.parse_args()
    if args.base_gb <= 0 or args.own_gb <= 0:
        parser.error("--base-gb and --own-gb must be more than 0")
    OUT.mkdir(parents=True, exist_ok=True)
    work = OUT / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    base, base_s = ensure_base(int(args.base_gb * GB), rebuild=args.rebuild_base)
    small = ensure_small_base()
    index = write_index(work / "index", int(args.own_gb * GB))
    with IndexServer(index) as server:
        b = setup(args, work, base, small, server.simple_url)
        try:
            pairs = {
                "a_cold": cold(b),
                "b_plugin_only": plugin_only(b),
                "c_no_change": no_change(b, fresh=False),
                "c_no_change_fresh_builder": no_change(b, fresh=True),
            }
            d = small_base(b)
        finally:
            if not args.keep:
                cleanup(b, work)
    result: dict[str, Any] = {
        "revision": args.head,
        "base": base,
        "base_gb": args.base_gb,
        "base_layers_bytes": sum(x.size for x in b.ours.base),
        "base_build_push_s": round(base_s, 3),
        "own_gb": args.own_gb,
        "compressor": b.reports[0].get("compressor"),
        "scenarios": {k: {s: v.summary() for s, v in p.items()} for k, p in pairs.items()},
    }
    result["scenarios"]["d_small_base"] = d
    (OUT / "result.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    print(f"revision {args.head} (a clone of its HEAD); base {base}")
    print(
        f"base layers {mb(result['base_layers_bytes'])} (compressed), own wheels {args.own_gb} GB"
    )
    titles = {
        "a_cold": "a. cold build + publish",
        "b_plugin_only": f"b. plugin-only change ({PLUGIN_FILE}, one line)",
        "c_no_change": "c. no-change nightly (empty commit), warm builder",
        "c_no_change_fresh_builder": "c'. no-change nightly on a fresh builder (--no-cache)",
    }
    for key, title in titles.items():
        print("\n" + scenario_table(title, pairs[key]))
    big_d, small_d = result["scenarios"]["a_cold"]["ours"]["durations_s"], d["durations_s"]
    print(f"\nd. cold build on the {args.base_gb} GB base (a.) vs on debian:bookworm-slim:")
    for k in ("build", "save", "normalize", "load", "total"):
        print(f"  {k:9} {big_d[k]:6.1f} s  {small_d[k]:6.1f} s")
    print("\n" + goals(result))
    print(f"\nresult: {OUT / 'result.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
