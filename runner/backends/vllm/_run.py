"""One vLLM run: the engine's own step loop (`add_request`, `step`, `abort_request`) with every id kept per row as it
arrives, one recorder step per token of the longest row, and a signal honoured between steps."""

import json
import time
from pathlib import Path
from typing import Any, Literal

from genrun.backends import (BackendOutcome, ExecutionContext, GenerationEnd, LoadedModel, SequenceStop, TokenRow, deferred,
                             exception_info, generation_timings, save_prompt_ids, save_token_rows)

from ._chat import conversation_of, render_conversation
from ._engine import engine_arguments, vllm_environment
from ._evidence import (CALL_CONFIG, RowSampling, VllmCallConfig, VllmEos, VllmFailed, VllmInterrupted, VllmMaxModelLen, VllmMaxTokens,
                        VllmStopString, VllmUnknown)
from ._sampling import build_sampling, limit_source
from ._shared import ATTRIBUTE as SHARED_ATTRIBUTE


class _Row:
    """What the loop keeps for one row (one completion of one prompt)."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.ids: list[int] = []
        self.text = ""
        """The text vLLM returned (without a matched stop string unless `include_stop_str_in_output`)."""
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None


class VllmRun:
    """`generate`: the step loop; `finish`: ids, texts and one stop record per row, however far the loop got."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self._ctx = ctx
        self.rows: list[_Row] = []
        self.longest = 0
        """Ids of the longest row so far (what progress counts), kept as ids arrive: the engine thread asks for it per output."""
        self.prompt_ids: dict[int, list[int]] = {}
        self.prompt_ids_saved = False
        """`prompt-token-ids.safetensors` written (while the engine generated), so `finish` does not write it again."""
        self.call: VllmCallConfig | None = None
        self.sampling_sources: dict[str, str] = {}
        self.tokenizer: Any = None
        self.started: float | None = None
        self.ended: float | None = None

    def generate(self, loaded: LoadedModel) -> None:
        from vllm.sampling_params import RequestOutputKind

        ctx, llm = self._ctx, loaded.model
        check_same_engine(llm, engine_arguments(ctx.request, ctx.model_dir))
        self.tokenizer = loaded.processor
        engine = llm.llm_engine
        prompts: tuple[Any, ...] = prompts_of(ctx.request)
        conversation, chat = conversation_of(ctx.request), None
        if conversation is not None:  # vLLM's own chat rendering; the engine gets its ids, the call config its record
            engine_input, chat = render_conversation(llm, conversation)
            prompts = (engine_input,)
        checkpoint = checkpoint_sampling(llm)
        # the request's seed seeds its own sampling, so a reused engine (seeded by an earlier request) samples the same
        generation = {"seed": ctx.request.seed, **ctx.request.generation}
        sampling, params, sources = build_sampling(generation, checkpoint, output_kind=RequestOutputKind.DELTA)
        self.sampling_sources = dict(sources)
        n = sampling.n
        self.rows = [_Row(i) for i in range(len(prompts) * n)]
        self.call = VllmCallConfig(
            vllm_version=_vllm_version(), vllm_environment=loaded_environment(loaded), engine_arguments=engine_arguments(ctx.request, ctx.model_dir),
            engine=resolved_engine(engine), eos_token_ids=engine_eos_ids(llm, self.tokenizer, ctx.model_dir),
            requests=tuple(RowSampling(row=p * n, params=params, sources=sources) for p in range(len(prompts))), chat=chat)
        ctx.snapshot.write(CALL_CONFIG, self.call)
        ctx.recorder.start(ctx.planned_units, len(self.rows))
        ctx.recorder.set_last_ids(lambda: tuple(max(self.rows, key=lambda r: len(r.ids)).ids[-8:]) if self.rows else ())
        self.started = time.monotonic()
        try:
            shared = getattr(llm, SHARED_ATTRIBUTE, None)
            if shared is None:
                self._step_alone(engine, prompts, sampling, n)
            else:
                self._through_shared(shared, prompts, sampling, n)
        finally:
            self.ended = time.monotonic()
        ctx.recorder.mark_generation_end()

    def _step_alone(self, engine: Any, prompts: tuple[Any, ...], sampling: Any, n: int) -> None:
        """This run owns the engine: add its requests, step until they finish."""
        try:
            for p, prompt in enumerate(prompts):
                engine.add_request(str(p), prompt, sampling)
            while engine.has_unfinished_requests():
                with deferred():  # a signal raises at the end of the block: between steps, with this step's ids kept
                    for out in engine.step():
                        self._take(int(out.request_id), n, out)
                    self._count_progress()
        except BaseException:
            # not classifying (the core does): stop the engine's work so the process can seal and exit
            unfinished = sorted({str(r.index // n) for r in self.rows if r.finish_reason is None})
            engine.abort_request(unfinished)
            raise

    def _through_shared(self, shared: Any, prompts: tuple[Any, ...], sampling: Any, n: int) -> None:
        """A sweep worker's engine serves many items at once: hand it this run's requests (ids unique to this snapshot)
        and wait for them; the engine thread keeps the ids and counts progress through `on_output`."""
        tag = self._ctx.snapshot_dir.name

        def on_output(out: Any) -> None:
            self._take(int(out.request_id.rsplit("/", 1)[1]), n, out)
            self._count_progress()

        submission = shared.submit([(f"{tag}/{p}", prompt, sampling) for p, prompt in enumerate(prompts)], on_output)
        # every item of a sweep ends at about the same time, so what it writes after its rows end is the sweep's tail: the
        # prompt ids are known from each request's first output and written while the engine generates the rest
        submission.wait_started()
        try:
            if self.tokenizer is not None and len(self.prompt_ids) == len(self.rows):  # all of them (not a request refused)
                save_prompt_ids(self._ctx.snapshot, sorted(self.prompt_ids.items()))
                self.prompt_ids_saved = True
        finally:
            submission.wait()

    def _count_progress(self) -> None:
        """One recorder step per new token of the longest row."""
        longest = self.longest
        counted = self._ctx.recorder.steps  # the recorder's own count (a signal inside `step` lands after it): never told twice
        if longest > counted:
            self._ctx.recorder.step(longest - counted)

    def _take(self, prompt: int, n: int, out: Any) -> None:
        if prompt * n not in self.prompt_ids and out.prompt_token_ids is not None:
            for child in range(n):
                self.prompt_ids[prompt * n + child] = list(out.prompt_token_ids)
        for completion in out.outputs:
            row = self.rows[prompt * n + completion.index]
            row.ids.extend(completion.token_ids)
            self.longest = max(self.longest, len(row.ids))
            row.text += completion.text
            if completion.finish_reason is not None:
                row.finish_reason, row.stop_reason = completion.finish_reason, completion.stop_reason

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        ctx = self._ctx
        call = self.call
        eos = call.eos_token_ids if call is not None else ()
        params = call.requests[0].params if call is not None and call.requests else {}
        row_eos = _row_eos_set(eos, params)
        stops = tuple(self._stop(row, end, row_eos, params) for row in self.rows)
        outputs: tuple[str, ...] = ()
        if self.tokenizer is not None or not self.rows:
            if not self.prompt_ids_saved:
                save_prompt_ids(ctx.snapshot, sorted(self.prompt_ids.items()))
            lengths = {len(ids) for ids in self.prompt_ids.values()}
            outputs = save_token_rows(ctx.snapshot, ctx.outputs_dir, [TokenRow(r.index, r.ids, row_eos) for r in self.rows], self.tokenizer,
                                      prompt_length=lengths.pop() if len(lengths) == 1 else None, eos_token_ids=row_eos,
                                      pad_token_id=getattr(self.tokenizer, "pad_token_id", None))
        total = sum(len(r.ids) for r in self.rows)
        # the longest row, as progress counts it: a signal may have landed between a row's new ids and their count
        ctx.recorder.sync_steps(max((len(r.ids) for r in self.rows), default=0))
        first_unit_s, decode_s = generation_timings(ctx.recorder, self.started, self.ended)
        return BackendOutcome(unit="token", generated=total, generated_tokens=total, first_unit_s=first_unit_s, decode_s=decode_s,
                              stops=stops, outputs=outputs)

    def _stop(self, row: _Row, end: GenerationEnd, row_eos: tuple[int, ...], params: dict[str, Any]) -> SequenceStop:
        prompt_length = len(self.prompt_ids.get(row.index, ()))
        engine = self.call.engine if self.call is not None else {}
        max_model_len = engine.get("max_model_len")
        max_tokens = params.get("max_tokens")
        facts: dict[str, Any] = {
            "last_token_id": row.ids[-1] if row.ids else None, "eos_token_ids": row_eos, "max_new_tokens": max_tokens,
            "max_length": max_model_len, "prompt_length": prompt_length, "finish_reason": row.finish_reason, "stop_reason": row.stop_reason}
        evidence: Any
        if end.signal is not None and row.finish_reason is None:
            evidence = VllmInterrupted(signal=end.signal, **facts)
        elif end.failure is not None and row.finish_reason is None:
            evidence = VllmFailed(raised=type(end.failure).__name__, **facts)
        else:
            evidence = self._finished(row, facts, params, prompt_length, max_model_len)
        failure = end.failure if evidence.reason == "exception" else None
        return SequenceStop(index=row.index, call_index=0, reason=evidence.reason, generated=len(row.ids),
                            exception=exception_info(failure) if failure is not None else None, evidence=evidence)

    def _finished(self, row: _Row, facts: dict[str, Any], params: dict[str, Any], prompt_length: int, max_model_len: int | None) -> Any:
        """vLLM's `finish_reason`/`stop_reason` untangled: which end id, which stop string, which length limit."""
        if row.finish_reason == "stop" and isinstance(row.stop_reason, str):
            stops = params.get("stop") or ()
            return VllmStopString(stop_strings=tuple([stops] if isinstance(stops, str) else stops), stop_string=row.stop_reason,
                                  in_output=row.stop_reason in row.text, output_text=row.text, **facts)
        if row.finish_reason == "stop" and row.ids:
            requested = params.get("stop_token_ids") or ()
            matched: Literal["eos", "checkpoint_eos", "stop_token_ids"] = (
                "eos" if row.stop_reason is None else "stop_token_ids" if row.stop_reason in requested else "checkpoint_eos")
            return VllmEos(eos_token_id=row.ids[-1], matched=matched, **facts)
        if row.finish_reason == "length" and max_model_len is not None and prompt_length + len(row.ids) >= max_model_len:
            engine_set = "max_model_len" in self._ctx.request.backend_tables.get("engine", {})
            return VllmMaxModelLen(limit=max_model_len, source="request" if engine_set else "model_config", **facts)
        if row.finish_reason == "length" and len(row.ids) == params.get("max_tokens"):
            source = limit_source(self.sampling_sources.get("max_tokens", "vllm_default"))  # type: ignore[arg-type]
            return VllmMaxTokens(limit=len(row.ids), source=source, **facts)
        return VllmUnknown(note=f"vLLM finish_reason {row.finish_reason!r}, stop_reason {row.stop_reason!r} after {len(row.ids)} ids", **facts)


def check_same_engine(llm: Any, planned: dict[str, Any]) -> None:
    """Refuse to run on an engine started with other arguments (a reused engine; the seed aside: each request seeds its own
    sampling). Raised inside generate, so the snapshot is sealed as failed, naming both."""
    started = getattr(llm, "_genrun_engine_arguments", None)
    if started is None:
        return
    differ = {k: (started.get(k), planned.get(k)) for k in set(started) | set(planned) if k != "seed" and started.get(k) != planned.get(k)}
    if differ:
        shown = "; ".join(f"{k}: engine {a!r}, planned {b!r}" for k, (a, b) in sorted(differ.items()))
        raise RuntimeError(f"the reused vLLM engine was started with other arguments than this snapshot planned ({shown}); "
                           "execute it with its own engine")


def checkpoint_sampling(llm: Any) -> dict[str, Any]:
    """The sampling defaults the checkpoint's generation_config.json gives the engine (read when genrun started it)."""
    kept = getattr(llm, "_genrun_checkpoint_sampling", None)
    return dict(kept if kept is not None else llm.llm_engine.model_config.get_diff_sampling_param())


def engine_eos_ids(llm: Any, tokenizer: Any, model_dir: Path) -> tuple[int, ...]:
    """`eos_ids` as read when genrun started the engine (the same checkpoint: a run checks its files before it runs)."""
    kept = getattr(llm, "_genrun_eos_token_ids", None)
    return tuple(kept) if kept is not None else eos_ids(tokenizer, model_dir)


def _row_eos_set(eos: tuple[int, ...], params: dict[str, Any]) -> tuple[int, ...]:
    """Ids that end a row: the request's stop_token_ids, and the EOS ids unless `ignore_eos`."""
    stop_ids = tuple(params.get("stop_token_ids") or ())
    return tuple(dict.fromkeys((() if params.get("ignore_eos") else eos) + stop_ids))


def prompts_of(request: Any) -> tuple[str, ...]:
    """The request's text prompts (`prompt` or `prompts`), one vLLM request each (none for `messages`)."""
    return (request.input.prompt,) if request.input.prompt is not None else tuple(request.input.prompts or ())


def request_count(request: Any) -> int:
    """vLLM requests per snapshot: one per text prompt, or one for a conversation."""
    return len(prompts_of(request)) or (1 if request.input.messages else 0)


def eos_ids(tokenizer: Any, model_dir: Path) -> tuple[int, ...]:
    """The tokenizer's EOS, then the checkpoint's generation_config.json EOS ids (vLLM folds those into stop_token_ids)."""
    ids = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
    path = model_dir / "generation_config.json"
    if path.is_file():
        value = json.loads(path.read_text()).get("eos_token_id")
        ids += value if isinstance(value, list) else [value] if isinstance(value, int) else []
    return tuple(dict.fromkeys(ids))


def resolved_engine(engine: Any) -> dict[str, Any]:
    """The started engine's configuration: the limits a snapshot's stops are judged by."""
    config = engine.vllm_config
    model, cache, scheduler, parallel = config.model_config, config.cache_config, config.scheduler_config, config.parallel_config
    return {
        "max_model_len": model.max_model_len, "dtype": str(model.dtype).removeprefix("torch."), "generation_config": model.generation_config,
        "seed": model.seed, "block_size": cache.block_size, "num_kv_blocks": cache.num_gpu_blocks,
        "kv_cache_memory_bytes": cache.kv_cache_memory_bytes, "cache_dtype": str(cache.cache_dtype),
        "enable_prefix_caching": cache.enable_prefix_caching, "max_num_seqs": scheduler.max_num_seqs,
        "max_num_batched_tokens": scheduler.max_num_batched_tokens, "enable_chunked_prefill": scheduler.enable_chunked_prefill,
        "tensor_parallel_size": parallel.tensor_parallel_size, "pipeline_parallel_size": parallel.pipeline_parallel_size,
        "data_parallel_size": parallel.data_parallel_size, "device": str(config.device_config.device),
        "enforce_eager": model.enforce_eager,
    }


def loaded_environment(loaded: LoadedModel) -> dict[str, str]:
    """The `VLLM_*` settings recorded when the engine was created (vLLM adds its own afterwards)."""
    return dict(getattr(loaded.model, "_genrun_vllm_environment", None) or vllm_environment())


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)
