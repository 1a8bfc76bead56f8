"""URL rules that are pure: which index URLs are allowed, and how URLs appear in messages."""

from __future__ import annotations

import ipaddress
from urllib.parse import quote, urlsplit, urlunsplit

from core.errors import IndexError_, UsageError


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_index_url(name: str, url: str) -> None:
    """Refuse plain ``http://`` unless the host is loopback (a local test or mirror server)."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise UsageError(
            f"index {name}: {redact(url)} is not a valid URL (its port is not a number)"
        ) from None
    if not parts.hostname:
        raise UsageError(f"index {name}: {redact(url)} has no host")
    if parts.scheme == "https":
        return
    if parts.scheme == "http":
        if is_loopback_host(parts.hostname or ""):
            return
        raise UsageError(
            f"index {name}: {redact(url)} uses plain http:// on a non-loopback host; "
            "anyone on the path could swap the wheels",
            hint="use https://, or serve the index on 127.0.0.1 for local testing",
        )
    raise UsageError(f"index {name}: {redact(url)} is not an http(s) URL")


def check_fetch_url(index: str, url: str) -> None:
    """Every URL fetched for an index (its files, their metadata, every redirect) obeys the
    index's own rule: https, or http on loopback only; never credentials in the URL."""
    parts = urlsplit(url)
    if parts.username is not None or parts.password is not None:
        raise IndexError_(
            f"index {index}: {redact(url)} carries credentials in the URL; refusing to fetch it",
            hint="an index page must not hand out credentials; report it to the index owner",
        )
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname or ""):
        return
    what = "plain http:// on a non-loopback host" if parts.scheme == "http" else "not https"
    raise IndexError_(
        f"index {index}: {redact(url)} is {what} (a file URL or a redirect of the index); "
        "refusing to fetch it",
        hint="the index must serve its files over https, or be a mirror on 127.0.0.1",
    )


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port (default ports filled in)."""
    pa, pb = urlsplit(a), urlsplit(b)
    defaults = {"http": 80, "https": 443}
    return (
        pa.scheme == pb.scheme
        and (pa.hostname or "") == (pb.hostname or "")
        and (pa.port or defaults.get(pa.scheme)) == (pb.port or defaults.get(pb.scheme))
    )


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``https://u:p@host/x`` -> (``https://host/x``, (u, p))."""
    parts = urlsplit(url)
    if parts.username is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return bare, (parts.username or "", parts.password or "")


def redact(url: str) -> str:
    """Hide the userinfo of a URL (``https://***@host/``); everything else stays readable."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    netloc = "***@" + parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def project_url(index_url: str, project: str) -> str:
    """PEP 503: ``<index>/<normalized name>/``."""
    return index_url.rstrip("/") + "/" + quote(project) + "/"
