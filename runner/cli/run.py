"""`genrun run REQUEST`: plan and execute in one go."""

import argparse

from genrun.schemas import TokenBudget, layout
from genrun.snapshot_dir import SnapshotDir

from genrun.runner.interrupts import RunInterrupted

from ._interrupt import report_interrupt
from ._output import print_json, print_quiet_result, working
from .execute import add_approval_arguments
from .plan import add_plan_arguments, planning_status, print_plan_summary


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "run",
        help="plan and execute a request",
        description="Freeze REQUEST into a snapshot, run it with full instrumentation, and seal the snapshot.",
        epilog=(
            "example: genrun run examples/tiny.toml\n"
            "  planned snapshots/20261129T101500Z-tiny-3fa2c1 (plan digest 9b1e4c0d2f7a…)\n"
            "    budget: 64 tokens (request), prompt 5 tokens, context 256\n"
            "    memory: needs ~2.35 GiB of cpu: the model 328.5 KiB (weights 309.3 KiB + KV cache 19.0 KiB + activations 192 B) + margin 2.35 GiB (…)\n"
            "  succeeded: snapshots/20261129T101500Z-tiny-3fa2c1\n"
            "    sequence 0: eos (id 2) after 13 tokens\n"
            "Ctrl-C before execution starts keeps the plan (exit 130): run it later with 'genrun execute ID'.\n"
            "exit codes: 0 success (any stop reason), 1 generation failed, 2 request refused,\n"
            "            3 pre-flight budget refused, 130/143 interrupted (SIGINT/SIGTERM)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_plan_arguments(parser)
    add_approval_arguments(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.execute import execute_snapshot
    from genrun.runner.phases import PlanClock
    from genrun.runner.plan import plan_request

    from .execute import render_summary

    snapshot = None
    try:
        with working(f"planning {args.request}") as say:
            # the process's start and planning come first: their share is shown beside execution's
            clock = PlanClock(args.started, on_enter=planning_status(say, args.request))
            snapshot = plan_request(args.request, store=args.store, force=args.force, clock=clock)
        if not args.json:
            print_plan_summary(snapshot, SnapshotDir(snapshot).read(layout.TOKEN_BUDGET, TokenBudget))
        planned = clock.stop()
        result = execute_snapshot(snapshot, require_approval=args.require_approval, allowed_signers=args.allowed_signers, live=False if args.json or args.quiet else None)
    except KeyboardInterrupt:
        print_quiet_result(args, snapshot)
        return report_interrupt(snapshot)
    except RunInterrupted as exc:  # genrun's own handlers (installed by main) before execution started
        print_quiet_result(args, snapshot)
        return report_interrupt(snapshot, exc.signal_name)
    if args.json:
        print_json({"snapshot": str(snapshot), "plan_timings": planned._asdict(), "result": result.model_dump(mode="json")})
    else:
        render_summary(snapshot, result, planned)
        print_quiet_result(args, snapshot)
    return result.exit_code
