"""``vllm`` console script of the demo stand-in: ``vllm serve MODEL`` and ``vllm --version``."""

from __future__ import annotations

import argparse
import json
import sys

import vllm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--version", action="version", version=vllm.__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a model (demo: report the platform and exit)")
    serve.add_argument("model", nargs="?", default="demo-model")
    serve.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args = parser.parse_args(argv)
    if args.command == "serve":
        plugins = vllm.load_platform_plugins()
        plan = {"model": args.model, "platforms": plugins, "version": vllm.__version__}
        sys.stdout.write(json.dumps(plan, sort_keys=True) + "\n")
        return 0 if plugins else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
