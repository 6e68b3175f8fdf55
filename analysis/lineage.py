"""What a rerun proves: the verdict of a child snapshot against its parent, with its evidence.

Torch-free and read-only. The verdict depends on what the child changed (`lineage.json`):
nothing (or a seed, a prompt...) -> `reproduced` / `diverged at token k of row r`; a raised limit
-> per row, `stopped at the same place by EOS` or `went past the parent's stop`; EOS suppressed
-> how far each row went past its EOS. A divergence names the recorded environment and
determinism differences that may explain it.
"""

from array import array
from typing import Any, TypedDict

from genrun.schemas import Lineage, RequestChange, SequenceStop, layout

from ._diffing import ABSENT, diff_values, short_value
from ._load import Snapshot
from ._verdict import EnvironmentDifference, LineageVerdict, RowOutcome, RowVerdict, VerdictKind
from .diff import first_divergence

LIMIT_KEYS = ("generation.max_new_tokens", "generation.max_length", "generation.max_time")
SUPPRESS_KEYS = ("generation.suppress_tokens", "generation.begin_suppress_tokens")
LIMIT_REASONS = ("max_new_tokens", "max_length", "max_time")


def descent(a: Snapshot, b: Snapshot) -> tuple[Snapshot, Snapshot, Lineage] | None:
    """(parent, child, lineage) when one snapshot was rerun from the other (by the parent's sealed digest)."""
    for parent, child in ((a, b), (b, a)):
        lineage = child.lineage
        if lineage is not None and parent.snapshot_digest is not None and lineage.parent_snapshot_digest == parent.snapshot_digest:
            return parent, child, lineage
    return None


def lineage_verdict(parent: Snapshot, child: Snapshot, lineage: Lineage) -> LineageVerdict:
    """Compare the child with its parent in the light of what the child changed."""
    kind = _kind_of(lineage.changes, parent)
    environment = tuple(environment_differences(parent, child))
    if parent.result is None or child.result is None:
        rows: tuple[RowVerdict, ...] = ()
        which = "the parent" if parent.result is None else "the child"
        sentence = f"incomparable: {which} has no result (not executed or killed before sealing)"
        kind = "incomparable"
    else:
        rows = tuple(_rows(parent, child, kind))
        kind, sentence = _overall(kind, rows, parent, child, lineage.changes, environment)
    return LineageVerdict(parent=str(parent.path), child=str(child.path), changes=lineage.changes, kind=kind, sentence=sentence,
                          rows=rows, environment_differences=environment, changed_since_parent=lineage.changed_since_parent)


def describe_changes(changes: tuple[RequestChange, ...]) -> str:
    """`generation.max_new_tokens 16 -> 64, seed 0 -> 1` (`nothing changed` when empty)."""
    if not changes:
        return "nothing changed"
    parts = []
    for c in changes:
        before = "(absent)" if c.parent_absent else short_value(c.parent_value, 40)
        after = "(unset)" if c.child_absent else short_value(c.child_value, 40)
        parts.append(f"{c.key} {before} -> {after}")
    return ", ".join(parts)


def environment_differences(parent: Snapshot, child: Snapshot) -> list[EnvironmentDifference]:
    """Recorded facts reproduction depends on that differ: determinism.json, versions, CUDA, device and dtype."""
    return [EnvironmentDifference(key=c.path, parent=None if c.a is ABSENT else c.a, child=None if c.b is ABSENT else c.b)
            for c in diff_values(_facts(parent), _facts(child))]


# -- internals ------------------------------------------------------------------------------------


def _facts(snap: Snapshot) -> dict[str, Any]:
    determinism = snap.determinism
    facts: dict[str, Any] = {
        "determinism": determinism.model_dump(mode="json", exclude={"schema_version"}) if determinism else "not recorded",
    }
    if snap.environment is not None:
        env = snap.environment
        facts["packages"] = dict(env.packages)
        facts["python"] = env.python.split()[0]
        facts["cuda"] = env.cuda.model_dump(mode="json", exclude={"driver"}) if env.cuda else None
        facts["cuda_driver"] = env.cuda.driver if env.cuda else None
        facts["cpu"] = env.cpu.model
    if snap.generation_configs:
        first = snap.generation_configs[0]
        facts["generation"] = {"device": first.device, "dtype": first.dtype}
    return facts


def _kind_of(changes: tuple[RequestChange, ...], parent: Snapshot) -> VerdictKind:
    eos = set(parent.generation_configs[0].eos_token_ids) if parent.generation_configs else set()
    for c in changes:
        if c.action == "suppress_eos" or (c.key in SUPPRESS_KEYS and eos & set(c.child_value or ())):
            return "eos_suppressed"
    if any(c.key in LIMIT_KEYS for c in changes):
        return "limit_raised"
    return "reproduced"


def _rows(parent: Snapshot, child: Snapshot, kind: VerdictKind) -> list[RowVerdict]:
    stops_p = {s.index: s for s in parent.stop.sequences} if parent.stop else {}
    stops_c = {s.index: s for s in child.stop.sequences} if child.stop else {}
    ids_p, ids_c = parent.token_ids or {}, child.token_ids or {}
    return [_row(i, stops_p.get(i), stops_c.get(i), ids_p.get(i), ids_c.get(i), kind) for i in sorted(set(ids_p) | set(ids_c) | set(stops_p) | set(stops_c))]


class _Sides(TypedDict):
    """The `RowVerdict` fields that describe each side on its own."""

    index: int
    parent_reason: str | None
    child_reason: str | None
    parent_count: int | None
    child_count: int | None


class _Divergence(TypedDict):
    """The `RowVerdict` fields that locate where two rows part."""

    first_divergence: int | None
    parent_token_id: int | None
    child_token_id: int | None


def _row(index: int, sp: SequenceStop | None, sc: SequenceStop | None, p: array | None, c: array | None, kind: VerdictKind) -> RowVerdict:
    base = _Sides(index=index, parent_reason=sp.reason if sp else None, child_reason=sc.reason if sc else None,
                parent_count=len(p) if p is not None else (sp.generated if sp else None),
                child_count=len(c) if c is not None else (sc.generated if sc else None))
    if p is None or c is None:
        return RowVerdict(**base, outcome="incomparable", first_divergence=None, parent_token_id=None, child_token_id=None,
                          sentence=f"row {index}: no token ids on {'either side' if p is None and c is None else ('the parent' if p is None else 'the child')}")
    first = first_divergence(p, c)
    at = _Divergence(first_divergence=first, parent_token_id=_at(p, first), child_token_id=_at(c, first))
    outcome, sentence = _row_sentence(index, sp, sc, len(p), len(c), first, at, kind)
    return RowVerdict(**base, **at, outcome=outcome, sentence=sentence)


def _row_sentence(index: int, sp: SequenceStop | None, sc: SequenceStop | None, np_: int, nc: int, first: int | None,
                  at: _Divergence, kind: VerdictKind) -> tuple[RowOutcome, str]:
    rp, rc = (sp.reason if sp else "unknown"), (sc.reason if sc else "unknown")
    diverged = f"row {index} diverged at token {first} (parent id {at['parent_token_id']}, child id {at['child_token_id']})"
    if kind == "eos_suppressed" and rp == "eos":
        eos_at = np_ - 1  # the parent's last token is its EOS
        if first is not None and first < eos_at:
            return "diverged", f"{diverged}, before the parent's EOS at token {eos_at}"
        return "went_past_eos", (f"row {index} went {nc - eos_at} tokens past its EOS: the parent stopped by EOS at token {eos_at} "
                                 f"({np_} tokens), the child generated {nc} and stopped by {_reason(sc)}")
    if kind == "limit_raised":
        if rp == "eos" and first is None:
            return "same_place_by_eos", (f"row {index} stopped at the same place by EOS: the parent's stop was not the limit "
                                         f"(both {np_} tokens, limit {_limit(sp)} -> {_limit(sc)})")
        if rp in LIMIT_REASONS and first == np_ and nc > np_:
            return "went_past_stop", (f"row {index} went past the parent's stop: the parent was cut by {_reason(sp)} "
                                      f"(parent {np_} tokens, child {nc}, stopped by {_reason(sc)})")
        if first is None:
            return "same_place_again", f"row {index} stopped at the same place again ({np_} tokens, by {_reason(sc)}): the raised limit was not reached"
        if rc in LIMIT_REASONS and first == nc < np_:  # the child is the parent's start, cut by its own (lower) limit
            return "cut_by_child_limit", (f"row {index} was cut by the child's {_reason(sc)} after {nc} tokens, each equal to the "
                                          f"parent's (the parent went on to {np_} tokens, stopped by {_reason(sp)})")
        return "diverged", f"{diverged} before the parent's stop at {np_} tokens ({_reason(sp)}); this says nothing about the limit"
    if first is None:
        return "identical", f"row {index}: every token id equal ({np_} tokens, {rp})"
    return "diverged", diverged


def _overall(kind: VerdictKind, rows: tuple[RowVerdict, ...], parent: Snapshot, child: Snapshot,
             changes: tuple[RequestChange, ...], environment: tuple[EnvironmentDifference, ...]) -> tuple[VerdictKind, str]:
    with_changes = f" (with {describe_changes(changes)})" if changes else ""
    comparable = [r for r in rows if r.outcome != "incomparable"]
    if not rows:
        return "incomparable", "incomparable: neither run recorded any row"
    if not comparable:
        return _outputs_verdict(parent, child, with_changes)
    if kind in ("limit_raised", "eos_suppressed"):
        return kind, _join(r.sentence for r in rows)  # the rows' sentences name the limit or the EOS themselves
    diverged = [r for r in comparable if r.outcome == "diverged"]
    if not diverged and len(comparable) == len(rows):
        tokens = sum(r.parent_count or 0 for r in rows)
        return "reproduced", f"reproduced{with_changes}: every token id equal ({len(rows)} row{'s' if len(rows) != 1 else ''}, {tokens} tokens)"
    first = min(diverged or comparable, key=lambda r: (r.first_divergence if r.first_divergence is not None else 1 << 62, r.index))
    explain = ("; recorded differences that may explain it: " + ", ".join(f"{d.key} {d.parent!r} -> {d.child!r}" for d in environment[:8])
               if environment else "; no recorded environment or determinism setting differs")
    return "diverged", (f"diverged at token {first.first_divergence} of row {first.index}{with_changes}: "
                        f"parent id {first.parent_token_id}, child id {first.child_token_id}{explain}")


def _outputs_verdict(parent: Snapshot, child: Snapshot, with_changes: str) -> tuple[VerdictKind, str]:
    """Pipelines record no token ids: their outputs (digests from each manifest) are the evidence."""
    prefix = layout.OUTPUTS_DIR + "/"
    pick = lambda snap: {p: d for p, d in (snap.manifest or {}).items() if p.startswith(prefix)}  # noqa: E731
    a, b = pick(parent), pick(child)
    if a and a == b:
        return "reproduced", f"reproduced{with_changes}: every output file equal ({len(a)} files)"
    differing = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
    if not differing:
        return "incomparable", f"incomparable{with_changes}: no token ids and no output files recorded"
    return "diverged", f"diverged{with_changes}: output files differ ({', '.join(differing[:5])})"


def _join(sentences: Any) -> str:
    unique = list(dict.fromkeys(sentences))
    return "; ".join(unique)


def _reason(stop: SequenceStop | None) -> str:
    if stop is None:
        return "an unrecorded reason"
    limit = stop.evidence.fact("limit") if stop.reason in LIMIT_REASONS else None
    return f"{stop.reason} = {limit}" if limit is not None else stop.reason


def _limit(stop: SequenceStop | None) -> str:
    limit = stop.evidence.fact("max_new_tokens") if stop is not None else None
    return str(limit) if limit is not None else "?"


def _at(ids: array, index: int | None) -> int | None:
    return int(ids[index]) if index is not None and index < len(ids) else None
