"""`generation-config.before-generate.json`: the config exactly as generate uses it, and who set each limit.

Built inside generate (from the `_get_stopping_criteria` hook), where transformers 5.x has
already merged passed config > kwargs > `model.generation_config` > global defaults, derived
`max_length` (prompt + `max_new_tokens`, or prompt + 20 when nothing is set, capped at
`max_position_embeddings`), turned EOS into a 1-D tensor and defaulted pad to `eos[0]`
(all read in transformers 5.x `generate`). Nothing here re-derives those rules: it reads what generate computed.
"""

from typing import Any, NamedTuple

from transformers import GenerationConfig

from genrun.backends import GenerationConfigBeforeGenerate, LimitSource, array_or
from genrun.backends import jsonable as plain_json

from .._kv_budget import PositionLimit, decoder_context_limit


LIMIT_KEYS = ("max_new_tokens", "max_time", "stop_strings", "eos_token_id")
"""Limits whose source is looked up directly; `max_length` is derived (see `limit_sources`)."""

GENERATION_FIELDS = frozenset(k for k in GenerationConfig().to_dict() if not k.startswith("_") and k != "transformers_version")
"""Keyword arguments of generate that are config fields (the rest are model inputs)."""

_EXTRA_ARGUMENTS = ("stopping_criteria", "logits_processor", "streamer", "assistant_model", "prefix_allowed_tokens_fn", "custom_generate")


class CallArguments(NamedTuple):
    """What a caller passed to one generate call, split by meaning."""

    passed_config: GenerationConfig | None
    """`generation_config=` (or positional), if any."""
    generation_kwargs: dict[str, Any]
    """Keyword arguments that are `GenerationConfig` fields."""
    extras: dict[str, Any]
    """Non-config arguments that shape generation (criteria, processors, streamer, ...), described by class name."""
    caller_keys: frozenset[str] | None = None
    """Config fields the caller is known to have set (genrun's own call: the request's `[generation]` keys); `None`: read
    from the arguments above. Needed because a model's own `generate` (Whisper's) merges the caller's values with the
    checkpoint's into one full config before calling up: every field of that config looks passed."""


def jsonable(value: Any) -> Any:
    """Plain JSON values for config fields: tensors as lists, config objects as dicts, anything else as str."""
    return plain_json(value, _config_leaf)


def _config_leaf(value: Any) -> Any:
    if hasattr(value, "to_dict"):  # a nested config object (e.g. a watermarking config)
        return jsonable(value.to_dict())
    return _tensor_or_str(value)


_tensor_or_str = array_or(str)


def public_fields(config: GenerationConfig) -> dict[str, Any]:
    """Every public field of a config (private tensors and `transformers_version` dropped), JSON-ready."""
    return {k: jsonable(v) for k, v in config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}


def set_fields(config: GenerationConfig | None) -> dict[str, Any]:
    """Fields a caller set on a passed config: in transformers 5.x unset fields stay `None`."""
    if config is None:
        return {}
    return {k: v for k, v in public_fields(config).items() if v is not None}


def describe_extras(named: dict[str, Any]) -> dict[str, Any]:
    """Class names of the non-config generate arguments that were passed (criteria lists item by item)."""
    extras: dict[str, Any] = {}
    for key in _EXTRA_ARGUMENTS:
        value = named.get(key)
        if value is None:
            continue
        if isinstance(value, str):
            extras[key] = value
        elif isinstance(value, list):
            extras[key] = [type(v).__name__ for v in value]
        else:
            extras[key] = type(value).__name__
    return extras


def overrides_of(arguments: CallArguments) -> dict[str, Any]:
    """The caller's config fields (passed config first, kwargs win, as in generate), plus the extras."""
    return {**set_fields(arguments.passed_config), **{k: jsonable(v) for k, v in arguments.generation_kwargs.items()}, **arguments.extras}


def _caller_set(key: str, arguments: CallArguments) -> bool:
    if arguments.caller_keys is not None:
        return key in arguments.caller_keys
    if arguments.generation_kwargs.get(key) is not None:
        return True
    return arguments.passed_config is not None and getattr(arguments.passed_config, key, None) is not None


def source_of(key: str, arguments: CallArguments, model_config: GenerationConfig, caller: LimitSource) -> LimitSource:
    """Who set `key`: the caller, the checkpoint's generation_config, or (neither) the library default."""
    if _caller_set(key, arguments):
        return caller
    if getattr(model_config, key, None) is not None:
        return "model_generation_config"
    return "library_default"


def limit_sources(
    effective: GenerationConfig,
    eos_ids: tuple[int, ...],
    arguments: CallArguments,
    model_config: GenerationConfig,
    caller: LimitSource,
    has_default_max_length: bool | None,
) -> dict[str, LimitSource]:
    """Source of every limit that is set; `max_length` follows `max_new_tokens` when derived from it.

    Limits that are not set at all (e.g. no `max_time`) have no entry.
    """
    sources: dict[str, LimitSource] = {}
    for key in LIMIT_KEYS:
        value = eos_ids if key == "eos_token_id" else getattr(effective, key, None)
        if value is not None and value != ():
            sources[key] = source_of(key, arguments, model_config, caller)
    if effective.max_length is not None:
        if effective.max_new_tokens is not None:
            sources["max_length"] = sources["max_new_tokens"]
        elif has_default_max_length:
            sources["max_length"] = "library_default"
        else:
            sources["max_length"] = source_of("max_length", arguments, model_config, caller)
    return sources


def effective_special_tokens(config: GenerationConfig) -> tuple[tuple[int, ...], int | None]:
    """The EOS id set and pad id generate prepared (`_eos_token_tensor`, `_pad_token_tensor`)."""
    eos = getattr(config, "_eos_token_tensor", None)
    pad = getattr(config, "_pad_token_tensor", None)
    if eos is None:  # paths that never prepare special tokens (continuous batching) use the config's own fields
        listed = config.eos_token_id
        eos_ids = (listed,) if isinstance(listed, int) else tuple(int(i) for i in listed or ())
        return tuple(i for i in eos_ids if i >= 0), config.pad_token_id
    eos_ids = tuple(int(i) for i in eos.reshape(-1).tolist())
    return eos_ids, (int(pad) if pad is not None else None)


def context_limit(model: Any) -> PositionLimit | None:
    """The decoder's position limit (`max_position_embeddings`; Whisper's `max_target_positions`) and its config key,
    as the budget reads it."""
    return decoder_context_limit(model.config)


def build_before_generate(
    *,
    call_index: int,
    model: Any,
    config: GenerationConfig,
    arguments: CallArguments,
    caller: LimitSource,
    prompt_length: int,
    batch_rows: int,
    has_default_max_length: bool | None,
) -> GenerationConfigBeforeGenerate:
    """The artifact for one outermost call, from the merged config generate is about to decode with."""
    eos_ids, pad_id = effective_special_tokens(config)
    effective = public_fields(config)
    effective["eos_token_id"] = list(eos_ids) if eos_ids else None
    effective["pad_token_id"] = pad_id
    model_config = model.generation_config
    limit = context_limit(model)
    sources = limit_sources(config, eos_ids, arguments, model_config, caller, has_default_max_length)
    if limit is not None:  # the context limit is a limit too: named by the config key it comes from
        sources[limit.key] = "model_config"
    return GenerationConfigBeforeGenerate(
        call_index=call_index,
        model_class=type(model).__name__,
        model_generation_config={k: jsonable(v) for k, v in model_config.to_diff_dict().items() if not k.startswith("_") and k != "transformers_version"},
        overrides=overrides_of(arguments),
        effective=effective,
        limit_sources=sources,
        eos_token_ids=eos_ids,
        pad_token_id=pad_id,
        pad_defaulted_to_eos=config.pad_token_id is None and pad_id is not None,
        prompt_length=prompt_length,
        batch_rows=batch_rows,
        context_limit=limit.value if limit is not None else None,
        dtype=str(model.dtype).removeprefix("torch."),
        device=str(model.device),
    )
