"""The manifest's command of ``build_image.py``: ``schema``.

``add_commands`` registers it next to its handler ``(args, console) -> int``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.console import Console
from core.errors import ExitCode


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of a stack manifest (for editor completion)",
        description="Print the JSON Schema (draft 2020-12) of a stack manifest, generated from "
        "the manifest's key table, with sorted keys: the same bytes every run. "
        "docs/stack.schema.json is this output, committed; the shipped stacks name it on "
        "their first line, so an editor with the YAML language server completes and checks "
        "their keys.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the schema to FILE (atomically) instead of printing it, e.g. "
        "docs/stack.schema.json",
    )
    p.set_defaults(handler=cmd_schema)


def cmd_schema(args: argparse.Namespace, console: Console) -> int:
    from core.fsutil import atomic_write_text
    from manifest.schema import schema_json

    schema = schema_json()
    if args.out is None:
        console.out.write(schema)
    else:
        atomic_write_text(args.out, schema)
        console.note(f"wrote {args.out}")
    return int(ExitCode.OK)
