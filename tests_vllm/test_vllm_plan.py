"""Plan-time refusals: what vLLM would reject is refused by `genrun plan` before any engine starts (exit 2), and a request
over the engine's budget is refused before loading (exit 3) or recorded with --force. No engine is started here."""

from pathlib import Path

import pytest

from conftest import write_request
from genrun.runner.errors import BudgetRefused, RequestError
from genrun.runner.plan import plan_request


def _refused(tmp_path: Path, error: type[Exception], **request) -> str:
    store = tmp_path / "store"
    with pytest.raises(error) as caught:
        plan_request(write_request(tmp_path, **request), store)
    assert not store.exists() or not any(p for p in store.iterdir() if not p.name.startswith(".")), "a refused plan wrote a snapshot"
    return str(caught.value)


REQUEST_REFUSALS = {
    "transformers name": ({"max_new_tokens": 5}, None, "vLLM calls it `max_tokens`"),
    "misspelt sampling key": ({"temprature": 0.5}, None, "did you mean 'temperature'?"),
    "value vLLM refuses": ({"temperature": -1}, None, "temperature must be non-negative, got -1"),
    "min over max": ({"min_tokens": 10, "max_tokens": 5}, None, "min_tokens must be less than or equal to max_tokens=5"),
    "type vLLM does not check": ({"seed": "x"}, None, "[generation] seed = 'x' must be an integer"),
    "stop id outside the vocabulary": ({"stop_token_ids": [300]}, None, "below the vocabulary size 257"),
    "greedy n": ({"n": 2, "temperature": 0}, None, "n must be 1 when using greedy sampling, got 2"),
    "set by genrun": ({"output_kind": 1}, None, "output_kind is set by genrun"),
    "misspelt engine key": ({}, {"max_model_lenn": 64}, "unknown key 'max_model_lenn' in [engine]; did you mean 'max_model_len'?"),
    "engine value vLLM refuses": ({}, {"max_model_len": 0}, "max_model_len"),
    "engine context over the checkpoint's": ({}, {"max_model_len": 100000}, "greater than the derived max_model_len"),
    "model setting in [engine]": ({}, {"dtype": "float16"}, "[engine] dtype comes from the request"),
}


@pytest.mark.parametrize("case", list(REQUEST_REFUSALS))
def test_refused_at_plan_naming_key_value_and_fix(tmp_path: Path, case: str) -> None:
    generation, engine, expected = REQUEST_REFUSALS[case]
    message = _refused(tmp_path, RequestError, prompts=["uvw"], generation=generation, engine=engine)
    assert expected in message


def test_a_prompt_longer_than_max_model_len_is_refused_at_plan(tmp_path: Path) -> None:
    message = _refused(tmp_path, RequestError, prompts=["Count: " + "0" * 70], generation={"max_tokens": 1},
                       engine={"max_model_len": 64})
    assert "prompt 0 is 77 tokens, but the engine's max_model_len is 64" in message and "cut at least 14 tokens" in message


BUDGET_REFUSALS = {
    "prompt + max_tokens over max_model_len": ({"max_tokens": 100}, {"max_model_len": 64}, ["Count: 0"], "lower [generation] max_tokens to at most 56"),
    "rows over max_num_seqs": ({"max_tokens": 4, "n": 3, "temperature": 1.0}, {"max_num_seqs": 2}, ["uvw"], "3 rows (n x prompts) exceed the engine's max_num_seqs 2"),
}


@pytest.mark.parametrize("case", list(BUDGET_REFUSALS))
def test_over_budget_is_refused_before_loading(tmp_path: Path, case: str) -> None:
    generation, engine, prompts, expected = BUDGET_REFUSALS[case]
    message = _refused(tmp_path, BudgetRefused, prompts=prompts, generation=generation, engine=engine)
    assert expected in message
    snapshot = plan_request(write_request(tmp_path, prompts=prompts, generation=generation, engine=engine), tmp_path / "forced", force=True)
    budget = (snapshot / "token-budget.json").read_text()
    assert '"forced": true' in budget.replace(" ", "").replace('":true', '": true') or '"forced":true' in budget.replace(" ", "")


def test_kv_cache_over_the_configured_size_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """1,024 bytes of KV per token (2 x 2 layers x 1 KV head x 64 x 4 B): 4 rows x 1,008 tokens > a 1 MiB cache
    (`[engine] kv_cache_memory_bytes`; on CPU `VLLM_CPU_KVCACHE_SPACE` would win, so it is unset here)."""
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE")
    message = _refused(tmp_path, BudgetRefused, prompts=["Count: 0"] * 4, generation={"max_tokens": 1000},
                       engine={"kv_cache_memory_bytes": 2**20})
    assert "KV for 4 row(s) x 1,008 tokens is 4,128,768 bytes, more than the engine's KV cache of 1,048,576 bytes" in message


def test_the_cli_exits_2_for_a_bad_request_and_3_over_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """genrun's command line in this process (`python -m genrun` is `sys.exit(main())`; in-process, as the main suite runs
    it): the exit code and the message are the command's own."""
    from genrun.runner.cli import main

    bad = write_request(tmp_path, prompts=["uvw"], generation={"max_new_tokens": 5}, name="bad")
    over = write_request(tmp_path, prompts=["Count: 0"], generation={"max_tokens": 100}, engine={"max_model_len": 64}, name="over")
    for request, code, words in ((bad, 2, "vLLM calls it `max_tokens`"), (over, 3, "max_tokens")):
        returned = main(["plan", str(request), "--store", str(tmp_path / "store")])
        stderr = capsys.readouterr().err
        assert returned == code, stderr[-2000:]
        assert words in stderr


def _with_input(request: Path, table: str) -> Path:
    """`request` with its `[input]` table replaced by `table`."""
    text = request.read_text()
    start, end = text.index("[input]"), text.index("[generation]")
    request.write_text(text[:start] + table + "\n" + text[end:])
    return request


def test_media_are_refused_at_plan_naming_the_field_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "cat.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    request = _with_input(write_request(tmp_path, prompts=["uvw"], generation={"max_tokens": 4}), '[input]\nprompt = "Hi"\nimages = "cat.png"\n')
    with pytest.raises(RequestError) as caught:
        plan_request(request, tmp_path / "store")
    assert "[input] images ('cat.png') is not supported" in str(caught.value) and "use [model] backend = \"transformers\"" in str(caught.value)


def test_messages_for_a_checkpoint_without_a_chat_template_are_refused_at_plan(tmp_path: Path) -> None:
    import shutil

    from conftest import MODEL

    model = tmp_path / "no-template"
    shutil.copytree(MODEL, model)
    (model / "chat_template.jinja").unlink()
    request = write_request(tmp_path, prompts=["uvw"], generation={"max_tokens": 4})
    request.write_text(request.read_text().replace(str(MODEL), str(model)))
    _with_input(request, '[input]\nmessages = [{role = "user", content = "Hi"}]\n')
    with pytest.raises(RequestError) as caught:
        plan_request(request, tmp_path / "store")
    assert "[input] messages needs a chat template" in str(caught.value) and "add one to the checkpoint" in str(caught.value)


def test_a_cpu_engine_without_a_kv_size_is_refused_when_its_share_of_memory_is_not_free_naming_what_fits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's CPU worker reserves gpu_memory_utilization x the machine's memory when no KV size is set, and refuses to start
    (after loading) when that much is not free; 0.99 of a running machine's memory is never free. The KV size the refusal
    names (one sequence of max_model_len 1,024 x 1,024 bytes per token) plans, as does the bundled example on its own."""
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    message = _refused(tmp_path, BudgetRefused, prompts=["uvw"], generation={"max_tokens": 4},
                       engine={"enforce_eager": True, "gpu_memory_utilization": 0.99})
    assert "vLLM on CPU reserves [engine] gpu_memory_utilization = 0.99" in message, message
    assert "set VLLM_CPU_KVCACHE_SPACE=1" in message and "[engine] kv_cache_memory_bytes = 1048576" in message
    plan_request(write_request(tmp_path, prompts=["uvw"], generation={"max_tokens": 4},
                               engine={"enforce_eager": True, "gpu_memory_utilization": 0.99, "kv_cache_memory_bytes": 1048576}),
                 tmp_path / "store")
    from conftest import REPO

    plan_request(REPO / "examples" / "vllm" / "tiny-vllm.toml", tmp_path / "store")
