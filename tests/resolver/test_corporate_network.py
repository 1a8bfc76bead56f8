"""A lock on a corporate network, against the real command line: the indexes are HTTPS with
certificates of the company's own CA, and their host names resolve only through the
company's forward proxy (a real CONNECT proxy on 127.0.0.1, ``tests.support.forward_proxy``;
``.test`` names never resolve in DNS). The proxy and the trust store come from the variables
pip and uv honour, or from ``--proxy`` and ``--cert``; pages and METADATA files are asked for
compressed, wheels and range reads never."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.network import CERT_HINT
from testbed.index_server import IndexServer
from testbed.simple_index import Listing
from testbed.tls import Authority, make_authority
from tests.support.forward_proxy import ForwardProxy
from tests.support.lockcase import NATIVE, PIN_TORCH, TORCH, Case

USER, PASSWORD = "builder", "p@ss:word"
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@dataclass
class Corp:
    case: Case
    proxy: ForwardProxy
    authority: Authority


@pytest.fixture
def corp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Corp]:
    for name in (*PROXY_VARIABLES, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    authority = make_authority(tmp_path / "ca")
    with ExitStack() as stack:
        servers = {
            host: stack.enter_context(
                IndexServer(
                    tmp_path / f"{host}-index",
                    tls=authority.issue(host, [host]),
                    host=host,
                    gzip=True,
                )
            )
            for host in ("vendor.corp.test", "pypi.corp.test")
        }
        proxy = stack.enter_context(
            ForwardProxy(
                {host: ("127.0.0.1", server.port) for host, server in servers.items()},
                auth=(USER, PASSWORD),
            )
        )
        case = Case(tmp_path, servers["vendor.corp.test"], servers["pypi.corp.test"])
        torch = case.wheel("torch", TORCH, NATIVE)
        case.publish(case.vendor, Listing(path=torch, hash="none"))  # range reads, as a vendor's
        case.publish(
            case.pypi,
            Listing(path=case.wheel("numpy", "1.26.4", NATIVE), metadata=True),
            Listing(path=case.wheel("filelock", "3.17.0"), metadata=True),
        )
        yield Corp(case, proxy, authority)


def _lock(corp: Corp, *extra: str) -> tuple[int, str]:
    stack = corp.case.stack(PIN_TORCH, ["numpy==1.26.4", "filelock"])
    result = corp.case.run("lock", stack, "--retries", "0", *extra)
    return result.code, result.err


def test_a_lock_goes_through_the_proxy_and_trusts_the_companys_ca(
    corp: Corp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", corp.proxy.url_with(USER, PASSWORD))
    monkeypatch.setenv("SSL_CERT_FILE", str(corp.authority.ca_file))
    code, err = _lock(corp)
    assert code == 0, err
    lock = (corp.case.lock_dir() / "pylock.toml").read_text()
    for name in ("torch", "numpy", "filelock"):
        assert f'name = "{name}"' in lock
    tunnels = {r.target for r in corp.proxy.requests}
    assert tunnels == {
        f"vendor.corp.test:{corp.case.vendor.port}",
        f"pypi.corp.test:{corp.case.pypi.port}",
    }
    assert {(r.method, r.authorized) for r in corp.proxy.requests} == {("CONNECT", True)}
    assert PASSWORD not in err
    # what each kind of request asked for, as the index servers logged it
    vendor, pypi = corp.case.vendor, corp.case.pypi
    pages = pypi.encodings(lambda p: p.startswith("/simple/"))
    pages += vendor.encodings(lambda p: p.startswith("/simple/"))
    metadata = pypi.encodings(".metadata")
    wheels = vendor.encodings(".whl")  # its METADATA by range reads, and its download
    assert set(pages) == set(metadata) == {"gzip, deflate"}
    assert len(pages) == 4  # torch on each index (a vendor name on the public one), numpy, filelock
    assert len(metadata) == 2
    assert wheels
    assert set(wheels) == {"identity"}


def test_the_flags_stand_for_the_variables(corp: Corp) -> None:
    code, err = _lock(
        corp,
        "--proxy", corp.proxy.url_with(USER, PASSWORD),
        "--cert", str(corp.authority.ca_file),
    )  # fmt: skip
    assert code == 0, err
    assert corp.proxy.requests


def test_an_untrusted_certificate_names_the_host_and_what_to_set(
    corp: Corp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", corp.proxy.url_with(USER, PASSWORD))
    code, err = _lock(corp)
    url = f"{corp.case.vendor.simple_url}torch/"
    assert (code, err) == (
        1,
        f"error[index]: index mthreads: GET {url}: the certificate of vendor.corp.test is not "
        "trusted (unable to get local issuer certificate); trusted now: the system's CA "
        f"certificates\nhint: {CERT_HINT}\n",
    )


def test_a_proxy_that_wants_other_credentials_says_so_without_them(
    corp: Corp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("https_proxy", corp.proxy.url_with(USER, "wrong-secret"))
    monkeypatch.setenv("SSL_CERT_FILE", str(corp.authority.ca_file))
    code, err = _lock(corp)
    url = f"{corp.case.vendor.simple_url}torch/"
    assert (code, err) == (
        1,
        f"error[index]: index mthreads: GET {url} through the proxy "
        f"{corp.proxy.url} (https_proxy): the proxy wants credentials (407 Proxy "
        "Authentication Required)\n"
        "hint: write the proxy's user and password before its host in the proxy URL, as "
        "USER:PASSWORD@ (percent-encoded)\n",
    )
    assert {(r.method, r.authorized) for r in corp.proxy.requests} == {("CONNECT", False)}
