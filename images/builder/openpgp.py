"""Primary-key fingerprints of an OpenPGP key file (armored or binary), without gpg.

Before ``fetch``'s apt may trust a fetched archive key as ``signed-by``, the key file must
hold exactly the pinned key: the check the image build makes with ``gpg --show-keys``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

PUBLIC_KEY_TAG = 6
# what a public key file holds (RFC 4880 5.x): signature, public key, trust, user id, public
# subkey, user attribute. Anything else (a secret key: gpg imports its public part) is refused.
_KEY_FILE_TAGS = frozenset({2, 6, 12, 13, 14, 17})
_BEGIN = "-----BEGIN PGP"
_END = "-----END PGP"


class KeyFormatError(ValueError):
    pass


def _block_body(lines: list[str]) -> bytes:
    """The packets of one armored block (the lines between its BEGIN and END lines)."""
    body: list[str] = []
    in_body = False
    for raw in lines:
        line = raw.strip()
        if not in_body:
            if not line:
                in_body = True
            elif ":" not in line:  # no armor headers at all
                in_body = True
                body.append(line)
            continue
        if line.startswith("="):  # the CRC-24 checksum line
            break
        body.append(line)
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyFormatError(f"not a valid ASCII-armored key: {exc}") from None


def dearmor(data: bytes) -> bytes:
    """The packets of every ASCII-armored block, or ``data`` itself when it is binary.

    gpg (and apt, reading a ``signed-by`` file) takes every block of a file, so every block
    is read here too; text outside the blocks is refused rather than guessed at.
    """
    if not data.lstrip().startswith(_BEGIN.encode()):
        return data
    lines = data.decode("ascii", "replace").splitlines()
    out = b""
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line:
            continue
        if not line.startswith(_BEGIN):
            raise KeyFormatError(f"text outside an armored block: {line[:40]!r}")
        end = next((j for j in range(i, len(lines)) if lines[j].strip().startswith(_END)), None)
        if end is None:
            raise KeyFormatError(f"an armored block with no END line: {line!r}")
        out += _block_body(lines[i:end])
        i = end + 1
    return out


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    i = 0

    def need(n: int) -> None:
        if i + n > len(data):
            raise KeyFormatError(f"truncated packet header at byte {i}")

    while i < len(data):
        header = data[i]
        if not header & 0x80:
            raise KeyFormatError(f"not an OpenPGP packet at byte {i}")
        if header & 0x40:  # new format
            tag = header & 0x3F
            need(2)
            first = data[i + 1]
            if first < 192:
                length, i = first, i + 2
            elif first < 224:
                need(3)
                length, i = ((first - 192) << 8) + data[i + 2] + 192, i + 3
            elif first == 255:
                need(6)
                length, i = int.from_bytes(data[i + 2 : i + 6], "big"), i + 6
            else:
                raise KeyFormatError("partial body lengths do not occur in key files")
        else:  # old format
            tag = (header >> 2) & 0x0F
            size = {0: 1, 1: 2, 2: 4}.get(header & 0x03)
            if size is None:
                raise KeyFormatError("indeterminate packet lengths do not occur in key files")
            need(1 + size)
            length = int.from_bytes(data[i + 1 : i + 1 + size], "big")
            i += 1 + size
        if i + length > len(data):
            raise KeyFormatError("truncated packet")
        if tag not in _KEY_FILE_TAGS:
            raise KeyFormatError(f"packet type {tag} does not belong in a public key file")
        out.append((tag, data[i : i + length]))
        i += length
    return out


def primary_fingerprints(data: bytes) -> list[str]:
    """The 40-hex uppercase fingerprint of every primary (v4) public key in ``data``."""
    out: list[str] = []
    for tag, body in _packets(dearmor(data)):
        if tag != PUBLIC_KEY_TAG:
            continue
        if not body or body[0] != 4:
            raise KeyFormatError(f"a version {body[0] if body else '?'} key (only v4 is read)")
        digest = hashlib.sha1(  # the v4 fingerprint is SHA-1 by definition
            b"\x99" + len(body).to_bytes(2, "big") + body, usedforsecurity=False
        )
        out.append(digest.hexdigest().upper())
    return out
