"""`[model] backend = "loop"`: genrun records a generation loop it does not run itself.

The request names the loop (`[loop] callable = "module:function"`, the module beside the request)
and its keyword arguments (`[loop] kwargs`), and may name a plan-time budget callable (`[loop]
budget`). genrun freezes and hashes the request, `[model] path` (the files the loop reads), the
loop's module and the environment like any run, and loads nothing: at execution it calls
`function(model_dir, inputs, generation, rec, **kwargs)` inside the run template, and `rec`
(`recorder.py`) records the loop's configuration, stages, ids and stops. Built on the public
plugin module `genrun.backends` only.
"""

import contextlib
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from genrun.backends import (
    AppendStream,
    STAGE_IDS_FILE,
    STAGE_PROGRESS_FILE,
    STAGES_FILE,
    BackendOutcome,
    ExecutionContext,
    GenerationEnd,
    LoadContext,
    LoadedModel,
    Request,
    RequestError,
    Runtime,
    SequenceStop,
    StageIds,
    Stages,
    TokenBudget,
    Unit,
    exception_info,
    generation_timings,
    resolve_callable,
    unit_budget,
    unknown_key_message,
    user_import_paths,
)

from .evidence import CALL_CONFIG, EVIDENCE, LoopCall, stop_evidence_model
from .recorder import LoopRecorder, RecorderMisuse, Stage

LOOP_KEYS = ("callable", "kwargs", "budget")


class LoopBackend:
    """`[model] backend = "loop"`."""

    name = "loop"
    request_tables = ("loop",)
    # The loop brings its own engine: genrun sets no library's switches and names the engines its examples use (recorded
    # in environment.json as installed or absent), never torch.
    runtime = Runtime(packages=("onnxruntime", "MNN", "numpy", "tokenizers"))
    evidence = EVIDENCE  # what analysis may check (frozen as backend.json at plan time)

    def validate_request(self, request: Request, model_dir: Path, context: Any) -> None:
        """`[loop] callable` is required (`module:function`, importable beside the request); `kwargs` is a table; `budget` a
        `module:function`. `[generation]` is the loop's own: genrun passes it through unread."""
        table = loop_table(request)
        problems = [unknown_key_message(("loop",), key, list(LOOP_KEYS)) for key in table if key not in LOOP_KEYS]
        if "callable" not in table:
            problems.append('[loop] callable is missing: name the loop as callable = "module:function" (the module beside the request)')
        for key in ("callable", "budget"):
            value = table.get(key)
            if value is not None and (not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":"))):
                problems.append(f'[loop] {key} = {value!r} must be "module:function", e.g. "my_loop:generate"')
        if not isinstance(table.get("kwargs", {}), dict):
            problems.append(f"[loop] kwargs = {table['kwargs']!r} must be a table of keyword arguments, e.g. kwargs = {{ frames = 50 }}")
        if problems:
            raise RequestError("[loop] refused:" + "".join(f"\n  - {p}" for p in problems))
        resolve_callable(table["callable"], "[loop] callable")  # the plan imports it beside the request: a typo fails here

    def user_code(self, request: Request) -> tuple[tuple[str, str], ...]:
        """The loop's modules, hashed into `code.json` like an entry point's."""
        table = loop_table(request)
        return tuple((f"[loop] {key}", table[key]) for key in ("callable", "budget") if isinstance(table.get(key), str))

    def prepare_inputs(self, request: Request, processor: Any) -> dict[str, Any]:
        """`[input]` as plain values: `prompts` (one per row; `prompt` becomes a one-row list) and any media paths."""
        spec = request.input.model_dump(mode="json", exclude_none=True, exclude={"copy_files", "processor_kwargs"})
        prompt = spec.pop("prompt", None)
        if prompt is not None:
            spec["prompts"] = [prompt]
        return spec

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool, context: Any) -> TokenBudget:
        """The files' size against free memory, and the limits `[loop] budget` reports (each `needed` <= its `limit`); the
        requested length is `[generation] max_new_tokens` for a token loop, and unknown otherwise (the loop sets its own)."""
        unit = self.progress_unit(request)[0]
        return unit_budget(request, unit=unit, units=requested_tokens(request) if unit == "token" else None, weight_bytes=weight_bytes,
                           force=force, refusals=budget_refusals(request, model_dir, self.prepare_inputs(request, None)))

    def progress_unit(self, request: Request) -> tuple[Unit, int]:
        """`[units] name` (token or frame): the stages counting it feed `progress.ndjson` and `result.json`."""
        return request.units.name, 1

    def load(self, ctx: LoadContext) -> LoadedModel:
        """Nothing: the loop loads its model itself, with its own engine."""
        spec = ctx.request.model
        return LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=spec.dtype, device=ctx.device, loader=spec.loader,
                           model=None, processor=None, load_s=0.0)

    def start(self, ctx: ExecutionContext) -> "LoopRun":
        """A run that will call the loop."""
        return LoopRun(ctx, self.prepare_inputs(ctx.request, None))


def requested_tokens(request: Request) -> int | None:
    """`[generation] max_new_tokens`, which the loop receives in `generation`: the limit the request asks it for, in tokens
    (`None` when unset: the loop sets its own, e.g. from `[loop] kwargs`)."""
    limit = request.generation.get("max_new_tokens")
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def loop_table(request: Request) -> dict[str, Any]:
    """`[loop]` as written (empty when absent)."""
    return dict(request.backend_tables.get("loop", {}))


def budget_refusals(request: Request, model_dir: Path, inputs: dict[str, Any]) -> tuple[str, ...]:
    """Call `[loop] budget(model_dir, inputs, generation, **kwargs)`: it returns `{name: {"needed": n, "limit": m}}` (context,
    frames, bytes, ...); each `needed > limit` is a refusal naming both numbers and the fix."""
    table = loop_table(request)
    reference = table.get("budget")
    if reference is None:
        return ()
    limits = resolve_callable(reference, "[loop] budget")(model_dir, inputs, dict(request.generation), **table.get("kwargs", {}))
    if not isinstance(limits, Mapping):
        raise RequestError(f"[loop] budget {reference!r} returned {type(limits).__name__}; return {{name: {{'needed': n, 'limit': m}}}}")
    refusals = []
    for name, pair in limits.items():
        if not isinstance(pair, Mapping) or not {"needed", "limit"} <= set(pair):
            raise RequestError(f"[loop] budget {reference!r}: {name!r} is {pair!r}; each limit is {{'needed': n, 'limit': m}}")
        if pair["needed"] > pair["limit"]:
            refusals.append(f"[loop] budget {reference!r}: {name} needs {pair['needed']:,} but the limit is {pair['limit']:,}; ask the loop for "
                            f"less ([generation] or [loop] kwargs) so that {name} <= {pair['limit']:,}")
    return tuple(refusals)


class LoopRun:
    """Calls the loop with a recorder; `finish` writes what the recorder holds, whatever ended the run."""

    def __init__(self, ctx: ExecutionContext, inputs: dict[str, Any]) -> None:
        self._ctx, self._inputs = ctx, inputs
        self._table = loop_table(ctx.request)
        self.rec: LoopRecorder | None = None
        self._stage_progress: AppendStream | None = None
        self._started: float | None = None
        self._call_written = False

    def generate(self, loaded: LoadedModel) -> None:
        ctx = self._ctx
        with user_import_paths(ctx.import_paths):
            function = resolve_callable(self._table["callable"], "[loop] callable")
        self._stage_progress = ctx.snapshot.open_stream(STAGE_PROGRESS_FILE)
        ctx.outputs_dir.mkdir(exist_ok=True)
        progress = ctx.request.progress
        self.rec = LoopRecorder(core=ctx.recorder, progress_fd=self._stage_progress.fd, every_units=progress.every_units,
                                every_seconds=progress.every_seconds, on_config=self._write_call, outputs_dir=ctx.outputs_dir)
        ctx.recorder.start(ctx.planned_units, None)
        self._started = time.monotonic()
        before = set(threading.enumerate())
        with user_import_paths(ctx.import_paths):
            function(ctx.model_dir, self._inputs, dict(ctx.request.generation), self.rec, **self._table.get("kwargs", {}))
        refuse_running_threads(before)

    def _write_call(self, config: dict[str, Any] | None) -> None:
        call = LoopCall(callable=self._table["callable"], kwargs=self._table.get("kwargs", {}), budget=self._table.get("budget"), config=config)
        self._ctx.snapshot.write(CALL_CONFIG, call)
        self._call_written = True

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        ctx = self._ctx
        stages = self.rec.stages if self.rec is not None else []
        if self.rec is not None and not self._call_written:
            self._write_call(None)
        if self.rec is not None:
            ctx.snapshot.write(STAGE_IDS_FILE, StageIds(ids={s.name: tuple(tuple(r) for r in s.ids) for s in stages}))
            ctx.snapshot.write(STAGES_FILE, Stages(stages=tuple(s.record() for s in stages)))
        if self._stage_progress is not None:
            with contextlib.suppress(OSError):  # after the evidence: a loop that closed it (EBADF) loses nothing of it
                self._stage_progress.close()
        unit = ctx.recorder.unit
        counted = [s for s in stages if s.unit == unit]
        generated = sum(sum(s.units()) for s in counted)
        ctx.recorder.sync_steps(generated)  # a signal can land between a row's ids and their count
        stops = tuple(stop for index, stage in enumerate(stages) for stop in _stage_stops(index, stage, end, stage in counted))
        first_unit_s, decode_s = generation_timings(ctx.recorder, self._started, None)
        outputs = tuple(sorted(str(p.relative_to(ctx.outputs_dir)) for p in ctx.outputs_dir.rglob("*") if p.is_file())) \
            if ctx.outputs_dir.is_dir() else ()
        timed = next((s for s in counted if s.per_second is not None), None)
        produced = max(timed.units(), default=0) / timed.per_second if timed is not None and unit == "frame" and timed.per_second else None
        return BackendOutcome(unit=unit, generated=generated, generated_tokens=sum(len(i) for s in counted for i in s.ids),
                              first_unit_s=first_unit_s, decode_s=decode_s, stops=stops, outputs=outputs, produced_seconds=produced,
                              notes=(stage_timings(stages),) if stages else ())


def refuse_running_threads(before: set[threading.Thread]) -> None:
    """A loop that returns while a thread it started still runs has not finished: what that thread writes would land after
    the evidence is written (or the seal), so the run fails naming the threads."""
    running = [t for t in threading.enumerate() if t not in before]
    if running:
        names = ", ".join(repr(t.name) for t in running)
        raise RecorderMisuse(f"the loop returned while {len(running)} thread(s) it started still run ({names}); join every thread "
                             "before returning: what they write after the return would not be the run's evidence")


def _stage_stops(index: int, stage: Stage, end: GenerationEnd, counted: bool) -> list[SequenceStop]:
    """One record per row of the stage: the loop's stop, else what ended the run (`unknown` when the loop returned)."""
    records = []
    for row, units in enumerate(stage.units()):
        facts: dict[str, Any] = {"stage": stage.name, "units": units, "ids": len(stage.ids[row])}
        claimed = stage.stops.get(row)
        failure = None
        if claimed is not None:
            reason, facts = claimed.reason, {**claimed.facts, **facts}
        elif end.signal is not None:
            reason, facts["signal"] = "interrupted", end.signal
        elif end.failure is not None:
            reason, facts["raised"], failure = "exception", type(end.failure).__name__, exception_info(end.failure)
        else:
            reason = "unknown"
        model = stop_evidence_model(reason)
        records.append(SequenceStop(index=row, call_index=index, reason=reason, generated=units if counted else 0, exception=failure,
                                    evidence=model(**facts)))
    return records


def stage_timings(stages: list[Stage]) -> str:
    """`stages: ar 30.1 s (4,200 frames, peak 1.2 GiB) · acoustic 8.0 s (41 windows)`."""
    parts = []
    for s in stages:
        peak = f", peak {s.rss_peak_bytes / 2**30:.2f} GiB" if s.rss_peak_bytes else ""
        parts.append(f"{s.name} {s.seconds:.2f} s ({sum(s.units()):,} {s.unit}s{peak})")
    return "stages: " + " · ".join(parts)


def create_backend() -> LoopBackend:
    """The entry point `loop = "genrun.runner.backends.loop:create_backend"`."""
    return LoopBackend()
