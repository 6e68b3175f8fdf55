"""The `loop` backend, basics: the bundled loops (ONNX Runtime, MNN, the two-stage song) seal snapshots that verify.

Real engines on the bundled files, the real CLI in-process; the greedy ids are compared with the
transformers backend's on the same checkpoint and prompt.
"""

import subprocess
import sys
import wave
from pathlib import Path

import orjson
import pytest

from _lm_helpers import read_ids
from _loop_helpers import EXAMPLES, REPO, read, run, verify


def _sealed_example(tmp_path: Path, name: str) -> Path:
    done, snapshot = run(EXAMPLES / name, tmp_path / "store")
    assert done.returncode == 0, done.stderr
    assert snapshot is not None and read(snapshot, "result.json")["status"] == "succeeded"
    return snapshot


def test_onnx_loop_ids_equal_the_transformers_backend_and_the_snapshot_verifies(tmp_path: Path) -> None:
    snapshot = _sealed_example(tmp_path, "tiny-onnx-loop.toml")
    code, findings = verify(snapshot)
    assert code == 0 and {f["status"] for f in findings.values()} <= {"PASS", "SKIP"}, findings
    assert findings["stages"]["status"] == "PASS" and findings["call_config"]["status"] == "PASS"
    loop_ids = read(snapshot, "stage-ids.json")["ids"]["lm"][0]
    reference = _sealed_example(tmp_path / "hf", "tiny.toml")  # same checkpoint and prompt on the transformers backend
    assert loop_ids == read_ids(reference)["sequence_0"] and len(loop_ids) == 13 and loop_ids[-1] == 2  # "11 10 ... 0" + EOS
    (stop,) = read(snapshot, "generation-stop.json")["sequences"]
    assert (stop["reason"], stop["evidence"]["eos_token_id"], stop["evidence"]["stage"], stop["generated"]) == ("eos", 2, "lm", len(loop_ids))
    assert read(snapshot, "loop-call.json")["config"]["eos_token_ids"] == [2]
    code_json = read(snapshot, "code.json")
    assert any(f["path"].endswith("lm_loop.py") for f in code_json["entrypoint"]["files"]), code_json["entrypoint"]
    model = read(snapshot, "model.json")  # the ONNX directory is hashed like any checkpoint
    onnx_file = next(f for f in model["files"] if f["path"] == "model.onnx")
    assert model["weight_bytes"] == onnx_file["size"] > 0  # the engine's weights count in the memory budget
    events = [orjson.loads(line)["event"] for line in (snapshot / "stage-progress.ndjson").read_bytes().splitlines()]
    assert events[0] == "start" and events[-1] == "end" and "progress" in events


def test_mnn_loop_gives_the_onnx_ids(tmp_path: Path) -> None:
    pytest.importorskip("MNN")
    mnn = _sealed_example(tmp_path / "mnn", "tiny-mnn-loop.toml")
    onnx = _sealed_example(tmp_path / "onnx", "tiny-onnx-loop.toml")
    assert verify(mnn)[0] == 0
    assert read(mnn, "stage-ids.json") == read(onnx, "stage-ids.json")


def test_song_seals_two_stages_a_wav_and_warns_early_stop(tmp_path: Path) -> None:
    snapshot = _sealed_example(tmp_path, "tiny-song-loop.toml")
    code, findings = verify(snapshot)
    assert code == 0 and findings["stages"]["status"] == "PASS", findings["stages"]
    assert findings["early_stop"]["status"] == "WARN" and "stage 'ar' stopped with eos (id 0) at frame 17" in findings["early_stop"]["message"]
    stages = {s["name"]: s for s in read(snapshot, "stages.json")["stages"]}
    assert (stages["ar"]["unit"], stages["ar"]["units"], stages["ar"]["per_second"]) == ("frame", [17], 25.0)
    assert (stages["acoustic"]["unit"], stages["acoustic"]["consumes"], stages["acoustic"]["consumed"]) == ("window", "ar", 17)
    assert stages["acoustic"]["units"] == [4]  # windows of 8 frames on a hop of 4 over 17 frames: starts 0, 4, 8, 12
    result = read(snapshot, "result.json")
    assert (result["generated"], result["produced_seconds"], result["outputs"]) == (17, 17 / 25, ["song.wav"])
    with wave.open(str(snapshot / "outputs" / "song.wav")) as song:
        assert (song.getframerate(), song.getnframes()) == (8000, 17 * 320)
    reasons = [(s["call_index"], s["reason"]) for s in read(snapshot, "generation-stop.json")["sequences"]]
    assert reasons == [(0, "eos"), (1, "completed")]


def test_report_shows_each_stage_and_calls_the_loops_ids_ids(tmp_path: Path) -> None:
    """The loop declares no token ids: its codes are "ids" in the report and the review page, never "tokens"."""
    from conftest import run_cli

    snapshot = _sealed_example(tmp_path, "tiny-song-loop.toml")
    report = run_cli("report", snapshot)
    assert report.returncode == 0 and "Stages: load" in report.stdout and "ar " in report.stdout and "4 windows" in report.stdout
    assert "Last ids of sequence 0: 35 30 5" in report.stdout and "Last tokens" not in report.stdout, report.stdout
    page = tmp_path / "page.html"
    assert run_cli("report", "--html", page, snapshot).returncode == 0
    assert 'id="stages"' in page.read_text() and "acoustic" in page.read_text()
    assert "<th>last ids</th>" in page.read_text() and "last tokens" not in page.read_text()


def test_the_loop_and_its_recorder_never_import_torch(tmp_path: Path) -> None:
    """A fresh interpreter runs the ONNX loop through a real recorder; torch is never imported."""
    script = f"""
import sys, time
from pathlib import Path
sys.path.insert(0, {str(EXAMPLES)!r})
from genrun.runner.recorder import ProgressRecorder
from genrun.runner.backends.loop.recorder import LoopRecorder
from genrun.snapshot_dir import SnapshotDir
import lm_loop, os
out = Path({str(tmp_path)!r})
core = ProgressRecorder(SnapshotDir(out, writable=True).open_stream("progress.ndjson"), origin=time.monotonic(), unit="token", every_units=4, every_seconds=5.0)
fd = os.open(out / "stage-progress.ndjson", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
rec = LoopRecorder(core=core, progress_fd=fd, every_units=4, every_seconds=5.0, on_config=lambda c: None, outputs_dir=out)
lm_loop.generate(Path({str(EXAMPLES / "models" / "tiny-lm-onnx")!r}), {{"prompts": ["count down from 3 :"]}}, {{}}, rec)
print(rec.stages[0].ids[0], "torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[10, 9, 8, 2] False"  # the tokens "2 1 0" and EOS


def test_loop_runs_sweep_and_rerun_as_ordinary_snapshots(tmp_path: Path) -> None:
    from conftest import run_cli

    sweep = tmp_path / "loops.toml"
    sweep.write_text(f'[sweep]\nname = "loop-sweep"\nrequest = "{EXAMPLES / "tiny-onnx-loop.toml"}"\n'
                     '[sweep.grid]\n"generation.max_new_tokens" = [4, 64]\n[sweep.executor]\nkind = "local"\nworkers = 1\n')
    store = tmp_path / "store"
    swept = run_cli("sweep", sweep, "--store", store)
    assert swept.returncode == 0, swept.stderr
    items = sorted(p for p in store.iterdir() if (p / "stages.json").is_file())
    assert [read(p, "generation-stop.json")["sequences"][0]["reason"] for p in items] == ["max_new_tokens", "eos"]
    for item in items:
        code, findings = verify(item)
        assert code == 0 and findings["stages"]["status"] == "PASS" and findings["request_round_trip"]["status"] == "PASS", findings
    rerun = run_cli("rerun", items[0], "--set", "generation.max_new_tokens=64", "--json")
    assert rerun.returncode == 0, rerun.stderr
    child = Path(orjson.loads(rerun.stdout)["child"])
    assert verify(child)[0] == 0 and read(child, "stage-ids.json") == read(items[1], "stage-ids.json")


# -- what the summaries say ------------------------------------------------------------------------


def test_the_limit_the_request_gives_a_token_loop_is_its_budget_and_report_row(tmp_path: Path) -> None:
    from conftest import run_cli

    done = run_cli("run", EXAMPLES / "tiny-onnx-loop.toml", "--store", tmp_path / "store")
    assert done.returncode == 0, done.stderr
    assert "budget: 64 tokens (request)" in done.stderr  # [generation] max_new_tokens, passed to the loop
    (snapshot,) = (tmp_path / "store").iterdir()
    assert (read(snapshot, "token-budget.json")["requested_units"], read(snapshot, "token-budget.json")["requested_units_source"]) == (64, "request")
    report = run_cli("report", snapshot)
    assert "13 of 64 requested (from request) = 20%" in report.stdout
    assert "None" not in done.stderr + report.stdout


def test_a_loop_without_a_limit_in_the_request_says_it_sets_its_own(tmp_path: Path) -> None:
    from conftest import run_cli
    from genrun.schemas.budget import NO_LENGTH_LIMIT

    done = run_cli("run", EXAMPLES / "tiny-song-loop.toml", "--store", tmp_path / "store")  # frames; its limit is [loop] kwargs max_frames
    assert done.returncode == 0, done.stderr
    assert f"budget: {NO_LENGTH_LIMIT}" in done.stderr
    (snapshot,) = (tmp_path / "store").iterdir()
    report = run_cli("report", snapshot)
    assert f"17; {NO_LENGTH_LIMIT}" in " ".join(report.stdout.split())
    assert "None" not in done.stderr + report.stdout


def test_a_staged_summary_names_each_stage_and_counts_in_its_unit(tmp_path: Path) -> None:
    from conftest import run_cli

    done = run_cli("run", EXAMPLES / "tiny-song-loop.toml", "--store", tmp_path / "store")
    assert done.returncode == 0, done.stderr
    summary = " ".join(done.stderr.split())
    assert "stage ar, row 0: eos (id 0) after 17 frames" in summary
    assert "stage acoustic, row 0: completed after 4 windows" in summary  # advance() units, which carry no ids
    assert "sequence 0:" not in summary and "tokens" not in summary


def test_a_loop_run_never_imports_torchs_compiler(tmp_path: Path) -> None:
    """A fresh interpreter runs the ONNX loop end to end: restoring the deterministic switches only when they changed keeps
    torch._dynamo / torch._inductor (seconds of imports, once paid while writing the evidence) out of the process."""
    script = f"""
import sys
from genrun.runner.cli import main
code = main(["run", {str(EXAMPLES / "tiny-onnx-loop.toml")!r}, "--store", {str(tmp_path / "store")!r}, "--quiet"])
print(code, sorted(m for m in ("torch._dynamo", "torch._inductor") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "0 []"


# -- a backend's table in rerun and sweep changes ------------------------------------------------------


def test_rerun_sets_and_unsets_a_backend_table_by_its_own_name(tmp_path: Path) -> None:
    """`--set loop.X` / `--unset loop.X` reach the backend's `[loop]` table as the request file writes it (the frozen
    request keeps it under `backend_tables`); a misspelt table is refused naming the backend's."""
    from conftest import run_cli

    parent = _sealed_example(tmp_path, "tiny-onnx-loop.toml")
    unset = run_cli("rerun", parent, "--unset", "loop.kwargs.engine", "--json")  # the loop's own default is onnxruntime
    assert unset.returncode == 0, unset.stderr
    child = Path(orjson.loads(unset.stdout)["child"])
    assert read(child, "request.json")["backend_tables"]["loop"]["kwargs"] == {}
    assert read(child, "stage-ids.json") == read(parent, "stage-ids.json")
    (change,) = read(child, "lineage.json")["changes"]
    assert (change["key"], change["action"], change["parent_value"]) == ("loop.kwargs.engine", "unset", "onnxruntime")
    set_ = run_cli("rerun", parent, "--set", 'loop.kwargs.engine="mnn"', "--json")  # the ONNX checkpoint is no MNN file
    assert read(Path(orjson.loads(set_.stdout)["child"]), "request.json")["backend_tables"]["loop"]["kwargs"] == {"engine": "mnn"}
    misspelt = run_cli("rerun", parent, "--set", "lop.kwargs.engine=mnn")
    assert misspelt.returncode == 2 and "unknown key 'lop' at the top level; did you mean 'loop'?" in " ".join(misspelt.stderr.split())


def test_a_sweep_sets_a_backend_table_by_its_own_name(tmp_path: Path) -> None:
    from genrun.runner.sweep.spec import expand_items, load_sweep

    sweep = tmp_path / "loops.toml"
    sweep.write_text(f'[sweep]\nname = "loop-sweep"\nrequest = "{EXAMPLES / "tiny-onnx-loop.toml"}"\n'
                     '[sweep.grid]\n"loop.kwargs.engine" = ["onnxruntime", "mnn"]\n')
    items = expand_items(load_sweep(sweep))
    assert [item.request.backend_tables["loop"]["kwargs"]["engine"] for item in items] == ["onnxruntime", "mnn"]
