"""`genrun execute SNAPSHOT`: run a planned snapshot with full instrumentation and seal it."""

import argparse
from pathlib import Path

from rich.markup import escape

from genrun.schemas import GenerationStop, Result, layout
from genrun.schemas.stop import describe_stop
from genrun.schemas.rendering import human_bytes

from ._output import print_json, stderr_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "execute",
        help="run a planned snapshot",
        description=(
            "Verify that SNAPSHOT's frozen files, genrun's code and the model are unchanged, run it with "
            "full instrumentation (effective config, progress, token ids, stop reasons), and seal it."
        ),
        epilog=(
            "example: genrun execute snapshots/20261129T101500Z-tiny-3fa2c1\n"
            "  succeeded: snapshots/20261129T101500Z-tiny-3fa2c1\n"
            "    sequence 0: eos (id 2) after 4 tokens\n"
            "exit codes: 0 success (any stop reason), 1 generation failed or refused, 130/143 interrupted"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", help="snapshot directory made by 'genrun plan'")
    parser.add_argument("--require-approval", action="store_true", help="refuse to run without a valid approve sign-off")
    parser.add_argument("--json", action="store_true", help="print result.json's content on stdout and nothing else there")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.execute import execute_snapshot

    snapshot = Path(args.snapshot)
    result = execute_snapshot(snapshot, require_approval=args.require_approval, live=False if args.json else None)
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        render_summary(snapshot, result)
    return result.exit_code


_STATUS_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow"}


def render_summary(snapshot_dir: Path, result: Result) -> None:
    """Human summary on stderr: status, per-sequence stop reasons, counts, timings."""
    style = _STATUS_STYLE.get(result.status, "white")
    out = stderr_console
    out.print(f"[bold {style}]{result.status}[/]: {escape(str(snapshot_dir))}")
    for seq in _stops(snapshot_dir):
        out.print(f"  {escape(_describe_row(seq))}")
    rate = f", {result.units_per_s:,.1f} {result.unit}s/s" if result.units_per_s is not None else ""
    out.print(f"  generated {result.generated:,} {result.unit}s{rate}")
    if result.produced_seconds is not None:
        requested = f" of {result.requested_seconds:g} s requested" if result.requested_seconds is not None else ""
        out.print(f"  produced {result.produced_seconds:.2f} s{requested}")
    t = result.timings
    first = "first step" if result.unit == "step" else f"first {result.unit}"
    phases = [("load", t.load_s), (first, t.first_token_s), ("decode", t.decode_s), ("total", t.total_s)]
    out.print("  time: " + ", ".join(f"{name} {value:.2f} s" for name, value in phases if value is not None))
    if result.peak_memory.rss_bytes is not None:
        out.print(f"  peak rss {human_bytes(result.peak_memory.rss_bytes)}")
    if result.exception is not None:
        out.print(f"  [red]exception[/] {escape(result.exception.type)}: {escape(result.exception.message)}")
    if result.signal is not None:
        kept = "partial outputs" if result.unit == "step" else "partial ids"
        out.print(f"  [yellow]interrupted by {result.signal}[/]; {kept} and progress are kept")
    for note in result.notes:
        out.print(f"  note: {escape(note)}")


def _stops(snapshot_dir: Path) -> tuple:
    path = Path(snapshot_dir) / layout.STOP
    if not path.is_file():
        return ()
    return GenerationStop.model_validate_json(path.read_bytes()).sequences


def _describe_row(seq) -> str:
    """`sequence 0: eos (id 2) after 13 tokens`, or for a pipeline `pipeline call 0: completed after 10 of 10 steps`."""
    if seq.steps_planned is not None:
        return f"pipeline call {seq.index}: {describe_stop(seq)} after {seq.generated:,} of {seq.steps_planned:,} steps"
    return f"sequence {seq.index}: {describe_stop(seq)} after {seq.generated:,} tokens"
