"""Runs on the session's engines: a snapshot seals and verifies, greedy ids equal bare vLLM's, and each way a row stops
(EOS, stop token, stop string, max_tokens, max_model_len, the checkpoint's cap, vLLM's own default) is recorded and
told apart, each checked by verify against the saved ids."""

import json

from _snapshot import findings, ids, problems, stops

# tiny-vllm-lm's greedy walk (examples/models/make_tiny_vllm_lm.py): letters run to EOS, digits cycle forever.
# Its byte-level tokenizer has one id per byte (GPT-2's byte-to-unicode order, not ASCII): `encode` gives the ids.
EOS = 256


def encode(loaded, text):
    return loaded.processor.encode(text, add_special_tokens=False)


def test_a_run_seals_verifies_and_keeps_every_id(engine, run_on):
    snapshot, result = run_on(engine, prompts=["uvw", "Count: 0"], generation={"max_tokens": 12, "temperature": 0})
    assert result.status == "succeeded"
    assert problems(snapshot) == []
    saved = ids(snapshot)
    assert saved[0] == encode(engine, "xyz") + [EOS]
    assert saved[1] == encode(engine, "123456789012")
    rows = stops(snapshot)
    assert [r["reason"] for r in rows] == ["eos", "max_new_tokens"]
    assert rows[0]["evidence"]["matched"] == "eos" and rows[0]["evidence"]["eos_token_id"] == EOS
    assert rows[1]["evidence"]["source"] == "request" and rows[1]["evidence"]["finish_reason"] == "length"
    texts = [(snapshot / "outputs" / f"sequence_{i}.txt").read_text() for i in (0, 1)]
    assert texts == ["xyz", "123456789012"]
    prompt_ids = _prompt_ids(snapshot)
    assert prompt_ids == {0: encode(engine, "uvw"), 1: encode(engine, "Count: 0")}


def test_the_call_config_records_engine_and_sampling_with_provenance(engine, run_on):
    snapshot, _ = run_on(engine, prompts=["uvw"], generation={"temperature": 0})
    call = json.loads((snapshot / "vllm-config.before-generate.json").read_text())
    assert call["vllm_version"] == "0.32.0"
    assert call["engine"]["max_model_len"] == 1024 and call["engine"]["num_kv_blocks"] == 8192 and call["engine"]["block_size"] == 128
    assert call["vllm_environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    sampling = call["requests"][0]
    assert (sampling["params"]["max_tokens"], sampling["sources"]["max_tokens"]) == (20, "checkpoint")  # generation_config.json's 20
    assert sampling["sources"]["temperature"] == "request" and sampling["sources"]["top_p"] == "vllm_default"
    assert call["eos_token_ids"] == [EOS]


def test_greedy_ids_equal_bare_vllm(engine, run_on):
    from vllm import SamplingParams

    prompts = ["uvw", "Hi!", "Count: 0", "q"]
    snapshot, _ = run_on(engine, prompts=prompts, generation={"max_tokens": 30, "temperature": 0})
    bare = engine.model.generate(prompts, SamplingParams(temperature=0, max_tokens=30), use_tqdm=False)
    assert ids(snapshot) == {i: list(out.outputs[0].token_ids) for i, out in enumerate(bare)}
    assert problems(snapshot) == []


def test_a_stop_token_is_told_apart_from_eos(engine, run_on):
    (k,) = encode(engine, "k")
    snapshot, _ = run_on(engine, prompts=["abc"], generation={"max_tokens": 30, "temperature": 0, "stop_token_ids": [k]})
    (row,) = stops(snapshot)
    assert ids(snapshot)[0] == encode(engine, "defghijk")
    assert row["reason"] == "eos"
    assert (row["evidence"]["matched"], row["evidence"]["stop_reason"], row["evidence"]["eos_token_ids"]) == ("stop_token_ids", k, [EOS, k])
    assert problems(snapshot) == []


def test_a_stop_string_is_named_and_whether_it_is_in_the_output(engine, run_on):
    snapshot, _ = run_on(engine, prompts=["abc"], generation={"max_tokens": 30, "temperature": 0, "stop": ["fgh"]})
    (row,) = stops(snapshot)
    assert row["reason"] == "stop_string"
    assert (row["evidence"]["stop_string"], row["evidence"]["in_output"], row["evidence"]["output_text"]) == ("fgh", False, "de")
    assert ids(snapshot)[0] == encode(engine, "defgh")  # vLLM keeps the ids of the stop string, not its text
    assert (snapshot / "outputs" / "sequence_0.txt").read_text() == "defgh"  # the decode of the saved ids
    assert problems(snapshot) == []

    kept, _ = run_on(engine, prompts=["abc"], generation={"max_tokens": 30, "temperature": 0, "stop": ["fgh"],
                                                          "include_stop_str_in_output": True})
    assert (stops(kept)[0]["evidence"]["in_output"], stops(kept)[0]["evidence"]["output_text"]) == (True, "defgh")


def test_the_checkpoint_cap_is_a_hidden_cap(engine, run_on):
    """No max_tokens: generation_config.json's max_new_tokens = 20 cuts the digits (vLLM's "auto" merge)."""
    snapshot, _ = run_on(engine, prompts=["Count: 0"], generation={"temperature": 0})
    (row,) = stops(snapshot)
    assert (row["reason"], row["generated"]) == ("max_new_tokens", 20)
    assert row["evidence"]["source"] == "model_generation_config"
    status, message = findings(snapshot)["hidden_cap"]
    assert status == "WARN" and "20 tokens" in message
    assert problems(snapshot, allowed_warns=("hidden_cap", "budget_truncation")) == []


def test_vllm_default_cap_is_a_hidden_cap(small_engine, run_on):
    """generation_config = "vllm": no checkpoint defaults, so SamplingParams' own max_tokens = 16 cuts the digits."""
    from conftest import SMALL_ENGINE

    snapshot, _ = run_on(small_engine, prompts=["Count: 0"], generation={"temperature": 0}, engine=SMALL_ENGINE)
    (row,) = stops(snapshot)
    assert (row["reason"], row["generated"], row["evidence"]["source"]) == ("max_new_tokens", 16, "library_default")
    assert findings(snapshot)["hidden_cap"][0] == "WARN"
    assert problems(snapshot, allowed_warns=("hidden_cap", "budget_truncation")) == []


def test_max_model_len_is_told_apart_from_max_tokens(small_engine, run_on):
    """8-token prompt, max_tokens 100, max_model_len 64: vLLM says `length` after 56 ids; genrun says max_length."""
    from conftest import SMALL_ENGINE

    snapshot, result = run_on(small_engine, prompts=["Count: 0"], generation={"temperature": 0, "max_tokens": 100},
                              engine=SMALL_ENGINE, force=True)  # over budget: recorded with --force
    (row,) = stops(snapshot)
    assert (row["reason"], row["generated"]) == ("max_length", 56)
    assert (row["evidence"]["limit"], row["evidence"]["source"], row["evidence"]["finish_reason"]) == (64, "request", "length")
    assert result.forced is True
    assert problems(snapshot) == []


def test_a_reused_engine_with_other_arguments_seals_a_failure_naming_them(engine, run_on):
    from conftest import SMALL_ENGINE

    snapshot, result = run_on(engine, prompts=["uvw"], generation={"temperature": 0, "max_tokens": 4}, engine=SMALL_ENGINE)
    assert result.status == "failed"
    assert "max_model_len: engine None, planned 64" in result.exception.message
    assert problems(snapshot, allowed_warns=("completeness",)) == []  # completeness WARNs that the run failed


def _prompt_ids(snapshot):
    from safetensors.numpy import load_file

    tensors = load_file(str(snapshot / "prompt-token-ids.safetensors"))
    return {int(name.split("_")[1]): tensors[name].tolist() for name in tensors}
