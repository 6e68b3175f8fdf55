"""`genrun export SNAPSHOT --mlflow`: a round trip through a real local MLflow store (sqlite in a temp dir), read back with MlflowClient."""

import hashlib
import json
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from genrun.runner.cli import main
from genrun.schemas import layout
from genrun.schemas.artifacts import artifact_for

from _analysis_helpers import snapshots  # noqa: F401 - fixture
from _lm_helpers import read_json, read_progress

import mlflow  # noqa: F401 - the 'test' extra installs it; never importorskip: a missing mlflow must fail the suite, not hide it


@pytest.fixture()
def tracking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A sqlite tracking store in a temp dir; the cwd moves there too, so MLflow's default artifact root (./mlruns) stays inside it."""
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def test_round_trip(snapshots, tracking: str, capsys) -> None:  # noqa: F811
    from mlflow.tracking import MlflowClient

    snapshot = snapshots.get("eos")
    assert main(["export", str(snapshot), "--mlflow", "--tracking-uri", tracking, "--experiment", "review", "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    client = MlflowClient(tracking_uri=tracking)
    run = client.get_run(exported["run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "review"
    assert run.info.run_name == snapshot.name and run.info.status == "FINISHED"

    tags = run.data.tags
    manifest_digest = hashlib.sha256((snapshot / layout.MANIFEST).read_bytes()).hexdigest()
    assert tags["genrun.state"] == "succeeded" and tags["genrun.stop_reasons"] == "eos" and tags["genrun.stop_reason.row0"] == "eos"
    assert tags["genrun.snapshot_digest"] == manifest_digest and tags["genrun.snapshot_id"] == snapshot.name
    assert len(tags["genrun.plan_digest"]) == 64

    params = run.data.params
    assert params["request.generation.max_new_tokens"] == "64"
    assert params["effective.max_new_tokens"] == "64" and params["effective_source.max_new_tokens"] == "request"

    progress = read_progress(snapshot)
    start_ms = round(datetime.fromisoformat(progress[0]["wall_time"]).timestamp() * 1000)
    history = client.get_metric_history(run.info.run_id, "progress.generated")
    assert [(m.value, m.step) for m in history] == [(float(p["generated"]), p["generated"]) for p in progress]
    assert [m.timestamp for m in history] == [start_ms + round((p["t"] - progress[0]["t"]) * 1000) for p in progress]
    rates = client.get_metric_history(run.info.run_id, "progress.window_units_per_s")
    assert len(rates) == sum(1 for p in progress if p["event"] == "progress") > 0
    result = read_json(snapshot, layout.RESULT)
    assert run.data.metrics["result.generated"] == result["generated"]
    assert run.data.metrics["result.total_s"] == pytest.approx(result["timings"]["total_s"])
    assert run.info.start_time == start_ms

    uploaded = {a.path for a in client.list_artifacts(run.info.run_id, "snapshot")}
    assert {f"snapshot/{layout.RESULT}", f"snapshot/{layout.MANIFEST}", f"snapshot/{layout.PROGRESS}"} <= uploaded


def _uploaded(client, run_id: str, folder: str = "snapshot") -> set[str]:  # noqa: ANN001 (MlflowClient)
    """Every artifact file under `folder`, recursively."""
    found = set()
    for entry in client.list_artifacts(run_id, folder):
        found |= _uploaded(client, run_id, entry.path) if entry.is_dir else {entry.path}
    return found


def test_uploads_exactly_the_registered_files(snapshots, tracking: str, tmp_path: Path, capsys) -> None:  # noqa: F811
    """The artifact registry decides what is uploaded: a killed run's disk reserve and a stray file are not."""
    from mlflow.tracking import MlflowClient

    snapshot = Path(shutil.copytree(snapshots.get("eos"), tmp_path / "store" / snapshots.get("eos").name))
    (snapshot / layout.DISK_RESERVE).write_bytes(b"\0" * 1024)
    (snapshot / "notes-by-hand.txt").write_text("not part of the format")
    assert main(["export", str(snapshot), "--mlflow", "--tracking-uri", tracking, "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    files = sorted(p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file())
    expected = {f"snapshot/{rel}" for rel in files if rel not in (layout.DISK_RESERVE, "notes-by-hand.txt")}
    assert all(artifact_for(rel) is not None for rel in files if rel != "notes-by-hand.txt")
    assert f"snapshot/{layout.OUTPUTS_DIR}/sequence_0.txt" in expected
    assert _uploaded(MlflowClient(tracking_uri=tracking), exported["run_id"]) == expected
    assert exported["artifacts"] == len(expected) and exported["skipped"] == ["notes-by-hand.txt"]


def test_second_export_refused_unless_again(snapshots, tracking: str, capsys) -> None:  # noqa: F811
    from mlflow.tracking import MlflowClient

    snapshot = snapshots.get("budget")
    assert main(["export", str(snapshot), "--mlflow", "--tracking-uri", tracking]) == 0
    capsys.readouterr()
    assert main(["export", str(snapshot), "--mlflow", "--tracking-uri", tracking]) == 1
    assert "already exported as MLflow run" in capsys.readouterr().err
    assert main(["export", str(snapshot), "--mlflow", "--tracking-uri", tracking, "--again"]) == 0
    client = MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("genrun")
    runs = client.search_runs([experiment.experiment_id], filter_string=f"tags.`genrun.snapshot_id` = '{snapshot.name}'")
    assert len(runs) == 2 and {r.data.tags["genrun.stop_reasons"] for r in runs} == {"max_new_tokens"}


def test_failed_and_killed_runs_keep_their_state(snapshots, tracking: str) -> None:  # noqa: F811
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking)
    for snapshot, state, status in ((snapshots.get("exception"), "failed", "FAILED"), (snapshots.killed(), "incomplete", "KILLED")):
        assert main(["export", str(snapshot), "--mlflow", "--tracking-uri", tracking]) == 0
        (run,) = client.search_runs([client.get_experiment_by_name("genrun").experiment_id],
                                    filter_string=f"tags.`genrun.snapshot_id` = '{snapshot.name}'")
        assert run.data.tags["genrun.state"] == state and run.info.status == status


def test_planned_snapshot_is_refused(snapshots, tracking: str, capsys) -> None:  # noqa: F811
    assert main(["export", str(snapshots.planned_only()), "--mlflow", "--tracking-uri", tracking]) == 1
    assert "planned, never executed" in capsys.readouterr().err


def test_nothing_is_logged_during_generation() -> None:
    """The runner's modules never import mlflow: only `genrun export` does, after the fact."""
    import ast

    runner = Path(__file__).resolve().parent.parent / "runner"
    importers = []
    for path in runner.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.split(".")[0] == "mlflow" for n in names):
                importers.append(path.relative_to(runner).as_posix())
    assert sorted(set(importers)) == ["mlflow_export.py"]


def test_artifact_location_is_chosen_and_said_and_mlflow_info_stays_off_the_terminal(snapshots, tmp_path: Path, capsys,  # noqa: F811
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    tracking = f"sqlite:///{tmp_path / 'fresh.db'}"  # a new database: MLflow would announce creating its tables
    chosen = tmp_path / "artifacts"
    argv = ["export", str(snapshots.get("eos")), "--mlflow", "--tracking-uri", tracking, "--experiment", "placed"]
    assert main([*argv, "--artifact-location", str(chosen)]) == 0
    err = capsys.readouterr().err
    assert f"artifacts stored at {chosen.as_uri()}/" in err
    assert "INFO" not in err and "Creating initial MLflow database tables" not in err
    assert any(chosen.rglob(layout.RESULT)) and not (work / "mlruns").exists()  # nothing lands in the working directory
    assert main([*argv, "--again", "--artifact-location", str(tmp_path / "elsewhere")]) == 1
    refusal = capsys.readouterr().err
    assert "already stores its artifacts at" in refusal and "pass --experiment with a new name" in refusal
