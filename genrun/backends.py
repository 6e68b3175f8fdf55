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

**3. Plan-time members** (called by `genrun plan`, before anything is hashed or written):
`validate_request(request, model_dir)` refuses what you cannot run with `RequestError` (exit 2):
collect the problems and call `refuse_generation(problems)`; `unknown_key_message` words an
unknown `[generation]` key with a did-you-mean. `estimate_budget(request, model_dir,
weight_bytes, force)` returns the `TokenBudget` (use `memory_fit`, `refusals_for`,
`with_refusals`); `progress_unit(request)` says what you count (`"token"`, `"frame"`, `"step"`)
and how many recorder steps make one unit; `prepare_inputs(request, processor)` builds the model
inputs the same way at plan and at execution.

A backend that needs its own request table (an engine's `[engine]`, a loop's `[loop]`) lists it in a
`request_tables = ("engine",)` attribute: genrun parses any top-level table that is not its own into
`request.backend_tables["engine"]`, refuses a table the chosen backend does not list (exit 2, with a
did-you-mean), and leaves the content to your `validate_request`.

**4. The run** (genrun's core owns the template; you fill its steps)::

    run = backend.start(ctx)                   # ExecutionContext -> your Run; loads and writes nothing
    loaded = backend.load(ctx)                 # LoadContext -> LoadedModel (skipped when a sweep reuses one)
    run.generate(loaded)                       # may raise anything; RunInterrupted on SIGINT/SIGTERM
    outcome = run.finish(end)                  # GenerationEnd -> BackendOutcome, once, signals already disarmed

In `generate`, write the call-config artifact (`write_model_atomic(ctx.snapshot_dir / name,
model)`), call `ctx.recorder.start(planned_units, rows)`, then `ctx.recorder.step()` once per
generated unit; hold a signal to stop at a clean point with `deferred()`. In `finish(end)`, write
your outputs under `ctx.outputs_dir` (partial ones too) and return a `BackendOutcome` with one
`SequenceStop` per row whose reason agrees with `end` (`end.returned`, `end.signal`,
`end.failure`; `exception_info(end.failure)` fills `SequenceStop.exception`), and timings from
`generation_timings`. Never catch `BaseException` to classify the run and never disarm signals:
the core does both, writes `generation-stop.json`, `result.json` and the terminal progress
event, and seals the snapshot, for every backend alike.

The backend under `tests/test_backend_plugin/counter_backend.py` is a complete example that
imports nothing else from genrun.
"""

from genrun.runner._io import write_bytes_atomic, write_model_atomic
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
from genrun.runner.budget import MemoryFit, memory_fit, refusals_for, with_refusals
from genrun.runner.errors import RequestError
from genrun.runner.interrupts import RunInterrupted, deferred
from genrun.runner.recorder import ProgressRecorder
from genrun.runner.request_loading import unknown_key_message
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
from genrun.schemas.progress import Unit

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
    # refusing a request
    "RequestError", "refuse_generation", "unknown_key_message",
    # the plan-time budget
    "MemoryFit", "TokenBudget", "memory_fit", "refusals_for", "with_refusals",
    # writing an artifact
    "write_bytes_atomic", "write_model_atomic",
    # the `token_ids` evidence kind, for a backend that keeps its own ids (needs torch and safetensors)
    "TokenRow", "save_prompt_ids", "save_token_rows",
]
