"""The decoder tokens an encoder-decoder's own `generate` forces before the first generated token (Whisper:
`<|startoftranscript|>`, language, task, `<|notimestamps|>`), for `input-preparation.json`.

They are built by the model's own methods, the ones its `generate` calls in the same order
(`_prepare_generation_config`, `_set_return_timestamps`, `_set_language_and_task`,
`_retrieve_init_tokens`), on a copy of the config: nothing is predicted by genrun and the call the
user's request makes is untouched. Two cases give no record (`None`): a model without these
methods, and a multilingual checkpoint asked for no language, whose generate *detects* it by running
the model (only generate knows the answer; that is left to it rather than run twice). Private
methods can change between transformers versions: any failure to build is also `None`, never a
failed run (generate then raises its own error, which is recorded).
"""

from collections.abc import Mapping
from typing import Any

from genrun.backends import DecoderPrompt

BUILDER = "_retrieve_init_tokens"
_GENERATE_ARGUMENTS = ("return_timestamps", "language", "task", "is_multilingual")
"""Whisper `generate` parameters (not config fields) that decide the forced tokens."""


def forced_decoder_prompts(model: Any, generation: Mapping[str, Any], model_inputs: Any, tokenizer: Any) -> list[DecoderPrompt] | None:
    """Per row, the decoder tokens `model.generate(**model_inputs, **generation)` will force; `None` when unknown."""
    features = model_inputs.get("input_features") if hasattr(model_inputs, "get") else None
    if features is None or not all(hasattr(model, name) for name in (BUILDER, "_set_return_timestamps", "_set_language_and_task")):
        return None
    try:
        rows = _init_tokens(model, dict(generation), features)
    except (AttributeError, TypeError, ValueError, KeyError):  # a changed private API, or a request generate refuses itself
        return None
    if rows is None:
        return None
    built_by = f"{type(model).__name__}.{BUILDER}"
    return [DecoderPrompt(token_ids=tuple(ids), text=tokenizer.decode(ids, skip_special_tokens=False), built_by=built_by) for ids in rows]


def _init_tokens(model: Any, generation: dict[str, Any], features: Any) -> list[list[int]] | None:
    named = {key: generation.pop(key, None) for key in _GENERATE_ARGUMENTS}
    config, _ = model._prepare_generation_config(None, **generation)  # a copy: model.generation_config is not touched
    encoder = model.model.encoder
    segment_frames = encoder.conv1.stride[0] * encoder.conv2.stride[0] * model.config.max_source_positions
    is_shortform = features.shape[-1] <= segment_frames
    model._set_return_timestamps(return_timestamps=named["return_timestamps"], is_shortform=is_shortform, generation_config=config)
    model._set_language_and_task(language=named["language"], task=named["task"], is_multilingual=named["is_multilingual"],
                                 generation_config=config)
    if getattr(config, "language", None) is None and hasattr(config, "lang_to_id"):
        return None  # generate detects the language by running the model
    tokens = getattr(model, BUILDER)(features, batch_size=int(features.shape[0]), generation_config=config, config=model.config,
                                     num_segment_frames=segment_frames, kwargs={})
    return [[int(t) for t in row] for row in tokens.tolist()]
