"""Crash consistency of a sweep worker's group commit: stopped at every step, no item is ever shown succeeded unsealed.

A worker's items are synced together and then sealed one after another (`genrun.runner.group_commit`). Three items of
a `loop`-backend request (torch-free, so they can run on threads of one process) run at once in a forked worker process
(`tests/_group_commit_child.py`); the first item is committed alone, the other two together (held so, every run). At
each step of each group (before the files' sync, before each item's seal: the first right after the sync, the next
between two items' seals; before the manifests' sync) the process is either SIGKILLed or gets an `OSError` in the
committer. Afterwards every item is sealed and verifies, or is unsealed and `genrun ls` and `genrun verify`
show it so; an item whose seal failed is reported failed, never succeeded.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from _loop_helpers import write_loop
from conftest import PROCESS_TIMEOUT_S, run_cli
from genrun.runner.store import snapshot_state
from genrun.runner.sweep.store import plan_sweep
from genrun.schemas import layout

CHILD = Path(__file__).with_name("_group_commit_child.py")
REPO = Path(__file__).resolve().parent.parent
ITEMS = 3
LOOP = """\
def generate(model_dir, inputs, generation, rec, **kwargs):
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [5, 6, 2])
        lm.stop(0, "eos", eos_token_id=2)
"""


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A planned store of three item snapshots (copied for each job: a snapshot runs once)."""
    work = tmp_path_factory.mktemp("group-commit")
    write_loop(work, LOOP)
    (work / "items.jsonl").write_text("".join(json.dumps({"input.prompt": f"item {n}"}) + "\n" for n in range(ITEMS)))
    sweep = work / "sweep.toml"
    sweep.write_text('[sweep]\nname = "gc"\nrequest = "loop.toml"\n[sweep.dataset]\npath = "items.jsonl"\n'
                     '[sweep.executor]\nkind = "local"\nworkers = 1\n')
    store = work / "planned"
    sweep_dir = plan_sweep(sweep, store)
    plan = json.loads((sweep_dir / layout.SWEEP_PLAN).read_text())
    return store, [item["snapshot_id"] for item in plan["items"]]


def _serve(jobs: list[dict[str, Any]], work: Path) -> list[dict[str, Any]]:
    jobs_file = work / "jobs.json"
    jobs_file.write_text(json.dumps(jobs))
    done = subprocess.run([sys.executable, str(CHILD), str(jobs_file)], cwd=REPO, capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT_S + 60 * len(jobs))
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def _job(work: Path, planned: tuple[Path, list[str]], label: str, at: int | None, action: str | None) -> dict[str, Any]:
    source, ids = planned
    store = work / f"store-{label}"
    shutil.copytree(source, store, symlinks=True)
    return {"snapshots": [str(store / i) for i in ids], "store": str(store), "at": at, "action": action,
            "out": str(work / f"{label}.json"), "stderr": str(work / f"{label}.err")}


@pytest.fixture(scope="module")
def steps(planned: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[list]]:
    """One clean run: the group commit's steps (the points to stop at)."""
    work = tmp_path_factory.mktemp("group-commit-runs")
    job = _job(work, planned, "clean", None, None)
    (result,) = _serve([job], work)
    assert result["returncode"] == 0, Path(job["stderr"]).read_text()[-3000:]
    recorded = json.loads(Path(job["out"]).read_text())
    assert {r["status"] for r in recorded["reports"].values()} == {"succeeded"}, recorded
    for snapshot in job["snapshots"]:
        _assert_verifies(Path(snapshot), "clean run")
    return work, recorded["steps"]


def test_the_steps_cover_a_group_of_several_items(steps: tuple[Path, list[list]]) -> None:
    _, recorded = steps
    names = [step for step, _ in recorded]
    assert names == ["files-synced", "seal", "manifests-synced", "files-synced"] + ["seal"] * (ITEMS - 1) + ["manifests-synced"], recorded
    first, second = recorded[0][1], recorded[3][1]
    assert len(first) == 1 and sorted(first + second) == sorted({*first, *second}) and len(first + second) == ITEMS, recorded


@pytest.mark.parametrize("action", ["SIGKILL", "OSError"])
def test_stopped_at_every_step(planned: tuple[Path, list[str]], steps: tuple[Path, list[list]], action: str) -> None:
    work, recorded = steps
    jobs = [_job(work, planned, f"{action}-{n}", n, action) for n in range(1, len(recorded) + 1)]
    results = _serve(jobs, work)
    assert len(results) == len(jobs)
    sealed_somewhere = unsealed_somewhere = 0
    for n, (job, got) in enumerate(zip(jobs, results), start=1):
        where = f"{action} before step {n} {recorded[n - 1][0]}"
        err = Path(job["stderr"]).read_text()
        if action == "SIGKILL":
            assert got["returncode"] == -9, f"{where}: exit {got['returncode']}: {err[-2000:]}"
            reports = {}
        else:
            assert got["returncode"] == 0, f"{where}: {err[-2000:]}"
            reports = json.loads(Path(job["out"]).read_text())["reports"]
            assert len(reports) == ITEMS, f"{where}: every item reported (none waits forever for a failed group): {reports}"
        _assert_ls_never_succeeded_unsealed(Path(job["store"]), where)
        for snapshot in map(Path, job["snapshots"]):
            state = snapshot_state(snapshot)
            report = reports.get(snapshot.name)
            if state is layout.SnapshotState.SEALED:
                sealed_somewhere += 1
                _assert_verifies(snapshot, where)
                assert json.loads((snapshot / layout.RESULT).read_text())["status"] == "succeeded", where
            else:
                unsealed_somewhere += 1
                assert state in (layout.SnapshotState.RUNNING, layout.SnapshotState.INCOMPLETE), f"{where}: {snapshot.name} {state.value}"
                verdict = run_cli("verify", snapshot)
                assert verdict.returncode == 1 and "incomplete" in verdict.stdout, f"{where}: {verdict.stdout}"
                assert report is None or report["status"] == "failed", f"{where}: unsealed {snapshot.name} reported {report}"
    assert sealed_somewhere and unsealed_somewhere  # the points reached both sides of a seal


def _assert_verifies(snapshot: Path, where: str) -> None:
    done = run_cli("verify", snapshot, "--json")
    failed = [f for f in json.loads(done.stdout)["findings"] if f["status"] == "FAIL"]
    assert done.returncode == 0 and not failed, f"{where}: {snapshot.name}: {failed}"


def _assert_ls_never_succeeded_unsealed(store: Path, where: str) -> None:
    """`genrun ls` of the sweep's items: an unsealed item is `running` or `incomplete`, a succeeded one is sealed."""
    (sweep,) = [p.name for p in store.iterdir() if (p / layout.SWEEP_PLAN).is_file()]
    listed = run_cli("ls", "--store", store, "--sweep", sweep, "--json")
    assert listed.returncode == 0, listed.stderr
    items = [row for row in json.loads(listed.stdout)["snapshots"] if row["id"] != sweep]
    assert len(items) == ITEMS, f"{where}: {items}"
    for row in items:
        assert row["sealed"] or row["state"] in ("running", "incomplete"), f"{where}: {row}"
        assert row["state"] != "succeeded" or row["sealed"], f"{where}: {row}"
    succeeded = run_cli("ls", "--store", store, "--state", "succeeded", "--json")
    assert all(row["sealed"] for row in json.loads(succeeded.stdout)["snapshots"]), f"{where}: {succeeded.stdout}"
