"""Audio inputs on the record, through the real CLI (in-process `genrun.runner.cli.main`): frozen files,
input-preparation.json, Whisper short and long form, truncation by the feature extractor and by a
tokenizer `max_length`, `copy = false` re-hashing, and refusals (exit 2 / changed files) with nothing written.

Models: the bundled random-weight `examples/models/tiny-whisper` and the count-down `tiny-lm`.
"""

import json
import shutil
from pathlib import Path

import orjson
import pytest
import safetensors.torch

from conftest import EXAMPLES, write_request
from genrun.runner.cli import main
from genrun.schemas import InputFiles, InputPreparation, TokenBudget, layout

WHISPER = EXAMPLES / "models" / "tiny-whisper"
AUDIO = EXAMPLES / "audio"
SHORT, OTHER, LONG, NOT_AUDIO = (AUDIO / n for n in ("tone-3s.wav", "tone-5s.wav", "tone-34s-8k.wav", "not-audio.wav"))


def whisper_request(audio: str, *, extra_input: str = "", max_new_tokens: int = 4, name: str = "w") -> str:
    return (f'name = "{name}"\n[model]\npath = "{WHISPER}"\ndtype = "float32"\ndevice = "cpu"\n'
            f"[input]\naudio = {audio}\n{extra_input}\n[generation]\nmax_new_tokens = {max_new_tokens}\n")


def cli_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, dict]:
    """Run `genrun ... --json` in-process; (exit code, parsed stdout)."""
    capsys.readouterr()
    code = main([*map(str, args), "--json"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if out.strip() else {})


def run(capsys, tmp_path: Path, text: str) -> Path:
    code, out = cli_json(capsys, "run", write_request(tmp_path, text), "--store", tmp_path / "store")
    assert code == 0, out
    return Path(out["snapshot"])


def verify(capsys, snapshot: Path) -> dict[str, dict]:
    code, out = cli_json(capsys, "verify", snapshot)
    findings = {f["name"]: f for f in out["findings"]}
    failed = {n: f["message"] for n, f in findings.items() if f["status"] == "FAIL"}
    assert not failed and code == 0, failed
    return findings


def preparation(snapshot: Path) -> InputPreparation:
    return InputPreparation.model_validate_json((snapshot / layout.INPUT_PREPARATION).read_bytes())


def test_whisper_end_to_end_freezes_the_audio_and_records_what_the_model_heard(capsys, tmp_path: Path) -> None:
    snapshot = run(capsys, tmp_path, whisper_request(f'"{SHORT}"'))
    for name in (layout.INPUT_FILES, layout.INPUT_PREPARATION, layout.GENERATION_CONFIG, layout.STOP, layout.TOKEN_IDS, layout.RESULT,
                 layout.MANIFEST, f"{layout.INPUTS_DIR}/0-audio-tone-3s.wav"):
        assert (snapshot / name).is_file(), name
    frozen = (snapshot / layout.FROZEN_MANIFEST).read_text()
    assert f"{layout.INPUTS_DIR}/0-audio-tone-3s.wav" in frozen and layout.INPUT_FILES in frozen
    assert (snapshot / "inputs/0-audio-tone-3s.wav").read_bytes() == SHORT.read_bytes()
    row = preparation(snapshot).rows[0]
    assert (row.audio.input_seconds, row.audio.seconds_received, row.audio.resampled_with) == (3.0, 3.0, None)
    assert row.truncations == () and preparation(snapshot).architecture == "encoder_decoder"
    assert "decoder tokens" in preparation(snapshot).length_counts
    budget = TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())
    assert budget.context_limit == 96  # WhisperConfig.max_target_positions of the tiny model, not an encoder limit
    assert budget.domain is not None and budget.domain.input_seconds == 3.0  # measured, no [budget] hint given
    effective = orjson.loads((snapshot / layout.GENERATION_CONFIG).read_bytes())
    assert effective["context_limit"] == 96 and effective["model_class"] == "WhisperForConditionalGeneration"
    assert effective["limit_sources"]["max_target_positions"] == "model_config"  # where the context limit comes from
    generation = orjson.loads((WHISPER / "generation_config.json").read_bytes())
    assert row.decoder_prompt.token_ids == (generation["decoder_start_token_id"], generation["no_timestamps_token_id"])
    assert row.decoder_prompt.text == "<|startoftranscript|><|notimestamps|>" and row.decoder_prompt.built_by.endswith("._retrieve_init_tokens")
    assert effective["prompt_length"] == len(row.decoder_prompt.token_ids)  # what generate's decoder actually started from
    assert preparation(snapshot).processor_dir is None  # the checkpoint's own processor
    findings = verify(capsys, snapshot)
    assert findings["input_coverage"]["status"] == "PASS" and "3.0 s of 3.0 s" in findings["input_coverage"]["message"]
    assert findings["input_files"]["status"] == "PASS"


def test_the_30_second_cut_is_flagged_with_both_numbers_and_the_resampling_recorded(capsys, tmp_path: Path) -> None:
    snapshot = run(capsys, tmp_path, whisper_request(f'"{LONG}"'))
    row = preparation(snapshot).rows[0]
    assert row.audio.file_sample_rate == 8000 and row.audio.model_sample_rate == 16000 and row.audio.resampled_with.startswith("soxr")
    assert (row.audio.seconds_received, row.audio.long_form) == (30.0, False)
    (cut,) = row.truncations
    assert (cut.component, cut.unit, cut.dropped, cut.side) == ("WhisperFeatureExtractor", "seconds", 4.0, "right")
    coverage = verify(capsys, snapshot)["input_coverage"]
    assert coverage["status"] == "WARN"
    assert "the model received 30.0 s of 34.0 s of audio (88.2 %); WhisperFeatureExtractor truncated to 30 s" in coverage["message"]
    capsys.readouterr()
    assert main(["report", str(snapshot)]) == 0
    assert "audio received 30.0 s of 34.0 s supplied" in " ".join(capsys.readouterr().out.split())


def test_long_form_runs_sequential_windows_each_with_its_stop_reason(capsys, tmp_path: Path) -> None:
    kwargs = 'processor_kwargs = { truncation = false, padding = "longest", return_attention_mask = true }'
    snapshot = run(capsys, tmp_path, whisper_request(f'"{LONG}"', extra_input=kwargs))
    row = preparation(snapshot).rows[0]
    assert (row.audio.seconds_received, row.audio.long_form, row.audio.feature_frames) == (34.0, True, 3400)
    stops = orjson.loads((snapshot / layout.STOP).read_bytes())["sequences"]
    assert sorted({s["call_index"] for s in stops}) == [0, 1]  # two 30 s windows: two outermost generate calls
    assert (snapshot / layout.generation_config_name(1)).is_file()
    assert row.decoder_prompt.text == "<|startoftranscript|>"  # long form forces timestamps: no <|notimestamps|>
    coverage = verify(capsys, snapshot)["input_coverage"]
    assert coverage["status"] == "PASS" and "2 sequential window(s)" in coverage["message"]


@pytest.mark.parametrize(("language", "expected"), [
    ("en", "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"),
    (None, None),  # generate detects the language by running the model: only generate knows the prompt
])
def test_a_multilingual_whisper_records_its_language_and_task_tokens_unless_generate_detects_them(
        capsys, tmp_path: Path, language: str | None, expected: str | None) -> None:
    model = tmp_path / "multilingual-whisper"
    shutil.copytree(WHISPER, model)
    config = orjson.loads((model / "generation_config.json").read_bytes())
    config.update(is_multilingual=True, lang_to_id={"<|en|>": 258}, task_to_id={"translate": 259, "transcribe": 260})
    if language is not None:
        config["language"] = language
    (model / "generation_config.json").write_bytes(orjson.dumps(config))
    snapshot = run(capsys, tmp_path, whisper_request(f'"{SHORT}"').replace(str(WHISPER), str(model)))
    prompt = preparation(snapshot).rows[0].decoder_prompt
    effective = orjson.loads((snapshot / layout.GENERATION_CONFIG).read_bytes())
    if expected is None:
        assert prompt is None and effective["prompt_length"] == 3  # start, the detected language, notimestamps
    else:
        assert (prompt.text, prompt.token_ids, effective["prompt_length"]) == (expected, (257, 258, 260, 264), 4)


def _multilingual_whisper(tmp_path: Path) -> Path:
    model = tmp_path / "multilingual-whisper"
    shutil.copytree(WHISPER, model)
    config = orjson.loads((model / "generation_config.json").read_bytes())
    config.update(is_multilingual=True, lang_to_id={"<|en|>": 258}, task_to_id={"translate": 259, "transcribe": 260})
    (model / "generation_config.json").write_bytes(orjson.dumps(config))
    return model


def test_whisper_language_and_task_are_request_keys_passed_to_its_own_generate(capsys, tmp_path: Path) -> None:
    """`language` / `task` are parameters of Whisper's generate, not generation-config fields: the request takes them."""
    model = _multilingual_whisper(tmp_path)
    text = whisper_request(f'"{SHORT}"').replace(str(WHISPER), str(model)) + 'language = "en"\ntask = "transcribe"\n'
    snapshot = run(capsys, tmp_path, text)
    prompt = preparation(snapshot).rows[0].decoder_prompt
    assert prompt.text == "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"  # the language generate was told
    budget = TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())
    assert budget.prompt_tokens == 4  # start, language, task, notimestamps: what Whisper forces, counted before the run
    assert orjson.loads((snapshot / layout.GENERATION_CONFIG).read_bytes())["prompt_length"] == 4
    verify(capsys, snapshot)

    typo = whisper_request(f'"{SHORT}"', name="typo").replace(str(WHISPER), str(model)) + 'langauge = "en"\n'
    (tmp_path / "typo").mkdir()
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path / "typo", typo)), "--store", str(tmp_path / "typo-store")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "langauge" in err and "language" in err, err  # a typo is still refused, with the fix
    assert not (tmp_path / "typo-store").exists()


@pytest.mark.parametrize(("max_new_tokens", "fits"), [(94, True), (95, False)])
def test_whisper_forced_decoder_tokens_count_against_max_target_positions(capsys, tmp_path: Path, max_new_tokens: int, fits: bool) -> None:
    """The tiny Whisper's decoder holds 96 positions and generate forces 2 tokens first: 94 new tokens fit, 95 do not
    (Whisper's generate would raise at execute; the plan refuses it with the numbers instead)."""
    request = write_request(tmp_path, whisper_request(f'"{SHORT}"', max_new_tokens=max_new_tokens))
    capsys.readouterr()
    code = main(["plan", str(request), "--store", str(tmp_path / "store")])
    err = " ".join(capsys.readouterr().err.split())
    if fits:
        assert code == 0, err
        (snapshot,) = (tmp_path / "store").iterdir()
        budget = TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())
        assert (budget.prompt_tokens, budget.effective_max_length, budget.context_limit) == (2, 96, 96)
    else:
        assert code == 3 and "97" in err and "96" in err, err


def test_a_batch_of_two_durations_is_recorded_per_row(capsys, tmp_path: Path) -> None:
    snapshot = run(capsys, tmp_path, whisper_request(f'["{SHORT}", "{OTHER}"]'))
    rows = preparation(snapshot).rows
    assert [(r.row, r.audio.input_seconds, r.audio.seconds_received) for r in rows] == [(0, 3.0, 3.0), (1, 5.0, 5.0)]
    files = InputFiles.model_validate_json((snapshot / layout.INPUT_FILES).read_bytes()).files
    assert [f.frozen_path for f in files] == ["inputs/0-audio-tone-3s.wav", "inputs/1-audio-tone-5s.wav"]
    verify(capsys, snapshot)


def test_a_prompt_cut_by_a_tokenizer_max_length_is_recorded_with_count_and_side(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    text = (f'name = "cut"\n[model]\npath = "{tiny_lm}"\ndtype = "float32"\ndevice = "cpu"\n'
            '[input]\nprompt = "count down from 12 :"\nprocessor_kwargs = { truncation = true, max_length = 4 }\n'
            "[generation]\nmax_new_tokens = 4\n")
    snapshot = run(capsys, tmp_path, text)
    row = preparation(snapshot).rows[0]
    assert row.prompt_tokens == 4 and row.rendered_prompt == "count down from 12 :"
    (cut,) = row.truncations
    assert (cut.unit, cut.dropped, cut.side) == ("tokens", 2, "right")  # <bos> count down from | 12 : dropped
    coverage = verify(capsys, snapshot)["input_coverage"]
    assert coverage["status"] == "WARN" and "received 4 of 6 prompt tokens" in coverage["message"]


def test_a_text_request_records_its_prompt_ids_and_padding(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    text = (f'name = "pad"\n[model]\npath = "{tiny_lm}"\ndtype = "float32"\ndevice = "cpu"\n'
            '[input]\nprompts = ["count down from 3 :", "count down from 12 :"]\n[generation]\nmax_new_tokens = 4\n')
    record = preparation(run(capsys, tmp_path, text))
    assert record.architecture == "decoder_only" and record.padding_side == "left"
    assert [(r.prompt_tokens, r.pad_count) for r in record.rows] == [(6, 0), (6, 0)]
    assert record.rows[0].prompt_token_ids[0] == 1  # <bos>


def test_copy_false_freezes_the_hash_and_execute_rehashes(capsys, tmp_path: Path) -> None:
    audio = tmp_path / "talk.wav"
    shutil.copyfile(SHORT, audio)
    request = write_request(tmp_path, whisper_request('"talk.wav"', extra_input="copy = false"))
    code, out = cli_json(capsys, "plan", request, "--store", tmp_path / "store")
    assert code == 0, out
    snapshot = Path(out["snapshot"])
    assert not (snapshot / layout.INPUTS_DIR).exists()
    (item,) = InputFiles.model_validate_json((snapshot / layout.INPUT_FILES).read_bytes()).files
    assert item.frozen_path is None and item.source_path == str(audio) and item.size_bytes == audio.stat().st_size
    code, out = cli_json(capsys, "execute", snapshot)
    assert code == 0 and out["status"] == "succeeded"
    assert "originals (copy = false)" in verify(capsys, snapshot)["input_files"]["message"]


def test_a_changed_input_file_is_refused_by_execute_with_nothing_written(capsys, tmp_path: Path) -> None:
    audio = tmp_path / "talk.wav"
    shutil.copyfile(SHORT, audio)
    request = write_request(tmp_path, whisper_request('"talk.wav"', extra_input="copy = false"))
    code, out = cli_json(capsys, "plan", request, "--store", tmp_path / "store")
    snapshot = Path(out["snapshot"])
    shutil.copyfile(OTHER, audio)
    assert main(["execute", str(snapshot)]) == 1
    assert "input file" in capsys.readouterr().err.replace("\n", " ")
    for name in (layout.PROGRESS, layout.INPUT_PREPARATION, layout.RESULT, layout.MANIFEST):
        assert not (snapshot / name).exists(), name


def test_a_changed_frozen_copy_is_refused_by_execute(capsys, tmp_path: Path) -> None:
    code, out = cli_json(capsys, "plan", write_request(tmp_path, whisper_request(f'"{SHORT}"')), "--store", tmp_path / "store")
    snapshot = Path(out["snapshot"])
    (snapshot / "inputs/0-audio-tone-3s.wav").write_bytes(OTHER.read_bytes())
    assert main(["execute", str(snapshot)]) == 1
    assert "inputs/0-audio-tone-3s.wav changed since planning" in " ".join(capsys.readouterr().err.split())
    assert not (snapshot / layout.PROGRESS).exists()


@pytest.mark.parametrize(("audio", "expected"), [
    (f'"{NOT_AUDIO}"', "cannot be decoded as audio"),
    ('"missing.wav"', "no such file"),
])
def test_an_undecodable_or_missing_audio_file_is_refused_with_exit_2_and_nothing_written(capsys, tmp_path: Path, audio: str, expected: str) -> None:
    store = tmp_path / "store"
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path, whisper_request(audio))), "--store", str(store)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "[input] audio[0]" in err and expected in err
    assert not store.exists() or not any(store.iterdir())


def test_an_audio_llm_counts_the_audio_tokens_in_the_prompt_and_budgets_from_measured_seconds(capsys, tmp_path: Path) -> None:
    model = EXAMPLES / "models" / "tiny-audio-lm"
    text = (f'name = "alm"\n[model]\npath = "{model}"\ndtype = "float32"\ndevice = "cpu"\n'
            f'[input]\naudio = "{SHORT}"\nprompt = "<|audio_bos|><|AUDIO|><|audio_eos|>Transcribe:"\n'
            "[generation]\nmax_new_tokens = 4\n[budget]\nunits_per_input_second = 4\n")
    snapshot = run(capsys, tmp_path, text)
    row = preparation(snapshot).rows[0]
    audio_token = orjson.loads((model / "config.json").read_bytes())["audio_token_index"]
    assert row.prompt_token_ids.count(audio_token) == 75  # 3 s = 300 frames -> 75 audio tokens inside the prompt
    assert row.prompt_tokens == 88 and row.audio.seconds_received == 3.0 and preparation(snapshot).architecture == "decoder_only"
    prompts = safetensors.torch.load_file(snapshot / layout.PROMPT_TOKEN_IDS)
    assert prompts["prompt_0"].tolist() == list(row.prompt_token_ids)  # the same ids as a tensor beside the JSON
    budget = TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes())
    assert budget.prompt_tokens == 88  # the plan counted the audio tokens too
    assert (budget.domain.input_seconds, budget.domain.observed_units) == (3.0, 12)  # measured 3.0 s x 4 units/s
    findings = verify(capsys, snapshot)
    assert findings["limits_reached_config"]["status"] == "PASS", findings["limits_reached_config"]


IMAGES = EXAMPLES / "images"
LLAVA = EXAMPLES / "models" / "tiny-llava"


def llava_request(image: str) -> str:
    return (f'name = "img"\n[model]\npath = "{LLAVA}"\ndtype = "float32"\ndevice = "cpu"\n'
            f'[input]\nimages = "{image}"\nprompt = "<image>Describe:"\n[generation]\nmax_new_tokens = 3\n')


def test_an_image_is_frozen_and_its_size_before_and_after_the_processor_recorded(capsys, tmp_path: Path) -> None:
    snapshot = run(capsys, tmp_path, llava_request(str(IMAGES / "gradient-64x48.png")))
    assert (snapshot / "inputs/0-image-gradient-64x48.png").read_bytes() == (IMAGES / "gradient-64x48.png").read_bytes()
    (item,) = InputFiles.model_validate_json((snapshot / layout.INPUT_FILES).read_bytes()).files
    assert (item.image.width, item.image.height, item.image.mode) == (64, 48, "RGB")
    row = preparation(snapshot).rows[0]
    assert (row.image.width, row.image.height, row.image.received_width, row.image.received_height) == (64, 48, 32, 32)
    image_token = orjson.loads((LLAVA / "config.json").read_bytes())["image_token_index"]
    assert row.prompt_token_ids.count(image_token) == 16 and row.prompt_tokens == 25  # (32 / 8)^2 image tokens in the prompt
    assert TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes()).prompt_tokens == 25
    # Resized to 42x32 (shortest edge 32), then center-cropped to 32x32: 10 resized columns = 15 of the supplied 64 dropped.
    (crop,) = row.truncations
    assert crop.component.startswith("CLIPImageProcessor")  # ...Pil or ...Fast, by what is installed
    assert (crop.unit, crop.side, crop.cols_dropped, crop.rows_dropped, crop.dropped) == ("pixels", "both", 15, 0, 15 * 48)
    coverage = verify(capsys, snapshot)["input_coverage"]
    assert coverage["status"] == "WARN"
    assert "the model received 49x48 of the supplied 64x48 pixels of the image (76.6 %)" in coverage["message"]
    assert f"{crop.component} dropped 15 column(s) and 0 row(s) from both sides" in coverage["message"]


def test_an_undecodable_image_is_refused_with_exit_2(capsys, tmp_path: Path) -> None:
    store = tmp_path / "store"
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path, llava_request(str(IMAGES / "not-an-image.png")))), "--store", str(store)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "[input] images[0]" in err and "cannot be decoded as image" in err
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.parametrize(("input_table", "expected"), [
    (f'audio = "{SHORT}"\nimages = "{EXAMPLES}/images/gradient-64x48.png"', "give one kind of media per request"),
    (f'audio = ["{SHORT}", "{OTHER}"]\nprompts = ["a", "b", "c"]', "prompts has 3 entries but 2 media file(s)"),
    (f'audio = "{SHORT}"\n[entrypoint]\ncallable = "mod:fn"', "cannot be combined with [entrypoint]"),
])
def test_media_requests_the_backend_cannot_prepare_are_refused_with_exit_2(capsys, tmp_path: Path, input_table: str, expected: str) -> None:
    text = (f'name = "bad"\n[model]\npath = "{WHISPER}"\ndevice = "cpu"\n[generation]\nmax_new_tokens = 2\n'
            f"[input]\n{input_table}\n")
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path, text)), "--store", str(tmp_path / "store")]) == 2
    assert expected in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "store").exists()


def test_a_diffusers_request_with_media_is_refused_not_ignored(capsys, tmp_path: Path) -> None:
    text = (f'name = "dm"\n[model]\npath = "{EXAMPLES}/models/tiny-ddim"\nbackend = "diffusers"\ndevice = "cpu"\n'
            f'[input]\naudio = "{SHORT}"\n[generation]\nnum_inference_steps = 2\n')
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path, text)), "--store", str(tmp_path / "store")]) == 2
    assert "not passed to diffusers pipelines" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "store").exists()
