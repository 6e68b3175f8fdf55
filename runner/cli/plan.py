"""`genrun plan REQUEST`: freeze a request into a snapshot without running it."""

import argparse
from collections.abc import Callable

from rich.markup import escape

from genrun.analysis import describe_memory
from genrun.schemas import TokenBudget, layout
from genrun.schemas.budget import describe_requested
from genrun.schemas.digests import plan_digest
from genrun.schemas.rendering import human_bytes
from genrun.snapshot_dir import SnapshotDir

from ._library_output import add_quiet_argument
from ._options import add_store
from ._output import print_json, print_quiet_result, stderr_console, working


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="validate and freeze a request (no generation)",
        description="Validate REQUEST, hash code and weights, check the budget (in the backend's units) and memory, and freeze a snapshot.",
        epilog="example: genrun plan examples/tiny.toml\n  planned snapshots/20261129T101500Z-tiny-3fa2c1 (plan digest 9b1e…)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_plan_arguments(parser)
    parser.set_defaults(handler=handle)


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by `plan` and `run`."""
    parser.add_argument("request", help="request file (.toml or .json)")
    add_store(parser)
    parser.add_argument("--force", action="store_true", help="plan even if the pre-flight budget does not fit (recorded)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    add_quiet_argument(parser)


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.phases import PlanClock
    from genrun.runner.plan import plan_request

    with working(f"planning {args.request}") as say:
        snapshot = plan_request(args.request, store=args.store, force=args.force, clock=PlanClock(on_enter=planning_status(say, args.request)))
    budget = SnapshotDir(snapshot).read(layout.TOKEN_BUDGET, TokenBudget)
    if args.json:
        print_json({"snapshot": str(snapshot), "plan_digest": plan_digest(snapshot), "token_budget": budget.model_dump(mode="json")})
    else:
        print_plan_summary(snapshot, budget)
        print_quiet_result(args, snapshot)
    return 0


PLANNING_STEPS = {
    "startup": "starting", "checks": "checking the request", "imports": "importing the backend's libraries",
    "hashing": "hashing code, inputs and weights", "budget": "checking the budget and memory",
    "environment": "recording the environment", "freeze": "writing the snapshot",
}
"""What a terminal's status line says in each planning phase (`genrun.runner.phases.PlanPhase`)."""


def planning_status(say: Callable[[str], None], request: str) -> Callable[[str], None]:
    """A `PlanClock` `on_enter` that puts the phase on the status line: `planning req.toml: hashing code, inputs and weights`."""
    return lambda phase: say(f"planning {request}: {PLANNING_STEPS[phase]}")


def print_plan_summary(snapshot, budget: TokenBudget) -> None:
    """Where the plan is, the budget in one line, and the memory estimate by part in another."""
    stderr_console.print(f"planned [bold]{escape(str(snapshot))}[/] (plan digest {plan_digest(snapshot)[:12]}…)", soft_wrap=True)
    parts = [f"budget: {describe_requested(budget)}"]
    if budget.prompt_tokens is not None:
        parts.append(f"prompt {budget.prompt_tokens:,} tokens")
    if budget.context_limit is not None:
        parts.append(f"context {budget.context_limit:,}")
    # soft_wrap: the terminal wraps long lines itself; rich would cut inside a phrase ("of\ncpu")
    stderr_console.print("  " + ", ".join(parts), soft_wrap=True)
    stderr_console.print(f"  memory: needs {describe_memory(budget)}", soft_wrap=True, markup=False)
    for refusal in budget.refusals:
        stderr_console.print(f"  [yellow]forced past:[/] {escape(refusal)}", soft_wrap=True)
