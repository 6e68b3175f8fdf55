"""Instrument every generate call made while a run is in progress, without ever changing what it does.

`instrument_generate(session, models=...)` replaces, **process-wide** for the `with` block, and
restores the original objects in `finally` (so a failed or interrupted run leaves transformers as it was):
- `GenerationMixin.generate`: genrun's own call, helpers that call `model.generate`, remote-code
  overrides that call `super().generate()`;
- `ContinuousMixin.generate_batch`: continuous batching, called directly or by generate for
  `cache_implementation="paged"`;
- the `generate` override of each class in `models` whose source never calls up (MusicGen and
  MusicGen-Melody merge the config and call `self._sample` themselves; `own_generate.py`);
- `threading.Thread.start`, only to mark threads started by the run's thread: calls from those
  belong to the run; calls from any other thread pass through untouched and are counted.

A bound `model.generate` captured before the block and a string `custom_generate` are not reached.

Per outermost call of the run's threads (a contextvar keeps the depth; calls made from inside, e.g.
an assistant model's, pass through uninstrumented and are counted on the outer call) the wrapper:
- hooks two methods on the *instance* (generate calls them on `self`): `_prepare_generated_length`
  (prompt length, `has_default_max_length`, rows) and `_get_stopping_criteria` (the effective-config
  artifact is written there; the list is replaced by a `RecordingCriteriaList`). The hooks are
  installed once per instance (reference-counted) and record only for the call that the *current
  context* is running at depth 1, so a nested call on the same instance (`assistant_model=model`)
  or another thread's call never touches the outer call's record; the self-check (`selfcheck.py`)
  leaves out a hook whose method or parameters the installed transformers lacks;
- tees a streamer (forwarding to the caller's own) unless the path refuses one: beam search
  (its criteria list then counts steps and matches the returned sequences) and continuous batching
  (`generate_batch` is wrapped instead: effective config, ids and per-request stops).
If genrun itself fails while preparing a call, the call runs exactly as without genrun and the
failure is recorded in the call's `missing` (evidence partial), never raised.
"""

import contextlib
import contextvars
import functools
import inspect
import threading
from collections.abc import Iterator
from typing import Any

from transformers.generation.utils import GenerationMixin

from . import own_generate
from .batching import ContinuousMixin, record_batch_call
from .capture import CallCapture, CallPath, CaptureSession, returned_sequences
from .criteria import RecordingCriteriaList
from .effective_config import GENERATION_FIELDS, CallArguments, build_before_generate, describe_extras
from .selfcheck import run_self_check
from .streamer import TeeStreamer

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("genrun_generate_depth", default=0)
_CURRENT: contextvars.ContextVar[CallCapture | None] = contextvars.ContextVar("genrun_current_call", default=None)
"""The outermost call this context is running; `None` inside nested calls and in foreign threads."""
_HOOKED = ("_prepare_generated_length", "_get_stopping_criteria")
_HOOKS_LOCK = threading.Lock()
NO_STREAMER_IN_BATCHING = "per-step progress and first-token timing: continuous batching accepts no streamer"
_HOOK_USERS: dict[int, int] = {}  # id(model) -> outermost calls using its instance hooks right now


def is_instrumented() -> bool:
    """`GenerationMixin.generate` is currently genrun's wrapper."""
    return getattr(GenerationMixin.__dict__["generate"], "__genrun_session__", None) is not None


def current_call() -> CallCapture | None:
    """The outermost call the calling context is running (for the continuous-batching wrapper)."""
    return _CURRENT.get()


@contextlib.contextmanager
def instrument_generate(session: CaptureSession, models: tuple[Any, ...] = ()) -> Iterator[CaptureSession]:
    """Patch generate (and the paths above) for the block; the original objects are back afterwards, even on error."""
    original = GenerationMixin.__dict__["generate"]
    if getattr(original, "__genrun_session__", None) is not None:
        raise RuntimeError("GenerationMixin.generate is already instrumented by another genrun run in this process")
    session.self_check = run_self_check()
    session.thread_id = threading.get_ident()
    patches: list[tuple[Any, str, Any]] = [(GenerationMixin, "generate", _make_wrapper(original, session, "generate"))]
    if ContinuousMixin is not None and "generate_batch" in ContinuousMixin.__dict__:
        patches.append((ContinuousMixin, "generate_batch", _make_batch_wrapper(ContinuousMixin.__dict__["generate_batch"], session)))
    for cls in own_generate.own_loop_classes(models):
        patches.append((cls, "generate", _make_wrapper(cls.__dict__["generate"], session, "own_generate")))
    patches.append((threading.Thread, "start", _make_thread_start(threading.Thread.__dict__["start"], session)))
    saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield session
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def belongs_to_run(session: CaptureSession) -> bool:
    """The calling thread is the run's, or was started by it (or by one of its threads) while instrumented."""
    return threading.get_ident() == session.thread_id or getattr(threading.current_thread(), "_genrun_session", None) is session


def _make_thread_start(original: Any, session: CaptureSession) -> Any:
    @functools.wraps(original)
    def start(self: threading.Thread) -> None:
        if belongs_to_run(session):
            setattr(self, "_genrun_session", session)  # a marker Thread does not declare, read by belongs_to_run
        return original(self)

    return start


def _make_wrapper(original: Any, session: CaptureSession, kind: CallPath) -> Any:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not belongs_to_run(session):
            session.foreign_thread_calls += 1
            return original(self, *args, **kwargs)
        depth = _DEPTH.get()
        if depth > 0:
            return _nested_call(original, session, self, args, kwargs)
        depth_token, current_token = _DEPTH.set(1), _CURRENT.set(None)
        try:
            return _outermost_call(original, signature, kind, session, self, args, kwargs)
        finally:
            _CURRENT.reset(current_token)
            _DEPTH.reset(depth_token)

    setattr(generate, "__genrun_session__", session)  # marks the wrapper as genrun's (functools.wraps' type lacks it)
    return generate


def _make_batch_wrapper(original: Any, session: CaptureSession) -> Any:
    @functools.wraps(original)
    def generate_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not belongs_to_run(session):
            session.foreign_thread_calls += 1
            return original(self, *args, **kwargs)
        outer = _CURRENT.get()
        if outer is not None and outer.model is self and outer.path == "continuous_batching":  # generate's paged path
            return record_batch_call(original, session, outer, self, args, kwargs)
        if _DEPTH.get() > 0:
            return _nested_call(original, session, self, args, kwargs)
        depth_token = _DEPTH.set(1)
        try:
            passed = kwargs.get("generation_config", args[1] if len(args) > 1 else None)
            limit = {"max_new_tokens": kwargs["max_new_tokens"]} if kwargs.get("max_new_tokens") is not None else {}
            call = CallCapture(index=len(session.calls), model=self, arguments=CallArguments(passed, limit, {}, session.caller_keys),
                               caller=session.caller,
                               stream=None, input_rows=None, path="continuous_batching", missing=[NO_STREAMER_IN_BATCHING])
            session.calls.append(call)
            session.on_call_start(call)
            try:
                return record_batch_call(original, session, call, self, args, kwargs)
            except BaseException as exc:
                call.exception = exc
                raise
        finally:
            _DEPTH.reset(depth_token)

    return generate_batch


def _nested_call(original: Any, session: CaptureSession, model: Any, args: tuple, kwargs: dict) -> Any:
    """A call from inside an outermost one: runs untouched (no hooks record), counted on the outer call."""
    outer = _CURRENT.get()
    session.nested_calls += 1
    depth_token, current_token = _DEPTH.set(_DEPTH.get() + 1), _CURRENT.set(None)
    try:
        result = original(model, *args, **kwargs)
    finally:
        _CURRENT.reset(current_token)
        _DEPTH.reset(depth_token)
    if outer is not None:
        outer.nested_calls += 1
        if outer.path == "assisted":
            _count_drafts(outer, kwargs, result)
    return result


def _count_drafts(outer: CallCapture, kwargs: dict, result: Any) -> None:
    """Draft tokens an assistant call proposed: returned length minus the length it was given."""
    given = kwargs.get("decoder_input_ids", kwargs.get("input_ids"))
    sequences = returned_sequences(result)
    if given is None or sequences is None or not hasattr(given, "shape"):
        return
    outer.draft_tokens_proposed = (outer.draft_tokens_proposed or 0) + max(0, int(sequences.shape[-1]) - int(given.shape[-1]))


def _outermost_call(original: Any, signature: inspect.Signature, kind: CallPath, session: CaptureSession, model: Any, args: tuple, kwargs: dict) -> Any:
    prepared: CallCapture | None = None
    try:  # everything genrun does before the call, the session's callback and the instance hooks included
        prepared, named = _prepare_call(signature, kind, session, model, args, kwargs)
        session.calls.append(prepared)
        session.on_call_start(prepared)
        restore = _hook_instance(model, session)
    except Exception as exc:  # genrun's own failure: the call must run exactly as without genrun
        if prepared is not None and session.calls and session.calls[-1] is prepared:
            session.calls.pop()
        call = CallCapture(index=len(session.calls), model=model, arguments=CallArguments(None, {}, {}), caller=session.caller,
                           stream=None, input_rows=None, path=kind)
        call.missing.append(f"genrun could not prepare its instrumentation ({type(exc).__name__}: {exc}); the call ran uninstrumented")
        session.calls.append(call)
        with contextlib.suppress(Exception):  # the recorder drops the previous call's last ids (this call streams none)
            session.on_call_start(call)
        return _run_and_record(call, lambda: original(model, *args, **kwargs), restore=lambda: None)
    _CURRENT.set(prepared)
    return _run_and_record(prepared, lambda: original(model, **named), restore)


def _run_and_record(call: CallCapture, run: Any, restore: Any) -> Any:
    try:
        result = run()
    except BaseException as exc:
        call.exception = exc
        raise
    else:
        if call.path == "own_generate":
            call.output = result  # not token ids (MusicGen returns audio): the ids are the streamed ones
        elif call.path != "continuous_batching":  # generate reshapes paged results to [1, rows, len]; the requests are kept instead
            call.returned = returned_sequences(result)
        return result
    finally:
        restore()
        _fill_prompt_length(call)


def _fill_prompt_length(call: CallCapture) -> None:
    if call.prompt_length is None and call.stream is not None and call.stream.prompt is not None:
        call.prompt_length = int(call.stream.prompt.shape[-1])


def _prepare_call(signature: inspect.Signature, kind: CallPath, session: CaptureSession, model: Any, args: tuple, kwargs: dict) -> tuple[CallCapture, dict]:
    named = _bind(signature, model, args, kwargs)
    arguments = _call_arguments(named)._replace(caller_keys=session.caller_keys)
    path = _predict_path(kind, model, arguments, named)
    stream = None
    missing: list[str] = []
    if path == "continuous_batching":
        missing.append(NO_STREAMER_IN_BATCHING)
    elif path in ("beam_search", "own_generate"):
        # steps are counted by the criteria list; the ids are the returned sequences (beam search) or the
        # criteria's last input (own loops: MusicGen returns audio and, in transformers 5.x, never forwards
        # its streamer to the loop); the caller's own streamer is passed through untouched
        pass
    else:
        stream = TeeStreamer(session.on_step, named.get("streamer"))
        named["streamer"] = stream
    for name in _HOOKED:
        if name not in session.self_check.usable:
            missing.extend(p for p in session.self_check.problems if f".{name} " in p)
    call = CallCapture(index=len(session.calls), model=model, arguments=arguments, caller=session.caller, stream=stream,
                       input_rows=_input_rows(named), path=path, missing=missing)
    return call, named


def _bind(signature: inspect.Signature, model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by name (positional ones too), `**kwargs` merged in: every parameter but `self` is keyword-passable."""
    bound = signature.bind(model, *args, **kwargs)
    variadic = next((p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    named = {k: v for k, v in bound.arguments.items() if k not in ("self", variadic)}
    named.update(bound.arguments.get(variadic, {}) if variadic else {})
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


def _predict_path(kind: CallPath, model: Any, arguments: CallArguments, named: dict[str, Any]) -> CallPath:
    """The path generate will take, with its own precedence, where it decides whether a streamer is allowed.

    generate switches to continuous batching on the `cache_implementation="paged"` *keyword* only,
    and refuses a streamer with beam search (`num_beams`: kwargs > passed config > model).
    """
    if kind == "own_generate":
        return kind
    if named.get("cache_implementation") == "paged":
        return "continuous_batching"
    if _setting(model, arguments, "num_beams", 1) > 1:
        return "beam_search"
    if named.get("assistant_model") is not None or _setting(model, arguments, "prompt_lookup_num_tokens", None) is not None:
        return "assisted"
    return "generate"


def _setting(model: Any, arguments: CallArguments, key: str, default: Any) -> Any:
    passed = vars(arguments.passed_config) if arguments.passed_config is not None else {}
    for source in (arguments.generation_kwargs, passed):
        if source.get(key) is not None:
            return source[key]
    value = getattr(model.generation_config, key, None)
    return default if value is None else value


def _hook_instance(model: Any, session: CaptureSession) -> Any:
    """Install the instance hooks once per model (reference-counted); return a function that releases this use."""
    usable = [name for name in _HOOKED if name in session.self_check.usable]
    key = id(model)
    with _HOOKS_LOCK:
        users = _HOOK_USERS.get(key, 0)
        if users == 0:
            saved = {name: model.__dict__[name] for name in usable if name in model.__dict__}
            hooks = {"_prepare_generated_length": _prepare_length_hook, "_get_stopping_criteria": _criteria_hook}
            for name in usable:
                setattr(model, name, hooks[name](model, getattr(model, name), session))
            model.__dict__["_genrun_saved_hooks"] = (usable, saved)
        _HOOK_USERS[key] = users + 1

    def restore() -> None:
        with _HOOKS_LOCK:
            _HOOK_USERS[key] -= 1
            if _HOOK_USERS[key] > 0:
                return
            del _HOOK_USERS[key]
            names, saved = model.__dict__.pop("_genrun_saved_hooks")
            for name in names:
                if name in saved:
                    setattr(model, name, saved[name])
                else:
                    model.__dict__.pop(name, None)

    return restore


def _recording_call(model: Any) -> CallCapture | None:
    """The call a hook may record into: this context's outermost call, on this very instance, at depth 1."""
    call = _CURRENT.get()
    return call if call is not None and call.model is model and _DEPTH.get() == 1 else None


def _prepare_length_hook(model: Any, prepare_length: Any, session: CaptureSession) -> Any:
    parameters = tuple(inspect.signature(prepare_length).parameters)

    def prepare_generated_length(*args: Any, **kwargs: Any) -> Any:
        config = prepare_length(*args, **kwargs)
        call = _recording_call(model)
        if call is None:
            return config
        try:
            given = {**dict(zip(parameters, args)), **kwargs}
            call.prompt_length = int(given["input_ids_length"])
            call.has_default_max_length = bool(given["has_default_max_length"])
            call.guidance_scale = getattr(config, "guidance_scale", None)
            inputs = given.get("inputs_tensor")
            if inputs is not None:
                call.batch_rows = int(inputs.shape[0]) * max(config.num_beams or 1, config.num_return_sequences or 1)
        except Exception as exc:  # never break the call; say what is missing
            call.missing.append(f"prompt length not recorded ({type(exc).__name__}: {exc})")
        return config

    return prepare_generated_length


def _criteria_hook(model: Any, get_criteria: Any, session: CaptureSession) -> Any:
    def get_stopping_criteria(*args: Any, **kwargs: Any) -> Any:
        criteria = get_criteria(*args, **kwargs)
        call = _recording_call(model)
        if call is None or call.criteria is not None:  # another context's call, or a second list in the same call: keep the first
            return criteria
        config: Any = kwargs.get("generation_config", args[0] if args else None)  # a GenerationConfig; None fails below, recorded
        try:
            beam = call.path == "beam_search"
            call.criteria = RecordingCriteriaList(
                criteria, config.max_length, config.max_new_tokens, on_step=session.on_step if call.stream is None else None, beam_search=beam
            )
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
            if call.guidance_scale is not None and config.guidance_scale is None:  # MusicGen moved it into its CFG logits processor
                call.config = call.config.model_copy(update={"effective": {**call.config.effective, "guidance_scale": call.guidance_scale}})
        except Exception as exc:  # never break the call; say what is missing
            call.criteria = None
            call.missing.append(f"effective config and stop evidence not recorded ({type(exc).__name__}: {exc})")
            return criteria
        session.on_config(call)
        return call.criteria

    return get_stopping_criteria
