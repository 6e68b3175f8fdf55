"""Instrument every `GenerationMixin.generate` call made while a run is in progress.

`instrument_generate(session)` replaces `GenerationMixin.generate` **process-wide** for the
duration of the `with` block and restores the original function object in `finally` (notes §4).
That reaches genrun's own call, helpers that call `model.generate`, and remote-code models that
override `generate` and call `super().generate()`. It does not reach a `generate` override that
never calls up, nor a bound `model.generate` captured before the block (documented limits).

Per outermost call (a contextvar keeps the depth; calls made from inside, e.g. an assistant
model's, pass through uninstrumented and are only counted) the wrapper:
- hooks two methods on the *instance* (generate calls them on `self`, so the instance attribute
  wins): `_prepare_generated_length` (prompt length, generate's `has_default_max_length`) and
  `_get_stopping_criteria` (the final merged config: the effective-config artifact is written
  there, before the first token; the criteria list is replaced by a `RecordingCriteriaList`);
- tees a streamer (forwarding to the caller's own), unless the call is a beam search, which
  refuses streamers.
"""

import contextlib
import contextvars
import functools
import inspect
from collections.abc import Iterator
from typing import Any

from transformers.generation.utils import GenerationMixin

from .capture import CallCapture, CaptureSession, returned_sequences
from .criteria import RecordingCriteriaList
from .effective_config import GENERATION_FIELDS, CallArguments, build_before_generate, describe_extras
from .streamer import TeeStreamer

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("genrun_generate_depth", default=0)
_GENERATE_SIGNATURE = inspect.signature(GenerationMixin.__dict__["generate"])
_HOOKED = ("_prepare_generated_length", "_get_stopping_criteria")
_PREPARE_LENGTH_PARAMETERS = tuple(inspect.signature(GenerationMixin._prepare_generated_length).parameters)[1:]


def is_instrumented() -> bool:
    """`GenerationMixin.generate` is currently genrun's wrapper."""
    return getattr(GenerationMixin.__dict__["generate"], "__genrun_session__", None) is not None


@contextlib.contextmanager
def instrument_generate(session: CaptureSession) -> Iterator[CaptureSession]:
    """Patch `GenerationMixin.generate` for the block; the original object is back afterwards, even on error."""
    original = GenerationMixin.__dict__["generate"]
    if getattr(original, "__genrun_session__", None) is not None:
        raise RuntimeError("GenerationMixin.generate is already instrumented by another genrun run in this process")
    wrapper = _make_wrapper(original, session)
    GenerationMixin.generate = wrapper
    try:
        yield session
    finally:
        GenerationMixin.generate = original


def _make_wrapper(original: Any, session: CaptureSession) -> Any:
    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = _DEPTH.get()
        token = _DEPTH.set(depth + 1)
        try:
            if depth > 0:
                session.nested_calls += 1
                return original(self, *args, **kwargs)
            return _outermost_call(original, session, self, args, kwargs)
        finally:
            _DEPTH.reset(token)

    generate.__genrun_session__ = session
    return generate


def _outermost_call(original: Any, session: CaptureSession, model: Any, args: tuple, kwargs: dict) -> Any:
    named = _bind(model, args, kwargs)
    arguments = _call_arguments(named)
    stream = None
    if not _is_beam_search(model, arguments):
        stream = TeeStreamer(session.on_step, named.get("streamer"))
        named["streamer"] = stream
    call = CallCapture(
        index=len(session.calls), arguments=arguments, caller=session.caller, stream=stream, input_rows=_input_rows(named)
    )
    session.calls.append(call)
    session.on_call_start(call)
    restore = _hook_instance(model, call, session)
    try:
        result = original(model, **named)
    except BaseException as exc:
        call.exception = exc
        raise
    else:
        call.returned = returned_sequences(result)
        return result
    finally:
        restore()


def _bind(model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """generate's arguments by name (positional ones too), `**kwargs` merged in: every parameter but `self` is keyword-passable."""
    bound = _GENERATE_SIGNATURE.bind(model, *args, **kwargs)
    named = {k: v for k, v in bound.arguments.items() if k not in ("self", "kwargs")}
    named.update(bound.arguments.get("kwargs", {}))
    return named


def _call_arguments(named: dict[str, Any]) -> CallArguments:
    generation_kwargs = {k: v for k, v in named.items() if k in GENERATION_FIELDS}
    return CallArguments(named.get("generation_config"), generation_kwargs, describe_extras(named))


def _input_rows(named: dict[str, Any]) -> int | None:
    for key in ("input_ids", "inputs", "inputs_embeds"):
        value = named.get(key)
        if value is not None and hasattr(value, "shape") and len(value.shape) >= 1:
            return int(value.shape[0])
    return None


def _is_beam_search(model: Any, arguments: CallArguments) -> bool:
    """generate refuses a streamer with beam search; predict `num_beams` with its precedence (kwargs > config > model)."""
    for source in (arguments.generation_kwargs, vars(arguments.passed_config) if arguments.passed_config is not None else {}):
        if source.get("num_beams") is not None:
            return source["num_beams"] > 1
    return (getattr(model.generation_config, "num_beams", None) or 1) > 1


def _hook_instance(model: Any, call: CallCapture, session: CaptureSession) -> Any:
    """Install the two instance hooks; return a function that removes them (restoring any instance attribute there before)."""
    saved = {name: model.__dict__[name] for name in _HOOKED if name in model.__dict__}
    prepare_length = model._prepare_generated_length
    get_criteria = model._get_stopping_criteria

    def prepare_generated_length(*args: Any, **kwargs: Any) -> Any:
        config = prepare_length(*args, **kwargs)
        given = {**dict(zip(_PREPARE_LENGTH_PARAMETERS, args)), **kwargs}
        call.prompt_length = int(given["input_ids_length"])
        call.has_default_max_length = bool(given["has_default_max_length"])
        inputs = given.get("inputs_tensor")
        if inputs is not None:
            call.batch_rows = int(inputs.shape[0]) * max(config.num_beams or 1, config.num_return_sequences or 1)
        return config

    def get_stopping_criteria(*args: Any, **kwargs: Any) -> Any:
        criteria = get_criteria(*args, **kwargs)
        config = kwargs.get("generation_config", args[0] if args else None)
        if call.criteria is not None:  # a second list in the same call: keep the first, as documented
            return criteria
        call.criteria = RecordingCriteriaList(criteria, config.max_length, config.max_new_tokens)
        call.config = build_before_generate(
            call_index=call.index,
            model=model,
            config=config,
            arguments=call.arguments,
            caller=call.caller,
            prompt_length=call.prompt_length if call.prompt_length is not None else 0,
            batch_rows=call.rows,
            has_default_max_length=call.has_default_max_length,
        )
        session.on_config(call)
        return call.criteria

    model._prepare_generated_length = prepare_generated_length
    model._get_stopping_criteria = get_stopping_criteria

    def restore() -> None:
        for name in _HOOKED:
            if name in saved:
                setattr(model, name, saved[name])
            else:
                model.__dict__.pop(name, None)

    return restore
