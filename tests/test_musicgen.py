"""MusicGen and MusicGen-Melody (their own `generate`, never transformers') end to end through `genrun run`, and the
plan-time refusals that belong to them (a frame rate the codec contradicts, beam search, audio conditioning).

The model is the bundled `examples/models/tiny-musicgen` (tiny T5 text encoder, 2-codebook decoder, tiny EnCodec at
800 Hz with hop 16 -> 50 frames/s), built by `examples/models/make_tiny_musicgen.py`, which also builds the Melody
variant here; both load through genrun's real loading path. MusicGen decodes max_new_tokens steps; with 2 codebooks the delay pattern costs one
step, so 10 steps decode 9 frames = 144 samples = 0.18 s.
"""

import hashlib
import re
import importlib.util
import json
import wave
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from _cli_helpers import cli
from _lm_helpers import read_ids, read_json, read_progress, request_text
from conftest import EXAMPLES
from genrun.runner.cli import main

STEPS, CODEBOOKS, FRAME_RATE, SAMPLING_RATE = 10, 2, 50, 800
FRAMES = STEPS - (CODEBOOKS - 1)


def _builder() -> ModuleType:
    """`examples/models/make_tiny_musicgen.py`, the one place the tiny MusicGen (and Melody) is defined."""
    spec = importlib.util.spec_from_file_location("make_tiny_musicgen", EXAMPLES / "models" / "make_tiny_musicgen.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_musicgen() -> Path:
    """The bundled checkpoint (`examples/models/tiny-musicgen`), loaded by genrun's real loading path."""
    return EXAMPLES / "models" / "tiny-musicgen"


@pytest.fixture(scope="module")
def tiny_melody(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _builder().build_tiny_musicgen(tmp_path_factory.mktemp("melody") / "model", melody=True)


def run_music(tmp_path: Path, model: Path, expect: int = 0, **extra: Any) -> Path:
    """`genrun run` of a STEPS-step request for 1 s of music without `per_second` (the codec's rate, 50/s, read at plan time)."""
    text = request_text(model, prompt="a calm piano song", generation={"max_new_tokens": STEPS}, units={"name": "frame", "requested_seconds": 1.0}, **extra)
    (tmp_path / "music.toml").write_text(text)
    store = tmp_path / "store"
    assert main(["run", str(tmp_path / "music.toml"), "--store", str(store)]) == expect
    (snapshot,) = store.iterdir()
    return snapshot


def assert_audio_and_ids(snapshot: Path) -> dict:
    """The decoded audio as a WAV of the codec's sampling rate, frame units from the codec, every codebook row's ids; the result."""
    with wave.open(str(snapshot / "outputs" / "audio_0.wav")) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getnframes()) == (SAMPLING_RATE, 1, FRAMES * SAMPLING_RATE // FRAME_RATE)
    result = read_json(snapshot, "result.json")
    assert (result["unit"], result["generated"], result["produced_seconds"]) == ("frame", FRAMES, FRAMES / FRAME_RATE)
    assert "audio_0.wav" in result["outputs"]
    ids = read_ids(snapshot)  # the decoder's rows (batch x codebooks), in its delay pattern
    assert sorted(ids) == ["sequence_0", "sequence_1"] and all(len(row) == STEPS for row in ids.values())
    return result


def test_musicgen_end_to_end_with_wav_frames_and_stops(tmp_path: Path, tiny_musicgen: Path) -> None:
    # no per_second: the frame rate is the codec's (50/s), read from the checkpoint's config at plan time
    snapshot = run_music(tmp_path, tiny_musicgen, progress={"every_units": 1})
    result = assert_audio_and_ids(snapshot)

    # each codebook row with its recorded stop
    stops = read_json(snapshot, "generation-stop.json")["sequences"]
    assert [(s["reason"], s["generated"], s["evidence"]["fired"]) for s in stops] == [("max_new_tokens", STEPS, ["MaxLengthCriteria"])] * CODEBOOKS

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


def test_bundled_checkpoint_is_what_the_script_builds(tmp_path: Path, tiny_musicgen: Path) -> None:
    """One definition: `make_tiny_musicgen.py` rebuilds the committed checkpoint byte for byte (deterministic, offline)."""
    built = _builder().build_tiny_musicgen(tmp_path / "built")
    # save_pretrained stamps its own version into the JSON files ("transformers_version": "5.x.y"): a stamp of the
    # library that wrote them, not part of the checkpoint, so it is left out of the comparison; every other byte counts.
    stamp = re.compile(rb'\n\s*"transformers_version": "[^"]*",?')
    digest = lambda d: {p.name: hashlib.sha256(stamp.sub(b"", p.read_bytes())).hexdigest() for p in sorted(d.iterdir())}  # noqa: E731
    assert digest(built) == digest(tiny_musicgen)
    assert (tiny_musicgen / "model.safetensors").stat().st_size < 200_000, "the bundled model stays tiny"


def test_bundled_example_reports_frames_and_a_short_song(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`examples/tiny-musicgen.toml` as the README shows it: frames at the codec's rate, one row (the codebooks are not
    rows), a 0.40 s song for 1 s requested, and verify's early_stop naming max_new_tokens."""
    code, _, err = cli(capsys, "run", EXAMPLES / "tiny-musicgen.toml", "--store", tmp_path / "store")
    assert code == 0, err
    summary = " ".join(err.split())
    assert "generated 20 frames" in summary and "(1 row)" in summary and "summed over" not in summary
    # each codebook stream counts its tokens (21 steps, one of them the delay pattern's), never called frames
    assert "sequence 0: max_new_tokens (limit 21, request) after 21 tokens" in summary
    assert "produced 0.40 s of 1 s requested" in summary
    (snapshot,) = (tmp_path / "store").iterdir()
    result = read_json(snapshot, "result.json")
    assert (result["unit"], result["generated"], result["rows"], result["produced_seconds"]) == ("frame", 20, 1, 0.4)
    assert read_json(snapshot, "token-budget.json")["domain"]["requested_frames"] == FRAME_RATE
    code, out, err = cli(capsys, "report", snapshot)
    assert code == 0, err
    assert "stopped by max_new_tokens ×2; produced 0.40 s of 1 s requested" in " ".join(out.split())
    code, out, err = cli(capsys, "verify", snapshot, "--json")
    findings = {f["name"]: f for f in json.loads(out)["findings"]}
    assert code == 0 and not [f["name"] for f in findings.values() if f["status"] == "FAIL"], err
    assert [f["name"] for f in findings.values() if f["status"] == "WARN"] == ["early_stop"]
    assert findings["early_stop"]["message"] == ("early_stop: produced 0.40 s of 1 s requested, only 40.0% of it (early_stop warns below 95%); "
                                                 "the max_new_tokens limit (21) was reached after 20 frames")


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


# -- MusicGen-Melody ---------------------------------------------------------------------------------

TONE = Path(__file__).resolve().parents[1] / "examples" / "audio" / "tone-3s.wav"


def test_musicgen_melody_end_to_end_text_conditioned(tmp_path: Path, tiny_melody: Path) -> None:
    """Its own generate too (the text encoder's states and the absent chroma make the decoder's prefix); genrun conditions on text."""
    snapshot = run_music(tmp_path, tiny_melody)
    assert assert_audio_and_ids(snapshot)["status"] == "succeeded"
    stops = read_json(snapshot, "generation-stop.json")["sequences"]
    assert [(s["reason"], s["generated"]) for s in stops] == [("max_new_tokens", STEPS)] * CODEBOOKS
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert (config["model_class"], config["effective"]["max_new_tokens"], config["effective"]["guidance_scale"]) == (
        "MusicgenMelodyForConditionalGeneration", STEPS, 3.0)
    (call,) = read_json(snapshot, "generation-calls.json")["calls"]
    assert (call["path"], call["evidence_level"], call["audio"]["frames_per_second"], call["audio"]["codebooks"]) == (
        "own_generate", "full", FRAME_RATE, CODEBOOKS)
    budget = read_json(snapshot, "token-budget.json")
    assert (budget["rows_per_request"], budget["domain"]["frames_per_second_source"], budget["domain"]["requested_frames"]) == (2, "model_codec", FRAME_RATE)

    import genrun

    findings = {f.name: f for f in genrun.verify(snapshot).findings}
    assert not [f"{f.name}: {f.message}" for f in findings.values() if f.status == "FAIL"]
    assert findings["early_stop"].status == "WARN" and "max_new_tokens" in findings["early_stop"].message


def test_melody_audio_conditioning_is_refused_at_plan_time(tmp_path: Path, tiny_melody: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = request_text(tiny_melody, prompt="a calm piano song", generation={"max_new_tokens": STEPS}).replace(
        "[input]\n", f"[input]\naudio = {json.dumps(str(TONE))}\n")
    (tmp_path / "melody.toml").write_text(text)
    code, _, err = cli(capsys, "plan", tmp_path / "melody.toml", "--store", tmp_path / "store")
    message = " ".join(err.split())
    assert code == 2, message
    assert "[input] audio/images are not passed to MusicGen-family models by genrun" in message and "torchaudio" in message
    assert not (tmp_path / "store").exists()


FAILING_ENTRY = '''
import torch
from transformers import StoppingCriteria


class FailAtStep(StoppingCriteria):
    def __init__(self):
        self.calls = 0

    def __call__(self, input_ids, scores, **kwargs):
        self.calls += 1
        if self.calls == 4:
            raise RuntimeError("decoder blew up at step 4")
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)


def generate_then_fail(model, tokenizer, inputs, generation):
    encoded = tokenizer(inputs["prompt"], return_tensors="pt")
    return model.generate(**encoded, stopping_criteria=[FailAtStep()], **generation)
'''


def test_failed_run_counts_seconds_at_the_codec_rate(tmp_path: Path, tiny_musicgen: Path) -> None:
    """An entry point's MusicGen run that dies mid-generation decodes no audio: produced seconds are the streamed frames at the
    codec's rate (no per_second given), and verify's early_stop agrees with them instead of failing the arithmetic."""
    (tmp_path / "music_entry.py").write_text(FAILING_ENTRY)
    snapshot = run_music(tmp_path, tiny_musicgen, entrypoint="music_entry:generate_then_fail", expect=1)
    result = read_json(snapshot, "result.json")
    assert result["status"] == "failed" and not [o for o in result["outputs"] if o.endswith(".wav")]
    generated = [len(row) for row in read_ids(snapshot).values()]
    assert generated and max(generated) < STEPS
    assert result["produced_seconds"] == max(generated) / FRAME_RATE

    import genrun

    early = next(f for f in genrun.verify(snapshot).findings if f.name == "early_stop")
    assert early.status == "WARN" and early.evidence["per_second"] == FRAME_RATE, early.message
