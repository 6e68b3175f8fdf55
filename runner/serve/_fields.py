"""An OpenAI request body mapped onto genrun's request: `[input]` and `[generation]`, strictly.

Every field of the body is one of three kinds: mapped (it becomes an `[input]` or `[generation]` value, or the request's
`seed`), accepted only at its "off" value (OpenAI features genrun does not record, such as `logprobs`: refused when
asked for, never silently ignored), or unknown. An unknown field is refused with the closest known name (incident
`001_…`: `audio_duration_s` dropped without a word made a job 750x larger). The values themselves are checked where
every request's are: the backend's own plan-time checks (vLLM's `SamplingParams` for the vllm backend).
"""

import difflib
from typing import Any, Literal, NamedTuple

from ..errors import RequestError

Endpoint = Literal["completions", "chat"]

SAMPLING = ("max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stop", "stop_token_ids", "presence_penalty",
            "frequency_penalty", "repetition_penalty", "ignore_eos", "min_tokens")
"""Fields that go into `[generation]` under the same name (vLLM's OpenAI server passes them to `SamplingParams` so)."""

OFF_VALUES: dict[str, tuple[Any, ...]] = {
    "echo": (False,), "logprobs": (None, False), "top_logprobs": (None, 0), "best_of": (None, 1), "logit_bias": (None, {}),
    "suffix": (None,), "tools": (None, []), "tool_choice": (None, "none"), "response_format": (None, {"type": "text"}),
    "parallel_tool_calls": (None, False), "user": (), "stream_options": (),
}
"""Known OpenAI fields genrun accepts only at these values (an empty tuple: any value; `user` is a caller's label and
`stream_options` is read by the server itself). Anything else is refused: the snapshot would not record it."""

ONLY_FOR: dict[str, Endpoint] = {"prompt": "completions", "echo": "completions", "best_of": "completions", "suffix": "completions",
                                  "messages": "chat", "max_completion_tokens": "chat", "top_logprobs": "chat", "tools": "chat",
                                  "tool_choice": "chat", "response_format": "chat", "parallel_tool_calls": "chat"}
"""Fields one endpoint has and the other does not (as in OpenAI's API)."""

COMMON = ("model", "stream", "seed", *SAMPLING, "logprobs", "logit_bias", "user", "stream_options")


class ServedRequest(NamedTuple):
    """What one HTTP request asks genrun to run."""

    model: str | None
    """The `model` field (the server answers 404 when it names another model)."""
    input: dict[str, Any]
    """`[input]`: `prompt` or `prompts` (completions), `messages` (chat)."""
    generation: dict[str, Any]
    """Merged over the base request's `[generation]`."""
    seed: int | None
    """The request's `seed` (the base request's when `None`)."""
    stream: bool
    include_usage: bool
    """`stream_options.include_usage`: a last chunk with the token counts."""


class FieldError(RequestError):
    """A body field that genrun refuses; `param` names it (OpenAI's error `param`)."""

    def __init__(self, message: str, param: str | None) -> None:
        super().__init__(message)
        self.param = param


def known_fields(endpoint: Endpoint) -> list[str]:
    return [*COMMON, *(name for name, only in ONLY_FOR.items() if only == endpoint)]


def parse_body(body: Any, endpoint: Endpoint) -> ServedRequest:
    """The body of `POST /v1/completions` or `/v1/chat/completions` as a `ServedRequest`; a `FieldError` naming the first
    field refused (unknown, wrong endpoint, asking for what genrun does not record, wrong type)."""
    if not isinstance(body, dict):
        raise FieldError(f"the request body must be a JSON object, not {type(body).__name__}", None)
    known = known_fields(endpoint)
    for name in body:
        if name not in known:
            raise FieldError(_unknown(name, known, endpoint), name)
    for name, allowed in OFF_VALUES.items():
        if name in body and allowed and body[name] not in allowed:
            raise FieldError(f"{name}={body[name]!r} is not supported by genrun serve (the snapshot would not record it); "
                             f"leave it out or set it to {allowed[0]!r}", name)
    stream = _typed(body, "stream", bool, False)
    options = _typed(body, "stream_options", dict, None) or {}
    if options and not stream:
        raise FieldError("stream_options is only allowed with stream=true", "stream_options")
    for name in options:
        if name != "include_usage":
            raise FieldError(_unknown(name, ["include_usage"], endpoint, where="stream_options"), f"stream_options.{name}")
    seed = body.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise FieldError(f"seed={seed!r} must be a non-negative integer (genrun's request seed)", "seed")
    generation = {name: body[name] for name in SAMPLING if body.get(name) is not None}
    if endpoint == "chat" and body.get("max_completion_tokens") is not None:
        if "max_tokens" in generation and generation["max_tokens"] != body["max_completion_tokens"]:
            raise FieldError("max_tokens and max_completion_tokens differ; give one of them", "max_completion_tokens")
        generation["max_tokens"] = body["max_completion_tokens"]
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise FieldError(f"model={model!r} must be a string", "model")
    return ServedRequest(model=model, input=_input(body, endpoint), generation=generation, seed=seed, stream=stream,
                         include_usage=bool(options.get("include_usage", False)))


def _input(body: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    if endpoint == "completions":
        prompt = body.get("prompt")
        if isinstance(prompt, str) and prompt:
            return {"prompt": prompt}
        if isinstance(prompt, list) and prompt and all(isinstance(p, str) and p for p in prompt):
            return {"prompt": prompt[0]} if len(prompt) == 1 else {"prompts": list(prompt)}
        raise FieldError(f"prompt={_short(prompt)} must be a non-empty string or a list of non-empty strings (token-id prompts are "
                         "not supported: give the text)", "prompt")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise FieldError(f"messages={_short(messages)} must be a non-empty list of {{role, content}} objects", "messages")
    kept = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise FieldError(f"messages[{i}] must be an object with role and content", f"messages[{i}]")
        for name in message:
            if name not in ("role", "content"):
                raise FieldError(_unknown(name, ["role", "content"], endpoint, where=f"messages[{i}]"), f"messages[{i}].{name}")
        content = message.get("content")
        if not isinstance(content, str):  # OpenAI's list of content parts: images, audio; genrun serves text
            raise FieldError(f"messages[{i}].content must be a string (content parts are not supported)", f"messages[{i}].content")
        kept.append({"role": message.get("role"), "content": content})
    return {"messages": kept}


def _typed(body: dict[str, Any], name: str, kind: type, default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind):
        raise FieldError(f"{name}={_short(value)} must be a {kind.__name__}", name)
    return value


def _unknown(name: str, known: list[str], endpoint: Endpoint, where: str | None = None) -> str:
    place = where or f"the {endpoint} request"
    other: Endpoint = "chat" if endpoint == "completions" else "completions"
    if where is None and ONLY_FOR.get(name) == other:
        return f"{name!r} belongs to /v1/{'chat/completions' if other == 'chat' else 'completions'}, not to {place}"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}?" if close else f"known fields: {', '.join(sorted(known))}"
    return f"unknown field {name!r} in {place}; {hint}"


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
