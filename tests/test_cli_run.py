"""`genrun run` end to end on the bundled model: a sealed snapshot, a checkable manifest, an EOS stop,
and four concurrent runs into one store."""

import subprocess
from pathlib import Path

import orjson

from _forked import spawn_cli
from conftest import EXAMPLES, PROCESS_TIMEOUT_S, run_cli
from genrun.schemas import layout


def _only_snapshot(store: Path) -> Path:
    snapshots = [p for p in store.iterdir() if not p.name.startswith(".")]
    assert len(snapshots) == 1, snapshots
    return snapshots[0]


def test_tiny_example_ends_by_eos_in_a_sealed_snapshot(tmp_path: Path) -> None:
    proc = run_cli("run", EXAMPLES / "tiny.toml", "--store", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    document = orjson.loads(proc.stdout)  # --json: one document on stdout and nothing else
    snapshot = Path(document["snapshot"])
    assert snapshot == _only_snapshot(tmp_path)
    check = subprocess.run(["sha256sum", "-c", "--strict", layout.MANIFEST], cwd=snapshot, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    stop = orjson.loads((snapshot / layout.STOP).read_bytes())
    assert [s["reason"] for s in stop["sequences"]] == ["eos"]
    assert stop["sequences"][0]["generated"] == 13  # "11 10 ... 0" + <eos>
    assert document["result"]["status"] == "succeeded"
    text = (snapshot / "outputs" / "sequence_0.txt").read_text()
    assert text.split() == [str(n) for n in range(11, -1, -1)]


def test_tiny_budget_example_is_cut_by_max_new_tokens(tmp_path: Path) -> None:
    proc = run_cli("run", EXAMPLES / "tiny-budget.toml", "--store", tmp_path)
    assert proc.returncode == 0, proc.stderr
    stop = orjson.loads((_only_snapshot(tmp_path) / layout.STOP).read_bytes())
    assert [(s["reason"], s["generated"]) for s in stop["sequences"]] == [("max_new_tokens", 8)]


def test_four_concurrent_runs_make_four_complete_snapshots(tmp_path: Path) -> None:
    store = tmp_path / "store"
    procs = [
        spawn_cli("run", EXAMPLES / "tiny.toml", "--store", store, "--json")
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=PROCESS_TIMEOUT_S) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err for _, err in outputs]
    reported = {orjson.loads(out)["snapshot"] for out, _ in outputs}
    on_disk = sorted(p for p in store.iterdir())
    assert len(reported) == 4 and sorted(map(Path, reported)) == on_disk  # distinct, and no temporary leftovers
    for snapshot in on_disk:
        check = subprocess.run(["sha256sum", "-c", "--quiet", layout.MANIFEST], cwd=snapshot, capture_output=True, text=True)
        assert check.returncode == 0, (snapshot, check.stdout, check.stderr)
        assert orjson.loads((snapshot / layout.RESULT).read_bytes())["status"] == "succeeded"


def test_ls_lists_states(tmp_path: Path) -> None:
    assert run_cli("run", EXAMPLES / "tiny.toml", "--store", tmp_path).returncode == 0
    assert run_cli("plan", EXAMPLES / "tiny-budget.toml", "--store", tmp_path).returncode == 0
    proc = run_cli("ls", "--store", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = orjson.loads(proc.stdout)["snapshots"]
    run_row = next(row for row in rows if "-tiny-budget-" not in row["id"])
    plan_row = next(row for row in rows if "-tiny-budget-" in row["id"])
    assert (run_row["state"], run_row["sealed"], run_row["stop_reasons"], run_row["generated"]) == ("succeeded", True, "eos", 13)
    assert (plan_row["state"], plan_row["sealed"], plan_row["generated"]) == ("planned", False, None)
    human = run_cli("ls", "--store", tmp_path)
    assert human.returncode == 0 and "2 snapshot(s)" in human.stdout
