"""`genrun serve REQUEST`: an OpenAI-compatible endpoint where every request leaves a sealed snapshot."""

import argparse
from pathlib import Path

from genrun.runner.interrupts import EXIT_CODES

from ._options import add_store
from ._output import print_error


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from genrun.runner.serve import API_KEY_ENV, DEFAULT_MAX_BODY_BYTES

    parser = subparsers.add_parser(
        "serve",
        help="serve a model over OpenAI's HTTP API, one sealed snapshot per request",
        description=("Load REQUEST's model once and answer POST /v1/completions and /v1/chat/completions (stream too), "
                     "GET /v1/models and /health. Each request is planned from REQUEST plus its own fields ([input], "
                     "[generation], seed), run on the shared engine and sealed in the store; the answer names its snapshot "
                     "(header x-genrun-snapshot, body 'genrun'). Unknown fields and requests that can never fit are answered "
                     "400, requests that do not fit beside those in flight 409 (Retry-After), before anything is written. "
                     "SIGTERM: stop accepting, seal every request in flight 'interrupted', stop the engine, exit 143."),
        epilog=(
            "example: genrun serve examples/vllm/tiny-vllm.toml --store snapshots\n"
            "  genrun serve: tiny-vllm on http://127.0.0.1:8000 (store /home/me/snapshots)\n"
            "then: curl -s http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\\n"
            "        -d '{\"model\": \"tiny-vllm\", \"prompt\": \"Count: 0\", \"max_tokens\": 8}'\n"
            "exit codes: 143/130 stopped by SIGTERM/SIGINT (every request in flight sealed), 2 refused at start"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("request", type=Path, help="the base request file (model, backend, [engine], default [generation])")
    add_store(parser, "snapshot store directory, one snapshot per answered request")
    parser.add_argument("--host", metavar="ADDR", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs --api-key)")
    parser.add_argument("--port", metavar="N", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--api-key", metavar="KEY", default=None,
                        help=f"require 'Authorization: Bearer KEY' on every request (default: ${API_KEY_ENV}, else none)")
    parser.add_argument("--max-body-bytes", metavar="N", type=int, default=DEFAULT_MAX_BODY_BYTES,
                        help=f"larger request bodies are answered 413 (default {DEFAULT_MAX_BODY_BYTES:,})")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.serve import serve

    stopped_by = serve(args.request, store=Path(args.store) if args.store else None, host=args.host, port=args.port, api_key=args.api_key,
                       max_body_bytes=args.max_body_bytes)
    if stopped_by is not None:
        print_error(f"genrun serve stopped by {stopped_by}: every request in flight was sealed, the engine is stopped")
        return EXIT_CODES.get(stopped_by, 130)
    return 0
