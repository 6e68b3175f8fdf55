"""Build `token-budget.json` for a transformers causal LM from its config files and tokenizer."""

from pathlib import Path
from typing import Any

from genrun.backends import DTYPE_BYTES, TORCH_PACKAGES, PlanContext, Request, TokenBudget, TorchRuntime, decode_audio, load_image, memory_fit, refusals_for, with_refusals

from ._kv_budget import decoder_position_limit, kv_bytes_per_token, model_shape

from . import musicgen
from ._checkpoint_config import checkpoint_config, checkpoint_generation_config
from ._processor import architecture, encode_for_plan, plan_tokenizer, processor_source
from .length_rules import domain_estimate, effective_length, rows_per_request

LOGITS_COPIES = 2  # fp32 logits of the last position plus the processed scores, per row

TRANSFORMERS_RUNTIME = TorchRuntime(("transformers", *TORCH_PACKAGES))
"""Devices, determinism, threads and versions as torch sees them: the backend's `runtime`."""


def estimate_transformers_budget(plan: PlanContext, request: Request, model_dir: Path, stored_weight_bytes: int,
                                 force: bool) -> TokenBudget:
    """Context and memory pre-flight; loads config.json, generation_config.json and the tokenizer only."""
    trust = request.model.trust_remote_code
    config = checkpoint_config(plan, model_dir, trust)  # a sweep's items share one model directory and plan context: read once
    shape = model_shape(config, request.model.dtype)
    tokenizer_dir = processor_source(request, model_dir)  # `[model] processor` when given
    tokenizer = plan_tokenizer(plan, request, tokenizer_dir)
    checkpoint = _checkpoint_generation_config(plan, model_dir)
    if architecture(config) == "decoder_only" and request.input.media_files() and request.input.has_text():
        batch_size, prompt_tokens = media_prompt_shape(request, model_dir)
        context = _context_limit(shape.context, getattr(tokenizer, "model_max_length", None))
    elif architecture(config) == "encoder_decoder" or not request.input.has_text():
        # The decoder starts from the tokens generate forces; the encoder input (text or audio features) is not in its context.
        batch_size = max(len(request.input.audio_files()), len(request.input.image_files()), len(request.input.texts() or ()), 1)
        timestamps = bool(request.generation.get("return_timestamps")) or _long_form_audio(request, model_dir)
        prompt_tokens = forced_decoder_tokens(checkpoint, request.generation, timestamps) if architecture(config) == "encoder_decoder" else 0
        context = _context_limit(decoder_position_limit(config), None)
    else:
        encoded = encode_for_plan(tokenizer, request, tokenizer_dir)
        batch_size, prompt_tokens = encoded["input_ids"].shape
        context = _context_limit(shape.context, getattr(tokenizer, "model_max_length", None))
    length = effective_length(prompt_tokens, request.generation, checkpoint, context)

    rows = rows_per_request(request, batch_size, checkpoint)
    per_token = kv_bytes_per_token(shape)
    kv_total = per_token * length.max_length * rows
    weights = _weights_at_run_dtype(stored_weight_bytes, config, shape.dtype)
    activations = rows * shape.vocab_size * 4 * LOGITS_COPIES
    memory = memory_fit(request.model.device, request.budget.memory_margin_fraction, weights + kv_total + activations, TRANSFORMERS_RUNTIME)
    tokens_per_unit = request.units.tokens_per_frame if request.units.name == "frame" else 1
    requested_units = length.new_tokens // tokens_per_unit

    draft = TokenBudget(
        units=request.units.name,
        prompt_tokens=prompt_tokens,
        batch_size=batch_size,
        requested_units=requested_units,
        requested_units_source=length.source,
        effective_max_length=length.max_length,
        context_limit=context,
        fits_context=None if context is None else length.max_length <= context,
        kv_bytes_per_token=per_token,
        rows_per_request=rows,
        kv_bytes_at_budget=kv_total,
        weight_bytes=weights,
        activation_bytes_estimate=activations,
        **memory._asdict(),
        domain=domain_estimate(request, requested_units, prompt_tokens, context, musicgen.planned_frame_rate(plan, request.units, model_dir)),
        refusals=(),
        forced=False,
    )
    return with_refusals(draft, refusals_for(draft), force)


def forced_decoder_tokens(checkpoint: dict[str, Any], generation: dict[str, Any], timestamps: bool) -> int:
    """Decoder tokens an encoder-decoder's generate places before the first generated one, at most: its start token, and
    for Whisper-style checkpoints (their generation config names the ids) language + task when multilingual and,
    unless it predicts `timestamps`, `<|notimestamps|>`. Whisper refuses a call whose forced tokens + max_new_tokens
    exceed `max_target_positions`."""
    multilingual = generation.get("is_multilingual", checkpoint.get("is_multilingual"))
    language_and_task = 2 if multilingual and checkpoint.get("lang_to_id") else 0
    no_timestamps = 1 if checkpoint.get("no_timestamps_token_id") is not None and not timestamps else 0
    return 1 + language_and_task + no_timestamps


def _long_form_audio(request: Request, model_dir: Path) -> bool:
    """Whisper's long-form path, which predicts timestamps whatever the request says: the feature extractor is told not to
    truncate and the longest audio row (`[budget] input_seconds`, measured from the files at plan time) is longer than its
    window (`chunk_length` seconds), so generate receives more than one window of features."""
    from ._processor import load_processor

    if request.input.processor_kwargs.get("truncation", True) or not request.input.audio_files() or not request.budget.input_seconds:
        return False
    extractor = getattr(load_processor(request, processor_source(request, model_dir)), "feature_extractor", None)
    window = getattr(extractor, "chunk_length", None)
    return isinstance(window, (int, float)) and request.budget.input_seconds > window


def _checkpoint_generation_config(plan: PlanContext, model_dir: Path) -> dict:
    """The checkpoint's `generation_config.json` as a diff from the defaults (`{}` when it has none)."""
    return checkpoint_generation_config(plan, model_dir).to_diff_dict() if (model_dir / "generation_config.json").is_file() else {}


def media_prompt_shape(request: Request, model_dir: Path) -> tuple[int, int]:
    """(batch, padded prompt tokens) of an audio or vision LLM's prompt, from the processor run on the planned files
    (plan passes their absolute paths), so the audio / image tokens it inserts into the prompt are counted."""
    from ._processor import load_processor
    from .input_preparation import rendered_texts

    processor = load_processor(request, processor_source(request, model_dir))
    call: dict = {"return_tensors": "pt", "padding": True}
    if request.input.audio_files():
        rate = processor.feature_extractor.sampling_rate
        call.update(audio=[decode_audio(Path(p), rate).samples for p in request.input.audio_files()], sampling_rate=rate)
    if request.input.image_files():
        call["images"] = [load_image(Path(p)) for p in request.input.image_files()]
    rows = len(request.input.audio_files() or request.input.image_files())
    texts = list(rendered_texts(processor.tokenizer, request.input) or ())
    encoded = processor(text=texts * rows if len(texts) == 1 else texts, **call, **request.input.processor_kwargs)
    batch, tokens = encoded["input_ids"].shape
    return int(batch), int(tokens)


def _context_limit(positions: int | None, tokenizer_limit: int | None) -> int | None:
    """The smaller of max_position_embeddings and a real tokenizer limit (transformers uses ~1e30 for 'none')."""
    limits = [v for v in (positions, tokenizer_limit) if v is not None and v < 10**9]
    return min(limits) if limits else None


def _weights_at_run_dtype(stored_bytes: int, config, run_dtype: str) -> int:
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    stored_name = str(stored).removeprefix("torch.") if stored is not None else None
    if stored_name in DTYPE_BYTES and run_dtype in DTYPE_BYTES:
        return stored_bytes * DTYPE_BYTES[run_dtype] // DTYPE_BYTES[stored_name]
    return stored_bytes
