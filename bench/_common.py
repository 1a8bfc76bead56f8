"""Helpers shared by the benchmarks: nginx with an access log, timed subprocesses, tables.

Imported by ``bench.lock_download`` and ``bench.closure`` (run as modules from the repository
root, so the project and ``testbed`` are importable). No side effects at import.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = str(VENV_BIN / "python") if (VENV_BIN / "python").is_file() else sys.executable
CLI = str(ROOT / "build_image.py")


def tool(name: str) -> str:
    found = VENV_BIN / name
    if found.is_file():
        return str(found)
    which = shutil.which(name)
    if which is None:
        raise SystemExit(f"{name} is not installed (make dev installs it into .venv)")
    return which


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


# ----------------------------------------------------------------------------- nginx


@dataclass
class Nginx:
    proc: subprocess.Popen[bytes]
    port: int
    access_log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def log_offset(self) -> int:
        return self.access_log.stat().st_size if self.access_log.exists() else 0

    def requests_since(self, offset: int) -> list[tuple[str, int]]:
        """(path, status) of every request logged after ``offset`` bytes of the access log."""
        if not self.access_log.exists():
            return []
        with self.access_log.open("rb") as f:
            f.seek(offset)
            text = f.read().decode("utf-8", "replace")
        out = []
        for line in text.splitlines():
            m = _LOG_RE.search(line)
            if m:
                out.append((m.group(1), int(m.group(2))))
        return out


_LOG_RE = re.compile(r'"[A-Z]+ (\S+) HTTP/[\d.]+" (\d{3}) ')


@contextlib.contextmanager
def nginx(root: Path, workdir: Path, *, cached_prefix: str | None = None) -> Iterator[Nginx]:
    """Serve ``root`` with nginx (``testbed.nginx.nginx_config``) plus an access log
    (so a benchmark can count what was downloaded).

    ``cached_prefix`` (e.g. ``"cached"``) also serves the same tree under ``/cached/`` with
    ``Cache-Control: max-age`` (as PyPI's CDN sends), for HTTP caches that need freshness
    information to store anything (pip's)."""
    from testbed.nginx import NGINX, nginx_config, stop_nginx

    if not NGINX.is_file():
        raise SystemExit(f"{NGINX} is missing: apt-get install -y nginx")
    workdir = workdir.resolve()
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (workdir / "tmp" / kind).mkdir(parents=True, exist_ok=True)
    port = free_port()
    access = workdir / "access.log"
    conf_text = nginx_config(root, port, workdir)
    conf_text = conf_text.replace("access_log off;", f'access_log "{access}";', 1)
    if f'access_log "{access}"' not in conf_text:
        raise SystemExit("testbed.nginx.nginx_config changed: no 'access_log off;' to replace")
    if cached_prefix:
        alias = (
            f"        location /{cached_prefix}/ {{\n"
            f'            alias "{root.resolve()}/";\n'
            "            expires 1d;\n"
            "            add_header Vary Accept;\n"
            "        }\n"
        )
        conf_text = conf_text.replace("        location / {", alias + "        location / {", 1)
    conf = workdir / "nginx.conf"
    conf.write_text(conf_text, "utf-8")
    err = workdir / "error.log"
    with (workdir / "nginx.out").open("wb") as out:
        proc = subprocess.Popen(
            [str(NGINX), "-p", str(workdir), "-c", str(conf), "-e", str(err)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_nginx(proc, port, err)
        yield Nginx(proc, port, access)
    finally:
        stop_nginx(proc)


def wait_nginx(proc: subprocess.Popen[bytes], port: int, err: Path) -> None:
    """Until nginx listens on ``port`` (10 s at most); if it exits first, the end of its error
    log ``err`` is the exit message."""
    deadline = time.monotonic() + 10
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"nginx exited: {err.read_text('utf-8', 'replace')[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"nginx did not listen on {port}")
        time.sleep(0.02)


# ----------------------------------------------------------------------------- runs


@dataclass
class Run:
    seconds: float
    code: int
    out: str
    err: str
    cpu: float = 0.0  # user + system seconds of the child (and its children)
    rss_mb: float = 0.0  # the child's peak resident set (the biggest of it and its children)


def run(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> Run:
    os.sync()  # so writeback of the previous run's files does not land inside this timing
    t = time.perf_counter()
    with subprocess.Popen(
        list(argv),
        env=dict(env) if env is not None else None,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        # drained by threads: a child that fills one pipe must not block on it
        outs: dict[str, str] = {}
        readers = [
            threading.Thread(target=lambda k=k, f=f: outs.__setitem__(k, f.read()))
            for k, f in (("out", proc.stdout), ("err", proc.stderr))
        ]
        for reader in readers:
            reader.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
        for reader in readers:
            reader.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return Run(
        seconds, proc.returncode, outs["out"], outs["err"], cpu, rss_mb=usage.ru_maxrss / 1024
    )


def must(r: Run, what: str) -> Run:
    if r.code != 0:
        sys.stderr.write(f"{what} failed with exit {r.code}:\n{r.out[-3000:]}\n{r.err[-3000:]}\n")
        raise SystemExit(1)
    return r


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for every tool: no user config, no proxies, no Python downloads."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and not k.startswith(("PIP_", "UV_", "BUILD_IMAGE_"))
    }
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "UV_PYTHON_DOWNLOADS": "never",
        }
    )
    env.update(extra)
    return env


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def fmt_s(seconds: float) -> str:
    return f"{seconds:8.3f} s"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join([line, sep, *body])


def print_closure_equal(ours: dict[str, str], uv: dict[str, str]) -> bool:
    """Print whether the two closures (name -> version) are equal, and every name they differ
    in; True when equal."""
    equal = ours == uv
    print(f"\nclosure equal: {'yes' if equal else 'no'} (ours vs uv, {len(ours)} names)")
    for name in sorted(set(ours) | set(uv)):
        if ours.get(name) != uv.get(name):
            print(f"  {name}: ours {ours.get(name)}  uv {uv.get(name)}")
    return equal


PACKAGES = ("core", "manifest", "resolver", "sources", "images")


def compile_tool() -> None:
    """Write the tool's bytecode before any timing, as installing it does: with
    PYTHONDONTWRITEBYTECODE set (some shells set it), a checkout would otherwise compile
    every edited module again in every timed run."""
    argv = [PYTHON, "-m", "compileall", "-q", CLI, *(str(ROOT / p) for p in PACKAGES)]
    subprocess.run(argv, check=True, capture_output=True)


def revision() -> str:
    """The commit the benchmark ran against, and whether resolver/ or build_image.py differ."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "resolver", "build_image.py"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return f"{head or 'unknown'}{' + uncommitted resolver changes' if dirty else ''}"


def scratch(path: Path | None = None) -> Path:
    """Room for generated worlds and caches: ``path``, else ``build/bench`` in the repository
    (gitignored)."""
    path = path or ROOT / "build" / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def file_create_us(directory: Path, n: int = 200) -> float:
    """The median time, in microseconds, to create (and close) an empty file in a new
    directory under ``directory``: what every cache write pays. It varies by two orders of
    magnitude between a RAM disk, a fresh file system and a full one."""
    probe = Path(tempfile.mkdtemp(prefix="create-probe-", dir=directory))
    try:
        times = []
        for i in range(n):
            t = time.perf_counter()
            os.close(os.open(probe / f"f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
            times.append(time.perf_counter() - t)
        return median(times) * 1e6
    finally:
        shutil.rmtree(probe, ignore_errors=True)
