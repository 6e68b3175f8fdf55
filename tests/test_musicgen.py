"""A MusicGen-style model (its own `generate`, never transformers') end to end through `genrun run`.

The model is built from configs here (tiny T5 text encoder, 2-codebook decoder, tiny EnCodec at
800 Hz with hop 16 -> 50 frames/s), saved with `save_pretrained` and loaded back by genrun's real
loading path. MusicGen decodes max_new_tokens steps; with 2 codebooks the delay pattern costs one
step, so 10 steps decode 9 frames = 144 samples = 0.18 s.
"""

import json
import wave
from pathlib import Path

import pytest

from _cli_helpers import cli
from _lm_helpers import read_ids, read_json, read_progress, request_text
from genrun.runner.cli import main

STEPS, CODEBOOKS, FRAME_RATE, SAMPLING_RATE = 10, 2, 50, 800
FRAMES = STEPS - (CODEBOOKS - 1)


def build_tiny_musicgen(dest: Path) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import EncodecConfig, MusicgenConfig, MusicgenDecoderConfig, MusicgenForConditionalGeneration, PreTrainedTokenizerFast, T5Config

    torch.manual_seed(0)
    text = T5Config(vocab_size=32, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    audio = EncodecConfig(target_bandwidths=[1.5], sampling_rate=SAMPLING_RATE, audio_channels=1, num_filters=4, hidden_size=16, codebook_size=16,
                          codebook_dim=16, upsampling_ratios=[4, 4], num_residual_layers=1, num_lstm_layers=1, compress=2)
    decoder = MusicgenDecoderConfig(vocab_size=16, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32, num_codebooks=CODEBOOKS,
                                    max_position_embeddings=128, pad_token_id=16, bos_token_id=16, decoder_start_token_id=16)
    model = MusicgenForConditionalGeneration(MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=decoder.to_dict()))
    for key in ("decoder_start_token_id", "pad_token_id", "bos_token_id"):
        setattr(model.generation_config, key, 16)
    model.generation_config.do_sample = False
    model.generation_config.guidance_scale = 3.0  # as the released checkpoints: CFG on by default
    model.save_pretrained(dest)
    words = ["<pad>", "</s>", "<unk>", *"a calm piano song with drums".split()]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="</s>", unk_token="<unk>").save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def tiny_musicgen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_musicgen(tmp_path_factory.mktemp("musicgen") / "model")


def test_musicgen_end_to_end_with_wav_frames_and_stops(tmp_path: Path, tiny_musicgen: Path) -> None:
    # no per_second: the frame rate is the codec's (50/s), read from the checkpoint's config at plan time
    text = request_text(tiny_musicgen, prompt="a calm piano song", generation={"max_new_tokens": STEPS},
                        units={"name": "frame", "requested_seconds": 1.0}, progress={"every_units": 1})
    (tmp_path / "music.toml").write_text(text)
    store = tmp_path / "store"
    assert main(["run", str(tmp_path / "music.toml"), "--store", str(store)]) == 0
    (snapshot,) = store.iterdir()

    # the decoded audio, as a WAV of the codec's sampling rate
    with wave.open(str(snapshot / "outputs" / "audio_0.wav")) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getnframes()) == (SAMPLING_RATE, 1, FRAMES * SAMPLING_RATE // FRAME_RATE)
    result = read_json(snapshot, "result.json")
    assert (result["unit"], result["generated"], result["produced_seconds"]) == ("frame", FRAMES, FRAMES / FRAME_RATE)
    assert "audio_0.wav" in result["outputs"]

    # every codebook row's ids, as the decoder produced them, each with its recorded stop
    ids = read_ids(snapshot)
    assert sorted(ids) == ["sequence_0", "sequence_1"] and all(len(row) == STEPS for row in ids.values())
    stops = read_json(snapshot, "generation-stop.json")["sequences"]
    assert [(s["reason"], s["generated"], s["fired"]) for s in stops] == [("max_new_tokens", STEPS, ["MaxLengthCriteria"])] * CODEBOOKS

    # effective config written inside MusicGen's own generate, CFG included
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert config["model_class"] == "MusicgenForConditionalGeneration"
    assert (config["effective"]["max_new_tokens"], config["effective"]["guidance_scale"]) == (STEPS, 3.0)
    assert config["limit_sources"]["max_new_tokens"] == "request"

    # per-step progress (one record per step: every_units = 1), first-frame timing
    progress = read_progress(snapshot)
    assert [e["event"] for e in progress[:2]] == ["start", "first_token"]
    assert [e["generated"] for e in progress if e["event"] == "progress"] == list(range(2, STEPS + 1))
    assert result["timings"]["first_token_s"] is not None

    calls = read_json(snapshot, "generation-calls.json")
    (call,) = calls["calls"]
    assert (call["path"], call["evidence_level"]) == ("own_generate", "full")
    assert call["audio"] == {"codebooks": CODEBOOKS, "frames_per_second": FRAME_RATE, "sampling_rate": SAMPLING_RATE,
                             "frames": [FRAMES], "seconds": [FRAMES / FRAME_RATE], "files": ["audio_0.wav"]}

    # CFG doubles the rows the budget counts (guidance_scale 3.0 from the checkpoint); the plan's frames are the codec's
    budget = read_json(snapshot, "token-budget.json")
    assert budget["rows_per_request"] == 2
    domain = budget["domain"]
    assert (domain["frames_per_second"], domain["frames_per_second_source"], domain["requested_frames"]) == (FRAME_RATE, "model_codec", FRAME_RATE)

    import genrun

    findings = {f.name: f for f in genrun.verify(snapshot).findings}
    assert not [f"{f.name}: {f.message}" for f in findings.values() if f.status == "FAIL"]
    early = findings["early_stop"]
    assert early.status == "WARN" and "max_new_tokens" in early.message and early.evidence["per_second"] == FRAME_RATE
    assert json.loads((snapshot / "result.json").read_text())["produced_seconds"] < 1.0


@pytest.mark.parametrize("per_second, accepted", [(25, False), (50.0, True)])
def test_per_second_must_agree_with_the_codec(tmp_path: Path, tiny_musicgen: Path, capsys: pytest.CaptureFixture[str],
                                              per_second: float, accepted: bool) -> None:
    text = request_text(tiny_musicgen, prompt="a calm piano song", generation={"max_new_tokens": STEPS},
                        units={"name": "frame", "per_second": per_second, "requested_seconds": 1.0})
    (tmp_path / "music.toml").write_text(text)
    store = tmp_path / "store"
    code, _, err = cli(capsys, "plan", tmp_path / "music.toml", "--store", store)
    message = " ".join(err.split())
    if accepted:
        assert code == 0, message
        (snapshot,) = store.iterdir()
        assert read_json(snapshot, "token-budget.json")["domain"]["frames_per_second_source"] == "model_codec"
        return
    assert code == 2, message
    assert "[units] per_second = 25 disagrees with the model's audio codec, which emits 50 frames per second" in message
    assert "remove per_second" in message
    assert not store.exists()


def test_beam_search_on_musicgen_is_refused_at_plan_time(tmp_path: Path, tiny_musicgen: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MusicGen's own generate raises for anything but greedy search and sampling: the plan says so instead."""
    (tmp_path / "music.toml").write_text(request_text(tiny_musicgen, prompt="a calm piano song", generation={"max_new_tokens": STEPS, "num_beams": 2}))
    code, _, err = cli(capsys, "plan", tmp_path / "music.toml", "--store", tmp_path / "store")
    message = " ".join(err.split())
    assert code == 2, message
    assert "[generation] num_beams = 2 selects beam search, but this model's own generate (MusicGen) runs greedy search and sampling only" in message
    assert not (tmp_path / "store").exists()
