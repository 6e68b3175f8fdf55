"""What a vLLM snapshot records: the call-config artifact (`vllm-config.before-generate.json`) and one stop-evidence model
per reason, each untangling vLLM's own words (`finish_reason` `stop`/`length`, `stop_reason`) into genrun's reasons."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from genrun.backends import Failed, Interrupted, TokenStopFacts

CALL_CONFIG = "vllm-config.before-generate.json"
SamplingSource = Literal["request", "checkpoint", "vllm_default"]
"""Who set a sampling parameter: the request's `[generation]`, the checkpoint's generation_config.json (vLLM merges it
when `generation_config = "auto"`), or vLLM's `SamplingParams` default."""
LimitSource = Literal["request", "model_generation_config", "library_default", "model_config"]
"""Who set the limit that stopped a row (genrun's vocabulary; `model_config`: derived from the checkpoint's positions)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class RowSampling(_Frozen):
    """The sampling parameters of one prompt's request, as the engine received them."""

    row: int
    """First row of this request (rows `row .. row + n - 1` are its `n` completions)."""
    params: dict[str, Any]
    """Every user-settable `SamplingParams` field, as built (values vLLM would print)."""
    sources: dict[str, SamplingSource]
    """Who set each field in `params`."""


class VllmChat(_Frozen):
    """`[input] messages` as vLLM's chat path rendered them (what `LLM.chat` sends the engine)."""

    rendered_prompt: str
    """The conversation through the chat template, with the generation prompt: the text the engine received."""
    prompt_token_ids: tuple[int, ...]
    """Its ids as vLLM's renderer made them (the template emits any BOS/EOS: no special tokens added)."""
    template_sha256: str
    """SHA-256 of the chat template vLLM resolved (the checkpoint's, unless the engine was given one), as UTF-8."""


class VllmCallConfig(_Frozen):
    """`vllm-config.before-generate.json`: the engine and every request's sampling parameters, frozen before the first token."""

    vllm_version: str
    """`vllm.__version__`."""
    vllm_environment: dict[str, str]
    """The user's `VLLM_*` variables, read before the engine started."""
    engine_arguments: dict[str, Any]
    """What genrun passed to `LLM(...)`: `[model]`, the seed and `[engine]`."""
    engine: dict[str, Any]
    """The resolved engine configuration (max_model_len as derived, KV blocks and block size, max_num_seqs, ...)."""
    eos_token_ids: tuple[int, ...]
    """The tokenizer's EOS id and the checkpoint's other EOS ids (vLLM adds those to each request's stop_token_ids)."""
    requests: tuple[RowSampling, ...]
    """One entry per prompt."""
    chat: VllmChat | None = None
    """The rendered conversation for `[input] messages`; `None` for text prompts."""


class _VllmStop(TokenStopFacts):
    """Shared by every reason: vLLM's own words for the row, and the limits it ran under."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    finish_reason: str | None
    """vLLM's `finish_reason` (`stop`, `length`, ...; `None`: the row had not finished)."""
    stop_reason: int | str | None
    """vLLM's `stop_reason`: the stop token id or stop string that matched, `None` for EOS and limits."""


class VllmEos(_VllmStop):
    """`eos`: an end id ended the row: the tokenizer's EOS, a checkpoint EOS id, or one of the request's stop_token_ids."""

    reason: Literal["eos"] = "eos"
    eos_token_id: int
    """The id that ended the row (the last saved id)."""
    matched: Literal["eos", "checkpoint_eos", "stop_token_ids"]
    """Which set it came from: the tokenizer's EOS, generation_config.json's other EOS ids, or `[generation] stop_token_ids`."""


class VllmStopString(_VllmStop):
    """`stop_string`: one of `[generation] stop` appeared in the text."""

    reason: Literal["stop_string"] = "stop_string"
    stop_strings: tuple[str, ...]
    """Configured stop strings."""
    stop_string: str
    """The one that matched (its ids are among the saved ids)."""
    in_output: bool
    """Whether vLLM's returned text contains it (`include_stop_str_in_output`); the saved ids always hold its ids."""
    output_text: str
    """The text vLLM returned; `outputs/sequence_<i>.txt` is the decode of the saved ids, stop string included."""


class VllmMaxTokens(_VllmStop):
    """`max_new_tokens`: `max_tokens` ids were generated (vLLM says `length`)."""

    reason: Literal["max_new_tokens"] = "max_new_tokens"
    limit: int
    """The row's `max_tokens`."""
    source: LimitSource
    """Who set it."""


class VllmMaxModelLen(_VllmStop):
    """`max_length`: prompt + generated reached the engine's `max_model_len` (vLLM says `length` here too)."""

    reason: Literal["max_length"] = "max_length"
    limit: int
    """`max_model_len`."""
    source: LimitSource
    """`request` when `[engine] max_model_len` set it, `model_config` when vLLM derived it from the checkpoint."""


class VllmInterrupted(Interrupted, _VllmStop):
    """`interrupted`: a signal stopped the engine loop; the row keeps the ids generated so far and was aborted."""


class VllmFailed(Failed, _VllmStop):
    """`exception`: the engine (or genrun's loop around it) raised (`raised`: `EngineDeadError` when the engine core died);
    the traceback is in the record's `exception`."""


class VllmUnknown(_VllmStop):
    """`unknown`: vLLM's words do not map to a reason genrun can check (e.g. `abort` from inside the engine)."""

    reason: Literal["unknown"] = "unknown"
    note: str
    """What vLLM said."""


STOP_EVIDENCE = (VllmEos, VllmStopString, VllmMaxTokens, VllmMaxModelLen, VllmInterrupted, VllmFailed, VllmUnknown)
