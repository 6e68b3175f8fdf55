"""Check `[generation]` against what transformers' generate really accepts, at plan time.

transformers' `GenerationConfig(**kwargs)` stores unknown kwargs as attributes without a word,
and `generate(**kwargs)` forwards unknown ones to the model: a typo there silently
drops the setting the user meant (the run goes on with the default). So keys are checked against the fields of a default `GenerationConfig`, and a few common fields
are type-checked.
"""

from collections.abc import Collection
from typing import Any
from genrun.backends import unknown_key_message


# Types transformers does not enforce itself; a wrong type otherwise fails deep inside generate.
_INT_FIELDS = {"max_new_tokens", "max_length", "min_new_tokens", "min_length", "num_beams", "top_k",
               "num_return_sequences", "no_repeat_ngram_size", "num_beam_groups"}
_FLOAT_FIELDS = {"temperature", "top_p", "min_p", "typical_p", "max_time", "repetition_penalty", "length_penalty"}
_BOOL_FIELDS = {"do_sample", "use_cache", "early_stopping", "return_dict_in_generate", "output_scores"}
_POSITIVE_FIELDS = {"max_new_tokens", "max_length", "num_beams", "num_return_sequences"}
# genrun captures outputs itself; these would change what generate returns.
_RUNNER_OWNED = {"return_dict_in_generate", "output_scores", "output_logits", "output_attentions",
                 "output_hidden_states", "transformers_version"}


def generation_config_fields() -> list[str]:
    """Public fields of a default transformers GenerationConfig."""
    from transformers import GenerationConfig

    return sorted(k for k in GenerationConfig().to_dict() if not k.startswith("_"))


def generation_problems(generation: dict[str, Any], model_arguments: Collection[str] = ()) -> list[str]:
    """Every unknown, runner-owned or mistyped `[generation]` key (then transformers' own value validation).

    `model_arguments`: parameters the model's own `generate` override adds (Whisper's `language`, `task`);
    they are no generation-config fields, so transformers' config validation never sees them."""
    valid = generation_config_fields()
    problems = []
    for key, value in generation.items():
        if key in model_arguments:
            continue
        if key not in valid:
            problems.append(unknown_key_message(("generation",), key, sorted({*valid, *model_arguments})))
        elif key in _RUNNER_OWNED:
            problems.append(f"[generation] {key} is set by genrun itself (it records ids, scores are not kept); remove it")
        elif (problem := _type_problem(key, value)) is not None:
            problems.append(problem)
    if not problems:
        problems.extend(_library_validation({k: v for k, v in generation.items() if k not in model_arguments}))
    return problems


def _type_problem(key: str, value: Any) -> str | None:
    if key in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
        return f"[generation] {key} = {value!r} must be an integer, e.g. {key} = 256"
    if key in _FLOAT_FIELDS and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"[generation] {key} = {value!r} must be a number"
    if key in _BOOL_FIELDS and not isinstance(value, bool):
        return f"[generation] {key} = {value!r} must be true or false"
    if key in _POSITIVE_FIELDS and value < 1:
        return f"[generation] {key} = {value!r} must be at least 1"
    if key == "stop_strings" and not (
        (isinstance(value, str) and value) or (isinstance(value, list) and value and all(isinstance(s, str) and s for s in value))
    ):
        return f"[generation] stop_strings = {value!r} must be a non-empty string or a list of non-empty strings"
    if key == "eos_token_id" and not (
        isinstance(value, int) or (isinstance(value, list) and all(isinstance(i, int) for i in value))
    ):
        return f"[generation] eos_token_id = {value!r} must be an integer or a list of integers"
    return None


def _library_validation(generation: dict[str, Any]) -> list[str]:
    """transformers' own strict validation of the values (e.g. temperature <= 0 with sampling)."""
    from transformers import GenerationConfig

    try:
        GenerationConfig(**generation).validate(strict=True)
    except (ValueError, TypeError) as exc:  # TypeError: a wrong shape (`suppress_tokens = 5`) fails inside validate
        return [f"[generation] transformers refuses these values: {str(exc).strip()}"]
    return []
