"""`genrun watch SNAPSHOT`: follow a run from any terminal while `genrun run` writes it (read-only; never imports torch)."""

import argparse
import json
import sys
import time
from pathlib import Path

from ._output import add_store_lookup, stderr_console, stdout_console

EPILOG = """\
Prints one line per update: units so far, windowed/recent/cumulative rate (per row), memory,
seconds since the last progress record and an ETA to the budget from the recent pace. Warns
STALL when no record arrived for --stall-after seconds. Exits when the snapshot is sealed, with
the run's own exit code; exits 4 when the writer is gone and the snapshot was never sealed; exits 5
when the snapshot is planned and, after --stall-after seconds, no process is executing it.
A sweep (by path or id) is followed item by item until it is sealed, then exits as 'genrun sweep' did.
Ctrl-C stops the watcher only (exit 130); the run it watches is not touched.

example: genrun watch snapshots/20261129T101500Z-long-3fa2c1
  running  4,096/65,536 tokens  window 2.9/s  recent 2.9/s  cum 3.1/s  RSS 7.2 GiB  last 12 s ago  ETA 6 h 12 min
  ...
  sealed: succeeded (exit 0), 16384 tokens; stopped by eos"""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "watch", help="follow a running snapshot from another terminal (read-only)",
        description="Follow SNAPSHOT's progress stream while 'genrun run' writes it, until it is sealed.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", metavar="SNAPSHOT", help="snapshot or sweep directory (made by 'genrun run', 'genrun plan' or 'genrun sweep'), id, or unique id prefix")
    add_store_lookup(parser)
    parser.add_argument("--stall-after", type=float, metavar="SECONDS",
                        help="warn when no progress record arrived for this long (default: 3 × the request's [progress] every_seconds)")
    parser.add_argument("--interval", type=float, default=1.0, metavar="SECONDS", help="how often to read the stream (default 1)")
    parser.add_argument("--heartbeat", type=float, default=30.0, metavar="SECONDS",
                        help="print an update at least this often even when nothing new arrived (default 30)")
    parser.add_argument("--json", action="store_true", help="stream one JSON object per update on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.errors import SnapshotError, UsageError
    from genrun.runner.interrupts import EXIT_CODES, RunInterrupted
    from genrun.schemas import layout

    from ._target import resolve_target

    for flag, value in (("--interval", args.interval), ("--heartbeat", args.heartbeat), ("--stall-after", args.stall_after)):
        if value is not None and value <= 0:
            raise UsageError(f"{flag} {value:g} must be a positive number of seconds")
    snapshot, is_sweep = resolve_target(args.snapshot, args.store)
    if not is_sweep and not (snapshot / layout.FROZEN_MANIFEST).is_file():
        raise SnapshotError(f"{snapshot} is not a genrun snapshot (no {layout.FROZEN_MANIFEST}); pass a directory made by 'genrun run'")
    try:
        return _watch_sweep(snapshot, args) if is_sweep else _watch(snapshot, args)
    except RunInterrupted as exc:  # the watcher's own Ctrl-C: nothing it watches is touched
        stderr_console.print(f"stopped watching ({exc.signal_name}); the run itself is not affected", markup=False, highlight=False, soft_wrap=True)
        return EXIT_CODES.get(exc.signal_name, 130)


def _watch_sweep(sweep: Path, args: argparse.Namespace) -> int:
    """One line each time another item finishes (or every --heartbeat seconds), then the sealed verdict."""
    from genrun.analysis._sweep_watch import assess_sweep

    printed: tuple[int, int | None] | None = None
    printed_at = 0.0
    while True:
        update = assess_sweep(sweep)
        if (update.finished, update.exit_code) != printed or time.monotonic() - printed_at >= args.heartbeat:
            if args.json:
                sys.stdout.write(json.dumps(update._asdict()) + "\n")
                sys.stdout.flush()
            else:
                stdout_console.print(update.message, markup=False, highlight=False, soft_wrap=True)
            printed, printed_at = (update.finished, update.exit_code), time.monotonic()
        if update.exit_code is not None:
            return update.exit_code
        time.sleep(args.interval)


def _watch(snapshot: Path, args: argparse.Namespace) -> int:
    from genrun.analysis.watch import ProgressTail, assess, default_stall_after

    stall_after = args.stall_after if args.stall_after is not None else default_stall_after(snapshot)
    tail = ProgressTail(snapshot)
    began = time.monotonic()
    last_printed: tuple | None = None
    printed_at = 0.0
    stall_reported = False
    while True:
        new = tail.poll()
        update = assess(snapshot, tail, stall_after, waited_s=time.monotonic() - began, stall_reported=stall_reported)
        stall_reported = update.stalled
        key = (update.state, update.records, update.stalled)
        if new or key != last_printed or time.monotonic() - printed_at >= args.heartbeat or update.exit_code is not None:
            _emit(update, args.json)
            last_printed, printed_at = key, time.monotonic()
        if update.exit_code is not None:
            return update.exit_code
        time.sleep(args.interval)


def _emit(update, as_json: bool) -> None:  # noqa: ANN001 - WatchUpdate, imported lazily
    if as_json:
        sys.stdout.write(update.model_dump_json() + "\n")
        sys.stdout.flush()
        if update.stalled or update.state == "incomplete":  # warnings also reach a person watching stderr
            stderr_console.print(update.message, markup=False, highlight=False, soft_wrap=True)
        return
    line = format_update(update)
    style = "bold red" if update.state in ("stalled", "incomplete", "not_executing") else "bold" if update.state == "sealed" else None
    stdout_console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


def format_update(u) -> str:  # noqa: ANN001 - WatchUpdate
    """One human line for an update; before the start record only its message (no count or unit is known yet)."""
    if u.state in ("sealed", "incomplete", "waiting", "not_executing") or u.records == 0:
        return u.message
    done = "—" if u.generated is None else f"{u.generated:,}"
    planned = f"/{u.planned_units:,}" if u.planned_units else ""
    rows = f" × {u.rows} rows" if u.rows and u.rows > 1 else ""
    parts = [f"{u.state:<8} {done}{planned} {u.unit}s{rows}",
             f"window {_rate(u.window_units_per_s)}", f"recent {_rate(u.recent_units_per_s)}", f"cum {_rate(u.cumulative_units_per_s)} per row",
             f"RSS {_bytes(u.rss_bytes)}"]
    if u.cuda_allocated_bytes is not None:
        parts.append(f"CUDA {_bytes(u.cuda_allocated_bytes)} alloc / {_bytes(u.cuda_reserved_bytes)} reserved")
    if u.seconds_since_last_record is not None:
        parts.append(f"last record {_duration(u.seconds_since_last_record)} ago")
    if u.eta_s is not None:
        parts.append(f"ETA {_duration(u.eta_s)}")
    line = "  ".join(parts)
    return f"{line}\n  {u.message}" if u.message else line


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}/s"


def _bytes(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**30:.2f} GiB" if value >= 2**30 else f"{value / 2**20:.0f} MiB"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    return f"{minutes:.0f} min" if minutes < 90 else f"{int(minutes // 60)} h {int(minutes % 60)} min"
