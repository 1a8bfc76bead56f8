"""The value shapes that keys of several parts of the manifest share: a project or directory
name, an environment variable name, a relative file path, a Debian package name, a
``MAJOR.MINOR`` line, and a plain http(s) URL without credentials (``plain_url``).

The key parsers match them with ``fullmatch``; ``manifest.schema`` turns the same expressions
into the JSON Schema's patterns, so the schema checks what the reader checks.
"""

from __future__ import annotations

import re

from core.urls import redact
from manifest.fields import KeyReader
from manifest.model import PLAIN_URL_RE

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")
_REL_FILE_RE = re.compile(r"^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")
_LINE_RE = re.compile(r"^[0-9]+\.[0-9]+$")  # rules.line_map's versions, sdk.runtime


def plain_url(r: KeyReader, value: object, keypath: list[str]) -> str:
    url = r.string(value, keypath)
    if not PLAIN_URL_RE.fullmatch(url):
        raise r.error(
            keypath,
            f"{redact(url)!r} is not an http(s) URL without credentials",
            hint="credentials never go in the manifest; a mirror is a plain http(s) URL",
        )
    return url
