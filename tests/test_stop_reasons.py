"""Every stop reason of the format (docs/snapshot-format.md) on real local models, recorded live (never guessed from the ids).

Each case plans a real request with `plan_request` and runs it with `execute_snapshot` in
process (the CLI path minus argparse; the CLI itself is covered in test_execute_cli.py and the
signal cases in test_execute_signals.py). Models: the bundled count-down `tiny-lm` (greedy
`count down from N :` -> `N-1 ... 0 <eos>`) and variants of it, and random Llamas without EOS
or over a BPE tokenizer (tiny-lm's word-level tokenizer cannot build a StopStringCriteria).
"""

from pathlib import Path

import pytest
import torch

from _lm_helpers import (
    EOS,
    FixtureModels,
    assert_counts_agree,
    pick_stop_string,
    plan,
    read_ids,
    read_json,
    read_progress,
    request_text,
    write_entry_module,
)
from genrun.runner.execute import execute_snapshot
from genrun.runner.store import is_sealed

BPE_PROMPTS = ["def generate(self", "x", "stopping criteria"]


@pytest.fixture(scope="session")
def models(fixture_models: FixtureModels, tiny_lm: Path) -> dict[str, Path]:
    """The bundled model plus local variants (the session's shared builds)."""
    names = {"no_eos_random": "random-no-eos", "tiny_pad_unset": "tiny-pad-unset", "tiny_no_eos": "tiny-no-eos",
             "bpe_no_eos": "bpe-no-eos", "bpe_pad_unset": "bpe-pad-unset"}
    return {"tiny": tiny_lm, **{key: fixture_models.get(name) for key, name in names.items()}}


def run(tmp_path: Path, text: str) -> tuple[Path, dict]:
    snapshot = plan(tmp_path, text)
    result = execute_snapshot(snapshot, live=False)
    assert is_sealed(snapshot)
    assert_counts_agree(snapshot)
    assert read_json(snapshot, "result.json") == result.model_dump(mode="json")
    return snapshot, result.model_dump(mode="json")


def stops(snapshot: Path) -> list[dict]:
    return read_json(snapshot, "generation-stop.json")["sequences"]


def greedy_rows(model_dir: Path, prompts: list[str], new_tokens: int) -> tuple[list[list[int]], object, int]:
    """Uninstrumented greedy trajectories (left-padded batch, no EOS), to choose stop strings from."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir, padding_side="left")
    enc = tok(prompts, return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=tok.pad_token_id)
    prompt_length = enc["input_ids"].shape[1]
    return out[:, prompt_length:].tolist(), tok, prompt_length


def test_natural_eos_on_the_bundled_model(tmp_path: Path, models: dict[str, Path]) -> None:
    snapshot, result = run(tmp_path, request_text(models["tiny"], prompt="count down from 3 :", generation={"max_new_tokens": 16}))
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["last_token_id"]) == ("eos", 4, EOS)
    assert stop["evidence"]["fired"] == ["EosTokenCriteria"] and stop["evidence"]["eos_token_id"] == EOS
    summary = read_json(snapshot, "generated-token-ids.json")["sequences"][0]
    assert summary["text"] == "2 1 0" and summary["text_with_special"] == "2 1 0 <eos>" and summary["eos_positions"] == [3]
    assert result["status"] == "succeeded" and result["exit_code"] == 0 and result["generated"] == 4


def test_max_new_tokens(tmp_path: Path, models: dict[str, Path]) -> None:
    snapshot, _ = run(tmp_path, request_text(models["tiny"], prompt="count down from 40 :", generation={"max_new_tokens": 8}))
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["fired"]) == ("max_new_tokens", 8, ["MaxLengthCriteria"])
    facts = {k: stop["evidence"].pop(k) for k in ("last_token_id", "fired", "eos_token_ids", "max_new_tokens", "max_length", "prompt_length")}
    assert stop["evidence"] == {"reason": "max_new_tokens", "limit": 8, "source": "request", "stop_length": 6 + 8, "custom_criteria": [], "rule": None}  # rule: continuous batching only
    assert (facts["max_new_tokens"], facts["max_length"], facts["prompt_length"]) == (8, 6 + 8, 6)  # the token facts, in the evidence since format 3


def test_explicit_max_length_counts_the_prompt(tmp_path: Path, models: dict[str, Path]) -> None:
    snapshot, _ = run(tmp_path, request_text(models["tiny"], prompt="count down from 40 :", generation={"max_length": 10}))
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["max_length"], stop["evidence"]["prompt_length"]) == ("max_length", 4, 10, 6)
    assert stop["evidence"]["source"] == "request"


def test_silent_library_default_is_named(tmp_path: Path, models: dict[str, Path]) -> None:
    """Nothing sets a length anywhere: transformers 5.x stops at prompt + 20, and genrun says so."""
    snapshot, _ = run(tmp_path, request_text(models["tiny"], prompt="count down from 40 :"))
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["max_length"]) == ("max_length", 20, 26)
    assert stop["evidence"]["source"] == "library_default"
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert config["limit_sources"]["max_length"] == "library_default" and config["effective"]["max_new_tokens"] is None


def test_stop_string(tmp_path: Path, models: dict[str, Path]) -> None:
    rows, tok, _ = greedy_rows(models["bpe_no_eos"], ["x"], 24)
    stop_string, step = pick_stop_string(tok, rows[0], 3)
    snapshot, _ = run(tmp_path, request_text(models["bpe_no_eos"], prompt="x", generation={"max_new_tokens": 24, "stop_strings": [stop_string]}))
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["fired"]) == ("stop_string", step + 1, ["StopStringCriteria"])
    assert stop["evidence"]["stop_string"] == stop_string
    assert read_ids(snapshot)["sequence_0"] == rows[0][: step + 1]


def test_max_time(tmp_path: Path, models: dict[str, Path]) -> None:
    snapshot, result = run(
        tmp_path, request_text(models["no_eos_random"], prompt="count down from 3 :", generation={"max_new_tokens": 6000, "max_time": 0.3})
    )
    (stop,) = stops(snapshot)
    assert stop["reason"] == "max_time" and stop["evidence"]["fired"] == ["MaxTimeCriteria"] and stop["evidence"]["max_time"] == 0.3
    # Recorded evidence, not elapsed time (a loaded machine decodes few tokens in 0.3 s): the clock criterion
    # fired inside generate and the run ended before its token budget.
    assert 0 < stop["generated"] < 6000 and result["status"] == "succeeded"


def test_left_padded_batch_rows_stop_for_different_reasons(tmp_path: Path, models: dict[str, Path]) -> None:
    rows, tok, prompt_length = greedy_rows(models["bpe_pad_unset"], BPE_PROMPTS, 16)
    stop_string, step = pick_stop_string(tok, rows[1], 2)
    # EOS id: row 0's token at its step 4, absent from the other rows before their own stops
    eos_id = rows[0][4]
    assert eos_id not in rows[0][:4] and eos_id not in rows[1][: step + 1] and eos_id not in rows[2]
    text = request_text(
        models["bpe_pad_unset"], prompts=BPE_PROMPTS,
        generation={"max_new_tokens": 16, "eos_token_id": eos_id, "pad_token_id": 1, "stop_strings": [stop_string]},
    )
    snapshot, result = run(tmp_path, text)
    got = [(s["reason"], s["generated"]) for s in stops(snapshot)]
    assert got[0] == ("eos", 5) and got[1] == ("stop_string", step + 1) and got[2] == ("max_new_tokens", 16), got
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert config["prompt_length"] == prompt_length and config["batch_rows"] == 3  # "x" is left-padded to the longest prompt
    assert result["generated_tokens"] == 5 + step + 1 + 16
    assert read_progress(snapshot)[-1]["generated"] == 16  # the furthest row


def test_pad_equal_to_eos_does_not_turn_a_stop_string_into_eos(tmp_path: Path, models: dict[str, Path]) -> None:
    """No pad anywhere: generate pads finished rows with eos[0]; ids alone would say `eos` for row 1."""
    rows, tok, _ = greedy_rows(models["bpe_pad_unset"], BPE_PROMPTS, 12)
    stop_string, step = pick_stop_string(tok, rows[1], 2)
    text = request_text(models["bpe_pad_unset"], prompts=BPE_PROMPTS, generation={"max_new_tokens": 12, "stop_strings": [stop_string]})
    snapshot, _ = run(tmp_path, text)
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert config["pad_defaulted_to_eos"] is True and config["pad_token_id"] == 0 == config["eos_token_ids"][0]
    row = stops(snapshot)[1]
    assert (row["reason"], row["generated"]) == ("stop_string", step + 1)
    assert read_json(snapshot, "generated-token-ids.json")["sequences"][1]["eos_positions"] == []
    # the trap: what generate returns for that row continues with eos (the pad), so ids alone would say `eos`
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(models["bpe_pad_unset"]).eval()
    enc = tok(BPE_PROMPTS, return_tensors="pt", padding=True)
    out = model.generate(**enc, max_new_tokens=12, stop_strings=[stop_string], tokenizer=tok)
    tail = out[1, enc["input_ids"].shape[1] + step + 1 :].tolist()
    assert tail and set(tail) == {0}


def test_no_eos_configured(tmp_path: Path, models: dict[str, Path]) -> None:
    """Without EOS the count-down model emits id 2 as an ordinary token and keeps going to the cap."""
    snapshot, _ = run(tmp_path, request_text(models["tiny_no_eos"], prompt="count down from 3 :", generation={"max_new_tokens": 8}))
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["eos_token_ids"]) == ("max_new_tokens", 8, [])
    ids = read_ids(snapshot)["sequence_0"]
    assert EOS in ids and read_json(snapshot, "generated-token-ids.json")["sequences"][0]["eos_positions"] == []


def test_no_eos_stop_string_row_is_cut_where_it_stopped(tmp_path: Path, models: dict[str, Path]) -> None:
    """A finished row keeps emitting real tokens when no EOS criterion exists; the kept ids end at its stop."""
    rows, tok, _ = greedy_rows(models["bpe_no_eos"], BPE_PROMPTS, 12)
    stop_string, step = pick_stop_string(tok, rows[1], 2)
    text = request_text(models["bpe_no_eos"], prompts=BPE_PROMPTS, generation={"max_new_tokens": 12, "stop_strings": [stop_string]})
    snapshot, _ = run(tmp_path, text)
    row = stops(snapshot)[1]
    assert (row["reason"], row["generated"], row["evidence"]["eos_token_ids"]) == ("stop_string", step + 1, [])
    assert read_ids(snapshot)["sequence_1"] == rows[1][: step + 1]


def test_exception_mid_run_keeps_partial_ids_and_progress(tmp_path: Path, models: dict[str, Path]) -> None:
    module = write_entry_module(tmp_path, "entries_exception")
    text = request_text(
        models["tiny"], prompt="count down from 40 :", generation={"max_new_tokens": 30},
        entrypoint=f"{module}:raise_mid_run", entrypoint_kwargs={"after": 5}, progress={"every_units": 1},
    )
    snapshot, result = run(tmp_path, text)
    (stop,) = stops(snapshot)
    # the criterion raised while checking the 5th token, before generate streamed it
    assert stop["reason"] == "exception" and stop["generated"] == 4
    assert stop["exception"]["type"] == "RuntimeError" and "user criterion failed" in stop["exception"]["message"]
    assert "raise RuntimeError" in stop["exception"]["traceback"]
    assert read_json(snapshot, "generated-token-ids.json")["sequences"][0]["text"] == "39 38 37 36"
    events = [e["event"] for e in read_progress(snapshot)]
    assert events[0] == "start" and events[-1] == "exception" and events.count("progress") >= 3
    assert (result["status"], result["exit_code"], result["exception"]["type"]) == ("failed", 1, "RuntimeError")


def test_exception_before_the_first_token(tmp_path: Path, models: dict[str, Path]) -> None:
    module = write_entry_module(tmp_path, "entries_refused")
    text = request_text(models["tiny"], generation={"max_new_tokens": 4}, entrypoint=f"{module}:stop_strings_without_tokenizer")
    snapshot, result = run(tmp_path, text)
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["last_token_id"]) == ("exception", 0, None)
    assert stop["exception"]["type"] == "ValueError" and result["status"] == "failed"


def test_user_code_failing_after_generate_keeps_the_real_stop(tmp_path: Path, models: dict[str, Path]) -> None:
    module = write_entry_module(tmp_path, "entries_after")
    text = request_text(models["tiny"], generation={"max_new_tokens": 16}, entrypoint=f"{module}:fail_after_generate")
    snapshot, result = run(tmp_path, text)
    assert [s["reason"] for s in stops(snapshot)] == ["eos"]
    assert (result["status"], result["exception"]["type"]) == ("failed", "ValueError")
    assert read_progress(snapshot)[-1]["event"] == "exception"


def test_custom_criterion_is_custom_with_its_name_as_evidence(tmp_path: Path, models: dict[str, Path]) -> None:
    module = write_entry_module(tmp_path, "entries_custom")
    text = request_text(
        models["tiny"], prompt="count down from 40 :", generation={"max_new_tokens": 30},
        entrypoint=f"{module}:custom_stop", entrypoint_kwargs={"after": 3},
    )
    snapshot, result = run(tmp_path, text)
    (stop,) = stops(snapshot)
    assert (stop["reason"], stop["generated"], stop["evidence"]["fired"]) == ("custom", 3, ["StopAfter"])
    assert stop["evidence"]["custom_criteria"] == ["StopAfter"]
    assert result["status"] == "succeeded"


def test_host_and_device_bookkeeping_agree(models: dict[str, Path]) -> None:
    """The sync-free `device` mode (used on CUDA/MPS) gives the same rows as the `host` mode, here on CPU tensors."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from genrun.runner.backends.transformers.instrument.criteria import RecordingCriteriaList

    model = AutoModelForCausalLM.from_pretrained(models["tiny"]).eval()
    tok = AutoTokenizer.from_pretrained(models["tiny"], padding_side="left")
    enc = tok(["count down from 3 :", "down from 40 :", "count down from 2 :"], return_tensors="pt", padding=True)
    seen = {}
    for mode in ("host", "device"):
        original = model._get_stopping_criteria

        def hooked(*args, mode=mode, original=original, **kwargs):
            config = kwargs["generation_config"]
            seen[mode] = RecordingCriteriaList(original(*args, **kwargs), config.max_length, config.max_new_tokens, mode=mode)
            return seen[mode]

        model._get_stopping_criteria = hooked
        model.generate(**enc, max_new_tokens=6)
        del model._get_stopping_criteria
    assert seen["host"].row_states() == seen["device"].row_states()
    assert [r.kinds for r in seen["host"].row_states()] == [("eos",), ("max_new_tokens",), ("eos",)]
    assert torch.is_tensor(seen["device"]._device_state[0])
