"""The HTTP face of `genrun serve`: OpenAI's API in the shape vLLM's OpenAI server answers it.

Built on FastAPI and uvicorn, the web stack vLLM's own server uses (so they are installed wherever the vllm backend is,
and a client sees the same HTTP behaviour as `vllm serve`): HTTP/1.1 parsing, keep-alive, server-sent events and a
graceful shutdown are theirs, not hand-written. Each `POST` runs on a worker thread (`ServedModel.run` plans, executes
and seals one snapshot, blocking); the event loop only parses, authorizes and answers.

Every answer of a run carries the snapshot's id (header `x-genrun-snapshot`, body `genrun`); the texts are the sealed
snapshot's `outputs/sequence_<i>.txt`. `stream: true` is answered as server-sent events in OpenAI's chunk shape, sent
once the snapshot is sealed, so what is streamed is what the snapshot holds.
"""

import asyncio
import hmac
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse

from ..errors import GenrunError, RequestError
from ._fields import Endpoint, FieldError, parse_body
from ._served import Answer, Busy, CannotFit, ServedModel, ShuttingDown

RETRY_AFTER_S = 1
"""The `Retry-After` of a 409: requests in flight free their hold when they are sealed, typically within seconds."""
SNAPSHOT_HEADER = "x-genrun-snapshot"


class Settings:
    """What the app checks on every request."""

    def __init__(self, api_key: str | None, max_body_bytes: int, threads: int) -> None:
        self.api_key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.threads = threads
        """Requests planned or running at once (each holds a thread while its snapshot runs)."""


def create_app(served: ServedModel, settings: Settings) -> FastAPI:
    """The FastAPI application serving `served`."""
    app = FastAPI(title="genrun serve", docs_url=None, redoc_url=None, openapi_url=None)
    pool = ThreadPoolExecutor(max_workers=settings.threads, thread_name_prefix="genrun-serve")
    app.state.pool = pool

    @app.middleware("http")
    async def authorize(request: Request, call_next: Callable[[Request], Any]) -> Response:
        if settings.api_key is not None and not _authorized(request, settings.api_key):
            return _error(401, "a valid API key is required: header 'Authorization: Bearer KEY'", "AuthenticationError", None)
        response: Response = await call_next(request)
        return response

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> Response:
        engine = served.capacity
        card = {"id": served.model_id, "object": "model", "created": int(time.time()), "owned_by": "genrun", "root": served.base.model.path,
                "parent": None, "max_model_len": served.max_model_len, "permission": [],
                "genrun": {"backend": served.backend.name, "max_num_seqs": engine.rows, "kv_blocks": engine.kv_blocks}}
        return _json(200, {"object": "list", "data": [card]})

    async def answer(request: Request, endpoint: Endpoint) -> Response:
        body = await _read_body(request, settings.max_body_bytes)
        if isinstance(body, Response):
            return body
        try:
            given = parse_body(body, endpoint)
        except FieldError as exc:
            return _error(400, str(exc), "BadRequestError", exc.param)
        if given.model is not None and given.model != served.model_id:
            return _error(404, f"The model `{given.model}` does not exist; this server serves `{served.model_id}`", "NotFoundError", "model")
        loop = asyncio.get_running_loop()
        try:
            done = await loop.run_in_executor(pool, served.run, given)
        except FieldError as exc:
            return _error(400, str(exc), "BadRequestError", exc.param)
        except (CannotFit, RequestError) as exc:
            return _error(400, str(exc), "BadRequestError", None)
        except Busy as exc:
            return _error(409, str(exc), "ConflictError", None, headers={"Retry-After": str(RETRY_AFTER_S)})
        except ShuttingDown as exc:
            return _error(503, str(exc), "ServiceUnavailableError", None)
        except GenrunError as exc:  # execution refused the frozen plan (its files or code changed under the server): nothing ran
            return _error(500, str(exc), "InternalServerError", None)
        headers = {SNAPSHOT_HEADER: done.snapshot.name}
        if done.result.status != "succeeded":
            code = 503 if done.result.status == "interrupted" else 500
            why = done.result.signal or (f"{done.result.exception.type}: {done.result.exception.message}" if done.result.exception else "")
            return _error(code, f"the run ended {done.result.status} ({why}); its snapshot {done.snapshot.name} is sealed as such",
                          "ServiceUnavailableError" if code == 503 else "InternalServerError", None, headers=headers,
                          genrun=_genrun(done))
        if given.stream:
            chunks = _stream_chunks(done, endpoint, served.model_id, given.include_usage)
            return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)
        return _json(200, _completion(done, endpoint, served.model_id), headers)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await answer(request, "completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await answer(request, "chat")

    return app


def _authorized(request: Request, key: bytes) -> bool:
    """`Authorization: Bearer KEY`, compared in constant time (the time taken says nothing about how much matched)."""
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)


async def _read_body(request: Request, limit: int) -> Any:
    """The JSON body, or the error answer: 413 over `limit` bytes (read no further), 400 for what is not JSON."""
    declared = request.headers.get("content-length")
    too_large = _error(413, f"the request body is larger than {limit:,} bytes (genrun serve --max-body-bytes)", "BadRequestError", None)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return too_large
    received = bytearray()
    async for part in request.stream():
        received += part
        if len(received) > limit:
            return too_large
    try:
        return orjson.loads(received)
    except orjson.JSONDecodeError as exc:
        return _error(400, f"the request body is not JSON: {exc}", "BadRequestError", None)


def _genrun(done: Answer) -> dict[str, Any]:
    return {"snapshot": done.snapshot.name, "status": done.result.status, "stop_reasons": list(done.stop_reasons)}


def _usage(done: Answer) -> dict[str, Any]:
    return {"prompt_tokens": done.prompt_tokens, "total_tokens": done.prompt_tokens + done.completion_tokens,
            "completion_tokens": done.completion_tokens, "prompt_tokens_details": None}


def _completion(done: Answer, endpoint: Endpoint, model: str) -> dict[str, Any]:
    """The whole answer, as vLLM's server shapes it."""
    head: dict[str, Any] = {"id": _answer_id(endpoint), "object": "text_completion" if endpoint == "completions" else "chat.completion",
                            "created": int(time.time()), "model": model}
    choices: list[dict[str, Any]]
    if endpoint == "completions":
        choices = [{"index": i, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None, "prompt_logprobs": None}
                   for i, (text, reason) in enumerate(zip(done.texts, done.finish_reasons))]
    else:
        choices = [{"index": i, "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                                            "function_call": None, "tool_calls": [], "reasoning_content": None},
                    "logprobs": None, "finish_reason": reason, "stop_reason": None}
                   for i, (text, reason) in enumerate(zip(done.texts, done.finish_reasons))]
    return {**head, "choices": choices, "usage": _usage(done), "system_fingerprint": None, "genrun": _genrun(done)}


async def _stream_chunks(done: Answer, endpoint: Endpoint, model: str, include_usage: bool) -> AsyncIterator[bytes]:
    """Server-sent events: per choice its text, then its `finish_reason`; the usage chunk when asked; `[DONE]`."""
    ident, created = _answer_id(endpoint), int(time.time())
    kind = "text_completion" if endpoint == "completions" else "chat.completion.chunk"

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return b"data: " + orjson.dumps({"id": ident, "object": kind, "created": created, "model": model, "choices": choices, **extra}) + b"\n\n"

    for i, (text, reason) in enumerate(zip(done.texts, done.finish_reasons)):
        if endpoint == "completions":
            yield chunk([{"index": i, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None}])
            yield chunk([{"index": i, "text": "", "logprobs": None, "finish_reason": reason, "stop_reason": None}], genrun=_genrun(done))
        else:
            yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}])
            yield chunk([{"index": i, "delta": {"content": text}, "logprobs": None, "finish_reason": None}])
            yield chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": reason, "stop_reason": None}], genrun=_genrun(done))
    if include_usage:
        yield chunk([], usage=_usage(done))
    yield b"data: [DONE]\n\n"


def _answer_id(endpoint: Endpoint) -> str:
    return f"{'cmpl' if endpoint == 'completions' else 'chatcmpl'}-{uuid.uuid4().hex}"


def _json(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def _error(status: int, message: str, kind: str, param: str | None, *, headers: dict[str, str] | None = None,
           genrun: dict[str, Any] | None = None) -> Response:
    """OpenAI's error shape (as vLLM answers it), plus the snapshot where a run was sealed."""
    body: dict[str, Any] = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    if genrun is not None:
        body["genrun"] = genrun
    return _json(status, body, headers)

