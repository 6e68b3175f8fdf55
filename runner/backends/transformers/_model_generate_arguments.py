"""`[generation]` keys that a model's own `generate` override takes beyond `GenerationConfig`'s fields.

Whisper's `generate(language=..., task=...)` is how a speech user picks the
language: those are parameters of `WhisperForConditionalGeneration.generate`, not generation-config
fields, so the plain key check would refuse them. They are read from the model class's own signature
(the class the run loads, from the config alone, no weights), and only plain values count: tensors,
callables and the arguments that change what generate returns stay genrun's or the caller's.
"""

import inspect
from pathlib import Path
from typing import Any

from genrun.backends import PlanContext, Request, RequestError

from ._checkpoint_config import checkpoint_config
from ._processor import model_auto_class

# Parameters of generate overrides that are not request values: model inputs, objects genrun attaches itself
# (criteria, processors, streamer), and flags that make generate return a dict instead of the ids genrun records.
_NOT_REQUEST_VALUES = frozenset({
    "self", "inputs", "input_ids", "input_features", "attention_mask", "generation_config", "logits_processor",
    "stopping_criteria", "prefix_allowed_tokens_fn", "synced_gpus", "assistant_model", "streamer", "negative_prompt_ids",
    "negative_prompt_attention_mask", "prompt_ids", "decoder_input_ids", "monitor_progress", "use_model_defaults",
    "custom_generate", "kwargs", "model_kwargs",
})
_PLAIN_DEFAULTS = (type(None), bool, int, float, str)


def model_generate_arguments(context: PlanContext, request: Request, model_dir: Path) -> frozenset[str]:
    """Names of the plain-valued parameters the model class this request loads adds to `generate` (empty when none)."""
    from transformers import GenerationConfig, GenerationMixin

    try:  # the same config the budget reads next (read once per plan context)
        config = checkpoint_config(context, model_dir, request.model.trust_remote_code)
    except Exception:  # noqa: BLE001 - the budget loads the same config next and names what is wrong
        return frozenset()
    model_class = _model_class(config, request)
    generate = getattr(model_class, "generate", None)
    if generate is None or generate is GenerationMixin.generate:
        return frozenset()
    fields = set(GenerationConfig().to_dict())
    return frozenset(
        name for name, parameter in inspect.signature(generate).parameters.items()
        if name not in fields and name not in _NOT_REQUEST_VALUES and not name.startswith("return_")
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
        and isinstance(parameter.default, _PLAIN_DEFAULTS)
    )


def _model_class(config: Any, request: Request) -> type | None:
    """The class execution loads (`model_auto_class`'s mapping for this config), else the first of `architectures`
    (MusicGen-family checkpoints load through their own auto class)."""
    import transformers

    try:
        return model_auto_class(config, request)._model_mapping[type(config)]
    except RequestError:  # no auto class for this input (MusicGen's is AutoModelForTextToWaveform): the config names it
        pass
    for name in getattr(config, "architectures", None) or ():
        found = getattr(transformers, name, None)
        if isinstance(found, type):
            return found
    return None
