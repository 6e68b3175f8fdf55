"""`genrun run` / `genrun execute` end to end: every artifact, counts that agree, `--json`, the summary, the live bar."""

import os
import pty
import subprocess
from pathlib import Path

import orjson
import pytest
from safetensors.torch import load_file

from _forked import spawn_cli
from conftest import PROCESS_TIMEOUT_S, CliRun, run_cli

from _lm_helpers import REPO, assert_counts_agree, plan, read_json, read_progress, request_text, write_entry_module
from genrun.runner.execute import execute_snapshot
from genrun.schemas import EVENT_ADAPTER, GeneratedTokenIds, GenerationConfigBeforeGenerate, GenerationStop, Result, layout

EXECUTION_ARTIFACTS = (
    layout.GENERATION_CONFIG, layout.PROGRESS, layout.TOKEN_IDS, layout.TOKEN_IDS_SUMMARY, layout.STOP, layout.RESULT, layout.MANIFEST,
)


def cli(*args: str, cwd: Path = REPO) -> CliRun:
    return run_cli(*args, cwd=cwd)


def test_run_on_the_bundled_model_writes_every_artifact_with_agreeing_counts(tmp_path: Path) -> None:
    proc = cli("run", str(REPO / "examples" / "tiny.toml"), "--store", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (snapshot,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    for name in EXECUTION_ARTIFACTS:
        assert (snapshot / name).is_file(), name
    # every artifact parses with its schema
    GenerationConfigBeforeGenerate.model_validate_json((snapshot / layout.GENERATION_CONFIG).read_bytes())
    GeneratedTokenIds.model_validate_json((snapshot / layout.TOKEN_IDS_SUMMARY).read_bytes())
    stop = GenerationStop.model_validate_json((snapshot / layout.STOP).read_bytes())
    result = Result.model_validate_json((snapshot / layout.RESULT).read_bytes())
    events = [EVENT_ADAPTER.validate_json(line) for line in (snapshot / layout.PROGRESS).read_bytes().splitlines()]
    ids = load_file(snapshot / layout.TOKEN_IDS)["sequence_0"]
    assert len(ids) == stop.sequences[0].generated == events[-1].generated == result.generated == 13
    assert_counts_agree(snapshot)
    assert [e.event for e in events][:2] == ["start", "first_token"] and events[-1].event == "end"
    assert (snapshot / "outputs" / "sequence_0.txt").read_text() == "11 10 9 8 7 6 5 4 3 2 1 0"
    check = subprocess.run(["sha256sum", "-c", "--strict", layout.MANIFEST], cwd=snapshot, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    assert "sequence 0: eos (id 2) after 13 tokens" in proc.stderr and "succeeded" in proc.stderr
    assert result.timings.load_s and result.timings.first_token_s and result.timings.decode_s and result.units_per_s


def test_execute_json_prints_result_json_only(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot = plan(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 8}))
    proc = cli("execute", str(snapshot), "--json")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout) == read_json(snapshot, layout.RESULT)
    assert "sequence 0" not in proc.stderr and "generating" not in proc.stderr


def test_failed_generation_exits_1_and_is_sealed(tmp_path: Path, tiny_lm: Path) -> None:
    module = write_entry_module(tmp_path, "entries_cli_failure")
    snapshot = plan(tmp_path, request_text(tiny_lm, prompt="count down from 40 :", generation={"max_new_tokens": 20}, entrypoint=f"{module}:raise_mid_run"))
    proc = cli("execute", str(snapshot))
    assert proc.returncode == 1
    assert "exception" in proc.stderr and "user criterion failed" in proc.stderr
    assert "generating" not in proc.stderr  # stderr is a pipe here: no live bar
    assert (snapshot / layout.MANIFEST).is_file() and read_json(snapshot, layout.RESULT)["status"] == "failed"
    assert_counts_agree(snapshot)


@pytest.mark.parametrize("tokens_per_frame", [1, 2])
def test_frame_units(tmp_path: Path, tiny_lm: Path, tokens_per_frame: int) -> None:
    """`[units] name = "frame"`: progress and result count frames; produced seconds = frames / fps."""
    units = {"name": "frame", "per_second": 25.0, "requested_seconds": 1.0, "tokens_per_frame": tokens_per_frame}
    snapshot = plan(tmp_path, request_text(tiny_lm, prompt="count down from 12 :", generation={"max_new_tokens": 30}, units=units, progress={"every_units": 2}))
    result = execute_snapshot(snapshot, live=False)
    frames = 13 // tokens_per_frame
    assert (result.unit, result.generated, result.generated_tokens) == ("frame", frames, 13)
    assert result.produced_seconds == pytest.approx(frames / 25.0) and result.requested_seconds == 1.0
    events = read_progress(snapshot)
    assert events[0]["unit"] == "frame" and events[-1]["generated"] == frames
    assert all(e["generated"] % 2 == 0 for e in events if e["event"] == "progress")


def _execute_with_stderr_on_a_terminal(snapshot: Path) -> tuple[int, str, str]:
    """A process is the point: its stderr must be a real terminal."""
    leader, follower = pty.openpty()
    proc = spawn_cli("execute", snapshot, stderr=follower, text=False)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    out, _ = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    os.close(leader)
    return proc.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


def test_live_bar_on_a_terminal(tmp_path: Path, tiny_lm: Path) -> None:
    """stderr on a pseudo-terminal shows the bar (count, budget, rate); stdout carries none of it.
    (On a pipe there is no bar: test_failed_generation_exits_1_and_is_sealed checks that.)"""
    snapshot = plan(tmp_path, request_text(tiny_lm, prompt="count down from 40 :", generation={"max_new_tokens": 30}))
    code, out, err = _execute_with_stderr_on_a_terminal(snapshot)
    assert code == 0 and out == ""
    assert "generating" in err and "30/30" in err and "token/s" in err
