"""`genrun sweep`: plan and run many items (grid x dataset), each an ordinary snapshot, sealed as one sweep."""

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genrun.runner.errors import RequestError

from ._library_output import add_quiet_argument
from ._options import add_store
from ._output import counted, print_json, print_quiet_result, shown_path, stderr_console, working

if TYPE_CHECKING:  # rich.progress is imported only when the bar is drawn
    from rich.progress import TaskID

ACTIONS = ("run", "plan", "execute", "resume")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a grid x dataset of requests; every item its own snapshot, the sweep sealed as a whole",
        description=(
            "genrun sweep [run] SWEEP.toml      validate every item, plan them all, run them, seal the sweep\n"
            "genrun sweep plan SWEEP.toml       validate and freeze only (nothing runs)\n"
            "genrun sweep execute SWEEP         run a planned sweep\n"
            "genrun sweep resume SWEEP          finish a sweep whose driver was killed (finished items are not re-run)\n"
            "SWEEP is the sweep's directory, its id, or a unique id prefix in the store (--store)"
        ),
        epilog=(
            "example: genrun sweep examples/sweep/countdowns.toml\n"
            "  planned 6 items in snapshots/20261201T010000Z-countdowns-3fa2c1\n"
            "  [1/6] item 0 succeeded  eos  5 tokens  20261201T010000Z-countdowns-0000-a1b2c3  (local-0)\n"
            "  ...\n"
            "  sweep completed: 6 succeeded\n"
            "exit codes: 0 every item succeeded, 1 an item failed or was lost, 2 an item refused (nothing written),\n"
            "            3 an item's pre-flight budget refused (nothing written), 130/143 interrupted"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("target", nargs="+", metavar="[ACTION] PATH",
                        help="SWEEP.toml, or run/plan and SWEEP.toml, or execute/resume and a sweep (directory, id or unique id prefix)")
    add_store(parser, "snapshot store for the sweep and its items (run, plan), or to look a sweep id up in "
                      "(execute, resume; its items are the ones beside it, wherever that store is now)")
    parser.add_argument("--force", action="store_true", help="plan items whose pre-flight budget does not fit (recorded in each)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_quiet_argument(parser)  # and with it, as for run: what libraries print (vLLM's engine) goes to the items' logs
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    action, path = _action(args.target)
    from genrun.runner.sweep.store import plan_sweep

    if action in ("run", "plan"):
        with working(f"planning the sweep {path}: checking its items") as say:
            sweep_dir = plan_sweep(path, args.store, force=args.force, on_item=None if args.json else partial(_checking, say))
        if not args.json:
            count = _item_count(sweep_dir)
            stderr_console.print(f"planned {counted(count, 'item')} in {shown_path(sweep_dir)}", markup=False, highlight=False, soft_wrap=True)
        if action == "plan":
            if args.json:
                print_json({"sweep": str(sweep_dir)})
            print_quiet_result(args, sweep_dir)
            return 0
    else:
        sweep_dir = _planned_sweep(path, args.store)
    exit_code = _execute(sweep_dir, args.json)
    print_quiet_result(args, sweep_dir)
    return exit_code


def _planned_sweep(ref: str, store: str | None) -> Path:
    """The sweep `execute`/`resume` was given, as a directory, an id or a unique id prefix, resolved as every command
    resolves SNAPSHOT (`execute_sweep` then refuses a directory that is not a sweep)."""
    from genrun.runner.store import find_snapshot

    return find_snapshot(ref, store)


def _action(target: list[str]) -> tuple[str, str]:
    if len(target) == 1:
        return "run", target[0]
    if len(target) == 2 and target[0] in ACTIONS:
        return target[0], target[1]
    raise RequestError(f"'genrun sweep {' '.join(target)}': give SWEEP.toml, or one of {', '.join(ACTIONS)} followed by one path")


def _execute(sweep_dir: Path, as_json: bool) -> int:
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.executors import make_pool

    progress = SweepProgress(live=not as_json and sys.stderr.isatty())
    with progress:
        run = execute_sweep(sweep_dir, make_pool, on_event=progress.event)
    if run.leftovers:
        stderr_console.print(f"stopped {len(run.leftovers)} process(es) an earlier driver of this sweep left running "
                             f"(PIDs {', '.join(map(str, run.leftovers))}) before resuming", markup=False, highlight=False, soft_wrap=True)
    if as_json:
        print_json({"sweep": str(run.sweep_dir), "exit_code": run.exit_code, "result": run.result.model_dump(mode="json")})
    else:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(run.result.counts.items()))
        stderr_console.print(f"sweep {run.result.status}: {counts}  ({shown_path(run.sweep_dir)})", markup=False, highlight=False, soft_wrap=True)
    return run.exit_code


def _checking(say: Callable[[str], None], done: int, total: int) -> None:
    say(f"planning the sweep: validated {done}/{total} items")
    if done == total or done % 50 == 0:
        stderr_console.print(f"validated {done}/{total} items", markup=False, highlight=False, soft_wrap=True)


def _item_count(sweep_dir: Path) -> int:
    from genrun.runner.sweep.store import open_sweep

    return len(open_sweep(sweep_dir)[1].items)


class SweepProgress:
    """One line per item finished on stderr; a rich overall bar as well when stderr is a TTY."""

    def __init__(self, live: bool) -> None:
        self._bar = None
        self._task: "TaskID | None" = None
        if live:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=stderr_console)

    def __enter__(self) -> "SweepProgress":
        if self._bar is not None:
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)

    def event(self, kind: str, outcome, done: int, total: int) -> None:  # noqa: ANN001 (ItemOutcome | None)
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("items", total=total)
            self._bar.update(self._task, completed=done)
        if kind == "retry" or outcome is None:
            return
        reasons = ",".join(outcome.stop_reasons) or "-"
        generated = "-" if outcome.generated is None else str(outcome.generated)
        tries = f"  after {len(outcome.attempts)} attempts" if len(outcome.attempts) > 1 else ""
        line = f"[{done}/{total}] item {outcome.index} {outcome.status}  {reasons}  {generated} units  {outcome.snapshot_id}{tries}"
        if outcome.message and outcome.status != "succeeded":
            line += f"  ({outcome.message.splitlines()[0][:160]})"
        stderr_console.print(line, markup=False, highlight=False, soft_wrap=True)
