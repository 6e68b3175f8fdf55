"""`genrun rerun SNAPSHOT`: run a sealed snapshot again with changes, and say what the difference proves."""

import argparse
from pathlib import Path

from genrun.schemas import TokenBudget, layout
from genrun.snapshot_dir import SnapshotDir

from ._library_output import add_quiet_argument
from ._options import add_store
from ._output import print_json, print_quiet_result, shown_path, stdout_console


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rerun",
        help="rerun a snapshot with changes and compare",
        description=(
            "Plan a child snapshot from SNAPSHOT's frozen request (model, entry point and loader resolved as the parent "
            "resolved them), apply --set/--unset changes (validated like a request file), run it, and compare it with the "
            "parent: reproduced, diverged at token k of row r, stopped at the same place by EOS, went past the parent's "
            "stop, or how far a row went past its EOS. The child freezes lineage.json; the parent is only read."
        ),
        epilog=(
            "example: genrun rerun snapshots/…-tiny-budget-9b0e11 --set generation.max_new_tokens=64 --note 'EOS or cap?'\n"
            "  planned snapshots/…-tiny-budget-41c2d7 ...\n"
            "  verdict: row 0 went past the parent's stop: the parent was cut by max_new_tokens = 8 (parent 8 tokens,\n"
            "           child N, stopped by eos)\n"
            "VALUE is read as TOML (64, true, [1, 2], \"text\"), else as a plain string.\n"
            "exit codes: as 'genrun run' (the child's), 1 also when the parent is unsealed, damaged or its model/code changed"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("snapshot", help="a sealed snapshot (the parent): directory, id, or unique id prefix in $GENRUN_STORE or ./snapshots")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="change a request key, e.g. generation.max_new_tokens=64 or seed=1 (repeatable)")
    parser.add_argument("--unset", dest="unsets", action="append", default=[], metavar="KEY",
                        help="remove a [generation] key, or reset a field to its default (repeatable)")
    parser.add_argument("--suppress-eos", action="store_true",
                        help="add the parent's EOS ids to generation.suppress_tokens (how far does each row go past its EOS?)")
    parser.add_argument("--note", help="why this rerun is made (recorded in lineage.json)")
    parser.add_argument("--allow-changed", action="store_true",
                        help="rerun even though the model files or code differ from the parent's (recorded in lineage.json)")
    add_store(parser, "store for the child", default="the parent's store directory")
    parser.add_argument("--force", action="store_true", help="plan even if the pre-flight budget does not fit (recorded)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout (child, result, lineage, verdict)")
    add_quiet_argument(parser)  # and with it, as for run: the libraries' bars off and their notices through genrun
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.analysis import read_snapshot
    from genrun.analysis import render_verdict
    from genrun.analysis.lineage import lineage_verdict
    from genrun.runner.phases import PlanClock
    from genrun.runner.rerun import rerun_snapshot

    from .execute import render_summary
    from .plan import print_plan_summary

    def planned(child) -> None:
        if not args.json:
            print_plan_summary(shown_path(child), SnapshotDir(child).read(layout.TOKEN_BUDGET, TokenBudget))

    from ._target import list_items_command, refuse_sweep, resolve_target

    parent, is_sweep = resolve_target(args.snapshot, None)
    if is_sweep:
        refuse_sweep(parent, "rerun", f"Rerun one of its items ('{list_items_command(parent)}' lists them): genrun rerun ITEM --set KEY=VALUE, "
                                      "or run the sweep file again: genrun sweep SWEEP.toml")
    outcome = rerun_snapshot(
        parent, args.sets, args.unsets, suppress_eos=args.suppress_eos, note=args.note, allow_changed=args.allow_changed,
        store=args.store, force=args.force, live=False if args.json or args.quiet else None, on_planned=planned,
        clock=PlanClock(args.started),
    )
    child = read_snapshot(outcome.child)
    lineage = child.lineage
    assert lineage is not None, "rerun_snapshot writes the child's lineage.json before it returns"
    verdict = lineage_verdict(read_snapshot(outcome.parent), child, lineage)
    if args.json:
        print_json({
            "parent": str(outcome.parent), "child": str(outcome.child), "plan_timings": outcome.planned._asdict(),
            "result": outcome.result.model_dump(mode="json"),
            "lineage": lineage.model_dump(mode="json"), "verdict": verdict.model_dump(mode="json"),
        })
    else:
        render_summary(shown_path(outcome.child), outcome.result, outcome.planned)
        shown = {side: str(shown_path(Path(getattr(verdict, side)))) for side in ("parent", "child")}  # as `run` prints paths
        if args.quiet:
            print_quiet_result(args, outcome.child)  # the child alone: what a script takes (the verdict: `genrun report`)
        else:
            render_verdict(verdict.model_copy(update=shown), stdout_console)
    return outcome.result.exit_code
