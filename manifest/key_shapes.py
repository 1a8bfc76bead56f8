"""The value shapes that keys of several parts of the manifest share: the stack's name, a
project or directory name, an environment variable name, a relative file path, a Debian
package name, a ``MAJOR.MINOR`` line, a plain http(s) URL without credentials
(``plain_url``) and a path inside the repository (``repository_path``).

The key parsers match them with ``fullmatch``; ``manifest.key_table`` turns the same
expressions into the JSON Schema's patterns, so the schema checks what the reader checks.
"""

from __future__ import annotations

import re
from pathlib import Path

from core.urls import redact
from manifest.fields import KeyReader
from manifest.model import PLAIN_URL_RE

STACK_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # the top-level name
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.+-]+$")
REL_FILE_RE = re.compile(r"^[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")
LINE_RE = re.compile(r"^[0-9]+\.[0-9]+$")  # rules.line_map's versions, sdk.runtime


def plain_url(r: KeyReader, value: object, keypath: list[str]) -> str:
    url = r.string(value, keypath)
    if not PLAIN_URL_RE.fullmatch(url):
        raise r.error(
            keypath,
            f"{redact(url)!r} is not an http(s) URL without credentials",
            hint="credentials never go in the manifest; a mirror is a plain http(s) URL",
        )
    return url


def repository_path(r: KeyReader, value: object, keypath: list[str], hint: str) -> str:
    """A path relative to the repository root (a path source, the public key): neither
    absolute nor with a ``..`` part. Only its shape is checked; the file is read elsewhere."""
    path = r.string(value, keypath)
    if Path(path).is_absolute() or ".." in Path(path).parts:
        raise r.error(keypath, f"{path!r} is outside the repository", hint=hint)
    return path
