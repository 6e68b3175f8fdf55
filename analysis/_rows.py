"""One generated row as the token checks see it: ids, summary and stop record side by side."""

from typing import NamedTuple

from array import array

from genrun.schemas import DiffusionSteps, SequenceStop, TokenSequenceSummary, TokenStopFacts

from ._load import Snapshot


class Row(NamedTuple):
    """Row `index` across the three files that describe it; `None` where a file lacks it."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index (a method no caller uses on these)
    ids: array | None
    """# ids: array('q') [count], new tokens only."""
    summary: TokenSequenceSummary | None
    stop: SequenceStop | None


def rows_of(snap: Snapshot) -> list[Row]:
    """Every row index named by any of the ids file, its summary or the stop file, in order."""
    ids = snap.token_ids or {}
    summaries = {s.index: s for s in snap.token_summary.sequences} if snap.token_summary else {}
    stops = {s.index: s for s in snap.stop.sequences} if snap.stop else {}
    indexes = sorted(set(ids) | set(summaries) | set(stops))
    return [Row(i, ids.get(i), summaries.get(i), stops.get(i)) for i in indexes]


def decoded_id_lists(snap: Snapshot) -> list[list[int]]:
    """The id lists analysis decodes: every non-empty saved row, and the last progress record's ids."""
    rows = [row.ids.tolist() for row in rows_of(snap) if row.ids is not None and len(row.ids)]
    last = snap.progress.last if snap.progress else None
    return rows + ([list(last_ids)] if (last_ids := getattr(last, "last_ids", ())) else [])


def token_facts(stop: SequenceStop) -> TokenStopFacts:
    """The token facts of a row's evidence (declared with the `token_ids` kind): last id, EOS set, limits, prompt length.

    Raises `ValidationError` when the evidence does not carry them as the kind promises (a check turns that into a FAIL).
    """
    evidence = stop.evidence
    if isinstance(evidence, TokenStopFacts):
        return evidence
    return TokenStopFacts.model_validate(evidence.model_dump(mode="json"))


def steps_of(stop: SequenceStop) -> DiffusionSteps | None:
    """`evidence.steps` of a row (declared with the `diffusion_steps` kind); `None` when the evidence has none."""
    steps = stop.evidence.fact("steps")
    return DiffusionSteps.model_validate(steps) if steps is not None else None


def eos_positions(ids: array, eos: tuple[int, ...]) -> list[int]:
    """0-based positions of EOS ids (a plain loop: ~3 ms for 65,536 ids, cheaper than importing numpy)."""
    if not eos:
        return []
    wanted = frozenset(eos)
    return [i for i, token in enumerate(ids) if token in wanted]


def total_ids(snap: Snapshot) -> int:
    """Token ids held in the safetensors file."""
    return sum(len(a) for a in snap.token_ids.values()) if snap.token_ids else 0


def units_of(snap: Snapshot, tokens: int) -> int:
    """Tokens -> progress units (frames group `tokens_per_frame` tokens; a started frame does not count)."""
    per_unit = snap.request.units.tokens_per_frame if snap.unit == "frame" and snap.request is not None else 1
    return tokens // per_unit


class AudioFrames(NamedTuple):
    """Decoded frames per batch item of the calls that returned audio, re-derived from the saved ids."""

    frames: tuple[int, ...]
    """Per batch item: the longest codebook row minus the `codebooks - 1` steps of the delay pattern."""
    frames_per_second: float
    """The codec's rate (`generation-calls.json`)."""


def audio_frames(snap: Snapshot) -> AudioFrames | None:
    """`None` unless some call returned decoded audio (MusicGen-style): its ids are `codebooks` rows per item."""
    calls = snap.generation_calls
    audio = [(c.call_index, c.audio) for c in calls.calls if c.audio is not None] if calls is not None else []
    if not audio or snap.stop is None or snap.token_ids is None:
        return None
    frames: list[int] = []
    for call_index, evidence in audio:
        lengths = [len(snap.token_ids.get(s.index, ())) for s in snap.stop.sequences if s.call_index == call_index]
        per_item = evidence.codebooks
        for start in range(0, len(lengths), per_item):
            frames.append(max(0, max(lengths[start : start + per_item]) - (per_item - 1)))
    return AudioFrames(tuple(frames), audio[0][1].frames_per_second)
