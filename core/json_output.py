"""The JSON documents of ``--json``: one envelope, one way to write them.

Every document is a JSON object with ``"schema": "build-image/<command>/<n>"`` (``n`` grows
only when a key changes meaning or goes away; a new key does not change it), written with
sorted keys and a two-space indent, so the same result prints the same bytes. Under
``--json`` stdout carries that one document and nothing else; the human summary and every
note go to stderr. When a command fails before its document is printed, stdout carries an
error document instead (``error_document``), and ``error[code]`` is on stderr as always.
docs/json.md describes each shape.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from core.errors import BuildImageError
from core.urls import redact_text

SCHEMA_PREFIX = "build-image"
ERROR_SCHEMA = f"{SCHEMA_PREFIX}/error/1"


def schema(command: str, version: int = 1) -> str:
    """``build-image/<command>/<version>``: the versioned name of a command's document."""
    return f"{SCHEMA_PREFIX}/{command}/{version}"


def document(command: str, body: Mapping[str, Any], *, version: int = 1) -> dict[str, Any]:
    """``body`` with its ``schema`` key; ``body`` must not bring its own."""
    if "schema" in body:
        raise ValueError("a document's body has no schema key of its own")
    return {"schema": schema(command, version), **body}


def render_json(doc: Any) -> str:
    """Sorted keys, two-space indent, ASCII only (other characters as ``\\uXXXX``), no
    trailing newline (the console adds it)."""
    return json.dumps(doc, indent=2, sort_keys=True)


def error_document(
    command: str | None, *, code: str, message: str, hint: str | None, exit_code: int
) -> dict[str, Any]:
    """What stdout carries under ``--json`` when the command failed before its document:
    the error's code, message and hint (credentials redacted) and the exit code."""
    return {
        "command": command,
        "error": {
            "code": code,
            "exit_code": exit_code,
            "hint": redact_text(hint) if hint else None,
            "message": redact_text(message),
        },
        "schema": ERROR_SCHEMA,
    }


def error_document_of(
    command: str | None, exc: BuildImageError, *, exit_code: int
) -> dict[str, Any]:
    """``error_document`` of one of the tool's errors."""
    return error_document(
        command, code=exc.code, message=exc.message, hint=exc.hint, exit_code=exit_code
    )
