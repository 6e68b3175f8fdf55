"""Writing a genrun backend: everything a third-party backend imports, from this one module.

A backend is a model family or engine genrun can plan and run (`transformers` and `diffusers` are
built in). Anything under `genrun.runner`, `genrun.schemas` or `genrun.analysis` is genrun's own
and may change between releases; what is named here is the plugin contract.

**1. Register it.** Declare a factory in your distribution's entry points; genrun finds it by the
`[model] backend` value of a request and never compares backend names itself::

    [project.entry-points."genrun.backends"]
    counter = "my_package.counter:create_backend"    # create_backend() -> a Backend

**2. Declare your evidence** (`EvidenceDeclaration`, the backend's `evidence` attribute). `genrun
plan` freezes it into each snapshot as `backend.json`, with the JSON Schema of your models, so
`verify`, `report` and `diff` check your snapshots without importing your code::

    class CounterCall(BaseModel): ...                        # your call-config artifact's model

    class CountedAll(StopEvidence):                          # one model per stop reason
        reason: Literal["completed"] = "completed"
        counted: int

    evidence = EvidenceDeclaration(
        kinds=("call_config", "stop_records"),               # from EVIDENCE_KIND_MEANING
        stop_evidence=(CountedAll, Interrupted, Failed),
        call_config_name="counter-call.json", call_config_model=CounterCall,
    )

The kinds say which of verify's checks apply. Every backend provides `stop_records`; add
`call_config` with a call-config artifact; `token_ids` only if you write
`generated-token-ids.safetensors` and its summary the way the built-in language-model backend does
and give every stop model the `TokenStopFacts` fields (subclass it; `save_token_rows` writes the
files from ids a backend kept itself); `diffusion_steps` only if
your stop evidence carries `steps` as diffusion pipelines do. Reasons come from the core
vocabulary (`StopReason`, meanings in `STOP_REASON_MEANING`): `completed`, `interrupted` and
`exception` must agree with how the run ended; the others (`eos`, `max_new_tokens`, ...) are
yours to justify in your evidence.

**3. Plan-time members** (called by `genrun plan`, before anything is hashed or written; both
receive the plan's `PlanContext` last, whose `cached(key, compute)` caches a read, such as a checkpoint's
config, that a sweep's items share): `validate_request(request, model_dir, context)` refuses what you
cannot run with `RequestError` (exit 2): collect the problems and call `refuse_generation(problems)`;
`unknown_key_message` words an unknown `[generation]` key with a did-you-mean.
`estimate_budget(request, model_dir, weight_bytes, force, context)` returns the `TokenBudget` (use
`memory_fit`, `refusals_for`, `with_refusals`); `progress_unit(request)` says what you count (`"token"`, `"frame"`, `"step"`)
and how many recorder steps make one unit; `prepare_inputs(request, processor)` builds the model
inputs the same way at plan and at execution.

A backend that runs user code named in its table lists it with an optional `user_code(request)` member
returning `(field, "module:function")` pairs: planning hashes those modules into `code.json` (like
`[entrypoint] callable`), and `validate_request` / `estimate_budget` run with the request's directory
importable (`resolve_callable`), as the run does with `user_import_paths(ctx.import_paths)`.

A backend that needs its own request table (an engine's `[engine]`, a loop's `[loop]`) lists it in a
`request_tables = ("engine",)` attribute: genrun parses any top-level table that is not its own into
`request.backend_tables["engine"]`, refuses a table the chosen backend does not list (exit 2, with a
did-you-mean), and leaves the content to your `validate_request`.

**4. The run** (genrun's core owns the template; you fill its steps)::

    run = backend.start(ctx)                   # ExecutionContext -> your Run; loads and writes nothing
    loaded = backend.load(ctx)                 # LoadContext -> LoadedModel (skipped when a sweep reuses one;
                                               # give it `release=` if dropping it is not enough, e.g. a child process)
    run.generate(loaded)                       # may raise anything; RunInterrupted on SIGINT/SIGTERM
    outcome = run.finish(end)                  # GenerationEnd -> BackendOutcome, once, signals already disarmed

In `generate`, write the call-config artifact (`ctx.snapshot.write(name, model)`: the snapshot as a
writable `SnapshotDir`, every write atomic), call `ctx.recorder.start(planned_units, rows)`, then `ctx.recorder.step()` once per
generated unit; hold a signal to stop at a clean point with `deferred()`. In `finish(end)`, write
your outputs under `ctx.outputs_dir` (partial ones too; `ctx.snapshot.write_bytes("outputs/NAME", data)`
writes one atomically) and return a `BackendOutcome` with one
`SequenceStop` per row whose reason agrees with `end` (`end.returned`, `end.signal`,
`end.failure`; `exception_info(end.failure)` fills `SequenceStop.exception`), and timings from
`generation_timings`. Never catch `BaseException` to classify the run and never disarm signals:
the core does both, writes `generation-stop.json`, `result.json` and the terminal progress
event, and seals the snapshot, for every backend alike.

**5. Stages** (evidence kind `stages`): a backend whose run is a sequence of stages (an autoregressive stage,
then an acoustic one) writes `STAGE_PROGRESS_FILE` (`StageStartEvent` / `StageProgressEvent` / `StageEndEvent`
lines, appended through `ctx.snapshot.open_stream(STAGE_PROGRESS_FILE)`, an `AppendStream`), `STAGE_IDS_FILE` (`StageIds`) and `STAGES_FILE` (`Stages`), and names each stop record's stage in its
evidence (`stage`, `units`, `ids`); verify then checks ids against counts per stage and row, `eos` and
`max_new_tokens` claims against the ids, and what a consuming stage read against what its source made.

**6. Batching (optional)**: an engine that batches requests itself may also offer
`items_per_worker(request, model_dir)` and `open_batch(loaded) -> ItemBatch` (`BatchingBackend`): a local sweep
worker then runs that many items at once on one loaded model, each still its own snapshot on its own thread, and its
`generate` hands its requests to the open batch. The `vllm` backend is the example.

**7. Runtime (optional)**: the core never imports torch. What depends on the library a backend computes with (which
devices exist and what `device = "auto"` means, the deterministic switches and thread counts in `determinism.json`,
free device memory for `memory_fit(..., runtime)`, the CUDA devices and package versions in `environment.json` and
`report`) it asks the backend's `runtime` attribute, a `Runtime`. Without one a backend gets `Runtime()`: `auto` is the
CPU, no switches are set and none is claimed (`None`), no packages are named. A torch backend sets
`runtime = TorchRuntime(("my-library", "torch"))`; another subclasses `Runtime` and overrides what it knows
(`resolve_device`, `require_device`, `deterministic_mode`, `capture_determinism`, `device_memory`, `set_threads`,
`cuda_info`; `packages=` names the distributions whose versions shape its generation).

The backend under `tests/test_backend_plugin/counter_backend.py` is a complete example that
imports nothing else from genrun; the `loop` backend (`genrun.runner.backends.loop`) is another,
with stages. Its recorder is the contract a loop sees::

    def generate(model_dir, inputs, generation, rec, **kwargs):       # [loop] callable
        rec.config({"eos_token_ids": [2]})                             # once, before the first unit
        with rec.stage("lm", unit="token", rows=1) as lm:              # stages run in sequence
            lm.emit(0, [17])                                           # ids: list or numpy array
            lm.stop(0, "eos", eos_token_id=2)                          # or max_new_tokens (limit=), a loop reason
        with rec.stage("decode", unit="window", rows=1, consumes="lm") as dec:
            dec.advance(0, 1, consumed=1)                              # units without ids; source units read
"""

from genrun.runner._io import write_bytes_atomic, write_model_atomic
from genrun.runner.backends.batching import BatchingBackend, ItemBatch
from genrun.runner.backends.entrypoint import resolve_callable, user_import_paths
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
from genrun.runner.backends._torch_runtime import TorchRuntime
from genrun.runner.budget import MemoryFit, memory_fit, refusals_for, with_refusals
from genrun.runner.errors import RequestError
from genrun.runner.interrupts import RunInterrupted, deferred
from genrun.runner.plan_context import PlanContext
from genrun.runner.recorder import ProgressRecorder
from genrun.runner.request_loading import unknown_key_message
from genrun.runner.runtime import DeviceMemory, Runtime
from genrun.runner.token_rows import TokenRow, save_prompt_ids, save_token_rows
from genrun.schemas import (
    EVIDENCE_KIND_MEANING,
    STOP_REASON_MEANING,
    EvidenceDeclaration,
    EvidenceKind,
    ExceptionInfo,
    Request,
    SequenceStop,
    StopEvidence,
    StopReason,
    TokenBudget,
    TokenStopFacts,
)
from genrun.schemas.layout import LOOP_CALL as LOOP_CALL_FILE
from genrun.schemas.layout import STAGE_IDS as STAGE_IDS_FILE
from genrun.schemas.layout import STAGE_PROGRESS as STAGE_PROGRESS_FILE
from genrun.schemas.layout import STAGES as STAGES_FILE
from genrun.schemas.progress import Unit
from genrun.snapshot_dir import AppendStream, SnapshotDir
from genrun.schemas.stages import LoopCall, StageEndEvent, StageIds, StageProgressEvent, StageRecord, Stages, StageStartEvent, StageUnit

__all__ = [
    # registering and the protocol
    "ENTRY_POINT_GROUP", "Backend", "Run",
    # what the core hands a backend, and what it returns
    "BackendOutcome", "ExecutionContext", "GenerationEnd", "LoadContext", "LoadedModel", "ProgressRecorder", "Request", "Unit",
    "generation_timings",
    # evidence: the declaration and the stop records
    "EVIDENCE_KIND_MEANING", "EvidenceDeclaration", "EvidenceKind", "ExceptionInfo", "STOP_REASON_MEANING", "SequenceStop",
    "StopEvidence", "StopReason", "TokenStopFacts", "exception_info",
    # signals
    "RunInterrupted", "deferred",
    # optional: many snapshots' generation at once on one loaded model (a sweep worker's items; see section 6)
    "BatchingBackend", "ItemBatch",
    # refusing a request
    "RequestError", "refuse_generation", "unknown_key_message",
    # optional: the library the backend computes with (devices, determinism, threads, versions; see section 7)
    "DeviceMemory", "Runtime", "TorchRuntime",
    # the plan-time budget
    "MemoryFit", "PlanContext", "TokenBudget", "memory_fit", "refusals_for", "with_refusals",
    # writing an artifact (`ctx.snapshot`; the functions write a file outside a snapshot's own layout atomically)
    "AppendStream", "SnapshotDir", "write_bytes_atomic", "write_model_atomic",
    # the `stages` evidence kind: a run of stages in sequence (its files and their models)
    "STAGES_FILE", "STAGE_IDS_FILE", "STAGE_PROGRESS_FILE", "StageEndEvent", "StageIds", "StageProgressEvent", "StageRecord", "Stages",
    "StageStartEvent", "StageUnit",
    # the `loop` backend's call config (registered with genrun's artifacts)
    "LOOP_CALL_FILE", "LoopCall",
    # user code named by the request (`module:function`, beside the request)
    "resolve_callable", "user_import_paths",
    # the `token_ids` evidence kind, for a backend that keeps its own ids (needs torch and safetensors)
    "TokenRow", "save_prompt_ids", "save_token_rows",
]
