"""Render a `SnapshotDiff` with rich."""

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._diffing import short_value
from ._verdict import LineageVerdict
from .diff import FieldChange, FileSetChange, SnapshotDiff


def render_diff(diff: SnapshotDiff, console: Console) -> None:
    """One table per section that differs; a line saying so for those that do not."""
    console.rule("genrun diff")
    console.print(Text(f"A: {diff.a}\nB: {diff.b}"))
    _changes(console, "Request", diff.request)
    _changes(console, "Effective generation config", diff.effective_config)
    _changes(console, "Environment", diff.environment)
    if diff.code:
        for name, change in diff.code.items():
            _fileset(console, f"Code identity ({name})", change)
    else:
        console.print(Text("Code identity: same", style="dim"))
    if diff.model is not None:
        _fileset(console, "Model identity", diff.model)
    else:
        console.print(Text("Model identity: same", style="dim"))
    _changes(console, "Result", diff.result)
    _sequences(console, diff)
    if diff.outputs is not None:
        _fileset(console, "Outputs", diff.outputs, plural=True)
    if diff.files is not None:
        _files(console, diff.files, diff.files_set_aside)
    for side, found in diff.unverified.items():
        console.print(Text(f"{side.upper()} does not match its own manifest: {', '.join(found)}", style="bold red"))
    if diff.lineage is not None:
        render_verdict(diff.lineage, console)
    console.print(Text("identical (timings aside)" if diff.identical else "the snapshots differ", style="bold"))


def _changes(console: Console, title: str, changes: Sequence[FieldChange]) -> None:
    if not changes:
        console.print(Text(f"{title}: same", style="dim"))
        return
    table = Table(title=f"{title}: {len(changes)} difference(s)", title_justify="left")
    for column in ("key", "A", "B"):
        table.add_column(column, overflow="fold")
    for c in changes:
        table.add_row(Text(c.path), Text("(absent)" if c.a_absent else short_value(c.a, 80)),
                      Text("(absent)" if c.b_absent else short_value(c.b, 80)))
    console.print(table)


def _fileset(console: Console, title: str, change: FileSetChange, *, plural: bool = False) -> None:
    digests = f" {(change.digest_a or '—')[:12]}… → {(change.digest_b or '—')[:12]}…" if change.digest_a or change.digest_b else ""
    console.print(Text(f"{title} {'differ' if plural else 'differs'}:{digests}", style="bold yellow"))
    for label, paths in (("changed", change.changed), ("only in A", change.removed), ("only in B", change.added)):
        if paths:
            shown = ", ".join(paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
            console.print(Text(f"  {label}: {shown}"))


def _files(console: Console, files: FileSetChange, set_aside: dict[str, str]) -> None:
    """The files that make the snapshots differ, then (dim) those that differ as faithful reruns do, by reason."""
    counted = files.counted(set_aside)
    if counted is not None:
        _fileset(console, "Files (bytes on disk)", counted, plural=True)
    side = {**dict.fromkeys(files.removed, " (only in A)"), **dict.fromkeys(files.added, " (only in B)")}
    for reason in dict.fromkeys(set_aside.values()):
        shown = ", ".join(rel + side.get(rel, "") for rel, why in set_aside.items() if why == reason)
        console.print(Text(f"Files {reason}: {shown}", style="dim"))


def _sequences(console: Console, diff: SnapshotDiff) -> None:
    if not diff.sequences:
        console.print(Text("Sequences: none recorded on either side", style="dim"))
        return
    table = Table(title="Sequences", title_justify="left")
    for column in ("seq", "reason A", "reason B", "count A", "count B", "first diverging token"):
        table.add_column(column)
    for s in diff.sequences:
        first = "identical" if s.identical else ("—" if s.first_divergence is None else str(s.first_divergence))
        style = "" if s.identical and s.reason_a == s.reason_b else "yellow"
        table.add_row(str(s.index), str(s.reason_a), str(s.reason_b), str(s.count_a), str(s.count_b), Text(first, style=style))
    console.print(table)
    if diff.sequences_not_listed:
        console.print(Text(f"  and {diff.sequences_not_listed:,} more rows not listed (the differing ones are listed first)", style="dim"))


def render_verdict(verdict: LineageVerdict, console: Console) -> None:
    """The rerun verdict: one sentence, then the per-row evidence when there is more than one row."""
    from .lineage import describe_changes

    # soft_wrap: two snapshot paths on one line; rich would break them at 80 columns, the terminal wraps them whole
    console.print(Text(f"Lineage: {verdict.child} was rerun from {verdict.parent} ({describe_changes(verdict.changes)})"), soft_wrap=True)
    for allowed in verdict.changed_since_parent:
        console.print(Text(f"  allowed with --allow-changed: {allowed}", style="yellow"))
    console.print(Text(f"Verdict: {verdict.sentence}", style="bold"), soft_wrap=True)
    if len(verdict.rows) > 1 and verdict.kind in ("limit_raised", "eos_suppressed", "diverged"):
        for row in verdict.rows:
            console.print(Text(f"  {row.sentence}"))
