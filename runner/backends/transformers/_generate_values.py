"""`[generation]` values that transformers' generate would reject, found at plan time without loading weights.

generate builds its logits processors and stopping criteria from the merged generation config (the
checkpoint's, then the request's keys) before the first forward pass, and each class checks its own
arguments: `repetition_penalty = 0` or `= 2` (an int, not a float), `top_k = -1` with sampling,
`forced_eos_token_id = -3`, `stop_strings = ""` or a stop string this tokenizer cannot index.
`GenerationConfig.validate` sees none of these. So plan calls generate's own builders
(`GenerationMixin._prepare_generation_config`, `_prepare_special_tokens`, `_get_logits_processor`,
`_get_stopping_criteria`) on a stand-in that carries only the model's config: generate's own
conditions (top_k only when sampling, epsilon_cutoff only inside (0, 1)) and messages, never a copy of them.
"""

import warnings
from pathlib import Path
from typing import Any, NamedTuple
from genrun.backends import PlanContext

from ._checkpoint_config import checkpoint_config, checkpoint_generation_config, checkpoint_tokenizer

# Keys that decide *which* processors generate builds rather than holding a value one checks: when removing
# such a key also makes the error go away, the value it switched on is the one to blame.
_SWITCHES = {"do_sample", "num_beams", "num_return_sequences", "max_length", "max_new_tokens", "eos_token_id", "is_assistant"}


class _Rejection(NamedTuple):
    """What generate's builders raised for one set of `[generation]` keys."""

    error: str
    """`Type: message` of the exception."""
    by: str | None
    """The transformers class whose constructor raised (`RepetitionPenaltyLogitsProcessor`), when known."""


def generate_value_problems(context: PlanContext, generation: dict[str, Any], model_dir: Path, tokenizer_dir: Path,
                            trust_remote_code: bool) -> list[str]:
    """One sentence per request key whose value generate's processors or stopping criteria reject (none: `[]`).

    `tokenizer_dir` is where execution's tokenizer comes from (`[model] processor`, else the checkpoint):
    stop strings are judged by the tokenizer generate will be given. An error that stays without any
    request key (the checkpoint's own generation config) is not the request's to fix: it is left to
    execute, which records it. A model whose config cannot be loaded here is left to the budget, which
    names the problem.
    """
    builders = _builders(context, model_dir, tokenizer_dir if "stop_strings" in generation else None, trust_remote_code)
    if builders is None:
        return []
    problems: list[str] = []
    remaining = dict(generation)
    baseline = builders.reject({})  # what the checkpoint alone (or this stand-in) raises: never the request's doing
    while (rejection := builders.reject(remaining)) is not None and rejection != baseline:
        culprit = _culprit(builders, remaining, rejection, baseline)
        if culprit is None:
            break
        problems.append(_sentence(builders, remaining, culprit, rejection))
        del remaining[culprit]
    return problems + _beyond_vocabulary(remaining, builders.model.config)


# Ids generate writes into the scores (`scores[:, id]`) when it forces them: no processor checks them up front, and one
# beyond the vocabulary fails with an IndexError at the forced step, after the run has spent its time.
_FORCED_ID_KEYS = ("forced_bos_token_id", "forced_eos_token_id")


def _beyond_vocabulary(generation: dict[str, Any], config: Any) -> list[str]:
    vocabulary = getattr(config.get_text_config(decoder=True), "vocab_size", None)
    if not isinstance(vocabulary, int):
        return []
    problems = []
    for key in _FORCED_ID_KEYS:
        value = generation.get(key)
        ids = value if isinstance(value, list) else [value]
        if any(isinstance(i, int) and i >= vocabulary for i in ids):
            problems.append(f"[generation] {key} = {value!r} is beyond the model's vocabulary of {vocabulary:,} ids "
                            f"(generate would fail with an IndexError when it forces it); give an id below {vocabulary:,}")
    return problems


def _culprit(builders: "_Builders", keys: dict[str, Any], rejection: _Rejection, baseline: _Rejection | None) -> str | None:
    """The request key whose removal takes this error away (a value before a switch that enabled it); else one whose
    removal at least changes it (a second bad value then shows)."""
    without = {k: builders.reject({n: v for n, v in keys.items() if n != k}) for k in keys}
    cured = [k for k, left in without.items() if left in (None, baseline)]
    changed = [k for k, left in without.items() if left != rejection]
    for group in (cured, changed):
        ranked = [k for k in group if k not in _SWITCHES] + [k for k in group if k in _SWITCHES]
        if ranked:
            return ranked[0]
    return None


def _sentence(builders: "_Builders", keys: dict[str, Any], key: str, rejection: _Rejection) -> str:
    value = keys[key]
    by = f"transformers' {rejection.by}" if rejection.by else "transformers' generate"
    fix = "give a value it accepts or remove the key"
    as_float = builders.reject({**keys, key: float(value)}) if type(value) is int else rejection
    if as_float is None or as_float.by != rejection.by:  # the same number as a float passes this class
        fix = f"write it as a float: {key} = {float(value)!r}"
    return f"[generation] {key} = {value!r} is rejected by {by} ({rejection.error}); {fix}"


class _Builders(NamedTuple):
    """generate's processor and criteria builders bound to a weightless stand-in of the model."""

    model: Any
    tokenizer: Any

    def reject(self, generation: dict[str, Any]) -> _Rejection | None:
        """What building generate's processors and criteria for these keys raises, or `None`."""
        import torch
        from transformers import StoppingCriteriaList
        from transformers.utils import logging

        ids = torch.zeros((1, 1), dtype=torch.long)  # input_ids: [batch, prompt]
        verbosity = logging.get_verbosity()
        logging.set_verbosity_error()  # the builders log advice meant for a real generate call
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config, model_kwargs = self.model._prepare_generation_config(None, **generation)
                self.model._prepare_special_tokens(config, kwargs_has_attention_mask=True, device="cpu")
                self.model._get_logits_processor(config, input_ids_seq_length=1, encoder_input_ids=ids, device="cpu",
                                                 model_kwargs=model_kwargs)
                if self.tokenizer is not None or config.stop_strings is None:
                    self.model._get_stopping_criteria(config, StoppingCriteriaList(), self.tokenizer)  # as generate passes it
        except Exception as exc:  # noqa: BLE001 - any exception here is one generate would raise at its start
            return _Rejection(f"{type(exc).__name__}: {str(exc).strip()}", _raising_class(exc))
        finally:
            logging.set_verbosity(verbosity)
        return None


_BUILDER_METHODS = ("_prepare_generation_config", "_prepare_special_tokens", "_get_logits_processor", "_get_stopping_criteria",
                    "_merge_criteria_processor_list")
"""The `GenerationMixin` methods generate calls to build its processors and criteria (transformers 5.x)."""


def _builders(context: PlanContext, model_dir: Path, tokenizer_dir: Path | None, trust_remote_code: bool) -> _Builders | None:
    """The stand-in for this checkpoint: its config and generation config, and the tokenizer from `tokenizer_dir`
    when stop strings need one."""
    from transformers import GenerationMixin

    methods = {name: getattr(GenerationMixin, name, None) for name in _BUILDER_METHODS}
    if None in methods.values():  # a transformers whose private builders differ: execute's self-check reports it
        return None
    # what generate's builders read from a model (`config`, `generation_config`, `device`), without weights
    model = type("ConfigOnlyModel", (), {**methods, "device": "cpu"})()
    try:
        model.config = checkpoint_config(context, model_dir, trust_remote_code)
        model.generation_config = checkpoint_generation_config(context, model_dir, model.config)  # as from_pretrained sets it
    except Exception:  # noqa: BLE001 - the budget loads the same files next and names what is wrong
        return None
    tokenizer = None
    if tokenizer_dir is not None:
        try:
            tokenizer = checkpoint_tokenizer(context, tokenizer_dir, trust_remote_code)  # the one the budget encodes the prompt with
        except Exception:  # noqa: BLE001 - no tokenizer here: stop strings are checked at execution
            tokenizer = None
    return _Builders(model, tokenizer)


def _raising_class(exc: BaseException) -> str | None:
    """The innermost transformers generation object (`self` of a frame) the exception came from."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if owner is not None and type(owner).__module__.startswith("transformers.generation"):
            found = type(owner).__name__
        tb = tb.tb_next
    return found
