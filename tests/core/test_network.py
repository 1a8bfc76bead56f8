"""The network settings a command reads once from its flags and environment: the proxies
and the trust store pip and uv honour, ``NO_PROXY``, and credentials in a proxy URL
(percent-decoded, never shown)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import UsageError
from core.network import (
    NetworkConfig,
    Proxy,
    Trust,
    bypasses,
    network_from_env,
    parse_proxy,
    tool_environment,
)


def test_each_scheme_takes_its_own_proxy_then_all_proxy() -> None:
    net = network_from_env({"HTTPS_PROXY": "http://secure:3128", "ALL_PROXY": "http://any:3128"})
    assert net.proxy_for("https://pypi.org/simple/") == Proxy(
        url="http://secure:3128", source="HTTPS_PROXY"
    )
    assert net.proxy_for("http://mirror.corp/simple/") == Proxy(
        url="http://any:3128", source="ALL_PROXY"
    )
    assert network_from_env({}).proxies == {}


def test_the_lower_case_variable_wins_as_in_curl_and_urllib() -> None:
    net = network_from_env({"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"})
    assert net.proxy_for("https://h/") == Proxy(url="http://lower:1", source="https_proxy")


def test_the_proxy_flag_replaces_the_environment_but_no_proxy_still_holds() -> None:
    net = network_from_env(
        {"HTTPS_PROXY": "http://env:1", "NO_PROXY": "registry.corp"}, proxy="proxy.corp:8080"
    )
    flag = Proxy(url="http://proxy.corp:8080", source="--proxy")
    assert net.proxy_for("https://pypi.org/simple/") == flag
    assert net.proxy_for("http://127.0.0.1:5000/v2/") == flag
    assert net.proxy_for("https://registry.corp/v2/") is None


@pytest.mark.parametrize(
    ("host", "port", "entries", "direct"),
    [
        ("pypi.org", 443, ("*",), True),
        ("files.corp.example", 443, ("corp.example",), True),
        ("files.corp.example", 443, (".corp.example",), True),
        ("corp.example", 443, (".corp.example",), True),
        ("notcorp.example", 443, ("corp.example",), False),
        ("registry.corp", 5000, ("registry.corp:5000",), True),
        ("registry.corp", 443, ("registry.corp:5000",), False),
        ("10.1.2.3", 443, ("10.0.0.0/8",), True),
        ("11.1.2.3", 443, ("10.0.0.0/8",), False),
        ("127.0.0.1", 8080, ("127.0.0.1",), True),
        ("::1", 8080, ("::1",), True),
        ("Mirror.Corp", 443, ("MIRROR.corp",), True),
        ("pypi.org", 443, ("", " "), False),
    ],
)
def test_no_proxy_names_hosts_domains_ports_and_networks(
    host: str, port: int, entries: tuple[str, ...], direct: bool
) -> None:
    assert bypasses(host, port, entries) is direct


def test_credentials_in_a_proxy_url_are_percent_decoded_and_never_shown() -> None:
    proxy = parse_proxy("http://build%2Dbot:p%40ss%3Aword@proxy.corp:3128", "HTTPS_PROXY")
    assert proxy.url == "http://proxy.corp:3128"
    assert proxy.credentials == ("build-bot", "p@ss:word")
    assert "p@ss" not in repr(proxy)
    assert proxy.describe() == "the proxy http://proxy.corp:3128 (HTTPS_PROXY)"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "socks5://user:secret@proxy:1080",
            "--proxy: socks5://***@proxy:1080 is a socks5 proxy; this tool speaks to http "
            "and https proxies only",
        ),
        (
            "http://user:secret@proxy:port/",
            "--proxy: http://***@proxy:port/ is not a proxy URL (its port is not a number "
            "from 0 to 65535)",
        ),
        ("http://", "--proxy: http:// is not a proxy URL (it names no host)"),
    ],
)
def test_a_proxy_that_is_no_http_proxy_url_is_refused_without_its_secret(
    value: str, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        network_from_env({}, proxy=value)
    assert caught.value.message == message
    assert "secret" not in caught.value.message


def test_the_trust_store_comes_from_the_flag_then_the_variables(tmp_path: Path) -> None:
    bundle = tmp_path / "corp.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    certs = tmp_path / "certs"
    certs.mkdir()
    assert network_from_env({}).trust == Trust()
    assert network_from_env({"SSL_CERT_FILE": str(bundle)}).trust == Trust(
        cafile=bundle, source=f"SSL_CERT_FILE={bundle}"
    )
    assert network_from_env({"SSL_CERT_DIR": str(certs)}).trust == Trust(
        capath=certs, source=f"SSL_CERT_DIR={certs}"
    )
    assert network_from_env({"SSL_CERT_DIR": str(certs)}, cert=bundle).trust == Trust(
        cafile=bundle, source=f"--cert {bundle}"
    )


def test_a_url_that_does_not_parse_goes_direct() -> None:
    net = NetworkConfig(proxies={"https": Proxy(url="http://p:1")})
    assert net.proxy_for("https://[::1/") is None


def test_a_tool_the_command_runs_gets_the_commands_proxies_and_no_other(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    net = network_from_env(
        {"NO_PROXY": "mirror.corp", "SSL_CERT_FILE": str(ca)}, proxy="http://bot:p%40ss@proxy:3128"
    )
    env = {"PATH": "/usr/bin", "ALL_PROXY": "http://stale:1", "https_proxy": "http://stale:2"}
    assert tool_environment(env, net) == {
        "PATH": "/usr/bin",
        "http_proxy": "http://bot:p%40ss@proxy:3128",
        "HTTP_PROXY": "http://bot:p%40ss@proxy:3128",
        "https_proxy": "http://bot:p%40ss@proxy:3128",
        "HTTPS_PROXY": "http://bot:p%40ss@proxy:3128",
        "no_proxy": "mirror.corp",
        "NO_PROXY": "mirror.corp",
        "SSL_CERT_FILE": str(ca),
    }
    # no proxy in the settings: the tool connects directly, whatever the environment says
    assert tool_environment(env, NetworkConfig()) == {"PATH": "/usr/bin"}
