"""What ``bench.http_clients`` asks for, and the nginx that serves it.

``make_world``: the real-sized pages of ``bench.realindex``, ten pages of about 2 MB more
(numpy's size) and a ``.gz`` beside every page for nginx's ``gzip_static``, written once per
directory (a mark file says it is complete), then a fixed sample of pages and ``.metadata``
files with the decoded size of each. ``nginx``: the test suite's nginx configuration over it,
plus a second server with ``ssl http2`` on a self-signed certificate (the openssl CLI), and an
access log of each request's connection, protocol and bytes sent, which ``Server.since``
counts.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from bench import _common as c

WORLD_MARK = "http-clients-world-v1"


@dataclass
class World:
    root: Path
    pages: list[str]  # paths under the root, e.g. /public/simple/name/
    metadata: list[str]
    expected: dict[str, int]  # path -> decoded size
    page_bytes: int = 0
    page_gz_bytes: int = 0


def make_world(out: Path, *, pages: int, metadata: int) -> World:
    """The real-sized world of ``bench.realindex`` (cached in ``out``), ten pages of about
    2 MB more, and a ``.gz`` beside every page for nginx's ``gzip_static``."""
    from bench import realindex

    if not (out / WORLD_MARK).is_file():
        shutil.rmtree(out, ignore_errors=True)
        realindex.generate(out)
        for k in range(10):
            _giant_page(out / "public" / "simple" / f"giant-{k}", k)
        for page in (out / "public" / "simple").glob("*/index.json"):
            page.with_suffix(".json.gz").write_bytes(gzip.compress(page.read_bytes(), 6))
        (out / WORLD_MARK).write_text("done\n")
    simple = out / "public" / "simple"
    rng = random.Random(7)  # noqa: S311 (a fixed sample, not a secret)
    names = sorted(p.name for p in simple.iterdir() if p.is_dir())
    giants = [n for n in names if n.startswith("giant-")]
    chosen = [*rng.sample([n for n in names if n not in giants], pages - len(giants)), *giants]
    metas = sorted(p.name for p in (out / "public" / "files").glob("*.metadata"))
    world = World(out, [], [], {})
    for n in chosen:
        path = f"/public/simple/{n}/"
        world.pages.append(path)
        world.expected[path] = (simple / n / "index.json").stat().st_size
        world.page_bytes += world.expected[path]
        world.page_gz_bytes += (simple / n / "index.json.gz").stat().st_size
    for m in rng.sample(metas, metadata):
        path = f"/public/files/{quote(m)}"
        world.metadata.append(path)
        world.expected[path] = (out / "public" / "files" / m).stat().st_size
    return world


def _giant_page(page_dir: Path, k: int) -> None:
    """A page of 150 releases of 30 wheels and an sdist (about 2 MB, numpy's size)."""
    import hashlib

    from bench.realindex import PLATFORMS, PYTHONS

    name = f"giant-{k}"
    files: list[dict[str, object]] = []
    versions = [f"{1 + v // 20}.{v % 20}.{k}" for v in range(150)]
    for v in versions:
        names = [f"giant_{k}-{v}-{p}-{p}-{plat}.whl" for p in PYTHONS for plat in PLATFORMS]
        for fn in [*names, f"giant_{k}-{v}.tar.gz"]:
            digest = hashlib.sha256(fn.encode()).hexdigest()
            files.append({
                "filename": fn,
                "url": "../../files/" + quote(fn),
                "hashes": {"sha256": digest},
                "requires-python": ">=3.9",
                "size": 1_000_000 + len(fn) * 997,
                "upload-time": "2025-06-01T12:00:00.000000Z",
                "yanked": False,
                "core-metadata": {"sha256": digest},
                "data-dist-info-metadata": {"sha256": digest},
            })  # fmt: skip
    doc = {"meta": {"api-version": "1.1"}, "name": name, "versions": versions, "files": files}
    page_dir.mkdir(parents=True)
    (page_dir / "index.json").write_text(json.dumps(doc, separators=(",", ":")))


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int  # plain http/1.1
    tls_port: int  # https, http/1.1 and h2 by ALPN
    log: Path
    cert: Path

    def offset(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def since(self, offset: int) -> tuple[int, int, int, set[str]]:
        """Requests, connections, bytes sent and protocols logged after ``offset``."""
        with self.log.open("rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines()
        conns: set[str] = set()
        protos: set[str] = set()
        sent = 0
        for line in lines:
            conn, rest = line.split(" ", 1)
            conns.add(conn)
            request, _, tail = rest.rpartition('" ')
            protos.add(request.rsplit(" ", 1)[-1])
            sent += int(tail.split()[1])
        return len(lines), len(conns), sent, protos


def _certificate(workdir: Path) -> tuple[Path, Path]:
    cert, key = workdir / "cert.pem", workdir / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "7", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def nginx(root: Path, workdir: Path) -> Iterator[Server]:
    """nginx from ``testbed.nginx.nginx_config``, plus: an access log with the
    connection of each request, ``gzip_static``, and a second server with ``ssl http2``."""
    from testbed.nginx import NGINX, nginx_config, stop_nginx

    if not NGINX.is_file():
        raise SystemExit(f"{NGINX} is missing: apt-get install -y nginx")
    shutil.rmtree(workdir, ignore_errors=True)
    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (workdir / "tmp" / kind).mkdir(parents=True, exist_ok=True)
    cert, key = _certificate(workdir)
    port, tls_port = c.free_port(), c.free_port()
    log = workdir / "access.log"
    conf = nginx_config(root, port, workdir)
    extra = (
        "log_format clients '$pid-$connection \"$request\" $status $bytes_sent';\n"
        f'    access_log "{log}" clients;\n'
        "    gzip_static on;\n"
        "    http2_max_concurrent_streams 128;"
    )
    if "access_log off;" not in conf:
        raise SystemExit("testbed.nginx.nginx_config changed: no 'access_log off;'")
    conf = conf.replace("access_log off;", extra, 1)
    tls_server = f"""
    server {{
        listen 127.0.0.1:{tls_port} ssl http2;
        ssl_certificate "{cert}";
        ssl_certificate_key "{key}";
        ssl_protocols TLSv1.2 TLSv1.3;
        root "{root.resolve()}";
        index $pypi_index index.html;
        location / {{
            add_header Vary Accept;
        }}
    }}
"""
    body = conf.rstrip()
    assert body.endswith("}")
    conf = body[:-1] + tls_server + "}\n"
    (workdir / "nginx.conf").write_text(conf)
    err = workdir / "error.log"
    cmd = [str(NGINX), "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-e", str(err)]
    with (workdir / "nginx.out").open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        c.wait_nginx(proc, port, err)
        c.wait_nginx(proc, tls_port, err)
        yield Server(proc, port, tls_port, log, cert)
    finally:
        stop_nginx(proc)
