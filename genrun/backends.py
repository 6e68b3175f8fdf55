"""Writing a genrun backend: everything a third-party backend imports, from this one module.

A backend is a model family or engine genrun can plan and run. Four are built in (`transformers`,
`diffusers`, `loop`, `vllm`) and use genrun only through this module, as yours will. Anything under
`genrun.runner`, `genrun.schemas` or `genrun.analysis` is genrun's own and may change between
releases; what is named here is the plugin contract. A complete, runnable example ships with genrun:
`genrun.examples.counter_backend` (read its source; `help()` it, or copy it).

**1. Register it.** Declare a factory (no arguments, returns your backend) in your distribution's
entry points; genrun finds it by the `[model] backend` value of a request and never compares names
itself. Two installed distributions registering one name are refused, naming both::

    [project.entry-points."genrun.backends"]
    counter = "my_package.counter:create_backend"    # add " [extra]" to name an extra it needs

**2. The backend object: every required member** (a missing one is refused at plan time, named)::

    class CounterBackend:
        name = "counter"                              # str: the entry-point name; `[model] backend` it serves
        evidence = EvidenceDeclaration(...)           # what it writes and analysis may check (section 3)

        def validate_request(self, request: Request, model_dir: Path, context: PlanContext) -> None: ...
        def prepare_inputs(self, request: Request, processor: Any) -> Any: ...
        def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool,
                            context: PlanContext) -> TokenBudget: ...
        def progress_unit(self, request: Request) -> tuple[Unit, int]: ...
        def load(self, ctx: LoadContext) -> LoadedModel: ...
        def start(self, ctx: ExecutionContext) -> Run: ...   # Run: generate(loaded) -> None, finish(end) -> BackendOutcome

- `validate_request`, at plan time before anything is hashed or written: refuse what you cannot run
  with `RequestError` (exit 2); collect `[generation]` problems and call `refuse_generation(problems)`;
  `unknown_key_message(("generation",), key, valid_keys)` words an unknown key with a did-you-mean.
  `context.cached(key, compute)` caches a read (a checkpoint's config) that a sweep's items share.
- `prepare_inputs`: the model inputs `[input]` becomes, the same at plan and at execution
  (`processor`: `LoadedModel.processor` at execution).
- `estimate_budget`: the pre-flight `token-budget.json`; `force` records refusals instead of refusing.
  A backend that is not a token language model builds it with one call (no KV-cache fields)::

      unit_budget(request, unit="step", units=steps, weight_bytes=weight_bytes, force=force,
                  rows=1, working_bytes=0, refusals=(), units_key="steps")

  A token LM fills `TokenBudget` itself (prompt, context, KV bytes) with `memory_fit`, `refusals_for`
  and `with_refusals`; `DTYPE_BYTES` sizes a dtype, `WEIGHT_SUFFIXES` names weight files.
- `progress_unit`: what `progress.ndjson` counts (`"token"`, `"frame"`, `"step"`, ...) and how many
  `recorder.step()` calls make one unit.
- `load(ctx)`: load the frozen model offline from `ctx.model_dir` onto `ctx.device`; return
  `LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=ctx.request.model.dtype,
  device=ctx.device, loader=ctx.request.model.loader, model=..., processor=..., load_s=...)`, with
  `release=` if dropping it is not enough (e.g. a child process): called after the seal of the run that loaded it.
  A sweep may reuse it for other snapshots.
- `start(ctx)`: your `Run` for one snapshot; cheap, loads and writes nothing.

Optional members: `request_tables = ("engine",)` (top-level request tables you own: genrun parses
them into `request.backend_tables["engine"]` and refuses tables no one owns); `user_code(request)`
returning `(field, "module:function")` pairs (hashed into `code.json`; resolve them with
`resolve_callable(reference, field)` inside `user_import_paths(ctx.import_paths)`); `not_installed()`
returning the install line when your libraries are missing (`None`: ready); batching (section 6).

**3. Declare your evidence.** `genrun plan` freezes `evidence` into each snapshot as `backend.json`,
with the JSON Schema of your models, so `verify`, `report` and `diff` check your snapshots without
importing your code::

    class CounterCall(BaseModel): ...                          # your call-config artifact's model

    class _Counted(StopEvidence):                              # facts every reason of yours carries
        counted: int

    class CountedAll(_Counted):                                # one model per stop reason
        reason: Literal["completed"] = "completed"

    class CountInterrupted(Interrupted, _Counted): ...         # `signal`, from genrun
    class CountFailed(Failed, _Counted): ...                   # `raised` (the class name), from genrun

    evidence = EvidenceDeclaration(
        kinds=("call_config", "stop_records"),                 # keys of EVIDENCE_KIND_MEANING
        stop_evidence=(CountedAll, CountInterrupted, CountFailed),
        call_config_name="counter-call.json", call_config_model=CounterCall,
    )

The kinds say which of verify's checks apply. Every backend provides `stop_records`; add
`call_config` with a call-config artifact; `token_ids` only if you write the token-id files with
`save_token_rows` (and `save_prompt_ids`) and give every stop model the `TokenStopFacts` fields;
`diffusion_steps` only if every stop model carries `steps`, a `DiffusionSteps` (steps done of steps planned, and where
the plan came from: `StepsPlannedSource`); `stages` as in section 5; `generation_config` and `generation_calls` as in
section 8. genrun's own call-config models subclass `CallConfigRecord` (how `report` and `diff` show the record, and
where it carries the request's values); yours need not: a third party's call config is shown as recorded. Reasons come from the core vocabulary (`StopReason`, meanings in
`STOP_REASON_MEANING`): `completed`, `interrupted` and `exception` must agree with how the run ended;
the others (`eos`, `max_new_tokens`, ...) are yours to justify in your evidence. `Interrupted`,
`Failed` and `FailedWithMessage` (`type` and `message` instead of `raised`) are the shared models of
the two reasons the core decides: subclass one first, then your shared facts.

**4. The run** (genrun's core owns the template; you fill its steps)::

    run = backend.start(ctx)                   # ExecutionContext -> your Run; loads and writes nothing
    loaded = backend.load(ctx)                 # LoadContext -> LoadedModel (skipped when a sweep reuses one)
    run.generate(loaded)                       # may raise anything; RunInterrupted on SIGINT/SIGTERM
    outcome = run.finish(end)                  # GenerationEnd -> BackendOutcome, once, signals already disarmed

In `generate`, write the call-config artifact (`ctx.snapshot.write(name, model)`: the snapshot as a
writable `SnapshotDir`, every write atomic and relative to the directory the core holds open for the run; `ctx.snapshot_dir`
is its path, for messages), call `ctx.recorder.start(planned_units, rows)`, then
`ctx.recorder.step()` once per generated unit; hold a signal to stop at a clean point with
`deferred()` (`first_signal()` says whether one is held); where your user's code hands you a unit (a loop's
`emit`), call `stop_if_requested()` first: a signal that code swallowed stops the run there. A file you append to yourself is written after
`refuse_other_process(what)`: a child forked by user code that returns into your code ends there (genrun's own writes
and the seal check the same). `[input]` files frozen with the snapshot
are `read_input_files(ctx.snapshot)` (an `InputFile` each) and `input_path(ctx.snapshot_dir, file)`; `decode_audio`
and `load_image` read them. In `finish(end)`, write your outputs under `ctx.outputs_dir` (partial ones
too; `ctx.snapshot.write_bytes("outputs/NAME", data)`, or `save_audio`, `save_array`,
`save_output_fields` for arrays, which need numpy) and return `BackendOutcome(unit=..., generated=...,
generated_tokens=..., first_unit_s=..., decode_s=..., stops=(SequenceStop(...), ...), outputs=(...))`:
one `SequenceStop(index=row, call_index=0, reason=..., generated=..., exception=..., evidence=...)`
per row whose reason agrees with `end` (`end.returned`, `end.signal`, `end.failure`;
`exception_info(end.failure)` fills `exception`), and timings from
`generation_timings(ctx.recorder, started, None)`. Never catch `BaseException` to classify the run and
never disarm signals: the core does both, writes `generation-stop.json`, `result.json` and the terminal
progress event, and seals the snapshot, for every backend alike.

**5. Stages** (evidence kind `stages`): a backend whose run is a sequence of stages (an autoregressive
stage, then an acoustic one) writes `STAGE_PROGRESS_FILE` (`StageStartEvent` / `StageProgressEvent` /
`StageEndEvent` lines, appended through `ctx.snapshot.open_stream(STAGE_PROGRESS_FILE)`, an `AppendStream`), `STAGE_IDS_FILE` (`StageIds`) and `STAGES_FILE` (`Stages`), and names each stop
record's stage in its evidence (`stage`, `units`, `ids`); verify then checks ids against counts per
stage and row, `eos` and `max_new_tokens` claims against the ids, and what a consuming stage read
against what its source made. The built-in `loop` backend (`genrun.runner.backends.loop`, its
recorder documented in docs/backends.md) is one.

**6. Batching (optional)**: an engine that batches requests itself may also offer
`items_per_worker(request, model_dir) -> int` and `open_batch(loaded) -> ItemBatch` (`BatchingBackend`):
a local sweep worker then runs that many items at once on one loaded model, each still its own snapshot
on its own thread, and its `generate` hands its requests to the open batch. The built-in `vllm`
backend is the example.

**7. Runtime (optional)**: the core never imports torch. What depends on the library a backend computes with (which
devices exist and what `device = "auto"` means, the deterministic switches and thread counts in `determinism.json`,
free device memory for `memory_fit(..., runtime)`, the CUDA devices and package versions in `environment.json` and
`report`) it asks the backend's `runtime` attribute, a `Runtime`. Without one a backend gets `Runtime()`: `auto` is the
CPU, no switches are set and none is claimed (`None`), no packages are named. A torch backend sets
`runtime = TorchRuntime(("my-library", *TORCH_PACKAGES))`; another subclasses `Runtime` and overrides what it knows
(`resolve_device`, `require_device`, `deterministic_mode`, `capture_determinism`, `device_memory`, `set_threads`,
`cuda_info`; `packages=` names the distributions whose versions shape its generation).

**8. A library's generate, instrumented (optional)**: a backend that runs a library's `generate` (the built-in
`transformers` backend is one) may write what verify checks for two more kinds, and what each row became before it:

- `generation_config`: before a call's first token, the config exactly as generate used it, a
  `GenerationConfigBeforeGenerate` written as `generation_config_name(call_index)` (outermost calls from 0), each limit
  with who set it (`LimitSource`; a `library_default` length is the prompt + `LIBRARY_DEFAULT_NEW_TOKENS`);
- `generation_calls`: `GENERATION_CALLS_FILE`, a `GenerationCalls` with one `CallEvidence` per outermost call (and an
  `AudioEvidence` for the audio a call decoded);
- `INPUT_PREPARATION_FILE` (no kind; `report` shows it): an `InputPreparation` with one `PreparedRow` per row (prompt
  ids, the `AudioReceived` / `ImageReceived` facts, forced `DecoderPrompt`s, every `Truncation`) for the model's
  `Architecture`.

**Also here**: `ENTRY_POINT_GROUP` (the group's name); `Backend` (the protocol of section 2, for
`isinstance` and type checkers); `ProgressRecorder` (the type of `ctx.recorder`); `EvidenceKind` (the
type of a kind); `ExceptionInfo` (what `exception_info` returns); `MemoryFit` (what `memory_fit`
returns); `DeviceMemory` (what `Runtime.device_memory` returns); `AppendStream` (what
`ctx.snapshot.open_stream` returns: `write`, `fsync`, `close`); `DecodedAudio` (what `decode_audio` returns: samples and rate); `StageRecord` and
`StageUnit` (the parts of `Stages`); `InputSpec` and `UnitsSpec` (the types of `request.input` and
`request.units`); `DomainEstimate`, `LengthSource` and `FrameRateSource` (parts of `TokenBudget`); `jsonable(value,
leaf)` and `array_or(describe)` (a library's config objects as plain JSON values, for a call-config artifact);
`human_bytes(n)` (a size in a refusal's words, as genrun's own messages print it); `write_bytes_atomic(path, data)` and `write_model_atomic(path,
model)` (a file outside the snapshot's own layout, atomically); `save_entrypoint_result(outputs_dir,
value)` (what a user's entry point returned, as `outputs/` files); for `token_ids`, `TokenRow` (one
row's ids), `summarise_token_rows` (the summary `save_token_rows` writes, without writing) and
`write_sequence_texts` (each row's decoded text under `outputs/`); `add_line_from_another_process(stream, source, text)`
(a line a process your backend started wrote, such as an engine's own process, kept in the run's `run-log.ndjson`).
"""

import importlib
from typing import TYPE_CHECKING, Any

# The names are imported on first use (PEP 562), like `genrun.schemas`: an evidence module that needs three models
# (and every reader that finds a built-in backend's models through it) does not pay for the runner's modules. The
# `TYPE_CHECKING` imports are what type checkers read; `_EXPORTS` is what runs; tests/test_plugin_contract.py checks
# that the two name the same things.
if TYPE_CHECKING:
    from genrun.runner._io import write_bytes_atomic, write_model_atomic
    from genrun.runner.backends.batching import BatchingBackend, ItemBatch
    from genrun.runner.backends.entrypoint import resolve_callable, save_entrypoint_result, user_import_paths
    from genrun.runner.backends import (
        ENTRY_POINT_GROUP,
        Backend,
        BackendOutcome,
        ExecutionContext,
        GenerationEnd,
        LoadContext,
        LoadedModel,
        Run,
        exception_info,
        generation_timings,
        refuse_generation,
    )
    from genrun.runner.backends._audio import DecodedAudio, decode_audio
    from genrun.runner.backends._images import load_image
    from genrun.runner.budget import DTYPE_BYTES, MemoryFit, memory_fit, refusals_for, unit_budget, with_refusals
    from genrun.runner.backends._torch_runtime import TORCH_PACKAGES, TorchRuntime
    from genrun.runner.errors import RequestError
    from genrun.runner.executing_process import refuse_other_process
    from genrun.runner.input_files import input_path, read_input_files
    from genrun.runner.interrupts import RunInterrupted, deferred, first_signal, stop_if_requested
    from genrun.runner.media import save_array, save_audio, save_output_fields
    from genrun.runner.model_identity import WEIGHT_SUFFIXES
    from genrun.runner.plan_context import PlanContext
    from genrun.runner.recorder import ProgressRecorder
    from genrun.runner.request_loading import unknown_key_message
    from genrun.runner.run_log import add_line_from_another_process
    from genrun.runner.runtime import DeviceMemory, Runtime
    from genrun.runner.token_rows import TokenRow, save_prompt_ids, save_token_rows, summarise_token_rows, write_sequence_texts
    from genrun.schemas import (
        EVIDENCE_KIND_MEANING,
        AudioEvidence,
        AudioReceived,
        CallEvidence,
        DecoderPrompt,
        DiffusionSteps,
        DomainEstimate,
        GenerationCalls,
        GenerationConfigBeforeGenerate,
        ImageReceived,
        InputFile,
        InputPreparation,
        InputSpec,
        LimitSource,
        PreparedRow,
        Truncation,
        UnitsSpec,
        STOP_REASON_MEANING,
        EvidenceDeclaration,
        EvidenceKind,
        ExceptionInfo,
        Failed,
        FailedWithMessage,
        Interrupted,
        Request,
        SequenceStop,
        StopEvidence,
        StopReason,
        TokenBudget,
        TokenStopFacts,
    )
    from genrun.schemas.budget import FrameRateSource, LengthSource
    from genrun.schemas.call_config import CallConfigRecord
    from genrun.schemas.inputs import Architecture
    from genrun.schemas.layout import GENERATION_CALLS as GENERATION_CALLS_FILE
    from genrun.schemas.layout import INPUT_PREPARATION as INPUT_PREPARATION_FILE
    from genrun.schemas.layout import LIBRARY_DEFAULT_NEW_TOKENS, generation_config_name
    from genrun.schemas.layout import STAGE_IDS as STAGE_IDS_FILE
    from genrun.schemas.layout import STAGE_PROGRESS as STAGE_PROGRESS_FILE
    from genrun.schemas.layout import STAGES as STAGES_FILE
    from genrun.schemas.progress import Unit
    from genrun.schemas.rendering import array_or, human_bytes, jsonable
    from genrun.schemas.diffusion_steps import StepsPlannedSource
    from genrun.schemas.stages import StageEndEvent, StageIds, StageProgressEvent, StageRecord, Stages, StageStartEvent, StageUnit
    from genrun.snapshot_dir import AppendStream, SnapshotDir

_EXPORTS: dict[str, tuple[str, ...]] = {
    "genrun.runner._io": ("write_bytes_atomic", "write_model_atomic"),
    "genrun.runner.backends": ("Backend", "BackendOutcome", "ENTRY_POINT_GROUP", "ExecutionContext", "GenerationEnd", "LoadContext", "LoadedModel", "Run", "exception_info", "generation_timings", "refuse_generation"),
    "genrun.runner.backends._audio": ("DecodedAudio", "decode_audio"),
    "genrun.runner.backends._images": ("load_image",),
    "genrun.runner.backends._torch_runtime": ("TORCH_PACKAGES", "TorchRuntime"),
    "genrun.runner.backends.batching": ("BatchingBackend", "ItemBatch"),
    "genrun.runner.backends.entrypoint": ("resolve_callable", "save_entrypoint_result", "user_import_paths"),
    "genrun.runner.budget": ("DTYPE_BYTES", "MemoryFit", "memory_fit", "refusals_for", "unit_budget", "with_refusals"),
    "genrun.runner.errors": ("RequestError",),
    "genrun.runner.executing_process": ("refuse_other_process",),
    "genrun.runner.input_files": ("input_path", "read_input_files"),
    "genrun.runner.interrupts": ("RunInterrupted", "deferred", "first_signal", "stop_if_requested"),
    "genrun.runner.media": ("save_array", "save_audio", "save_output_fields"),
    "genrun.runner.model_identity": ("WEIGHT_SUFFIXES",),
    "genrun.runner.plan_context": ("PlanContext",),
    "genrun.runner.recorder": ("ProgressRecorder",),
    "genrun.runner.request_loading": ("unknown_key_message",),
    "genrun.runner.run_log": ("add_line_from_another_process",),
    "genrun.runner.runtime": ("DeviceMemory", "Runtime"),
    "genrun.runner.token_rows": ("TokenRow", "save_prompt_ids", "save_token_rows", "summarise_token_rows", "write_sequence_texts"),
    "genrun.schemas.call_config": ("CallConfigRecord",),
    "genrun.schemas": ("AudioEvidence", "AudioReceived", "CallEvidence", "DecoderPrompt", "DiffusionSteps", "DomainEstimate", "EVIDENCE_KIND_MEANING", "EvidenceDeclaration", "EvidenceKind", "ExceptionInfo", "Failed", "FailedWithMessage", "GenerationCalls", "GenerationConfigBeforeGenerate", "ImageReceived", "InputFile", "InputPreparation", "InputSpec", "Interrupted", "LimitSource", "PreparedRow", "Request", "STOP_REASON_MEANING", "SequenceStop", "StopEvidence", "StopReason", "TokenBudget", "TokenStopFacts", "Truncation", "UnitsSpec"),
    "genrun.schemas.budget": ("FrameRateSource", "LengthSource"),
    "genrun.schemas.inputs": ("Architecture",),
    "genrun.schemas.layout": ("GENERATION_CALLS_FILE=GENERATION_CALLS", "INPUT_PREPARATION_FILE=INPUT_PREPARATION", "LIBRARY_DEFAULT_NEW_TOKENS", "STAGES_FILE=STAGES", "STAGE_IDS_FILE=STAGE_IDS", "STAGE_PROGRESS_FILE=STAGE_PROGRESS", "generation_config_name"),
    "genrun.schemas.progress": ("Unit",),
    "genrun.schemas.rendering": ("array_or", "human_bytes", "jsonable"),
    "genrun.schemas.stages": ("StageEndEvent", "StageIds", "StageProgressEvent", "StageRecord", "StageStartEvent", "StageUnit", "Stages"),
    "genrun.schemas.diffusion_steps": ("StepsPlannedSource",),
    "genrun.snapshot_dir": ("AppendStream", "SnapshotDir"),
}
"""Each module and the names this one takes from it (`PUBLIC=attribute` where the public name differs)."""
_SOURCE = {public: (module, attribute or public) for module, names in _EXPORTS.items()
           for public, _, attribute in (name.partition("=") for name in names)}
"""Public name -> (module, attribute)."""

__all__ = [
    # registering and the protocol
    "ENTRY_POINT_GROUP", "Backend", "Run",
    # what the core hands a backend, and what it returns
    "BackendOutcome", "ExecutionContext", "GenerationEnd", "LoadContext", "LoadedModel", "ProgressRecorder", "Request", "Unit",
    "generation_timings",
    # the request's parts a backend reads
    "InputSpec", "UnitsSpec",
    # evidence: the declaration and the stop records
    "EVIDENCE_KIND_MEANING", "EvidenceDeclaration", "EvidenceKind", "ExceptionInfo", "Failed", "FailedWithMessage", "Interrupted",
    "STOP_REASON_MEANING", "SequenceStop", "StopEvidence", "StopReason", "TokenStopFacts", "exception_info",
    # the base of genrun's own typed call-config models
    "CallConfigRecord",
    # the `diffusion_steps` evidence kind: the steps every stop record carries
    "DiffusionSteps", "StepsPlannedSource",
    # signals; a process forked by user code never writes (its own appends: `refuse_other_process` first)
    "RunInterrupted", "deferred", "first_signal", "refuse_other_process", "stop_if_requested",
    # optional: many snapshots' generation at once on one loaded model (a sweep worker's items; see section 6)
    "BatchingBackend", "ItemBatch",
    # refusing a request
    "RequestError", "refuse_generation", "unknown_key_message",
    # optional: the library the backend computes with (devices, determinism, threads, versions; see section 7)
    "DeviceMemory", "Runtime", "TORCH_PACKAGES", "TorchRuntime",
    # the plan-time budget
    "DTYPE_BYTES", "MemoryFit", "PlanContext", "TokenBudget", "WEIGHT_SUFFIXES", "memory_fit", "refusals_for", "unit_budget", "with_refusals",
    "DomainEstimate", "FrameRateSource", "LengthSource", "human_bytes",
    # the request's input files, as frozen into the snapshot (`[input]` audio/images)
    "DecodedAudio", "InputFile", "decode_audio", "input_path", "load_image", "read_input_files",
    # writing an artifact (`ctx.snapshot`; the functions write a file outside a snapshot's own layout atomically)
    "AppendStream", "SnapshotDir", "write_bytes_atomic", "write_model_atomic",
    # writing outputs under `ctx.outputs_dir` (numpy needed when called)
    "save_array", "save_audio", "save_entrypoint_result", "save_output_fields",
    # the `stages` evidence kind: a run of stages in sequence (its files and their models)
    "STAGES_FILE", "STAGE_IDS_FILE", "STAGE_PROGRESS_FILE", "StageEndEvent", "StageIds", "StageProgressEvent", "StageRecord", "Stages",
    "StageStartEvent", "StageUnit",
    # output of a process the backend starts (an engine's own process), read back into the run's run-log.ndjson
    "add_line_from_another_process",
    # user code named by the request (`module:function`, beside the request)
    "resolve_callable", "user_import_paths",
    # a library's generate, instrumented (section 8): the `generation_config` and `generation_calls` kinds, input preparation
    "AudioEvidence", "CallEvidence", "GENERATION_CALLS_FILE", "GenerationCalls", "GenerationConfigBeforeGenerate", "LIBRARY_DEFAULT_NEW_TOKENS",
    "LimitSource", "generation_config_name", "array_or", "jsonable",
    "Architecture", "AudioReceived", "DecoderPrompt", "INPUT_PREPARATION_FILE", "ImageReceived", "InputPreparation", "PreparedRow", "Truncation",
    # the `token_ids` evidence kind, for a backend that keeps its own ids (needs torch and safetensors)
    "TokenRow", "save_prompt_ids", "save_token_rows", "summarise_token_rows", "write_sequence_texts",
]


def __getattr__(name: str) -> Any:
    """`from genrun.backends import Request`: the module that defines it is imported now (once: the name is kept)."""
    source = _SOURCE.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(source[0]), source[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
