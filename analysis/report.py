"""`report`: a post-mortem a person can read in a minute, built read-only from a snapshot.

`report_snapshot` returns a typed `Report` (also the `--json` document); `_report_render` turns it
into rich text and `_plot` into a PNG. Works on incomplete snapshots: whatever exists is shown.
"""

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from pydantic import SerializeAsAny

from genrun.schemas import GenerationConfigBeforeGenerate, Phases, StopEvidence, TokenBudget, TokenStopFacts, UnitsSpec
from genrun.schemas.layout import SnapshotState, Unit
from genrun.schemas.result import describe_produced

from .memory_estimate import describe_memory
from ._check_integrity import INCOMPLETE, PLANNED, is_plan_only
from ._check_inputs import input_summary
from ._load import Snapshot, read_snapshot
from ._rows import decoded_id_lists, eos_positions, rows_of, steps_of, token_facts
from ._tokenizer import DecoderUnavailable, TextDecoder, load_decoder

LAST_TOKENS_SHOWN = 16
SEQUENCES_SHOWN = 8
MAX_SAMPLES = 1000  # progress records kept for charts; every_units = 1 on 65k tokens would otherwise be 65k points
LIMIT_KEYS = ("max_new_tokens", "max_length", "max_time", "stop_strings", "eos_token_id")


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class LimitLine(_Model):
    """One effective limit and who set it."""

    call_index: int
    name: str
    value: Any
    source: str
    """`request`, `model_generation_config`, `library_default`, `entrypoint`, or `derived`/`not set`."""


class TokenLine(_Model):
    """One generated id and its vocabulary entry."""

    id: int
    token: str | None


class SequenceLine(_Model):
    """Why one row stopped, with its evidence and its last tokens."""

    index: int
    call_index: int
    reason: str
    generated: int
    last_token_id: int | None
    fired: tuple[str, ...]
    evidence: SerializeAsAny[StopEvidence] | None
    """The backend's evidence for the reason (token facts shown in their own fields are left out)."""
    eos_positions: tuple[int, ...]
    """First EOS positions found in the saved ids (at most 8)."""
    last_tokens: tuple[TokenLine, ...]
    last_text: str | None
    """Decode (special tokens kept) of the last tokens."""
    steps_planned: int | None = None
    """Steps planned, when the evidence records them (diffusion)."""
    exception: str | None = None


InputKind = Literal["prompt", "prompts", "messages"]
"""Which `[input]` key holds the text (`messages` is one conversation, `prompts` one batch)."""


class RequestSummary(_Model):
    """The request's essentials."""

    name: str
    model: str
    """`[model] path`."""
    processor: str | None = None
    """`[model] processor`, when set (the processor directory used instead of the checkpoint's)."""
    backend: str
    dtype: str
    device: str
    input: str | tuple[str, ...] | None
    """The prompt, the prompts, or the messages as `role: content`; `None` when the request has no input."""
    input_kind: InputKind | None = None
    """Which `[input]` key `input` came from (messages are one conversation, prompts one batch)."""
    media: tuple[str, ...] | None = None
    """`[input] audio` / `images` files as `kind: path`, one per row; `None` without media."""
    generation: dict[str, Any]
    """`[generation]` as given (the library's own keyword arguments: open by contract)."""
    seed: int
    entrypoint: str | None = None
    """`[entrypoint] callable`, when set."""
    units: UnitsSpec | None = None
    """`[units]`, for frame units only."""


class IdentitySummary(_Model):
    """What ran: model, code, packages, host."""

    model_path: str | None = None
    model_digest: str | None = None
    weight_bytes: int | None = None
    genrun_code_digest: str | None = None
    packages: dict[str, str | None] = {}
    """The installed packages `environment.json` recorded (its backend's, then genrun's own), in its order."""
    host: str | None = None
    cuda: str | None = None
    """Device names, when CUDA devices were visible."""
    dtype: str | None = None
    device: str | None = None


class TimingsSummary(_Model):
    """Phase timings, seconds: from result.json, else from the progress stream."""

    load_s: float | None
    first_token_s: float | None
    decode_s: float | None
    total_s: float | None
    units_per_s: float | None
    """Summed over rows."""
    phases: Phases | None = None
    """What `total_s` is made of (result.json; `None` before phases were recorded, or with no result)."""
    units_per_s_per_row: float | None = None
    """The same rate for one row (summed / rows)."""
    rows: int | None = None
    """Rows decoded in parallel."""


class StageLine(_Model):
    """One stage of a staged run (`stages.json`): its unit, counts, time and memory."""

    name: str
    unit: str
    units: int
    """Units over all rows."""
    rows: int
    consumed: int | None
    """Units of its source stage it read."""
    seconds: float
    rss_peak_bytes: int | None


class BudgetSummary(_Model):
    """The plan-time estimate next to what happened."""

    plan: TokenBudget | None
    """`token-budget.json` as planned."""
    memory_breakdown: str | None = None
    """The planned memory in words: weights, KV cache, activations and margin, each named."""
    generated_max: int | None = None
    """Units of the longest row (from ids, stop records, or the last progress record of a killed run)."""
    used_fraction: float | None = None
    """`generated_max` / requested units."""
    peak_rss_bytes: int | None = None
    peak_cuda_allocated_bytes: int | None = None
    produced_seconds: float | None = None
    requested_seconds: float | None = None


class Sample(_Model):
    """One progress record, for throughput and memory over time."""

    t: float
    event: str
    generated: int
    units_per_s: float | None
    window_units_per_s: float | None
    rss_bytes: int | None
    cuda_allocated_bytes: int | None
    cuda_reserved_bytes: int | None


class Report(_Model):
    """Everything `genrun report` shows."""

    snapshot: str
    snapshot_id: str
    state: SnapshotState
    """planned / running / incomplete / sealed (from the files present)."""
    complete: bool
    """result.json and the manifest exist."""
    status: str | None
    """result.json status (`None` when the run ended without a result)."""
    headline: str
    """One sentence: how the run ended and why."""
    request: RequestSummary | None
    """Name, model, backend, dtype, device, input, `[generation]`, units (`None` without a valid request.json)."""
    identity: IdentitySummary
    """Model digest and path, genrun code digest, key package versions, device."""
    limits: tuple[LimitLine, ...]
    prompt_length: int | None
    context_limit: int | None
    context_limit_key: str | None = None
    """The model config key the context limit comes from (`max_target_positions` for Whisper), from `limit_sources`."""
    eos_token_ids: tuple[int, ...]
    pad_token_id: int | None
    sequences: tuple[SequenceLine, ...]
    unit: Unit
    ids_are_tokens: bool
    """The backend declares `token_ids` evidence, so its ids are a tokenizer's (a loop's or a plugin's are its own codes)."""
    timings: TimingsSummary
    """From result.json, else from progress."""
    budget: BudgetSummary
    """Plan estimate next to what happened."""
    samples: tuple[Sample, ...]
    """Progress records over time (throughput and memory), thinned evenly to at most 1,000."""
    progress_records: int
    """Progress records in the file (before thinning)."""
    call_config: dict[str, Any] | None = None
    """The declared call-config artifact (`call_config_name`), top-level values: as recorded, or those set in genrun's own
    model of it; `None` when there is none, or when the `generation_config` kind's limits show it call by call."""
    call_config_name: str | None = None
    """That artifact's file name."""
    call_config_title: str | None = None
    """The heading its model declares (`None`: `Call config (as made, <file>)`)."""
    call_config_shown: tuple[str, ...] | None = None
    """The fields its model declares the terminal shows (`None`: every one)."""
    outputs: tuple[str, ...]
    """Files under `outputs/` named by result.json."""
    last_progress_ids: tuple[TokenLine, ...]
    """`last_ids` of the last progress record (row 0): the latest evidence when a killed run saved no ids file."""
    last_progress_text: str | None
    """Their decode (special tokens kept), when a tokenizer is available."""
    stages: tuple[StageLine, ...] = ()
    """A staged run's stages in order (`stages.json`), with time and memory each."""
    notes: tuple[str, ...]
    """Things a reader must know (incomplete, truncated progress line, undecodable ids)."""

    @property
    def call_config_heading(self) -> str:
        """The call config table's heading, on the terminal and the page: its model's, else `Call config (as made, <file>)`."""
        return self.call_config_title or f"Call config (as made, {self.call_config_name})"


def report_snapshot(path: str | Path) -> Report:
    """Build the post-mortem of a snapshot (read-only; no hashing of files)."""
    snap = read_snapshot(path, hash_files=False)
    has_ids = snap.token_ids is not None or (snap.progress is not None and any(getattr(e, "last_ids", ()) for e in snap.progress.events[-1:]))
    decoder = load_decoder(snap.model, decoded_id_lists(snap)) if has_ids and snap.declares("token_ids") else DecoderUnavailable("no ids")
    return build_report(snap, decoder)


def build_report(snap: Snapshot, decoder: TextDecoder | DecoderUnavailable) -> Report:
    """The report of a loaded snapshot."""
    notes = _notes(snap, decoder)
    configs = snap.generation_configs
    first = configs[0] if configs else None
    return Report(
        snapshot=str(snap.path), snapshot_id=snap.id, state=snap.state, complete=snap.result is not None and snap.is_sealed,
        status=snap.result.status if snap.result and snap.is_sealed else None, headline=_headline(snap), request=_request_essentials(snap),
        identity=_identity(snap), limits=tuple(line for cfg in configs for line in _limit_lines(cfg)),
        prompt_length=first.prompt_length if first else None, context_limit=first.context_limit if first else None,
        context_limit_key=next((key for key, source in first.limit_sources.items() if source == "model_config"), None) if first else None,
        eos_token_ids=first.eos_token_ids if first else (), pad_token_id=first.pad_token_id if first else None,
        sequences=tuple(_sequence_lines(snap, decoder)), unit=snap.unit, ids_are_tokens=snap.declares("token_ids"), timings=_timings(snap), budget=_budget(snap),
        samples=tuple(_samples(snap)), progress_records=len(snap.progress.events) if snap.progress else 0, notes=tuple(notes),
        stages=tuple(StageLine(name=s.name, unit=s.unit, units=sum(s.units), rows=s.rows, consumed=s.consumed, seconds=s.seconds,
                               rss_peak_bytes=s.rss_peak_bytes) for s in (snap.stages.stages if snap.stages else ())),
        outputs=snap.result.outputs if snap.result else (), **_declared_call_config(snap),
        **_last_progress_ids(snap, decoder),
    )


def _declared_call_config(snap: Snapshot) -> dict[str, Any]:
    """The declared call config as its model shows it (genrun's own model: typed, the fields set), else as recorded. The
    `generation_config` kind shows the same file call by call (the limits), so it is not repeated."""
    declared = snap.declaration.call_config
    if declared is None or snap.declares("generation_config"):
        return {}
    found: dict[str, Any] = {"call_config_name": declared.name}
    if (call := snap.call_config) is not None:
        record = call.model_dump(mode="json", exclude_none=True, exclude={"schema_version"})
        return found | {"call_config": record, "call_config_title": call.title, "call_config_shown": call.shown_fields}
    if declared.read_as_model or not isinstance(snap.call_config_json, dict):  # genrun's own model, and it did not load
        return {}
    return found | {"call_config": snap.call_config_json}


def _headline(snap: Snapshot) -> str:
    if is_plan_only(snap):
        return f"{PLANNED} (run it with 'genrun execute {snap.path.name}')"
    if snap.result is None:
        last = snap.progress.last if snap.progress else None
        where = f"; last record '{last.event}' at t={last.t:.2f} s with {last.generated} {snap.unit}s" if last else ""
        return INCOMPLETE + where
    stops = snap.stop.sequences if snap.stop else ()
    reasons: dict[str, int] = {}
    for s in stops:
        reasons[s.reason] = reasons.get(s.reason, 0) + 1
    why = ", ".join(f"{r} ×{n}" if n > 1 else r for r, n in reasons.items()) or "no stop record"
    heard = input_summary(snap.input_preparation) if snap.input_preparation is not None else None
    heard = f"; {heard}" if heard else ""
    produced = describe_produced(snap.result)
    heard += f"; {produced}" if produced else ""
    if not snap.is_sealed:  # a result without the seal is never a success
        return f"{snap.state.value}: never sealed, so its result.json is no evidence of how it ended; {snap.result.generated} {snap.result.unit}s recorded"
    ended = f"stopped by {why}"
    if snap.result.exception is not None:  # what ended the run, named where the stop records cannot say (none were made)
        raised = f"raised {snap.result.exception.type}: {_first_line(snap.result.exception.message)}"
        ended = f"{ended}; {raised}" if stops else raised
    elif snap.result.signal is not None and not stops:
        ended = f"interrupted by {snap.result.signal}"
    return f"{snap.result.status}: {snap.result.generated} {snap.result.unit}s in {snap.result.timings.total_s:.2f} s; {ended}{heard}"


def _first_line(message: str, limit: int = 200) -> str:
    """The first line of an exception's message, at most `limit` characters (the headline is one line)."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _request_essentials(snap: Snapshot) -> RequestSummary | None:
    request = snap.request
    if request is None:
        return None
    inputs = request.input
    if inputs.prompt is not None:
        shown: str | tuple[str, ...] | None = inputs.prompt
    elif inputs.prompts is not None:
        shown = tuple(inputs.prompts)
    else:
        shown = tuple(f"{m.role}: {m.content}" for m in inputs.messages) if inputs.messages else None
    kind: InputKind | None = "prompt" if inputs.prompt is not None else "prompts" if inputs.prompts is not None else "messages" if inputs.messages else None
    return RequestSummary(name=request.name, model=request.model.path, processor=request.model.processor, backend=request.model.backend,
                          dtype=request.model.dtype,
                          device=request.model.device, input=shown, input_kind=kind,
                          media=tuple(f"{media_kind}: {path}" for media_kind, _, path in inputs.media_files()) or None, generation=request.generation, seed=request.seed,
                          entrypoint=request.entrypoint.callable if request.entrypoint else None,
                          units=request.units if request.units.name == "frame" else None)


def _identity(snap: Snapshot) -> IdentitySummary:
    found: dict[str, Any] = {}
    if snap.model is not None:
        found.update(model_path=snap.model.resolved_path, model_digest=snap.model.digest, weight_bytes=snap.model.weight_bytes)
    if snap.code is not None:
        found["genrun_code_digest"] = snap.code.genrun.digest
    if snap.environment is not None:
        env = snap.environment
        found["packages"] = {name: version for name, version in env.packages.items() if version is not None}
        found["host"] = f"{env.hostname} ({env.cpu.model or 'cpu'}, {env.cpu.logical_cores} cores)"
        if env.cuda is not None and env.cuda.devices:
            found["cuda"] = ", ".join(d.name for d in env.cuda.devices)
    if snap.generation_configs:
        found["dtype"], found["device"] = snap.generation_configs[0].dtype, snap.generation_configs[0].device
    return IdentitySummary(**found)


def _limit_lines(cfg: GenerationConfigBeforeGenerate) -> list[LimitLine]:
    lines = []
    for key in LIMIT_KEYS:
        value = cfg.effective.get(key)
        source = cfg.limit_sources.get(key) or ("not set" if value is None else "derived")
        lines.append(LimitLine(call_index=cfg.call_index, name=key, value=value, source=source))
    return lines


def _sequence_lines(snap: Snapshot, decoder: TextDecoder | DecoderUnavailable) -> list[SequenceLine]:
    if snap.declares("stages"):
        return _stage_stop_lines(snap)
    lines = []
    for row in rows_of(snap)[:SEQUENCES_SHOWN]:
        stop = row.stop
        if row.ids is not None:
            tail = row.ids[-LAST_TOKENS_SHOWN:].tolist()
        else:
            tail = list(row.summary.last_ids[-LAST_TOKENS_SHOWN:]) if row.summary else []
        decodable = not isinstance(decoder, DecoderUnavailable)
        tokens = tuple(TokenLine(id=i, token=decoder.token(i) if decodable else None) for i in tail)  # type: ignore[union-attr]
        if decodable:
            text = decoder.decode(tail, skip_special_tokens=False)  # type: ignore[union-attr]
        else:
            text = row.summary.text_with_special[-200:] if row.summary and row.summary.text_with_special else None
        facts = token_facts(stop) if stop is not None and snap.declares("token_ids") else None
        eos = facts.eos_token_ids if facts else (snap.token_summary.eos_token_ids if snap.token_summary else ())
        positions = tuple(eos_positions(row.ids, eos)[:8]) if row.ids is not None else ()
        steps = steps_of(stop) if stop is not None and snap.declares("diffusion_steps") else None
        lines.append(SequenceLine(
            index=row.index, call_index=stop.call_index if stop else 0, reason=stop.reason if stop else "not recorded",
            generated=stop.generated if stop else (len(row.ids) if row.ids is not None else 0),
            last_token_id=facts.last_token_id if facts else (tail[-1] if tail else None), fired=facts.fired if facts else (),
            evidence=_shown_evidence(stop.evidence) if stop else None, eos_positions=positions, last_tokens=tokens, last_text=text,
            steps_planned=steps.steps_planned if steps else None,
            exception=f"{stop.exception.type}: {stop.exception.message}" if stop and stop.exception else None))
    return lines


def _stage_stop_lines(snap: Snapshot) -> list[SequenceLine]:
    """A staged run: one line per stop record (a row of a stage), with the stage's last ids of the row."""
    lines = []
    ids = snap.stage_ids.ids if snap.stage_ids else {}
    for stop in (snap.stop.sequences if snap.stop else ())[:SEQUENCES_SHOWN]:
        rows = ids.get(stop.evidence.fact("stage"), ())
        tail = list(rows[stop.index][-LAST_TOKENS_SHOWN:]) if stop.index < len(rows) else []
        lines.append(SequenceLine(
            index=stop.index, call_index=stop.call_index, reason=stop.reason, generated=stop.evidence.fact("units", stop.generated),
            last_token_id=tail[-1] if tail else None, fired=(), evidence=_shown_evidence(stop.evidence), eos_positions=(),
            last_tokens=tuple(TokenLine(id=i, token=None) for i in tail), last_text=None,
            exception=f"{stop.exception.type}: {stop.exception.message}" if stop.exception else None))
    return lines


_TOKEN_FACTS = frozenset(TokenStopFacts.model_fields) - {"reason"}


def _shown_evidence(evidence: StopEvidence) -> StopEvidence:
    """The evidence without the token facts a sequence line shows in its own fields (or, EOS set and limits, under limits)."""
    return StopEvidence.model_validate({k: v for k, v in evidence.model_dump(mode="json").items() if k not in _TOKEN_FACTS})


def _last_progress_ids(snap: Snapshot, decoder: TextDecoder | DecoderUnavailable) -> dict[str, Any]:
    last = snap.progress.last if snap.progress else None
    ids = tuple(getattr(last, "last_ids", ())) if last is not None else ()
    decodable = not isinstance(decoder, DecoderUnavailable)
    tokens = tuple(TokenLine(id=i, token=decoder.token(i) if decodable else None) for i in ids)  # type: ignore[union-attr]
    text = decoder.decode(list(ids), skip_special_tokens=False) if decodable and ids else None  # type: ignore[union-attr]
    return {"last_progress_ids": tokens, "last_progress_text": text}


def _timings(snap: Snapshot) -> TimingsSummary:
    if snap.result is not None:
        t = snap.result.timings
        return TimingsSummary(load_s=t.load_s, first_token_s=t.first_token_s, decode_s=t.decode_s, total_s=t.total_s,
                              phases=t.phases, units_per_s=snap.result.units_per_s, units_per_s_per_row=snap.result.units_per_s_per_row,
                              rows=snap.result.rows)
    events = snap.progress.events if snap.progress else ()
    start = next((e.t for e in events if e.event == "start"), None)
    first = next((e.t for e in events if e.event == "first_token"), None)
    last = events[-1].t if events else None
    return TimingsSummary(load_s=None, first_token_s=None if first is None or start is None else first - start,
                          decode_s=None if first is None or last is None else last - first, total_s=last, units_per_s=None)


def _budget(snap: Snapshot) -> BudgetSummary:
    budget = snap.budget
    found: dict[str, Any] = {"memory_breakdown": describe_memory(budget) if budget is not None else None}
    counts = [len(a) for a in snap.token_ids.values()] if snap.token_ids else [s.generated for s in (snap.stop.sequences if snap.stop else ())]
    if not counts and snap.progress is not None and snap.progress.last is not None:  # killed: the stream is the only count
        counts = [snap.progress.last.generated]
    if counts:
        found["generated_max"] = max(counts)
        if budget is not None and budget.requested_units:
            found["used_fraction"] = max(counts) / budget.requested_units
    if snap.result is not None:
        found.update(peak_rss_bytes=snap.result.peak_memory.rss_bytes, peak_cuda_allocated_bytes=snap.result.peak_memory.cuda_allocated_bytes,
                     produced_seconds=snap.result.produced_seconds, requested_seconds=snap.result.requested_seconds)
    return BudgetSummary(plan=budget, **found)


def _samples(snap: Snapshot) -> list[Sample]:
    """Progress records, thinned evenly to at most MAX_SAMPLES (first and last always kept)."""
    if snap.progress is None:
        return []
    events = snap.progress.events
    if len(events) > MAX_SAMPLES:
        stride = len(events) / (MAX_SAMPLES - 1)
        events = tuple(events[min(round(i * stride), len(events) - 1)] for i in range(MAX_SAMPLES - 1)) + (events[-1],)
    samples = []
    for e in events:
        samples.append(Sample(t=e.t, event=e.event, generated=e.generated, units_per_s=getattr(e, "units_per_s", None),
                              window_units_per_s=getattr(e, "window_units_per_s", None), rss_bytes=e.rss_bytes,
                              cuda_allocated_bytes=e.cuda_allocated_bytes, cuda_reserved_bytes=e.cuda_reserved_bytes))
    return samples


def _notes(snap: Snapshot, decoder: TextDecoder | DecoderUnavailable) -> list[str]:
    notes = []
    if not snap.is_sealed and not is_plan_only(snap):  # a plan is protected by frozen-sha256.txt, and sealed when it runs
        notes.append("not sealed: no manifest-sha256.txt, so these files are not protected (run 'genrun verify')")
    if snap.progress is not None and snap.progress.truncated_tail:
        notes.append(f"progress.ndjson: {snap.progress.truncated_tail}")
    for file, why in sorted(snap.problems.items()):
        notes.append(f"{file}: {why}")
    if isinstance(decoder, DecoderUnavailable) and snap.token_ids is not None:
        notes.append(f"last tokens shown as ids only: {decoder.reason}")
    return notes
