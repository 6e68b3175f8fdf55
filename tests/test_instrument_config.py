"""`generation-config.before-generate.json` equals what generate actually used.

The reference is captured independently inside generate by this test: a spy on the model
class's `_prepare_generated_length` deep-copies the config generate is about to decode with
(merged, lengths derived, EOS/pad tensors prepared) and the prompt length it was given.
genrun's own hook sits on the instance and reaches the spy through the normal method lookup.
"""

import copy
import json
from pathlib import Path

import pytest
from transformers import LlamaForCausalLM

from _lm_helpers import EOS, FixtureModels, plan, read_json, request_text, write_entry_module
from genrun.runner.execute import execute_snapshot


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, int]]:
    """(config, prompt length) of every generate call, copied inside generate."""
    captured: list[tuple[object, int]] = []
    original = LlamaForCausalLM._prepare_generated_length

    def spy(self, *args, **kwargs):
        config = original(self, *args, **kwargs)
        captured.append((copy.deepcopy(config), kwargs["input_ids_length"]))
        return config

    monkeypatch.setattr(LlamaForCausalLM, "_prepare_generated_length", spy)
    return captured


def expected_effective(config) -> dict:
    fields = {k: v for k, v in config.to_dict().items() if not k.startswith("_") and k != "transformers_version"}
    eos = config._eos_token_tensor
    fields["eos_token_id"] = eos.reshape(-1).tolist() if eos is not None else None
    fields["pad_token_id"] = int(config._pad_token_tensor) if config._pad_token_tensor is not None else None
    return json.loads(json.dumps(fields))


def run_and_compare(tmp_path: Path, text: str, used: list) -> dict:
    snapshot = plan(tmp_path, text)
    execute_snapshot(snapshot, live=False)
    written = read_json(snapshot, "generation-config.before-generate.json")
    (config, prompt_length), = used
    assert written["effective"] == expected_effective(config)
    assert written["prompt_length"] == prompt_length
    assert written["eos_token_ids"] == written["effective"]["eos_token_id"] or (written["eos_token_ids"] == [] and written["effective"]["eos_token_id"] is None)
    return written


@pytest.fixture(scope="session")
def checkpoint_limits(fixture_models: FixtureModels) -> Path:
    return fixture_models.get("tiny-max-length-12")


@pytest.fixture(scope="session")
def sampling_checkpoint(fixture_models: FixtureModels) -> Path:
    return fixture_models.get("tiny-sampling")


@pytest.fixture(scope="session")
def pad_unset(fixture_models: FixtureModels) -> Path:
    return fixture_models.get("tiny-pad-unset")


def test_checkpoint_max_length(tmp_path: Path, used: list, checkpoint_limits: Path) -> None:
    written = run_and_compare(tmp_path, request_text(checkpoint_limits, prompt="count down from 40 :"), used)
    assert written["effective"]["max_length"] == 12 and written["limit_sources"]["max_length"] == "model_generation_config"
    assert written["model_generation_config"]["max_length"] == 12 and written["overrides"] == {}


def test_max_new_tokens_with_a_padded_batch(tmp_path: Path, used: list, tiny_lm: Path) -> None:
    text = request_text(tiny_lm, prompts=["count down from 3 :", "down from 40 :"], generation={"max_new_tokens": 5})
    written = run_and_compare(tmp_path, text, used)
    assert (written["prompt_length"], written["batch_rows"]) == (6, 2)
    assert written["effective"]["max_length"] == 6 + 5
    assert written["limit_sources"] == {"max_new_tokens": "request", "max_length": "request", "eos_token_id": "model_generation_config",
                                        "max_position_embeddings": "model_config"}


def test_max_length_and_max_new_tokens_together(tmp_path: Path, used: list, tiny_lm: Path) -> None:
    text = request_text(tiny_lm, prompt="count down from 40 :", generation={"max_length": 9, "max_new_tokens": 7})
    written = run_and_compare(tmp_path, text, used)
    assert written["effective"]["max_length"] == 6 + 7  # max_new_tokens wins over max_length
    assert written["overrides"] == {"max_length": 9, "max_new_tokens": 7}


def test_nothing_set_is_the_library_default(tmp_path: Path, used: list, tiny_lm: Path) -> None:
    written = run_and_compare(tmp_path, request_text(tiny_lm, prompt="count down from 40 :"), used)
    assert written["effective"]["max_length"] == 6 + 20 and written["effective"]["max_new_tokens"] is None
    assert written["limit_sources"]["max_length"] == "library_default"
    assert written["context_limit"] == 256 and (written["dtype"], written["device"]) == ("float32", "cpu")


def test_passed_config_inherits_sampling_from_the_checkpoint(tmp_path: Path, used: list, sampling_checkpoint: Path) -> None:
    module = write_entry_module(tmp_path, "entries_passed_config")
    text = request_text(sampling_checkpoint, prompt="count down from 40 :", generation={"max_new_tokens": 7}, entrypoint=f"{module}:passed_config")
    written = run_and_compare(tmp_path, text, used)
    effective = written["effective"]
    assert (effective["do_sample"], effective["temperature"], effective["top_k"], effective["top_p"]) == (True, 0.6, 5, 0.9)
    assert written["overrides"] == {"max_new_tokens": 7}  # what the caller's config set; the rest was inherited
    assert written["limit_sources"]["max_new_tokens"] == "entrypoint"


def test_a_list_of_eos_ids(tmp_path: Path, used: list, tiny_lm: Path) -> None:
    written = run_and_compare(tmp_path, request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 10, "eos_token_id": [EOS, 8]}), used)
    assert written["eos_token_ids"] == [EOS, 8] and written["limit_sources"]["eos_token_id"] == "request"
    stop = read_json(next((tmp_path / "store").iterdir()), "generation-stop.json")["sequences"][0]
    assert (stop["reason"], stop["evidence"]["eos_token_id"], stop["generated"]) == ("eos", 8, 3)  # "0" is id 8


def test_pad_defaults_to_the_first_eos(tmp_path: Path, used: list, pad_unset: Path) -> None:
    written = run_and_compare(tmp_path, request_text(pad_unset, prompt="count down from 3 :", generation={"max_new_tokens": 6}), used)
    assert (written["pad_token_id"], written["pad_defaulted_to_eos"]) == (EOS, True)
