"""The pre-flight budget (`token-budget.json`) for causal LMs: refusals with exit 3 before any weights
are loaded, `--force` recorded, the KV formula from the config's own head_dim, and where limits come from."""

from pathlib import Path

import orjson
import pytest
from transformers import Qwen3Config

from conftest import run_cli, tiny_request, write_request
from genrun.runner.backends.transformers._kv_budget import kv_bytes_per_token, model_shape
from genrun.runner.plan import plan_request
from genrun.schemas import TokenBudget, layout


def _budget(snapshot: Path) -> TokenBudget:
    return TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())


def test_budget_beyond_the_context_is_refused_with_the_numbers(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 300"))
    proc = run_cli("plan", request, "--store", tmp_path / "store")
    assert proc.returncode == 3, proc.stderr
    message = " ".join(proc.stderr.split())
    # "count down from 5 :" is 6 tokens with <bos>; the bundled model has 256 positions.
    assert "prompt (6 tokens) + budget (300) = 306 exceeds the model's context limit 256" in message
    assert "max_new_tokens to at most 250" in message and "--force" in message
    assert not (tmp_path / "store").exists()


def test_force_goes_ahead_and_is_recorded(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 300"))
    proc = run_cli("plan", request, "--store", tmp_path / "store", "--force", "--json")
    assert proc.returncode == 0, proc.stderr
    budget = _budget(Path(orjson.loads(proc.stdout)["snapshot"]))
    assert budget.forced and budget.fits_context is False
    assert len(budget.refusals) == 1 and "context limit 256" in budget.refusals[0]


def test_a_forced_run_says_what_it_went_past_without_offering_force(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 300"))
    proc = run_cli("run", request, "--store", tmp_path / "store", "--force")
    assert proc.returncode == 0, proc.stderr
    message = " ".join(proc.stderr.split())
    assert ("forced past: prompt (6 tokens) + budget (300) = 306 exceeds the model's context limit 256; "
            "lower [generation] max_new_tokens to at most 250") in message
    assert "--force" not in message  # the advice is for a refused plan; this one was forced
    (snapshot,) = (tmp_path / "store").iterdir()
    assert not any("--force" in refusal for refusal in _budget(snapshot).refusals)


def test_memory_beyond_the_free_memory_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    # A real condition, not a mock: keep 99.99 % of the machine's memory as margin, so nothing fits.
    text = tiny_request(tiny_lm, tables="[budget]\nmemory_margin_fraction = 0.9999")
    proc = run_cli("plan", write_request(tmp_path, text), "--store", tmp_path / "store")
    assert proc.returncode == 3, proc.stderr
    message = " ".join(proc.stderr.split())
    assert "needs ~" in message and "free" in message and "weights" in message and "KV" in message
    assert not (tmp_path / "store").exists()


def test_fitting_plan_records_kv_rows_and_sources(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm, generation="max_new_tokens = 16\nnum_return_sequences = 2\ndo_sample = true",
                        tables="[budget]\nrows_per_request = 2").replace(
        'prompt = "count down from 5 :"', 'prompts = ["count down from 5 :", "count down from 12 :"]')
    budget = _budget(plan_request(write_request(tmp_path, text), store=tmp_path / "store"))
    # tiny-lm: 2 layers x 2 KV heads x head_dim 16 x float32, K and V
    assert budget.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4
    assert budget.rows_per_request == 2 * 2 * 2  # prompts x return sequences x [budget] rows_per_request
    assert (budget.prompt_tokens, budget.effective_max_length, budget.requested_units_source) == (6, 22, "request")
    assert budget.kv_bytes_at_budget == budget.kv_bytes_per_token * 22 * 8
    assert budget.fits_context and budget.fits_memory and budget.refusals == () and not budget.forced
    assert budget.required_bytes == budget.weight_bytes + budget.kv_bytes_at_budget + budget.activation_bytes_estimate + budget.margin_bytes


def test_nothing_set_is_the_library_default(tmp_path: Path, tiny_lm: Path) -> None:
    budget = _budget(plan_request(write_request(tmp_path, tiny_request(tiny_lm, generation="")), store=tmp_path / "store"))
    assert (budget.effective_max_length, budget.requested_units, budget.requested_units_source) == (26, 20, "library_default")


def test_domain_estimates(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm, generation="max_new_tokens = 64", tables=(
        "[budget]\ninput_seconds = 10.0\nunits_per_input_second = 3.0\nconservative_units_per_input_second = 20.0"))
    domain = _budget(plan_request(write_request(tmp_path, text), store=tmp_path / "store")).domain
    assert (domain.observed_units, domain.conservative_units, domain.context_constrained_units) == (30, 200, 250)
    assert (domain.observed_fits_budget, domain.conservative_fits_budget) == (True, False)


@pytest.mark.parametrize("dtype, expected", [("bfloat16", 2 * 4 * 2 * 128 * 2), ("float32", 2 * 4 * 2 * 128 * 4)])
def test_kv_uses_the_configs_own_head_dim(dtype: str, expected: int) -> None:
    # Qwen3's head_dim (128 by default) differs from hidden/heads (256/4 = 64): the formula must not derive it.
    config = Qwen3Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4,
                         intermediate_size=512, vocab_size=100)
    assert config.head_dim == 128
    assert kv_bytes_per_token(model_shape(config, dtype)) == expected
