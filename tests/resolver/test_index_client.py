"""The index client against nginx, a keep-alive HTTP/1.1 server like the real indexes."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from core.network import NetworkOptions
from resolver.cache import Cache
from resolver.endpoints import IndexEndpoint
from resolver.index_client import IndexClient
from testbed.distributions import WheelSpec, build_wheel
from testbed.nginx import NGINX, start_nginx, stop_nginx
from testbed.simple_index import Listing, write_simple_index
from tests.support.environment import unavailable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_kept_alive_connection_survives_conditional_and_missing_answers(tmp_path: Path) -> None:
    if not Path(NGINX).is_file():
        unavailable(f"{NGINX} is not installed (ci/install-system-deps.sh)", marker="nginx")
    wheel = build_wheel(
        WheelSpec(name="torch", version="2.11.0", tags="cp312-cp312-linux_x86_64"), tmp_path / "w"
    )
    write_simple_index(tmp_path / "index", [Listing(path=wheel, hash="none")])
    port = free_port()
    proc = start_nginx(tmp_path / "index", port, tmp_path / "nginx")

    def no_retry(seconds: float) -> None:
        raise AssertionError(f"a request was retried (backoff {seconds} s)")

    client = IndexClient(Cache(tmp_path / "cache"), NetworkOptions(sleep=no_retry), concurrency=1)
    endpoint = IndexEndpoint(name="vendor", url=f"http://127.0.0.1:{port}/simple/")
    try:
        files = client.project_files(endpoint, "torch")
        assert files is not None
        first = client.download(endpoint, files[0], label="torch")  # 200, read whole
        for _ in range(3):  # 304s on the same kept-alive connection, never read
            assert client.download(endpoint, files[0], label="torch") == first
            assert client.project_files(endpoint, "missing") is None  # a 404 body, never read
            assert client.project_files(endpoint, "torch") == files
        with ThreadPoolExecutor(4) as pool:  # as the locker does: the same file, concurrently
            got = list(
                pool.map(lambda _: client.download(endpoint, files[0], label="t"), range(40))
            )
        assert set(got) == {first}
    finally:
        client.close()
        stop_nginx(proc)
