"""`[model] processor`: a processor directory outside the checkpoint, through the real CLI (in-process `main`).

The override is the bundled `examples/processors/tiny-whisper-15s`: the tiny Whisper's processor whose feature
extractor takes 15 s windows (hop 80 instead of 160, so the encoder still gets its 3000 frames): the model hears 15 s of a 34 s file
instead of the checkpoint processor's 30 s, which shows the override is what the model received.
Refusals: a missing directory, one AutoProcessor cannot load, one holding weights, `loader` + `processor`,
diffusers; a changed frozen copy is refused by execute and failed by verify.
"""

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import EXAMPLES, write_request
from test_media_inputs import cli_json
from genrun.runner.cli import main
from genrun.runner.errors import SnapshotError
from genrun.runner.execute import execute_snapshot, load_for_snapshot
from genrun.runner.plan import plan_request
from genrun.schemas import InputPreparation, ModelIdentity, TokenBudget, layout

WHISPER = EXAMPLES / "models" / "tiny-whisper"
LONG = EXAMPLES / "audio" / "tone-34s-8k.wav"
PROCESSOR_FILES = ("processor_config.json", "tokenizer.json", "tokenizer_config.json")


def fifteen_second_processor(tmp_path: Path) -> Path:
    """A copy of the bundled example `examples/processors/tiny-whisper-15s` (the tests change or remove it)."""
    return Path(shutil.copytree(EXAMPLES / "processors" / "tiny-whisper-15s", tmp_path / "proc"))


def request_text(processor: str, *, extra_model: str = "") -> str:
    return (f'name = "p"\n[model]\npath = "{WHISPER}"\ndtype = "float32"\ndevice = "cpu"\n'
            f'processor = "{processor}"\n{extra_model}\n[input]\naudio = "{LONG}"\n[generation]\nmax_new_tokens = 3\n')


def plan(capsys, tmp_path: Path, text: str) -> Path:
    code, out = cli_json(capsys, "plan", write_request(tmp_path, text), "--store", tmp_path / "store")
    assert code == 0, out
    return Path(out["snapshot"])


def test_an_out_of_model_processor_is_frozen_recorded_and_is_what_the_model_received(capsys, tmp_path: Path) -> None:
    processor = fifteen_second_processor(tmp_path)
    snapshot = plan(capsys, tmp_path, request_text("proc"))
    identity = ModelIdentity.model_validate_json((snapshot / layout.MODEL).read_bytes()).processor
    assert (identity.requested, identity.resolved_path, identity.frozen_dir) == ("proc", str(processor.resolve()), layout.PROCESSOR_DIR)
    assert [f.path for f in identity.files] == sorted(PROCESSOR_FILES)
    frozen = (snapshot / layout.FROZEN_MANIFEST).read_text()
    for name in PROCESSOR_FILES:
        assert (snapshot / layout.PROCESSOR_DIR / name).read_bytes() == (processor / name).read_bytes()
        assert f"{layout.PROCESSOR_DIR}/{name}" in frozen
    # The original may change after planning: execution loads the frozen copy, never the directory the user named.
    (processor / "processor_config.json").write_text("{}")
    assert main(["execute", str(snapshot)]) == 0
    preparation = InputPreparation.model_validate_json((snapshot / layout.INPUT_PREPARATION).read_bytes())
    assert preparation.processor_dir == layout.PROCESSOR_DIR
    row = preparation.rows[0]
    assert (row.audio.seconds_received, row.audio.hop_length, row.audio.feature_frames, row.audio.window_seconds) == (15.0, 80, 3000, 15.0)
    (cut,) = row.truncations
    assert (cut.component, cut.unit, cut.dropped, cut.side) == ("WhisperFeatureExtractor", "seconds", 19.0, "right")
    assert "n_samples=240000: 15.0 s" in cut.cause
    code, out = cli_json(capsys, "verify", snapshot)
    findings = {f["name"]: f for f in out["findings"]}
    assert code == 0 and not [f for f in findings.values() if f["status"] == "FAIL"]
    assert findings["processor_files"]["status"] == "PASS" and "3 processor file(s) in processor/ match model.json" in findings["processor_files"]["message"]
    assert findings["input_coverage"]["status"] == "WARN"
    assert "the model received 15.0 s of 34.0 s of audio (44.1 %); WhisperFeatureExtractor truncated to 15 s" in findings["input_coverage"]["message"]
    capsys.readouterr()
    assert main(["report", str(snapshot)]) == 0
    report = " ".join(capsys.readouterr().out.split())
    assert "processor proc" in report and f"media audio: {LONG}" in report and "context 96 (max_target_positions)" in report


def test_a_changed_frozen_processor_is_refused_by_execute_and_failed_by_verify(capsys, tmp_path: Path) -> None:
    fifteen_second_processor(tmp_path)
    snapshot = plan(capsys, tmp_path, request_text("proc"))
    copy = snapshot / layout.PROCESSOR_DIR / "processor_config.json"
    original = copy.read_bytes()
    copy.write_bytes(original.replace(b'"chunk_length": 15', b'"chunk_length": 30'))
    capsys.readouterr()
    assert main(["execute", str(snapshot)]) == 1
    assert f"{layout.PROCESSOR_DIR}/processor_config.json changed since planning" in " ".join(capsys.readouterr().err.split())
    assert not (snapshot / layout.PROGRESS).exists() and not (snapshot / layout.INPUT_PREPARATION).exists()
    # Restored, it runs; changed after the seal, verify fails the snapshot.
    copy.write_bytes(original)
    assert main(["execute", str(snapshot)]) == 0
    os.chmod(copy, stat.S_IRUSR | stat.S_IWUSR)
    copy.write_bytes(original + b"\n")
    code, out = cli_json(capsys, "verify", snapshot)
    failed = {f["name"]: f["message"] for f in out["findings"] if f["status"] == "FAIL"}
    assert code != 0 and f"{layout.PROCESSOR_DIR}/processor_config.json" in failed["manifest_integrity"], failed
    assert failed["processor_files"] == f"the frozen processor copy no longer matches model.json: changed: {layout.PROCESSOR_DIR}/processor_config.json"


def no_bos_tokenizer(tiny_lm: Path, directory: Path) -> Path:
    """The tiny-lm tokenizer without its BOS post-processor: 5 prompt tokens instead of 6."""
    directory.mkdir()
    shutil.copyfile(tiny_lm / "tokenizer_config.json", directory / "tokenizer_config.json")
    spec = json.loads((tiny_lm / "tokenizer.json").read_text())
    spec["post_processor"] = None
    (directory / "tokenizer.json").write_text(json.dumps(spec))
    return directory


def text_request(tiny_lm: Path, processor: str | None) -> str:
    line = f'processor = "{processor}"\n' if processor else ""
    return (f'name = "t"\n[model]\npath = "{tiny_lm}"\ndevice = "cpu"\n{line}'
            '[input]\nprompt = "count down from 3 :"\n[generation]\nmax_new_tokens = 2\n')


def test_a_text_request_plans_and_runs_with_the_override_tokenizer(capsys, tmp_path: Path, tiny_lm: Path) -> None:
    no_bos_tokenizer(tiny_lm, tmp_path / "tok")
    snapshot = plan(capsys, tmp_path, text_request(tiny_lm, "tok"))
    assert TokenBudget.model_validate_json((snapshot / layout.TOKEN_BUDGET).read_bytes()).prompt_tokens == 5  # budgeted with the override
    assert main(["execute", str(snapshot)]) == 0
    preparation = InputPreparation.model_validate_json((snapshot / layout.INPUT_PREPARATION).read_bytes())
    assert preparation.processor_dir == layout.PROCESSOR_DIR and preparation.rows[0].prompt_token_ids == (4, 5, 6, 11, 7)
    # A rerun uses the parent's frozen copy, even once the original directory is gone.
    shutil.rmtree(tmp_path / "tok")
    code, out = cli_json(capsys, "rerun", snapshot, "--store", tmp_path / "store")
    assert code == 0, out
    child = Path(out["child"])
    child_model = ModelIdentity.model_validate_json((child / layout.MODEL).read_bytes()).processor
    assert child_model.digest == ModelIdentity.model_validate_json((snapshot / layout.MODEL).read_bytes()).processor.digest
    assert child_model.resolved_path == str(snapshot.absolute() / layout.PROCESSOR_DIR)
    code, out = cli_json(capsys, "verify", child)
    assert code == 0 and not [f for f in out["findings"] if f["status"] == "FAIL"], out["findings"]


def test_a_model_loaded_with_another_processor_cannot_run_the_plan(tmp_path: Path, tiny_lm: Path) -> None:
    no_bos_tokenizer(tiny_lm, tmp_path / "tok")
    store = tmp_path / "store"
    with_override = plan_request(write_request(tmp_path, text_request(tiny_lm, "tok")), store=store)
    checkpoint_own = plan_request(write_request(tmp_path, text_request(tiny_lm, None), name="own.toml"), store=store)
    loaded = load_for_snapshot(checkpoint_own)
    with pytest.raises(SnapshotError, match=r"processor_digest None != planned '[0-9a-f]{64}'"):
        execute_snapshot(with_override, live=False, loaded=loaded)
    assert not (with_override / layout.PROGRESS).exists()


@pytest.mark.parametrize(("setup", "extra_model", "expected"), [
    ("missing", "", "[model] processor = 'proc' ({proc}) does not exist"),
    ("file", "", "[model] processor = 'proc' ({proc}) is a file, not a directory"),
    ("unloadable", "", "[model] processor directory {proc} cannot be loaded by AutoProcessor"),
    ("weights", "", "[model] processor = 'proc' ({proc}) holds weight files (model.safetensors)"),
    ("whisper", 'loader = "mod:load"', "[model] processor cannot be combined with [model] loader"),
])
def test_a_processor_the_plan_cannot_use_is_refused_with_exit_2_and_nothing_written(capsys, tmp_path: Path, setup: str, extra_model: str,
                                                                                      expected: str) -> None:
    proc = tmp_path / "proc"
    if setup == "file":
        proc.write_text("{}")
    elif setup == "unloadable":
        proc.mkdir()
        (proc / "notes.txt").write_text("not a processor")
    elif setup == "weights":
        shutil.copytree(WHISPER, proc)
    elif setup == "whisper":
        fifteen_second_processor(tmp_path)
    store = tmp_path / "store"
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path, request_text("proc", extra_model=extra_model))), "--store", str(store)]) == 2
    assert expected.format(proc=proc.resolve()) in " ".join(capsys.readouterr().err.split())
    assert not store.exists() or not any(store.iterdir())


def test_diffusers_refuses_a_processor_override(capsys, tmp_path: Path) -> None:
    fifteen_second_processor(tmp_path)
    text = (f'name = "d"\n[model]\npath = "{EXAMPLES}/models/tiny-ddim"\nbackend = "diffusers"\ndevice = "cpu"\nprocessor = "proc"\n'
            "[generation]\nnum_inference_steps = 2\n")
    capsys.readouterr()
    assert main(["plan", str(write_request(tmp_path, text)), "--store", str(tmp_path / "store")]) == 2
    assert "[model] processor is not used by diffusers pipelines" in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "store").exists()


def test_a_musicgen_model_loads_its_tokenizer_from_the_override(capsys, tmp_path: Path) -> None:
    model = EXAMPLES / "models" / "tiny-musicgen"  # read only: the override is a copy
    override = tmp_path / "tok"  # the checkpoint's word-level tokenizer with two words' ids swapped
    override.mkdir()
    shutil.copyfile(model / "tokenizer_config.json", override / "tokenizer_config.json")
    spec = json.loads((model / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    vocab["calm"], vocab["piano"] = vocab["piano"], vocab["calm"]
    (override / "tokenizer.json").write_text(json.dumps(spec))
    text = (f'name = "m"\n[model]\npath = "{model}"\ndevice = "cpu"\nprocessor = "tok"\n'
            '[input]\nprompt = "calm piano"\n[generation]\nmax_new_tokens = 3\n')
    snapshot = plan(capsys, tmp_path, text)
    assert main(["execute", str(snapshot)]) == 0
    row = InputPreparation.model_validate_json((snapshot / layout.INPUT_PREPARATION).read_bytes()).rows[0]
    assert row.prompt_token_ids[:2] == (vocab["calm"], vocab["piano"])  # the override's ids, not the checkpoint's

