"""Values transformers' generate rejects are refused at plan time, and a refused plan leaves nothing.

Found by trying boundary values under plain `model.generate` on the bundled tiny-lm: each REFUSED value
raised there (before any token) yet planned; each ACCEPTED value ran. Plan now builds generate's own
logits processors and stopping criteria on the model's config (no weights), so both lists follow the
library's own checks. Every refusal: exit 2, one sentence naming the key, the value and the fix,
no store directory and no hash cache entry.
"""

from pathlib import Path

import pytest

from conftest import run_cli, tiny_request, write_request

SAMPLING = "do_sample = true\n"

# id -> ([generation] body, the "key = value" the refusal names, the fix it gives)
REFUSED = {
    "repetition_penalty-0": ("repetition_penalty = 0.0", "repetition_penalty = 0.0", "give a value it accepts"),
    "repetition_penalty-negative": ("repetition_penalty = -1.0", "repetition_penalty = -1.0", "give a value it accepts"),
    # generate's processor wants a float: an int other than 1 (which generate skips) is rejected
    "repetition_penalty-int": ("repetition_penalty = 2", "repetition_penalty = 2", "write it as a float: repetition_penalty = 2.0"),
    "encoder_repetition_penalty-0": ("encoder_repetition_penalty = 0.0", "encoder_repetition_penalty = 0.0", "give a value it accepts"),
    # an empty stop string makes StopStringCriteria fail with "substring not found"; genrun says what is wrong instead
    "stop_strings-empty": ('stop_strings = ""', "stop_strings = ''", "must be a non-empty string or a list of non-empty strings"),
    "stop_strings-empty-in-list": ('stop_strings = [""]', "stop_strings = ['']", "must be a non-empty string or a list of non-empty strings"),
    # tiny-lm's word-level vocabulary cannot build transformers' StopStringCriteria at all
    "stop_strings-tokenizer-cannot-index": ('stop_strings = ["5"]', "stop_strings = ['5']", "give a value it accepts"),
    "forced_eos_token_id-negative": ("forced_eos_token_id = -3", "forced_eos_token_id = -3", "give a value it accepts"),
    # no processor checks it up front: generate fails with an IndexError at the forced step
    "forced_eos_token_id-beyond-vocabulary": ("forced_eos_token_id = 1000000", "forced_eos_token_id = 1000000",
                                              "is beyond the model's vocabulary of 72 ids"),
    "bad_words_ids-empty": ("bad_words_ids = []", "bad_words_ids = []", "give a value it accepts"),
    "bad_words_ids-negative": ("bad_words_ids = [[-1]]", "bad_words_ids = [[-1]]", "give a value it accepts"),
    "exponential_decay_length_penalty-short": ("exponential_decay_length_penalty = [1]", "exponential_decay_length_penalty = [1]",
                                               "give a value it accepts"),
    "top_k-negative-sampling": (SAMPLING + "top_k = -1", "top_k = -1", "give a value it accepts"),
    "top_p-negative-sampling": (SAMPLING + "top_p = -0.1", "top_p = -0.1", "give a value it accepts"),
    "min_p-above-1-sampling": (SAMPLING + "min_p = 1.5", "min_p = 1.5", "give a value it accepts"),
    "typical_p-0-sampling": (SAMPLING + "typical_p = 0.0", "typical_p = 0.0", "give a value it accepts"),
    "temperature-0-sampling": (SAMPLING + "temperature = 0.0", "temperature = 0.0", "give a value it accepts"),
    "top_h-above-1-sampling": (SAMPLING + "top_h = 1.5", "top_h = 1.5", "give a value it accepts"),
}

# boundary values generate accepts (each ran under plain generate on tiny-lm): they must still plan
ACCEPTED = {
    "repetition_penalty-int-1": "repetition_penalty = 1",  # == 1.0: generate builds no processor
    "repetition_penalty-tiny": "repetition_penalty = 1e-9",
    "repetition_penalty-float": "repetition_penalty = 2.0",
    "encoder_repetition_penalty-half": "encoder_repetition_penalty = 0.5",
    "no_repeat_ngram_size-0": "no_repeat_ngram_size = 0",
    "no_repeat_ngram_size-1": "no_repeat_ngram_size = 1",
    "forced_eos_token_id-0": "forced_eos_token_id = 0",
    "forced_eos_token_id-last-id": "forced_eos_token_id = 71",
    "forced_bos_token_id-0": "forced_bos_token_id = 0",
    "top_k-0-sampling": SAMPLING + "top_k = 0",
    "top_k-1-sampling": SAMPLING + "top_k = 1",
    "top_p-1-sampling": SAMPLING + "top_p = 1.0",
    "min_p-0-sampling": SAMPLING + "min_p = 0.0",
    "min_p-1-sampling": SAMPLING + "min_p = 1.0",
    "typical_p-1-sampling": SAMPLING + "typical_p = 1.0",
    "epsilon_cutoff-0-sampling": SAMPLING + "epsilon_cutoff = 0.0",
    "eta_cutoff-0-sampling": SAMPLING + "eta_cutoff = 0.0",
    "temperature-small-sampling": SAMPLING + "temperature = 1e-6",
    "top_h-1-sampling": SAMPLING + "top_h = 1.0",
    "num_return_sequences-2-sampling": SAMPLING + "num_return_sequences = 2",
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_value_generate_rejects_is_refused_at_plan_time(case: str, tmp_path: Path, tiny_lm: Path) -> None:
    body, named, fix = REFUSED[case]
    request = write_request(tmp_path, tiny_request(tiny_lm, generation=f"max_new_tokens = 4\n{body}"))
    cache = tmp_path / "cache"
    done = run_cli("plan", request, "--store", tmp_path / "store", env={"GENRUN_CACHE_DIR": str(cache)})
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert f"[generation] {named} " in message and fix in message, message
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists() and not cache.exists()


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_boundary_value_generate_accepts_still_plans(case: str, tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation=f"max_new_tokens = 4\n{ACCEPTED[case]}"))
    done = run_cli("plan", request, "--store", tmp_path / "store")
    assert done.returncode == 0, done.stderr


def test_each_rejected_key_is_named_once(tmp_path: Path, tiny_lm: Path) -> None:
    body = f"max_new_tokens = 4\n{SAMPLING}repetition_penalty = 0.0\ntop_p = -0.1"
    done = run_cli("plan", write_request(tmp_path, tiny_request(tiny_lm, generation=body)), "--store", tmp_path / "store")
    assert done.returncode == 2 and "2 problems" in done.stderr, done.stderr
    message = " ".join(done.stderr.split())
    assert "repetition_penalty = 0.0 is rejected by transformers' RepetitionPenaltyLogitsProcessor" in message
    assert "top_p = -0.1 is rejected by transformers' TopPLogitsWarper" in message
    assert "do_sample = true is rejected" not in message  # the switch that enabled top_p is not blamed


def test_budget_refusal_leaves_no_hash_cache_entry(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 300"))
    cache = tmp_path / "cache"
    done = run_cli("plan", request, "--store", tmp_path / "store", env={"GENRUN_CACHE_DIR": str(cache)})
    assert done.returncode == 3, done.stderr
    assert not (tmp_path / "store").exists() and not cache.exists()
    # the same request once it fits: the plan is in the store, and only then are the digests remembered
    request.write_text(tiny_request(tiny_lm, generation="max_new_tokens = 4"))
    done = run_cli("plan", request, "--store", tmp_path / "store", env={"GENRUN_CACHE_DIR": str(cache)})
    assert done.returncode == 0, done.stderr
    entries = list((cache / "hashes-v1").iterdir())
    assert len(entries) == len([p for p in tiny_lm.iterdir() if p.is_file()]), entries


def test_refused_sweep_item_leaves_no_hash_cache_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 0 plans (its model is hashed), item 1 is refused: the sweep writes nothing, the digests are not remembered."""
    from _sweep_helpers import write_sweep
    from genrun.runner.errors import RequestError
    from genrun.runner.sweep.store import plan_sweep

    cache = tmp_path / "cache"
    monkeypatch.setenv("GENRUN_CACHE_DIR", str(cache))
    sweep = write_sweep(tmp_path / "sweep", grid={"generation.repetition_penalty": [1.5, 0.0]})
    with pytest.raises(RequestError, match=r"(?s)sweep item 1.*repetition_penalty = 0.0 is rejected by transformers' RepetitionPenaltyLogitsProcessor"):
        plan_sweep(sweep, tmp_path / "store")
    assert not (tmp_path / "store").exists() and not cache.exists()


def test_stop_strings_are_judged_by_the_tokenizer_execution_uses(tmp_path: Path, tiny_lm: Path, fixture_models) -> None:  # noqa: ANN001
    """With `[model] processor` generate is given the override's tokenizer: stop strings it cannot index are refused
    at plan time even when the checkpoint's own tokenizer could build them."""
    model = fixture_models.get("bpe-no-eos")  # its byte-level BPE tokenizer builds StopStringCriteria
    word_level = tmp_path / "word-level-tokenizer"  # tiny-lm's cannot (see "stop_strings-tokenizer-cannot-index")
    word_level.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (word_level / name).write_bytes((tiny_lm / name).read_bytes())
    plain = tiny_request(model, generation='max_new_tokens = 4\nstop_strings = ["5"]')
    done = run_cli("plan", write_request(tmp_path, plain, "plain.toml"), "--store", tmp_path / "store")
    assert done.returncode == 0, done.stderr
    override = plain.replace('device = "cpu"\n', f'device = "cpu"\nprocessor = "{word_level}"\n', 1)
    done = run_cli("plan", write_request(tmp_path, override, "override.toml"), "--store", tmp_path / "store-override")
    assert done.returncode == 2, done.stderr
    assert "[generation] stop_strings = ['5'] " in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "store-override").exists()
