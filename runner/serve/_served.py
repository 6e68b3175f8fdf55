"""The served model: one loaded engine, and each HTTP request run on it as one ordinary snapshot.

A request is planned from the base request plus its own fields (`prepare_plan`, with one `PlanContext` for the server's
life, as a sweep plans its items), held against the engine's capacity, frozen into the store and executed with
`execute_snapshot(..., loaded=)` on the shared engine: verified, recorded and sealed like any run. The machinery is the
sweep worker's (`genrun.runner.backends.batching`): a backend that batches itself (vLLM's continuous batching) gets one
`open_batch` for the server's life and every request's `generate` joins it from its own thread; the requests' files are
made durable and sealed in groups (`genrun.runner.group_commit`), as a sweep worker's items are. Other backends are
refused at start (a signal reaches only the main thread, and only a batch passes it on to a run on another thread).

Refusals come before anything is frozen, so a refused request leaves nothing in the store (no snapshot, no refusal
record; the HTTP answer names the reason): a bad field or value and a request that can never fit the engine
(`CannotFit`, answered 400), and one that does not fit what requests in flight hold now (`Busy`, answered 409).
"""

import importlib
import itertools
import math
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any, NamedTuple

from genrun.schemas import Request, Result, TokenBudget, layout
from genrun.snapshot_dir import SnapshotDir

from .. import _hash_cache
from ..backends import LoadedModel, get_backend
from ..backends.batching import BatchingBackend, ItemBatch
from ..errors import BudgetRefused, GenrunError, RequestError
from ..group_commit import GroupCommit
from ..plan import prepare_plan
from ..plan_context import PlanContext
from ..request_loading import load_request
from ..store import create_snapshot, resolve_store
from ._fields import FieldError, ServedRequest

LOAD_PROMPT = "genrun serve: engine start"
"""The prompt of the plan the engine is loaded from (a temporary store, removed once the engine runs): the base request
needs no `[input]` of its own."""


PLAN_CONTEXT_KEEP = 256
"""Values the server's plan context keeps (the shared facts are asked for by every request, so they stay; each prompt's
own reads are dropped in turn)."""


class CannotFit(RequestError):
    """The request can never run on this engine, whatever else is in flight (HTTP 400)."""


class Busy(GenrunError):
    """The request fits the engine, but not beside the requests in flight now (HTTP 409, with a Retry-After)."""


class ShuttingDown(GenrunError):
    """A signal came: the server takes no new request (HTTP 503)."""


class Capacity(NamedTuple):
    """The loaded engine's limits, as it resolved them at start."""

    rows: int | None
    """Rows the engine schedules at once (vLLM's `max_num_seqs`); `None`: one request at a time."""
    kv_blocks: int | None
    """KV cache blocks (vLLM's `num_gpu_blocks`); `None` when the backend does not say."""
    block_tokens: int | None
    """Tokens per KV block."""


class Hold(NamedTuple):
    """What one admitted request holds until it is sealed."""

    key: int
    rows: int
    kv_blocks: int


class Answer(NamedTuple):
    """A sealed request: what the HTTP answer says."""

    snapshot: Path
    result: Result
    texts: tuple[str, ...]
    """Per row: `outputs/sequence_<i>.txt`, exactly as sealed."""
    finish_reasons: tuple[str | None, ...]
    """Per row: OpenAI's word (vLLM's own `finish_reason` where it recorded one)."""
    stop_reasons: tuple[str, ...]
    """Per row: genrun's classified stop reason (`generation-stop.json`)."""
    prompt_tokens: int
    completion_tokens: int


class ServedModel:
    """The base request, its loaded engine, and the requests in flight on it."""

    def __init__(self, request_path: Path, store: Path | None) -> None:
        loaded_request = load_request(request_path)
        self.base: Request = loaded_request.request
        self.base_dir = loaded_request.path.parent
        self.store = resolve_store(store)
        self.backend = get_backend(self.base.model.backend)
        if self.backend.progress_unit(self.base)[0] != "token":
            raise RequestError(f"genrun serve answers text completions; the {self.backend.name} backend's unit is "
                               f"{self.backend.progress_unit(self.base)[0]!r}, not tokens")
        if not isinstance(self.backend, BatchingBackend):
            raise RequestError(f"genrun serve needs a backend that batches requests itself (the vllm backend); the "
                               f"{self.backend.name} backend runs one snapshot at a time and cannot be interrupted from the "
                               "server's other threads yet: use 'genrun run' for it")
        self.context = PlanContext(keep=PLAN_CONTEXT_KEEP)
        self.loaded = self._load()
        self.capacity = _capacity(self.loaded)
        self.chat_as_prompt = _renders_chat_itself(self.backend, self.base)
        self._batch: ItemBatch = self.backend.open_batch(self.loaded)
        self._commit = GroupCommit()
        self._lock = threading.Lock()
        self._held: dict[int, Hold] = {}
        self._keys = itertools.count()
        self._closing: str | None = None
        self.in_flight: set[Path] = set()
        """Snapshots frozen and not yet sealed (a SIGTERM seals each `interrupted`)."""

    @property
    def max_model_len(self) -> int | None:
        config = getattr(getattr(self.loaded.model, "llm_engine", None), "vllm_config", None)
        return int(config.model_config.max_model_len) if config is not None else None

    @property
    def model_id(self) -> str:
        """The name clients give as `model` (the base request's `name`)."""
        return self.base.name

    def _load(self) -> LoadedModel:
        """Load the engine through genrun's own loading path, from a plan in a temporary store (removed again)."""
        from ..execute import load_for_snapshot
        from ..plan import plan_request

        request = self.base.model_copy(update={"input": self.base.input.model_copy(update={"prompt": LOAD_PROMPT, "prompts": None,
                                                                                              "messages": None})})
        scratch = Path(tempfile.mkdtemp(prefix="genrun-serve-load-"))
        try:
            snapshot = plan_request(request, scratch, base_dir=self.base_dir)
            return load_for_snapshot(snapshot)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def request_for(self, served: ServedRequest) -> Request:
        """The base request with this HTTP request's `[input]`, `[generation]` and seed (validated as a request file is)."""
        given = dict(served.input)
        if "messages" in given and self.chat_as_prompt:
            given = {"prompt": render_chat(self.loaded.processor, given["messages"])}
        data = self.base.model_dump(mode="json", by_alias=True, exclude_unset=True)
        data["input"] = {**{k: v for k, v in data.get("input", {}).items() if k not in ("prompt", "prompts", "messages")}, **given}
        data["generation"] = {**self.base.generation, **served.generation}
        if served.seed is not None:
            data["seed"] = served.seed
        try:
            return Request.model_validate(data)
        except ValueError as exc:
            raise FieldError(f"the request is not valid once mapped onto [input]/[generation]: {exc}", None) from exc

    def run(self, served: ServedRequest) -> Answer:
        """Plan, hold, freeze, execute and seal one request (on the caller's thread); raises before freezing on a refusal."""
        request = self.request_for(served)
        self.store.mkdir(parents=True, exist_ok=True)
        # From its frozen plan to its last evidence file, a request's files are made durable with its group's (one syncfs
        # for the requests sealing together), before its seal vouches for them: a served snapshot claims nothing unsealed.
        with self._commit.owning(self.store):
            with _hash_cache.held_until_planned():
                try:
                    prepared = prepare_plan(request, base_dir=self.base_dir, context=self.context)
                except BudgetRefused as exc:  # the CLI's way past it (--force) is no option for a served request
                    raise CannotFit("\n".join(line for line in str(exc).splitlines() if "--force" not in line)) from exc
                hold = self._hold(prepared.budget)
                try:
                    snapshot = create_snapshot(self.store, prepared.name, prepared.freeze)
                except BaseException:
                    self._release(hold, None)
                    raise
            try:
                with self._lock:
                    self.in_flight.add(snapshot)
                result = self._execute(snapshot)
            finally:
                self._release(hold, snapshot)
        return read_answer(snapshot, result, rows_per_prompt=int(request.generation.get("n", 1)))

    def _execute(self, snapshot: Path) -> Result:
        from ..execute import execute_snapshot

        return execute_snapshot(snapshot, live=False, loaded=self.loaded)

    def _hold(self, budget: TokenBudget) -> Hold:
        """Hold rows and KV blocks for the request, or refuse it: `CannotFit` never, `Busy` not beside what is in flight."""
        rows = max(budget.rows_per_request, budget.batch_size, 1)
        tokens = min(budget.effective_max_length or 0, budget.context_limit or budget.effective_max_length or 0)
        cap = self.capacity
        blocks = rows * math.ceil(tokens / cap.block_tokens) if cap.block_tokens and tokens else 0
        if cap.rows is not None and rows > cap.rows:
            raise CannotFit(f"{rows} rows (n x prompts) exceed the engine's max_num_seqs {cap.rows}; ask for fewer")
        if cap.kv_blocks is not None and blocks > cap.kv_blocks:
            raise CannotFit(f"{rows} row(s) x {tokens:,} tokens need {blocks:,} KV blocks of {cap.block_tokens} tokens, more than the "
                            f"engine's {cap.kv_blocks:,}; lower max_tokens, n or the prompts")
        with self._lock:
            if self._closing is not None:
                raise ShuttingDown(f"the server is shutting down ({self._closing}); it takes no new request")
            held_rows = sum(h.rows for h in self._held.values())
            held_blocks = sum(h.kv_blocks for h in self._held.values())
            if cap.rows is not None and held_rows + rows > cap.rows:
                raise Busy(f"{rows} row(s) do not fit beside the {held_rows} in flight (the engine schedules {cap.rows} at once); "
                           "retry when requests in flight finish")
            if cap.kv_blocks is not None and held_blocks + blocks > cap.kv_blocks:
                raise Busy(f"{blocks:,} KV blocks needed, {cap.kv_blocks - held_blocks:,} of {cap.kv_blocks:,} free beside the "
                           f"{len(self._held)} request(s) in flight; retry when they finish")
            hold = Hold(next(self._keys), rows, blocks)
            self._held[hold.key] = hold
        return hold

    def _release(self, hold: Hold, snapshot: Path | None) -> None:
        with self._lock:
            self._held.pop(hold.key, None)
            if snapshot is not None:
                self.in_flight.discard(snapshot)

    def interrupt(self, signal_name: str) -> None:
        """Refuse new requests; every request in flight stops and seals `interrupted` with its ids (only sets flags)."""
        self._closing = self._closing or signal_name
        if self._batch is not None:
            self._batch.interrupt(signal_name)

    def close(self) -> None:
        """Close the batch, commit the seals still waiting, and stop the engine (vLLM's engine core included, reaped)."""
        self._batch.close()
        self._commit.close()
        if self.loaded.release is not None:
            self.loaded.release()


def read_answer(snapshot: Path, result: Result, rows_per_prompt: int = 1) -> Answer:
    """The sealed snapshot's texts, stops and counts (read back from its files: the answer is what the snapshot holds)."""
    import json

    reader = SnapshotDir(snapshot)
    stops = json.loads(reader.read_bytes(layout.STOP))["sequences"]
    texts = []
    for stop in stops:
        name = layout.sequence_text_name(stop["index"])
        path = snapshot / layout.OUTPUTS_DIR / name
        texts.append(path.read_text() if path.is_file() else "")
    prompt_ids = _prompt_tokens(snapshot, rows_per_prompt)
    return Answer(snapshot=snapshot, result=result, texts=tuple(texts),
                  finish_reasons=tuple(openai_finish_reason(s) for s in stops), stop_reasons=tuple(s["reason"] for s in stops),
                  prompt_tokens=prompt_ids, completion_tokens=sum(int(s["generated"]) for s in stops))


OPENAI_REASONS = {"eos": "stop", "stop_string": "stop", "max_new_tokens": "length", "max_length": "length"}
"""genrun's stop reason -> OpenAI's `finish_reason`, where the backend recorded none of its own."""


def openai_finish_reason(stop: dict[str, Any]) -> str | None:
    evidence = stop.get("evidence") or {}
    if evidence.get("finish_reason") is not None:
        return str(evidence["finish_reason"])
    return OPENAI_REASONS.get(stop["reason"], "abort" if stop["reason"] in ("interrupted", "exception") else None)


def _prompt_tokens(snapshot: Path, rows_per_prompt: int) -> int:
    """Prompt ids counted once per prompt (as OpenAI's `usage` does for `n` > 1: rows `p * n + i` share prompt `p`)."""
    path = snapshot / layout.PROMPT_TOKEN_IDS
    if not path.is_file():
        return 0
    from safetensors import safe_open

    with safe_open(str(path), "np") as tensors:
        return sum(int(tensors.get_slice(name).get_shape()[0]) for name in tensors.keys()
                   if int(name.rsplit("_", 1)[1]) % rows_per_prompt == 0)


def render_chat(tokenizer: Any, messages: list[dict[str, str]]) -> str:
    """The chat template of the checkpoint's tokenizer applied to `messages`, with the assistant turn opened (what vLLM's
    chat endpoint renders); a tokenizer without one is a 400 naming the fix."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise FieldError("the served model's tokenizer has no chat_template, so /v1/chat/completions cannot render messages; "
                         "use /v1/completions, or serve a checkpoint whose tokenizer_config.json has one", "messages")
    try:
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    except Exception as exc:  # noqa: BLE001 (the template's own error, e.g. a role it does not know, names the problem)
        raise FieldError(f"the chat template refused the messages: {type(exc).__name__}: {exc}", "messages") from exc


def _renders_chat_itself(backend: Any, base: Request) -> bool:
    """Whether serve renders chat messages into the prompt: the backend refuses `[input] messages` itself (the vllm
    backend before it applies chat templates); otherwise the backend takes `messages` as a request file gives them."""
    refuse = getattr(importlib.import_module(type(backend).__module__), "refuse_unsupported_input", None)
    if refuse is None:
        return False
    probe = base.model_copy(update={"input": base.input.model_copy(update={"prompt": None, "prompts": None,
                                                                           "messages": ({"role": "user", "content": "x"},)})})
    try:
        refuse(probe)
    except RequestError:
        return True
    return False


def _capacity(loaded: LoadedModel) -> Capacity:
    """The engine's limits (vLLM: read from the started engine's configuration); a backend that says none: unknown."""
    engine = getattr(loaded.model, "llm_engine", None)
    config = getattr(engine, "vllm_config", None)
    if config is None:
        return Capacity(rows=None, kv_blocks=None, block_tokens=None)
    return Capacity(rows=config.scheduler_config.max_num_seqs, kv_blocks=config.cache_config.num_gpu_blocks,
                    block_tokens=config.cache_config.block_size)
