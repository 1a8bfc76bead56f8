"""``vllm`` console script of the demo stand-in: ``vllm serve MODEL`` and ``vllm --version``.

``vllm serve MODEL [--host H] [--port P] [--served-model-name NAME] [...]`` loads the platform
plugins as vLLM does, then runs the stand-in OpenAI-compatible server (``vllm.server``); other
vLLM options are accepted and ignored. ``--dry-run`` prints the plan (model, platforms,
version) as JSON and exits.
"""

from __future__ import annotations

import argparse
import json
import sys

import vllm


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("--version", action="version", version=vllm.__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a model (demo: the stand-in server)")
    serve.add_argument("model", nargs="?", default="demo-model")
    serve.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a server in a container
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default=None)
    serve.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    args, extra = parser.parse_known_args(argv)
    if args.command == "serve":
        plugins = vllm.load_platform_plugins()
        plan = {"model": args.model, "platforms": plugins, "version": vllm.__version__}
        sys.stdout.write(json.dumps(plan, sort_keys=True) + "\n")
        sys.stdout.flush()
        if args.dry_run or not plugins:
            return 0 if plugins else 1
        from vllm.server import serve as run_server

        return run_server(args.model, args.host, args.port, args.served_model_name, extra)
    return 2


if __name__ == "__main__":
    sys.exit(main())
