"""Causal LMs, encoder-decoders (T5/BART, Whisper) and audio LLMs through transformers: load, generate (or call the user's entry point) with every generate call instrumented.

Plain requests run `model.generate(**inputs, tokenizer=tokenizer, **[generation])` on the
left-padded prompts (or the chat-templated messages). `[entrypoint]` requests call
`fn(model, tokenizer_or_processor, inputs, generation, **kwargs)`; whatever generate calls it
makes are instrumented the same way (`genrun.runner.backends.transformers.instrument`).
"""

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genrun.backends import (GENERATION_CALLS_FILE, INPUT_PREPARATION_FILE, BackendOutcome, ExecutionContext, GenerationEnd, LoadContext, LoadedModel,
                             PlanContext, Request, RequestError, TokenBudget, TokenRow, Unit, deferred, exception_info, generation_config_name,
                             generation_timings, input_path, read_input_files, refuse_generation, resolve_callable, save_entrypoint_result,
                             save_prompt_ids, save_token_rows, user_import_paths)

from . import musicgen
from ._processor import (architecture, load_processor, model_auto_class, processor_source, require_checkpoint_config, require_config_file,
                         tokenizer_of, validate_media_request, validate_processor_override)
from ._prompts import encode_input
from ._decoder_prompt import forced_decoder_prompts
from ._generate_values import generate_value_problems
from ._generation_modes import mode_problems
from ._model_generate_arguments import model_generate_arguments
from .input_preparation import MediaRow, prepare_model_inputs, with_loading_facts
from ._transformers_keys import generation_problems, quick_generation_problems
from .budget import TRANSFORMERS_RUNTIME
from .evidence import EVIDENCE

if TYPE_CHECKING:  # `instrument` imports torch and transformers: only execution imports them, so a
    # request's mistakes are refused at plan time without them (`_transformers_keys.quick_generation_problems`)
    from .instrument import CallCapture, CaptureSession, ClassifiedRow


class TransformersBackend:
    """`[model] backend = "transformers"`."""

    name = "transformers"
    runtime = TRANSFORMERS_RUNTIME  # devices, determinism, threads and versions as torch sees them
    evidence = EVIDENCE  # what analysis may check (frozen as backend.json at plan time)

    def validate_request(self, request: Request, model_dir: Path, context: PlanContext) -> None:
        """A model needs a prompt or media (unless an entry point builds its inputs); `[generation]` must be generate's own keys."""
        config_file = require_config_file(request, model_dir)  # first: a directory without one is refused before anything reads it
        refuse_generation(quick_generation_problems(request.generation, config_file, request.model.trust_remote_code))  # no torch yet
        require_checkpoint_config(context, request, model_dir)
        if request.input.is_empty() and request.entrypoint is None:
            raise RequestError("[input] is empty; a transformers model needs one of 'prompt', 'prompts' or 'messages', or 'audio' / 'images' files")
        validate_media_request(request)
        model_arguments = model_generate_arguments(context, request, model_dir)  # Whisper's language, task
        key_problems = generation_problems(request.generation, model_arguments)  # modes and values: only from keys that passed
        config_keys = {k: v for k, v in request.generation.items() if k not in model_arguments}
        refuse_generation(key_problems or mode_problems(context, config_keys, model_dir, own_loop=musicgen.is_music_model(model_dir)))
        refuse_generation(generate_value_problems(context, config_keys, model_dir, processor_source(request, model_dir), request.model.trust_remote_code))
        musicgen.validate_request(context, request, model_dir)  # media for MusicGen; frame units without a rate, or one the codec contradicts
        validate_processor_override(request)

    def prepare_inputs(self, request: Request, processor: Any) -> Any:
        """Left-padded prompts (or the chat-templated messages): a `BatchEncoding` [batch, padded_prompt]. Text only:
        media rows are prepared at execution from the frozen files (`input_preparation.prepare_model_inputs`)."""
        return encode_input(processor, request.input)

    def estimate_budget(self, request: Request, model_dir: Path, weight_bytes: int, force: bool, context: PlanContext) -> TokenBudget:
        """Weights + KV cache at the effective max length, and the context limit."""
        from .budget import estimate_transformers_budget

        return estimate_transformers_budget(context, request, model_dir, weight_bytes, force)

    def progress_unit(self, request: Request) -> tuple[Unit, int]:
        """Tokens, or frames of `[units] tokens_per_frame` tokens (the recorder is stepped once per token either way)."""
        if request.units.name == "frame":
            return "frame", request.units.tokens_per_frame
        return "token", 1

    def load(self, ctx: LoadContext) -> LoadedModel:
        """`[model] loader`, else AutoModelForCausalLM + AutoTokenizer, offline; raises on failure."""
        started = time.monotonic()
        with user_import_paths(ctx.import_paths):
            model, tokenizer = load_model(ctx)
        spec = ctx.request.model
        return LoadedModel(backend=self.name, model_digest=ctx.model.digest, dtype=spec.dtype, device=ctx.device, loader=spec.loader,
                           model=model, processor=tokenizer, load_s=time.monotonic() - started,
                           processor_digest=ctx.model.processor.digest if ctx.model.processor is not None else None)

    def start(self, ctx: ExecutionContext) -> "TransformersRun":
        """One instrumented run (the core loads the model for it, or a sweep worker reuses one)."""
        return TransformersRun(self, ctx)


class TransformersRun:
    """`generate`: tokenise (or resolve the entry point) and call generate with every call instrumented; `finish`:
    token artifacts, texts, audio and the call evidence, however far generation got."""

    def __init__(self, backend: TransformersBackend, ctx: ExecutionContext) -> None:
        self._backend = backend
        self._ctx = ctx
        self.model: Any = None
        self.tokenizer: Any = None
        """The text tokenizer (of the processor, for media models); `None` until loaded."""
        self.session: "CaptureSession | None" = None
        self.audio: list[musicgen.AudioOutput] = []
        """MusicGen-style models: the decoded audio of each call, saved as WAV."""
        self.generation_started: float | None = None
        self.generation_ended: float | None = None
        self.value: Any = None
        """What the entry point returned."""
        self.notes: list[str] = []

    def generate(self, loaded: LoadedModel) -> None:
        """Seed, prepare the call, then generate (or call the entry point) inside the instrumentation."""
        ctx = self._ctx
        self.model, self.tokenizer = loaded.model, tokenizer_of(loaded.processor)
        with user_import_paths(ctx.import_paths):
            import torch

            from .instrument import CaptureSession, instrument_generate

            torch.manual_seed(ctx.request.seed)
            self.session = CaptureSession(
                caller="entrypoint" if ctx.request.entrypoint else "request",
                caller_keys=None if ctx.request.entrypoint else frozenset(ctx.request.generation),
                on_step=ctx.recorder.step,
                on_config=partial(write_effective_config, ctx),
                on_call_start=lambda call: ctx.recorder.set_last_ids(call.stream.last_ids if call.stream else tuple),
            )
            run_generation = self._prepare_call(ctx, loaded.model, loaded.processor)
            self.generation_started = time.monotonic()
            try:
                with instrument_generate(self.session, models=(self.model,)):
                    self.value = run_generation()
            finally:
                self.generation_ended = time.monotonic()
        ctx.recorder.mark_generation_end()

    def _prepare_call(self, ctx: ExecutionContext, model: Any, tokenizer: Any) -> Callable[[], Any]:
        """Tokenise (plain requests) or resolve the entry point, write `start`, and return the call to make."""
        entrypoint = ctx.request.entrypoint
        if entrypoint is not None:
            function = resolve_callable(entrypoint.callable, "[entrypoint] callable")
            inputs = ctx.request.input.model_dump(mode="json", exclude_defaults=True)  # what the user set: copy/processor_kwargs only when given
            ctx.recorder.start(ctx.planned_units, None)
            return partial(function, model, tokenizer, inputs, dict(ctx.request.generation), **entrypoint.kwargs)
        files = read_input_files(ctx.snapshot)
        media = [MediaRow(item, input_path(ctx.snapshot_dir, item)) for item in (files.files if files else ())]
        prepared = prepare_model_inputs(ctx.request.input, tokenizer, architecture(model.config), media)
        generation = dict(ctx.request.generation)
        text_tokenizer = tokenizer_of(tokenizer)
        record = with_loading_facts(prepared.record, processor_dir=ctx.frozen_processor_dir.name if ctx.frozen_processor_dir else None,
                                    decoder_prompts=forced_decoder_prompts(model, generation, prepared.model_inputs, text_tokenizer))
        with deferred():  # what the model will receive, on disk before generate starts
            ctx.snapshot.write(INPUT_PREPARATION_FILE, record)
            save_prompt_ids(ctx.snapshot, [(r.row, r.prompt_token_ids) for r in record.rows])
        encoded = prepared.model_inputs.to(model.device)
        ctx.recorder.start(ctx.planned_units, _planned_rows(model, ctx, len(record.rows)))
        # the tokenizer serves stop_strings; MusicGen-Melody's generate refuses the keyword (and audio codes are no text)
        extra = {} if musicgen.is_music_instance(model) else {"tokenizer": text_tokenizer}

        def call() -> Any:  # looks `generate` up inside the patch: a bound method taken earlier would bypass it
            return model.generate(**encoded, **extra, **generation)

        return call

    def finish(self, end: GenerationEnd) -> BackendOutcome:
        """Token ids, summary, texts, the entry point's result, audio and `generation-calls.json`, partial ones too."""
        from .instrument import classify_calls

        ctx, state = self._ctx, self
        calls = state.session.calls if state.session is not None else []
        rows = classify_calls(calls, state.tokenizer, exception_info)
        first = _first_config(calls)
        # each row's ids up to the step it stopped at (ids generate kept emitting after a row finished are not kept), with
        # its own EOS set; partial rows of an interrupted or failed run as far as they got
        token_rows = [TokenRow(r.index, r.tokens.ids.tolist(), tuple(r.stop.evidence.fact("eos_token_ids", ())), r.tokens.call_index) for r in rows]
        ctx.outputs_dir.mkdir(exist_ok=True)
        outputs = save_token_rows(
            ctx.snapshot, ctx.outputs_dir, token_rows,
            None if musicgen.is_music_instance(state.model) else state.tokenizer,  # codebook codes are no text: no decodes
            prompt_length=calls[0].prompt_length if calls else None,
            eos_token_ids=first.eos_token_ids if first else (),
            pad_token_id=first.pad_token_id if first else None,
        )
        if end.returned and ctx.request.entrypoint is not None:
            outputs += save_entrypoint_result(ctx.outputs_dir, state.value)
        outputs += self._save_audio(ctx, state, calls)
        ctx.recorder.sync_steps(sum(call.steps for call in calls))
        if state.session is not None:
            self._write_call_evidence(ctx, state, state.session)
        if end.returned and not calls:
            state.notes.append("the entry point returned without calling generate")
        return self._outcome(ctx, state, rows, outputs)

    @staticmethod
    def _save_audio(ctx: ExecutionContext, state: "TransformersRun", calls: "list[CallCapture]") -> tuple[str, ...]:
        """MusicGen-style calls returned decoded audio: WAV files, with frames and seconds from the codec."""
        codec = musicgen.codec(state.model) if state.model is not None else None
        written: list[str] = []
        for call in calls:
            if call.path == "own_generate" and codec is not None and call.output is not None and getattr(call.output, "ndim", 0) == 3:
                audio = musicgen.save_call_audio(ctx.outputs_dir, call.index, call.output, codec, call.rows)
                state.audio.append(audio)
                written += audio.files
        return tuple(written)

    @staticmethod
    def _write_call_evidence(ctx: ExecutionContext, state: "TransformersRun", session: "CaptureSession") -> None:
        """`generation-calls.json`, and a note for what the summary should say about it."""
        from .instrument import generation_calls

        evidence = generation_calls(session, {a.call_index: musicgen.audio_evidence(a) for a in state.audio})
        ctx.snapshot.write(GENERATION_CALLS_FILE, evidence)
        if session.nested_calls:
            state.notes.append(f"{session.nested_calls} nested generate call(s) ran inside outer ones (not recorded separately)")
        if evidence.foreign_thread_calls:
            state.notes.append(f"{evidence.foreign_thread_calls} generate call(s) from threads that are not the run's passed through unrecorded")
        if evidence.evidence_level == "partial":
            state.notes.append(f"evidence partial: see {GENERATION_CALLS_FILE}")

    def _outcome(self, ctx: ExecutionContext, state: "TransformersRun", rows: "tuple[ClassifiedRow, ...]", outputs: tuple[str, ...]) -> BackendOutcome:
        from .instrument import stop_records

        units = ctx.request.units
        unit, per_unit = self._backend.progress_unit(ctx.request)
        counts = [int(r.tokens.ids.shape[0]) for r in rows]
        first_unit_s, decode_s = generation_timings(ctx.recorder, state.generation_started, state.generation_ended)
        produced = None
        codec = musicgen.codec(state.model) if state.model is not None else None
        per_second = units.per_second or (codec.frames_per_second if codec is not None else None)  # plan refused any disagreement
        if unit == "frame" and per_second:
            produced = max((c // per_unit for c in counts), default=0) / per_second
        unit, generated = units.name, sum(c // per_unit for c in counts)
        if state.audio:  # decoded audio: frames and seconds from the codec, whatever the request's units
            unit, generated = "frame", sum(sum(a.frames) for a in state.audio)
            produced = max(s for a in state.audio for s in a.seconds) if any(a.seconds for a in state.audio) else 0.0
        return BackendOutcome(
            unit=unit,
            generated=generated,
            generated_tokens=sum(counts),
            first_unit_s=first_unit_s,
            decode_s=decode_s,
            stops=stop_records(rows),
            outputs=outputs,
            produced_seconds=produced,
            notes=tuple(state.notes),
            rows=max(len(a.frames) for a in state.audio) if state.audio else None,  # batch items, not their codebook rows
        )


def create_backend() -> TransformersBackend:
    """The `genrun.backends` entry point `transformers` (pyproject.toml)."""
    return TransformersBackend()


def load_model(ctx: LoadContext) -> tuple[Any, Any]:
    """`[model] loader` when given, MusicGen-style models through `musicgen`, else the auto class that fits the config and
    input (causal LM, seq2seq, speech seq2seq, multimodal LM) + `AutoTokenizer` (text) or `AutoProcessor` (media), from
    the frozen directory (offline)."""
    spec = ctx.request.model
    path = str(ctx.model_dir)
    if spec.loader is not None:
        loader = resolve_callable(spec.loader, "[model] loader")
        loaded = loader(path, spec.dtype, ctx.device, **spec.loader_kwargs)
        if not (isinstance(loaded, tuple) and len(loaded) == 2):
            raise TypeError(f"[model] loader {spec.loader!r} returned {type(loaded).__name__}; it must return (model, tokenizer_or_processor)")
        return loaded
    import torch
    from transformers import AutoConfig

    dtype = "auto" if spec.dtype == "auto" else getattr(torch, spec.dtype)
    options = {"trust_remote_code": spec.trust_remote_code, "local_files_only": True}
    if musicgen.is_music_model(ctx.model_dir):
        return musicgen.load(path, dtype, ctx.device, options, ctx.processor_dir, for_entrypoint=ctx.request.entrypoint is not None)
    config = AutoConfig.from_pretrained(path, **options)
    model = model_auto_class(config, ctx.request).from_pretrained(path, dtype=dtype, **options)
    model.to(ctx.device)
    model.eval()
    return model, load_processor(ctx.request, ctx.processor_dir)


def write_effective_config(ctx: ExecutionContext, call: "CallCapture") -> None:
    """Inside generate, before the first token: `generation-config.before-generate[.<i>].json`."""
    assert call.config is not None, "the instrument calls on_config only once it has recorded the call's config"
    with deferred():  # the file is complete or absent, never interrupted half-way
        ctx.snapshot.write(generation_config_name(call.index), call.config)


def _planned_rows(model: Any, ctx: ExecutionContext, batch: int) -> int:
    sequences = ctx.request.generation.get("num_return_sequences") or getattr(model.generation_config, "num_return_sequences", None) or 1
    return batch * int(sequences)


def _first_config(calls: "list[CallCapture]") -> Any:
    return next((c.config for c in calls if c.config is not None), None)
