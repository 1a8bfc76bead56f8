"""URL rules that are pure: which index URLs are allowed, and how URLs appear in messages.

``redact`` hides credentials also in what does not parse as a URL (a typo'd ``--index``):
whatever stands between ``//`` (or the start) and the last ``@`` is shown as ``***``, and a
"port" that does not start with a digit is hidden too (it may be a password that lost its
``@``: ``https://user:TOKEN/host``).
``redact_text`` does the same for every ``scheme://...@`` in free text.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, quote, unquote, urlsplit, urlunsplit

from core.errors import IndexReadError, UsageError

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_SPACE = re.compile(r"(\s+)")
_URL_HINT = (
    "write an index URL as https://HOST[:PORT]/PATH/, with any credentials as USER:TOKEN@ "
    "before HOST"
)


def parse_url(url: str) -> SplitResult | str:
    """The parts of ``url``, or (a string) what makes it no URL: never the URL itself, which
    may hold a secret, and never an exception."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "its [IPv6] host is not closed or is not an address"
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number in range
    except ValueError:
        return "its port is not a number from 0 to 65535"
    return parts


def is_loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_index_url(name: str, url: str) -> None:
    """Refuse plain ``http://`` unless the host is loopback (a local test or mirror server)."""
    parts = parse_url(url)
    if isinstance(parts, str):
        raise UsageError(
            f"index {name}: {redact(url)} is not a valid URL ({parts})",
            hint=_URL_HINT,
        )
    if not parts.scheme or not parts.netloc:
        raise UsageError(
            f"index {name}: {redact(url)} is not a URL (it does not start with https:// or "
            "http://)",
            hint=_URL_HINT,
        )
    if not parts.hostname:
        raise UsageError(f"index {name}: {redact(url)} has no host", hint=_URL_HINT)
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
    parts = parse_url(url)
    if isinstance(parts, str):
        raise IndexReadError(
            f"index {index}: {redact(url)} is not a valid URL ({parts}); refusing to fetch it",
            hint="the index lists a broken link; report it to the index owner",
        )
    if parts.username is not None or parts.password is not None:
        raise IndexReadError(
            f"index {index}: {redact(url)} carries credentials in the URL; refusing to fetch it",
            hint="an index page must not hand out credentials; report it to the index owner",
        )
    if parts.scheme == "https":
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname or ""):
        return
    what = "plain http:// on a non-loopback host" if parts.scheme == "http" else "not https"
    raise IndexReadError(
        f"index {index}: {redact(url)} is {what} (a file URL or a redirect of the index); "
        "refusing to fetch it",
        hint="the index must serve its files over https, or be a mirror on 127.0.0.1",
    )


def same_origin(a: str, b: str) -> bool:
    """Same scheme, host and port (default ports filled in); False when either is no URL."""
    pa, pb = parse_url(a), parse_url(b)
    if isinstance(pa, str) or isinstance(pb, str):
        return False
    defaults = {"http": 80, "https": 443}
    return (
        pa.scheme == pb.scheme
        and (pa.hostname or "") == (pb.hostname or "")
        and (pa.port or defaults.get(pa.scheme)) == (pb.port or defaults.get(pb.scheme))
    )


def split_credentials(url: str, *, name: str = "") -> tuple[str, tuple[str, str] | None]:
    """``https://u:p@host/x`` -> (``https://host/x``, (u, p)), the credentials percent-decoded
    (``p%40ss`` is ``p@ss``); a UsageError (naming index
    ``name``, the URL redacted) when ``url`` does not parse."""
    parts = parse_url(url)
    if isinstance(parts, str):
        what = f"index {name}: " if name else ""
        raise UsageError(
            f"{what}{redact(url)} is not a valid URL ({parts})",
            hint=_URL_HINT,
        )
    if parts.username is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    # percent-decoded, as pip and uv read them: p%40ss is the password p@ss
    return bare, (unquote(parts.username or ""), unquote(parts.password or ""))


def _redact_token(token: str, *, bare: bool) -> str:
    """One whitespace-free piece of text; ``bare``: also ``user:pass@host`` without ``//``."""
    at = token.rfind("@")
    slashes = token.find("//", 0, at if at >= 0 else len(token))
    if at >= 0:
        if _SCHEME.match(token, at + 1):
            return token  # ``name@https://...`` (PEP 508): a separator, no credentials
        if slashes < 0 and not bare:
            return token  # ``repo:tag@sha256:...`` in a message is no URL
        start = slashes + 2 if slashes >= 0 else 0
        return token if start == at else token[:start] + "***" + token[at:]
    if slashes < 0:
        return token
    # no "@": a "port" that is not a number may be a password that lost its "@"
    start = slashes + 2
    end = len(token)
    for sep in "/?#":
        i = token.find(sep, start)
        if i >= 0:
            end = min(end, i)
    authority = token[start:end]
    host, colon, port = authority.rpartition(":")
    if not colon or port[:1].isdigit() or port == "" or authority.endswith("]"):
        return token  # a port, perhaps mistyped (``:80vendor``), or an [IPv6] host
    return token[: start + len(host) + 1] + "***" + token[end:]


def redact(url: str) -> str:
    """``url`` with its userinfo hidden (``https://***@host/``), also when it does not parse
    as a URL; everything else stays readable."""
    return "".join(
        part if i % 2 else _redact_token(part, bare=True)
        for i, part in enumerate(_SPACE.split(url))
    )


def redact_text(text: str) -> str:
    """Free text (an exception's message, a traceback) with every ``scheme://...@``'s
    userinfo hidden; ``repo:tag@sha256:...`` and e-mail addresses stay as they are."""
    return "".join(
        part if i % 2 else _redact_token(part, bare=False)
        for i, part in enumerate(_SPACE.split(text))
    )


def project_url(index_url: str, project: str) -> str:
    """PEP 503: ``<index>/<normalized name>/``."""
    return index_url.rstrip("/") + "/" + quote(project) + "/"
