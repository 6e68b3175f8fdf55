"""`genrun serve`'s strict reading of an OpenAI body (no engine, no server: the mapping alone), and the refusals the
command makes before it loads anything. The server itself is tested in the vLLM environment (tests_vllm/test_serve.py)."""

import sys
from pathlib import Path

import pytest

from genrun.runner.serve._fields import FieldError, parse_body

REPO = Path(__file__).resolve().parent.parent


def test_a_completion_body_maps_onto_input_generation_and_seed() -> None:
    served = parse_body({"model": "m", "prompt": "Hi", "max_tokens": 8, "temperature": 0.5, "stop": ["\n"], "seed": 3, "user": "u",
                         "echo": False, "logprobs": None, "ignore_eos": True}, "completions")
    assert served.input == {"prompt": "Hi"}
    assert served.generation == {"max_tokens": 8, "temperature": 0.5, "stop": ["\n"], "ignore_eos": True}
    assert (served.model, served.seed, served.stream, served.include_usage) == ("m", 3, False, False)
    assert parse_body({"prompt": ["a", "b"]}, "completions").input == {"prompts": ["a", "b"]}
    assert parse_body({"prompt": ["a"]}, "completions").input == {"prompt": "a"}


def test_a_chat_body_keeps_its_messages_and_max_completion_tokens() -> None:
    served = parse_body({"messages": [{"role": "user", "content": "Hi"}], "max_completion_tokens": 5, "stream": True,
                         "stream_options": {"include_usage": True}}, "chat")
    assert served.input == {"messages": [{"role": "user", "content": "Hi"}]}
    assert served.generation == {"max_tokens": 5}
    assert served.stream and served.include_usage


@pytest.mark.parametrize(("body", "endpoint", "said", "param"), [
    ({"prompt": "x", "max_token": 8}, "completions", "unknown field 'max_token' in the completions request; did you mean 'max_tokens'?",
     "max_token"),
    ({"prompt": "x", "audio_duration_s": 0.1}, "completions", "unknown field 'audio_duration_s' in the completions request; known fields:",
     "audio_duration_s"),
    ({"messages": [{"role": "user", "content": "x"}], "prompt": "x"}, "chat", "'prompt' belongs to /v1/completions", "prompt"),
    ({"prompt": "x", "messages": []}, "completions", "'messages' belongs to /v1/chat/completions", "messages"),
    ({"prompt": "x", "logprobs": 2}, "completions", "logprobs=2 is not supported by genrun serve", "logprobs"),
    ({"prompt": "x", "echo": True}, "completions", "echo=True is not supported", "echo"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, "chat", "tools=", "tools"),
    ({"prompt": "x", "stream_options": {"include_usage": True}}, "completions", "stream_options is only allowed with stream=true",
     "stream_options"),
    ({"prompt": "x", "stream": True, "stream_options": {"include_usag": True}}, "completions",
     "unknown field 'include_usag' in stream_options; did you mean 'include_usage'?", "stream_options.include_usag"),
    ({"prompt": "x", "stream": "yes"}, "completions", "stream='yes' must be a bool", "stream"),
    ({"prompt": "x", "seed": -1}, "completions", "seed=-1 must be a non-negative integer", "seed"),
    ({"prompt": [1, 2, 3]}, "completions", "token-id prompts are not supported", "prompt"),
    ({"prompt": ""}, "completions", "must be a non-empty string", "prompt"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}, "chat", "content parts are not supported",
     "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x", "name": "me"}]}, "chat", "unknown field 'name' in messages[0]", "messages[0].name"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4, "max_completion_tokens": 5}, "chat",
     "max_tokens and max_completion_tokens differ", "max_completion_tokens"),
    ([1, 2], "completions", "the request body must be a JSON object, not list", None),
])
def test_a_field_genrun_would_not_record_is_refused_naming_it(body: object, endpoint: str, said: str, param: str | None) -> None:
    with pytest.raises(FieldError) as refused:
        parse_body(body, endpoint)  # type: ignore[arg-type]
    assert said in str(refused.value)
    assert refused.value.param == param


def test_a_public_address_without_an_api_key_is_refused_before_anything_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from genrun.runner.cli import main

    monkeypatch.delenv("GENRUN_API_KEY", raising=False)
    assert main(["serve", str(REPO / "examples" / "vllm" / "tiny-vllm.toml"), "--store", str(tmp_path / "s"), "--host", "0.0.0.0"]) == 2
    assert "--host 0.0.0.0 listens beyond this machine: give --api-key KEY (or set GENRUN_API_KEY)" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_a_missing_web_stack_is_refused_with_the_pip_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from genrun.runner.cli import main

    monkeypatch.setitem(sys.modules, "fastapi", None)  # `import fastapi` raises ImportError, as where it is not installed
    assert main(["serve", str(REPO / "examples" / "vllm" / "tiny-vllm.toml"), "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert "genrun serve needs FastAPI and uvicorn (fastapi is missing): pip install 'genrun[serve]'" in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("example", ["tiny.toml", "tiny-onnx-loop.toml"])
def test_a_backend_that_does_not_batch_is_refused_before_loading(tmp_path: Path, example: str) -> None:
    """transformers and loop run one snapshot at a time, which a signal could not interrupt on a server thread."""
    from genrun.runner.errors import RequestError
    from genrun.runner.serve._served import ServedModel

    with pytest.raises(RequestError, match="genrun serve needs a backend that batches requests itself \\(the vllm backend\\)"):
        ServedModel(REPO / "examples" / example, tmp_path / "store")
    assert not (tmp_path / "store").exists()
