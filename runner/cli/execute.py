"""`genrun execute SNAPSHOT`: run a planned snapshot with full instrumentation and seal it."""

import argparse
from pathlib import Path
from typing import NamedTuple

from rich.markup import escape

from genrun.schemas import GenerationStop, Result, SequenceStop, layout
from genrun.schemas.stages import Stages
from genrun.schemas.result import describe_produced
from genrun.schemas.stop import describe_stop
from genrun.schemas.rendering import describe_phases, describe_timings, human_bytes
from genrun.snapshot_dir import SnapshotDir

from genrun.runner.interrupts import RunInterrupted
from genrun.runner.phases import PlanPhases

from ._interrupt import report_interrupt
from ._library_output import add_quiet_argument
from ._options import add_allowed_signers
from ._output import add_store_lookup, counted, print_json, print_quiet_result, stderr_console


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
    parser.add_argument("snapshot", help="snapshot made by 'genrun plan': directory, id, or unique id prefix in the store")
    add_store_lookup(parser)
    add_approval_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print result.json's content on stdout and nothing else there")
    add_quiet_argument(parser)
    parser.set_defaults(handler=handle)


def add_approval_arguments(parser: argparse.ArgumentParser) -> None:
    """`--require-approval` and `--allowed-signers`, shared by `execute` and `run`."""
    parser.add_argument(
        "--require-approval", action="store_true",
        help="refuse to run without a signed approve sign-off that verifies (unsigned ones count only with [policy] require_approval = \"any\")",
    )
    add_allowed_signers(parser, "allowed-signers file for checking approve signatures")


def handle(args: argparse.Namespace) -> int:
    from genrun.runner.execute import execute_snapshot

    from ._target import refuse_sweep, resolve_target

    snapshot, is_sweep = resolve_target(args.snapshot, args.store)
    if is_sweep:
        refuse_sweep(snapshot, "execute", f"Run a planned sweep with 'genrun sweep execute {snapshot}', "
                                          f"finish one whose driver was killed with 'genrun sweep resume {snapshot}'")
    try:
        result = execute_snapshot(snapshot, require_approval=args.require_approval, allowed_signers=args.allowed_signers, live=False if args.json or args.quiet else None)
    except KeyboardInterrupt:
        print_quiet_result(args, snapshot)
        return report_interrupt(snapshot)
    except RunInterrupted as exc:  # genrun's own handlers (installed by main) before execution started
        print_quiet_result(args, snapshot)
        return report_interrupt(snapshot, exc.signal_name)
    if args.json:
        print_json(result.model_dump(mode="json"))
    else:
        render_summary(snapshot, result)
        print_quiet_result(args, snapshot)
    return result.exit_code


_STATUS_STYLE = {"succeeded": "green", "failed": "red", "interrupted": "yellow"}


def render_summary(snapshot_dir: Path, result: Result, planned: PlanPhases | None = None) -> None:
    """Human summary on stderr: status, per-sequence stop reasons, counts, timings (`planned`: the plan made in the same
    command, whose share comes first, so the times shown add up to what the command took)."""
    style = _STATUS_STYLE.get(result.status, "white")
    out = stderr_console
    out.print(f"[bold {style}]{result.status}[/]: {escape(str(snapshot_dir))}", soft_wrap=True)
    row_counts = RowCounts.of(snapshot_dir, result)
    excerpted: set[int] = set()
    for seq in _stops(snapshot_dir):
        excerpt = text_excerpt(snapshot_dir, seq.index) if seq.index not in excerpted else None  # once per row, not per stage
        excerpted.add(seq.index)
        out.print(f"  {escape(row_counts.describe(seq))}" + (f"  [dim]{escape(excerpt)}[/]" if excerpt else ""), soft_wrap=True)
    out.print(f"  generated {result.generated:,} {result.unit}s{describe_rates(result)}", soft_wrap=True)
    if (produced := describe_produced(result)) is not None:
        out.print(f"  {produced}", soft_wrap=True)
    for line in describe_time(result, planned):
        out.print(line, soft_wrap=True)
    if result.peak_memory.rss_bytes is not None:
        out.print(f"  peak rss {human_bytes(result.peak_memory.rss_bytes)}", soft_wrap=True)
    if result.exception is not None:
        out.print(f"  [red]exception[/] {escape(result.exception.type)}: {escape(result.exception.message)}", soft_wrap=True)
    if result.signal is not None:
        kept = "partial outputs" if result.unit == "step" else "partial ids"
        out.print(f"  [yellow]interrupted by {result.signal}[/]; {kept} and progress are kept", soft_wrap=True)
    for note in result.notes:
        out.print(f"  note: {escape(note)}", soft_wrap=True)


def describe_time(result: Result, planned: PlanPhases | None) -> list[str]:
    """`  time: checks 0.04 s, …, evidence 0.03 s = total 2.03 s`; after a plan in the same command, three lines:
    `  time: plan 7.30 s + execute 2.03 s = total 9.33 s`, then each one's phases (which sum to it)."""
    if planned is None:
        return ["  time: " + describe_timings(result.timings, result.unit)]
    executed = result.timings.total_s
    return [
        f"  time: plan {planned.total_s:.2f} s + execute {executed:.2f} s = total {planned.total_s + executed:.2f} s",
        "    plan: " + ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in planned.parts()),
        "    execute: " + describe_phases(result.timings, result.unit),
    ]


EXCERPT_CHARS = 60


def text_excerpt(snapshot_dir: Path, index: int) -> str | None:
    """The start of row `index`'s generated text (outputs/sequence_N.txt), escaped as a Python literal so newlines,
    control characters and terminal escapes a model produced show as `\\n`, `\\x1b` and never act on the terminal."""
    path = Path(snapshot_dir) / layout.sequence_text_path(index)
    if not path.is_file() or path.is_symlink():
        return None
    with path.open("rb") as f:
        text = f.read(EXCERPT_CHARS * 4).decode("utf-8", errors="replace")
    cut = text[:EXCERPT_CHARS]
    return repr(cut) + ("…" if len(text) > EXCERPT_CHARS or path.stat().st_size > EXCERPT_CHARS * 4 else "")


def _stops(snapshot_dir: Path) -> tuple:
    stop = SnapshotDir(snapshot_dir).read_optional(layout.STOP, GenerationStop)  # none when the run failed before generating
    return stop.sequences if stop is not None else ()


class RowCounts(NamedTuple):
    """How the summary counts each stop record's units: a stage's own unit, or the run's where it counts tokens."""

    stage_units: dict[str, tuple[str, tuple[int, ...]]]
    """Stage name -> (unit, units per row), from `stages.json` (empty for a run without stages)."""
    row_unit: str
    """The unit a row's `generated` is in: the run's unit where its units are its tokens (a frame of one token), else
    `token` (MusicGen's codebook streams: 42 tokens make 20 frames)."""

    @classmethod
    def of(cls, snapshot_dir: Path, result: Result) -> "RowCounts":
        stages = SnapshotDir(snapshot_dir).read_optional(layout.STAGES, Stages)
        return cls({s.name: (s.unit, s.units) for s in stages.stages} if stages is not None else {},
                   result.unit if result.generated == result.generated_tokens else "token")

    def describe(self, seq: SequenceStop) -> str:
        """`sequence 0: eos (id 2) after 13 tokens`; a stage's record `stage ar, row 0: eos (id 0) after 17 frames`; when the
        evidence records steps (a diffusion pipeline's) `pipeline call 0: completed after 10 of 10 steps`."""
        steps = seq.evidence.fact("steps")
        planned = steps.get("steps_planned") if isinstance(steps, dict) else None
        if planned is not None:
            return f"pipeline call {seq.index}: {describe_stop(seq)} after {seq.generated:,} of {planned:,} steps"
        stage = seq.evidence.fact("stage")
        if isinstance(stage, str) and stage in self.stage_units:  # counted in the stage's unit, `advance` units included
            unit, per_row = self.stage_units[stage]
            count = per_row[seq.index] if seq.index < len(per_row) else seq.generated
            return f"stage {stage}, row {seq.index}: {describe_stop(seq)} after {counted(count, unit)}"
        return f"sequence {seq.index}: {describe_stop(seq)} after {counted(seq.generated, self.row_unit)}"


def describe_rates(result: Result) -> str:
    """`, 60.1 tokens/s summed over 3 rows (20.0 tokens/s per row)`; one row: `, 32.7 tokens/s (1 row)`."""
    if result.units_per_s is None:
        return ""
    unit = f"{result.unit}s/s"
    if not result.rows or result.rows == 1:
        return f", {result.units_per_s:,.1f} {unit}" + (" (1 row)" if result.rows == 1 else "")
    per_row = f" ({result.units_per_s_per_row:,.1f} {unit} per row)" if result.units_per_s_per_row is not None else ""
    return f" over {result.rows} rows, {result.units_per_s:,.1f} {unit} summed over rows{per_row}"
