"""The manifest's command of ``build_image.py``: ``schema``.

``add_commands`` registers it next to its handler ``(args, console) -> int``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.console import Console
from core.errors import ExitCode, ManifestError

# the checkout around this package: docs/manifest.md, which the schema is generated from
REPOSITORY = Path(__file__).resolve().parents[1]


def add_commands(sub: Any) -> None:
    p = sub.add_parser(
        "schema",
        help="print the JSON Schema of a stack manifest (for editor completion)",
        description="Print the JSON Schema (draft 2020-12) of a stack manifest, generated from "
        "the manifest reader and docs/manifest.md, with sorted keys: the same bytes every run. "
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
    from manifest.schema import REFERENCE, schema_json

    reference = REPOSITORY / REFERENCE
    try:
        text = reference.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(
            f"{reference}: no such file; the schema is generated from the manifest reference",
            hint="run `build_image.py schema` in a checkout of vllm-musa-image; an installed "
            "copy can use the checkout's committed docs/stack.schema.json",
        ) from None
    schema = schema_json(text)
    if args.out is None:
        console.out.write(schema)
    else:
        atomic_write_text(args.out, schema)
        console.note(f"wrote {args.out}")
    return int(ExitCode.OK)
