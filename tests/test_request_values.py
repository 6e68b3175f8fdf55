"""Requests whose values cannot be stored or computed with: exit 2, one sentence naming the key, nothing written.

Found by fuzzing: integers beyond int64 crashed while the plan was written (leaving an
empty store), `inf` / `1e308` overflowed the budget, deep nesting and 5,001-digit integers crashed the
parser, NaN was saved as `null` in `request.json`.
"""

from pathlib import Path

import pytest

from conftest import run_cli

from _lm_helpers import TINY_LM, toml_value

HEAD = f'name = "v"\nseed = 0\n[model]\npath = {toml_value(str(TINY_LM))}\ndtype = "float32"\ndevice = "cpu"\n[input]\nprompt = "count down from 3 :"\n'
JSON_HEAD = '{"name": "v", "model": {"path": %s}, "input": {"prompt": "count down from 3 :"}, ' % toml_value(str(TINY_LM))

CASES = {
    "int-beyond-int64-json": ("json", JSON_HEAD + '"generation": {"max_new_tokens": 18446744073709551616}}', "[generation] max_new_tokens"),
    "negative-int-beyond-int64-json": ("json", JSON_HEAD + '"seed": -9223372036854775809}', "seed"),
    "inf-in-budget": ("toml", HEAD + "[generation]\nmax_new_tokens = 4\n[budget]\ninput_seconds = inf\n", "[budget] input_seconds"),
    "1e308-in-units": ("toml", HEAD + '[generation]\nmax_new_tokens = 4\n[units]\nname = "frame"\nper_second = 1e308\n', "[units] per_second"),
    "nan-temperature": ("toml", HEAD + "[generation]\nmax_new_tokens = 4\ntemperature = nan\n", "[generation] temperature"),
    "nan-in-json": ("json", JSON_HEAD + '"generation": {"max_new_tokens": 4, "top_p": NaN}}', "[generation] top_p"),
    "nested-100k-deep": ("json", JSON_HEAD + '"generation": {"suppress_tokens": ' + "[" * 100_000 + "]" * 100_000 + "}}", "nested too deeply"),
    "5001-digit-integer": ("json", JSON_HEAD + '"generation": {"max_new_tokens": ' + "9" * 5001 + "}}", "number too long"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_unusable_value_is_refused_with_nothing_written(case: str, tmp_path: Path) -> None:
    fmt, text, named = CASES[case]
    request = tmp_path / f"request.{fmt}"
    request.write_text(text)
    store = tmp_path / "store"
    done = run_cli("plan", request, "--store", store)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not store.exists(), list(store.iterdir())


def test_generation_value_that_transformers_rejects_is_refused_at_plan_time(tmp_path: Path) -> None:
    request = tmp_path / "request.toml"
    request.write_text(HEAD + "[generation]\nmax_new_tokens = 4\nsuppress_tokens = 5\n")
    done = run_cli("plan", request, "--store", tmp_path / "store")
    assert done.returncode == 2 and "transformers refuses" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "store").exists()


def test_cuda_device_on_a_torch_without_cuda_is_refused(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # this machine has none; on one with CUDA the request is valid
        pytest.skip("CUDA is available here: device = 'cuda' is a valid request")
    request = tmp_path / "request.toml"
    request.write_text(HEAD.replace('device = "cpu"', 'device = "cuda"') + "[generation]\nmax_new_tokens = 4\n")
    done = run_cli("plan", request, "--store", tmp_path / "store")
    assert done.returncode == 2 and "[model] device = 'cuda'" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "store").exists()


def test_chat_messages_for_a_tokenizer_without_a_chat_template_are_refused(tmp_path: Path) -> None:
    request = tmp_path / "request.toml"
    request.write_text(HEAD.replace('prompt = "count down from 3 :"', 'messages = [{role = "user", content = "count down from 3 :"}]')
                       + "[generation]\nmax_new_tokens = 4\n")
    done = run_cli("plan", request, "--store", tmp_path / "store")
    assert done.returncode == 2 and "needs a chat template" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "store").exists()


def test_over_long_model_path_is_refused(tmp_path: Path) -> None:
    request = tmp_path / "request.toml"
    request.write_text(HEAD.replace(f"path = {toml_value(str(TINY_LM))}", f'path = "{"a" * 5000}"') + "[generation]\nmax_new_tokens = 4\n")
    done = run_cli("plan", request, "--store", tmp_path / "store")
    assert done.returncode == 2 and "[model] path" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "store").exists()
