"""One HTTP answer of ``core.transport``, read whole or streamed within bounds, and what a
failed exchange means.

``Response.content`` reads a body whole, but never more than ``max_body`` bytes
(``TransportError`` of kind ``too-large`` past it); ``Response.read(n)`` streams it. A
``Content-Encoding`` (gzip, deflate) is decoded here, incrementally and never more than the
bytes asked for, so a small compressed body cannot inflate in memory; other encodings are
refused. Every read reports its bytes to the request's watch (``core.deadline``), and a read
cut off by the deadline, a stall or a cancel says so. Closing a response whose body was not
read drains a small body of known length (so that the connection can be kept alive) and
closes the socket of any other; a redirect's body is never read.

``failure`` turns what urllib3 raised into a ``TransportError`` of a kind the transport
retries (``connect``, ``timeout``, ``broken``) or not (``certificate``, ``proxy-auth``,
``invalid``), naming the host of an untrusted certificate and the proxy a request went
through.
"""

from __future__ import annotations

import json
import re
import ssl
import zlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import urllib3

from core.closing import Closing
from core.deadline import Deadline, RequestWatch
from core.errors import TransportError
from core.network import CERT_HINT, DIRECT, NetworkConfig, Proxy
from core.urls import parse_url, redact

DRAIN_LIMIT = 1 << 20  # read at most this much of an unwanted body to keep a connection
RETRY_AFTER_LIMIT = 30.0
MAX_BODY = 64 << 20  # what Response.content reads at most, unless the request says otherwise
_READ = 1 << 20  # the most Response.content asks for at a time
_RAW_CHUNK = 64 * 1024  # compressed bytes read at a time to decode


class _Decoder:
    """gzip or deflate, decoded a bounded piece at a time."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in ("gzip", "x-gzip")
        self._obj = self._new()
        self._tail = b""
        self._started = False

    def _new(self) -> Any:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)

    @property
    def has_tail(self) -> bool:
        return bool(self._tail)

    @property
    def complete(self) -> bool:
        return bool(self._obj.eof)

    def decompress(self, data: bytes, amt: int) -> bytes:
        data = self._tail + data if self._tail else data
        try:
            out: bytes = self._obj.decompress(data, amt)
        except zlib.error:
            if self._started or self._gzip:
                raise
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate without its zlib header
            out = self._obj.decompress(data, amt)
        self._started = True
        self._tail = self._obj.unconsumed_tail
        if self._obj.eof:
            rest = self._obj.unused_data
            if self._gzip and rest:  # another gzip member follows
                self._obj = self._new()
                self._tail = rest
        return out

    def flush(self) -> bytes:
        out: bytes = self._obj.flush()
        return out


class Response(Closing):
    """One answer: ``status``, ``reason``, ``headers`` (case-insensitive), the final ``url``
    (after redirects), and the body, read whole (``content``, at most ``max_body`` bytes) or
    streamed (``read``). Close it (or use it as a context manager) when done."""

    def __init__(
        self,
        raw: urllib3.BaseHTTPResponse,
        url: str,
        *,
        method: str = "GET",
        deadline: Deadline | None = None,
        watch: RequestWatch | None = None,
        max_body: int = MAX_BODY,
        eager: bool = False,
    ) -> None:
        self._raw = raw
        self.status: int = raw.status
        self.reason: str = raw.reason or ""
        self.headers: Mapping[str, str] = raw.headers
        self.url = url
        self._method = method
        self._deadline = deadline or Deadline(None)
        self._watch = watch
        self._max_body = max_body
        self._eager = eager  # every read returns what has arrived (progress for the watch)
        self._content: bytes | None = None
        self._decoder: _Decoder | None = None
        self._decoder_ready = False
        self._pending = b""
        self._eof = False
        self._broken = False
        self._closed = False

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = self.read_all(self._max_body)
        return self._content

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        return json.loads(self.content)

    def read_all(self, limit: int) -> bytes:
        """The whole (decoded) body; ``TransportError`` kind ``too-large`` past ``limit``
        bytes, found out before more than ``limit + 1`` bytes are held. An answer to HEAD has
        no body, whatever its Content-Length says (the size of what GET would send)."""
        if self._method == "HEAD":
            return b""
        announced = self.headers.get("Content-Length", "")
        if not self.encoding and announced.isdigit() and int(announced) > limit:
            raise self._too_large(limit)
        parts: list[bytes] = []
        size = 0
        while chunk := self.read(min(_READ, limit - size + 1)):
            size += len(chunk)
            if size > limit:
                raise self._too_large(limit)
            parts.append(chunk)
        return b"".join(parts)

    @property
    def encoding(self) -> str:
        """The ``Content-Encoding`` ("" for none or identity)."""
        value = self.headers.get("Content-Encoding", "").strip().lower()
        return "" if value == "identity" else value

    def read(self, amt: int, *, eager: bool = False) -> bytes:
        """Up to ``amt`` bytes of the (decoded) body; b"" at its end. ``eager``: return as
        soon as some bytes have arrived (a stream of events), instead of waiting for ``amt``."""
        if amt <= 0 or self._eof:
            return b""
        if self._pending:
            out, self._pending = self._pending[:amt], self._pending[amt:]
            return out
        decoder = self._get_decoder()
        if decoder is None:
            out = self._raw_read(amt, eager=eager)
        else:
            out = self._decode(decoder, amt, eager=eager)
        if not out:
            self._deadline.check(self._watch, self._method, self.url)
            if decoder is not None and not decoder.complete:
                raise self._unreadable(
                    f"reading {redact(self.url)}: the {self.encoding} body ends before its end",
                    kind="broken",
                    name="DecodeError",
                    detail=f"truncated {self.encoding} body",
                )
            self._eof = True
            if self._watch is not None:
                self._deadline.end(self._watch)
        return out

    def iter_bytes(self, size: int, *, eager: bool = False) -> Iterator[bytes]:
        """The body in pieces of at most ``size`` bytes; ``eager``: each piece as soon as it
        arrives (Server-Sent Events: one event is not held back until ``size`` bytes came)."""
        while chunk := self.read(size, eager=eager):
            yield chunk

    def retry_after(self) -> float | None:
        """A numeric ``Retry-After`` in seconds (at most 30), else None."""
        value = self.headers.get("Retry-After", "")
        if value.isdigit():
            return min(float(value), RETRY_AFTER_LIMIT)
        return None

    def close(self) -> None:
        """Give the connection back for keep-alive only once the response is fully read: an
        unread body would break the next request on it (http.client's ResponseNotReady). An
        unread body that is big, or of unknown length, closes the socket instead."""
        if self._closed:
            return
        self._closed = True
        raw = self._raw
        import urllib3.exceptions  # loaded already: raw is urllib3's

        try:
            remaining = raw.length_remaining
            if not self._eof and (self._broken or remaining is None or remaining > DRAIN_LIMIT):
                raw.close()
            else:
                try:
                    raw.drain_conn()
                except (urllib3.exceptions.HTTPError, OSError):
                    raw.close()
            raw.release_conn()
        finally:
            if self._watch is not None:
                self._deadline.end(self._watch)

    def discard(self) -> None:
        """Close without reading (a redirect): the connection is closed, not drained."""
        self._closed = True
        self._raw.close()
        self._raw.release_conn()

    # -- internals

    def _get_decoder(self) -> _Decoder | None:
        if not self._decoder_ready:
            self._decoder_ready = True
            encoding = self.encoding
            if encoding in ("gzip", "x-gzip", "deflate"):
                self._decoder = _Decoder(encoding)
            elif encoding:
                raise self._unreadable(
                    f"reading {redact(self.url)}: the server sent Content-Encoding {encoding}, "
                    "which this tool does not decode (it asks for gzip or deflate only)",
                    kind="invalid",
                    name="UnsupportedEncoding",
                    detail=f"Content-Encoding {encoding}",
                )
        return self._decoder

    def _raw_read(self, amt: int, *, eager: bool = False) -> bytes:
        import urllib3.exceptions  # loaded already: raw is urllib3's

        try:
            if eager or self._eager:
                data = self._raw.read1(amt, decode_content=False)
            else:
                data = self._raw.read(amt, decode_content=False)
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._broken = True
            what = f"reading {redact(self.url)}"
            raise self._deadline.cut_off(self._watch, self._method, self.url) or failure(
                exc, what, url=self.url
            ) from None
        if self._watch is not None:
            self._watch.received(len(data))
        return data

    def _decode(self, decoder: _Decoder, amt: int, *, eager: bool = False) -> bytes:
        try:
            while True:
                if decoder.has_tail:
                    out = decoder.decompress(b"", amt)
                else:
                    raw = self._raw_read(_RAW_CHUNK, eager=eager)
                    if not raw:
                        out = decoder.flush()
                        if len(out) > amt:
                            out, self._pending = out[:amt], out[amt:]
                        return out
                    out = decoder.decompress(raw, amt)
                if out:
                    return out
        except zlib.error as exc:
            raise self._unreadable(
                f"reading {redact(self.url)}: the {self.encoding} body does not decode: {exc}",
                kind="broken",
                name="DecodeError",
                detail=short(exc),
            ) from None

    def _too_large(self, limit: int) -> TransportError:
        return self._unreadable(
            f"{self._method} {redact(self.url)}: the body has more than {limit} bytes",
            kind="too-large",
            name="BodyTooLarge",
            detail=f"more than {limit} bytes",
        )

    def _unreadable(self, message: str, *, kind: str, name: str, detail: str) -> TransportError:
        """The error of a body that is not read on; its connection is never reused."""
        self._broken = True
        return TransportError(message, kind=kind, name=name, detail=detail)


def failure(
    exc: BaseException,
    what: str,
    *,
    url: str = "",
    proxy: Proxy | None = None,
    network: NetworkConfig = DIRECT,
) -> TransportError:
    """What a failed urllib3 request or read means, as a ``TransportError`` of a kind."""
    import urllib3.exceptions  # the failure of a urllib3 request, or a timeout

    verify = _cause(exc, ssl.SSLCertVerificationError)
    if verify is not None:
        parts = parse_url(url)
        host = "" if isinstance(parts, str) else (parts.hostname or "")
        reason = getattr(verify, "verify_message", "") or short(verify)
        detail = f"the certificate of {host} is not trusted ({reason})"
        return TransportError(
            f"{what}: {detail}; trusted now: {network.trust.describe()}",
            kind="certificate",
            name="CertificateError",
            detail=detail,
            hint=CERT_HINT,
        )
    via = f" through {proxy.describe()}" if proxy is not None else ""
    if isinstance(exc, urllib3.exceptions.ProxyError):
        reason = short(exc)
        refused = _cause(exc, urllib3.exceptions.NewConnectionError)
        if refused is not None:
            reason = "cannot connect: " + str(refused).rpartition("new connection: ")[2]
        if "407" in reason:
            return TransportError(
                f"{what}{via}: the proxy wants credentials (407 Proxy Authentication Required)",
                kind="proxy-auth",
                name="ProxyError",
                detail="407 Proxy Authentication Required",
                hint="write the proxy's user and password before its host in the proxy URL, "
                "as USER:PASSWORD@ (percent-encoded)",
            )
        detail = f"through {proxy.describe() if proxy else 'the proxy'}: {reason}"
        return TransportError(f"{what}: {detail}", kind="connect", name="ProxyError", detail=detail)
    if isinstance(exc, (urllib3.exceptions.ReadTimeoutError, TimeoutError)):
        kind = "timeout"
    elif isinstance(
        exc,
        (
            urllib3.exceptions.ConnectTimeoutError,  # NewConnectionError too: refused, no DNS
            urllib3.exceptions.SSLError,
        ),
    ):
        kind = "connect"
    elif isinstance(exc, urllib3.exceptions.LocationValueError):
        kind = "invalid"
    else:
        kind = "broken"
    name, detail = type(exc).__name__, short(exc)
    return TransportError(f"{what}{via}: {name}: {detail}", kind=kind, name=name, detail=detail)


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first exception of type ``kind`` in its chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        for arg in getattr(current, "args", ()):
            if isinstance(arg, kind):
                return arg
        current = current.__cause__ or current.__context__
    return None


_POOL = re.compile(r"^\w+\(host=[^)]*\): ")  # urllib3's "HTTPPool(host=..., port=...): "


def short(exc: BaseException) -> str:
    text = redact(_POOL.sub("", str(exc)))
    return text if len(text) < 200 else text[:200] + "..."
