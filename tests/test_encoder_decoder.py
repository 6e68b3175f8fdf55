"""A plain encoder-decoder text model (the bundled random-weight tiny-bart) through the real CLI: the prompt goes to
the encoder, `max_new_tokens` counts decoder tokens, and the record says so."""

from pathlib import Path

import orjson

from conftest import EXAMPLES, write_request
from test_media_inputs import cli_json, preparation, verify
from genrun.schemas import TokenBudget, layout

BART = EXAMPLES / "models" / "tiny-bart"


def test_an_encoder_decoder_counts_decoder_tokens_and_says_so(capsys, tmp_path: Path) -> None:
    text = (f'name = "bart"\n[model]\npath = "{BART}"\ndtype = "float32"\ndevice = "cpu"\n'
            '[input]\nprompts = ["count down from 12 :", "count :"]\n[generation]\nmax_new_tokens = 5\n')
    code, out = cli_json(capsys, "run", write_request(tmp_path, text), "--store", tmp_path / "store")
    assert code == 0, out
    snapshot = Path(out["snapshot"])
    record = preparation(snapshot)
    assert record.architecture == "encoder_decoder" and record.length_counts.startswith("decoder tokens only")
    assert [(r.prompt_tokens, r.pad_count) for r in record.rows] == [(6, 0), (3, 3)]  # encoder input, right-padded
    assert all(r.decoder_prompt is None for r in record.rows)  # BART's generate forces no decoder prompt of its own (Whisper's does)
    effective = orjson.loads((snapshot / layout.GENERATION_CONFIG).read_bytes())
    assert effective["limit_sources"]["max_position_embeddings"] == "model_config" and effective["context_limit"] == 64
    budget = TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())
    assert (budget.prompt_tokens, budget.context_limit, budget.effective_max_length) == (1, 64, 6)  # decoder start + 5 new, of 64
    stops = orjson.loads((snapshot / layout.STOP).read_bytes())["sequences"]
    assert [s["evidence"]["prompt_length"] for s in stops] == [1, 1]  # the decoder's prompt, not the encoder's 6 tokens
    assert all(s["generated"] <= 5 for s in stops)
    verify(capsys, snapshot)
