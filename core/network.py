"""How this host reaches the network: its proxies and the certificates it trusts.

Read once, at the command line's edge, from the variables pip and uv honour, and passed down
to every ``core.transport.Transport`` that talks to an index or a registry:

- proxies: ``HTTPS_PROXY`` for https URLs, ``HTTP_PROXY`` for http URLs, ``ALL_PROXY`` for
  either when its own is unset, and ``NO_PROXY`` (a comma-separated list of host names,
  domain suffixes, ``host:port``, IP addresses or CIDR blocks, or ``*``) for the hosts reached
  directly. Each in either case; the lower-case one wins when both are set, as in curl and
  Python's urllib. ``--proxy URL`` replaces all three (``NO_PROXY`` still applies);
- trust: ``--cert FILE``, else ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``, else the system's CA
  certificates.

A proxy URL may carry credentials (``http://user:p%40ss@proxy:3128``): they are
percent-decoded, sent as ``Proxy-Authorization`` to the proxy only, and redacted in every
message (``core.urls.redact``). Nothing here opens a connection.

``NetworkOptions`` holds these with every other network option of a command (``--timeout``,
``--retries`` as attempts, ``--deadline``, ``--refresh``, ``--offline``); ``network_options``
reads it once from the command line, and it is passed down as it is.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import quote, unquote

from core.deadline import Deadline
from core.errors import EnvironmentFailureError, UsageError
from core.urls import parse_url, redact

PROXY_SCHEMES = ("http", "https")
CERT_HINT = (
    "set SSL_CERT_FILE to a PEM file (or SSL_CERT_DIR to a hashed directory) of the CA "
    "certificates that sign your index or registry, or pass --cert FILE"
)


@dataclass(frozen=True, kw_only=True)
class Proxy:
    """One proxy: its URL without credentials, and the credentials (percent-decoded)."""

    url: str
    credentials: tuple[str, str] | None = field(default=None, repr=False)
    source: str = ""  # the variable or flag that set it, for messages

    def describe(self) -> str:
        return f"the proxy {redact(self.url)} ({self.source})" if self.source else self.url

    def with_credentials(self) -> str:
        """The URL with the credentials in it, percent-encoded, as proxy variables carry them."""
        if self.credentials is None:
            return self.url
        scheme, _, rest = self.url.partition("://")
        user, password = (quote(part, safe="") for part in self.credentials)
        return f"{scheme}://{user}:{password}@{rest}"


@dataclass(frozen=True, kw_only=True)
class Trust:
    """The CA certificates a TLS connection accepts: ``cafile`` and/or ``capath``, or (both
    None) the system's. ``source`` names the setting, for the error of an untrusted host."""

    cafile: Path | None = None
    capath: Path | None = None
    source: str = ""

    def describe(self) -> str:
        return self.source or "the system's CA certificates"


@dataclass(frozen=True, kw_only=True)
class NetworkConfig:
    """The proxies by URL scheme, the hosts reached directly, and the trust store."""

    proxies: Mapping[str, Proxy] = field(default_factory=dict)  # "http" | "https" -> Proxy
    no_proxy: tuple[str, ...] = ()
    trust: Trust = field(default_factory=Trust)

    def proxy_for(self, url: str) -> Proxy | None:
        """The proxy a request for ``url`` goes through; None: directly."""
        parts = parse_url(url)
        if isinstance(parts, str):
            return None
        proxy = self.proxies.get(parts.scheme.lower())
        if proxy is None or bypasses(parts.hostname or "", parts.port, self.no_proxy):
            return None
        return proxy

    def or_proxy(self, url: str | None, source: str) -> NetworkConfig:
        """These settings, or, when they name no proxy at all, ``url`` as the proxy of both
        schemes (``mirrors.proxy``: a build host's proxy for its RUN steps serves the host's
        own requests too)."""
        if self.proxies or not url:
            return self
        proxy = parse_proxy(url, source)
        return replace(self, proxies=dict.fromkeys(PROXY_SCHEMES, proxy))


DIRECT = NetworkConfig()


@dataclass(frozen=True, kw_only=True)
class NetworkOptions:
    """Every network option of a command: what the index client, the fetches of a build's
    inputs and the tools it runs (git, cargo, apt, skopeo) connect with."""

    network: NetworkConfig = DIRECT  # the proxies and trust store (--proxy, --cert)
    timeout: float = 30.0  # seconds per connect and per read (--timeout)
    attempts: int = 4  # tries of a request: the first and --retries more
    deadline: Deadline | None = None  # the command's budget (--deadline); None: the default
    refresh: bool = False  # revalidate every cached index page (--refresh)
    offline: bool = False  # fetch nothing: a missing input is an error (--offline)
    sleep: Callable[[float], None] | None = None  # the backoff (None: a wait --deadline ends)


DEFAULT_OPTIONS = NetworkOptions()


def network_options(args: argparse.Namespace, env: Mapping[str, str]) -> NetworkOptions:
    """The options of a command that took ``core.console.add_network_arguments`` (or
    ``--timeout``, ``--retries`` and ``add_deadline_argument``, ``add_connection_arguments``),
    read once from ``args`` and ``env``. ``--retries`` becomes attempts here, and only here."""
    return NetworkOptions(
        network=network_from_env(env, proxy=args.proxy, cert=args.cert),
        timeout=args.timeout,
        attempts=args.retries + 1,
        deadline=Deadline(args.deadline),
        refresh=getattr(args, "refresh", False),
        offline=getattr(args, "offline", False),
    )


# the proxy variables of curl, git, cargo and Go's net/http (each in either case)
_PROXY_VARIABLES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})


def tool_environment(env: Mapping[str, str], network: NetworkConfig) -> dict[str, str]:
    """``env`` for a tool the command runs that makes requests of its own (skopeo, git,
    cargo): its proxy variables are ``network``'s and no others (each proxy with its
    credentials; ``NO_PROXY`` the hosts reached directly), its trust store in
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``. With no proxy in ``network``, the tool connects
    directly, whatever proxy ``env`` names."""
    out = {k: v for k, v in env.items() if k.lower() not in _PROXY_VARIABLES}
    for scheme in PROXY_SCHEMES:
        proxy = network.proxies.get(scheme)
        if proxy is not None:
            out[f"{scheme}_proxy"] = out[f"{scheme.upper()}_PROXY"] = proxy.with_credentials()
    if network.no_proxy:
        out["no_proxy"] = out["NO_PROXY"] = ",".join(network.no_proxy)
    if network.trust.cafile is not None:
        out["SSL_CERT_FILE"] = str(network.trust.cafile)
    if network.trust.capath is not None:
        out["SSL_CERT_DIR"] = str(network.trust.capath)
    return out


def bypasses(host: str, port: int | None, no_proxy: tuple[str, ...]) -> bool:
    """Whether ``NO_PROXY`` entries ``no_proxy`` send ``host`` (and ``port``) directly."""
    host = host.lower().strip("[]")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for raw in no_proxy:
        entry = raw.strip().lower()
        if entry == "*":
            return True
        if not entry:
            continue
        want_port: int | None = None
        if entry.count(":") == 1 and not entry.endswith("]"):
            entry, _, tail = entry.partition(":")
            if not tail.isdigit():
                continue
            want_port = int(tail)
        entry = entry.strip("[]")
        if want_port is not None and want_port != port:
            continue
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = entry.lstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def parse_proxy(value: str, source: str) -> Proxy:
    """A proxy URL as pip and curl take it (``host:port`` means ``http://host:port``);
    ``UsageError`` naming ``source`` for one that is not an http(s) proxy URL."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    parts = parse_url(text)
    if isinstance(parts, str) or not parts.hostname:
        reason = parts if isinstance(parts, str) else "it names no host"
        raise UsageError(
            f"{source}: {redact(value)} is not a proxy URL ({reason})",
            hint="write a proxy as http://[USER:PASSWORD@]HOST:PORT",
        )
    scheme = parts.scheme.lower()
    if scheme not in PROXY_SCHEMES:
        raise UsageError(
            f"{source}: {redact(value)} is a {scheme} proxy; this tool speaks to http and "
            "https proxies only",
            hint="use the HTTP CONNECT proxy of your network, http://HOST:PORT",
        )
    host = parts.hostname
    netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
    credentials = None
    if parts.username is not None:
        credentials = (unquote(parts.username), unquote(parts.password or ""))
    return Proxy(url=f"{scheme}://{netloc}", credentials=credentials, source=source)


def _variable(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(value, the variable's name) of ``name`` in either case, the lower-case one first."""
    for key in (name.lower(), name.upper()):
        value = env.get(key, "").strip()
        if value:
            return value, key
    return None


def network_from_env(
    env: Mapping[str, str], *, proxy: str | None = None, cert: Path | None = None
) -> NetworkConfig:
    """The network settings of a command: ``--proxy`` (``proxy``) and ``--cert`` (``cert``)
    when given, else the environment's. A setting that cannot be used is refused now,
    naming it, before any request is sent."""
    proxies: dict[str, Proxy] = {}
    if proxy:
        for scheme in PROXY_SCHEMES:
            proxies[scheme] = parse_proxy(proxy, "--proxy")
    else:
        fallback = _variable(env, "all_proxy")
        for scheme in PROXY_SCHEMES:
            found = _variable(env, f"{scheme}_proxy") or fallback
            if found is not None:
                proxies[scheme] = parse_proxy(*found)
    no_proxy = _variable(env, "no_proxy")
    entries = tuple(e.strip() for e in no_proxy[0].split(",") if e.strip()) if no_proxy else ()
    return NetworkConfig(proxies=proxies, no_proxy=entries, trust=_trust(env, cert))


def _trust(env: Mapping[str, str], cert: Path | None) -> Trust:
    if cert is not None:
        return Trust(cafile=_readable(cert, "--cert", directory=False), source=f"--cert {cert}")
    cafile = env.get("SSL_CERT_FILE", "").strip()
    capath = env.get("SSL_CERT_DIR", "").strip()
    if not cafile and not capath:
        return Trust()
    # SSL_CERT_DIR may list several directories (OpenSSL's path separator); the first is used
    first_dir = capath.split(os.pathsep)[0] if capath else ""
    sources = [f"SSL_CERT_FILE={cafile}"] if cafile else []
    sources += [f"SSL_CERT_DIR={capath}"] if capath else []
    return Trust(
        cafile=_readable(Path(cafile), "SSL_CERT_FILE", directory=False) if cafile else None,
        capath=_readable(Path(first_dir), "SSL_CERT_DIR", directory=True) if capath else None,
        source=" and ".join(sources),
    )


def _readable(path: Path, setting: str, *, directory: bool) -> Path:
    kind = "directory" if directory else "file"
    ok = path.is_dir() if directory else path.is_file()
    if not ok or not os.access(path, os.R_OK):
        raise EnvironmentFailureError(
            f"{setting} {path}: no readable {kind} of CA certificates is there",
            hint=CERT_HINT,
        )
    return path


def is_loopback(registry: str) -> bool:
    """Whether ``registry`` (host[:port], [v6]:port) is on this machine: plain http is used
    for such a registry only."""
    host = registry
    if host.startswith("["):
        host = host[1 : host.find("]")]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
