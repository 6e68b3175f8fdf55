"""A local sweep through the real CLI with faults planted: a worker SIGKILLed mid-item, an item raising, a hidden cap.

One sweep (2 worker processes, tiny-lm, a few tokens per item) is run once for the module; the
tests read the evidence it left: the lost attempt kept incomplete and retried as a new snapshot,
the failed item sealed while the others completed, `verify SWEEP` counting both, `sha256sum -c`,
the model loaded once per worker, `ls` grouping and a sign-off on the whole sweep.
"""

import hashlib
import os
import signal
import subprocess

import pytest

from _sweep_helpers import only_sweep, read, start_cli, wait_for, write_sweep
from conftest import PROCESS_TIMEOUT_S, run_cli
from genrun.schemas import layout

KILLED, FAILED, CAPPED = 1, 2, 3


@pytest.fixture(scope="module")
def faulty_sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sweep-faults")
    marker = root / "blocked.pid"
    rows = [
        {"input.prompt": "count down from 5 :"},
        {"input.prompt": "count down from 6 :", "entrypoint.callable": "sweep_entries:block_once", "entrypoint.kwargs.marker": str(marker)},
        {"input.prompt": "count down from 7 :", "entrypoint.callable": "sweep_entries:raise_now"},
        # cut before EOS by a cap the plan's own estimate (10 s x 2 tokens/s = 20 tokens) says is too small
        {"input.prompt": "count down from 12 :", "generation.max_new_tokens": 4, "budget.input_seconds": 10, "budget.units_per_input_second": 2},
        {"input.prompt": "count down from 3 :"},
    ]
    sweep = write_sweep(root / "in", rows=rows, workers=2)
    store = root / "store"
    driver = start_cli("sweep", sweep, "--store", store)
    worker_pid = int(wait_for(marker))
    os.kill(worker_pid, signal.SIGKILL)  # the worker dies mid-item: its snapshot started and never sealed
    out, err = driver.communicate(timeout=900)
    return {"store": store, "sweep": only_sweep(store), "exit": driver.returncode, "err": err, "worker_pid": worker_pid}


def test_failed_and_lost_items_do_not_stop_the_others(faulty_sweep: dict) -> None:
    assert faulty_sweep["exit"] == 1, faulty_sweep["err"]  # an item failed
    result = read(faulty_sweep["sweep"] / "sweep-result.json")
    statuses = [i["status"] for i in result["items"]]
    assert statuses == ["succeeded", "succeeded", "failed", "succeeded", "succeeded"]
    assert result["status"] == "completed" and result["counts"] == {"succeeded": 4, "failed": 1}
    failed = result["items"][FAILED]
    assert "planted failure in item code" in failed["message"] and failed["snapshot_digest"]  # sealed like any failed run
    assert f"item {FAILED} failed" in faulty_sweep["err"]  # one progress line per finished item


def test_killed_worker_item_is_lost_kept_and_retried(faulty_sweep: dict) -> None:
    store, sweep = faulty_sweep["store"], faulty_sweep["sweep"]
    item = read(sweep / "sweep-result.json")["items"][KILLED]
    lost, retry = item["attempts"]
    assert item["snapshot_id"] == retry and item["stop_reasons"] == ["eos"]
    assert (store / lost / "progress.ndjson").exists() and not (store / lost / "manifest-sha256.txt").exists()  # kept, incomplete
    assert (store / lost / "frozen-sha256.txt").read_bytes() == (store / retry / "frozen-sha256.txt").read_bytes()  # same plan
    log = [line for line in (sweep / "sweep-progress.ndjson").read_text().splitlines() if f'"item":{KILLED},' in line]
    assert '"status":"lost"' in log[1] and "SIGKILL" in log[1]
    verdict = run_cli("verify", store / lost)
    assert verdict.returncode == 1 and "incomplete" in verdict.stdout  # verify FAILs it as for any killed run


def test_workers_load_the_model_once_and_record_it(faulty_sweep: dict) -> None:
    store = faulty_sweep["store"]
    result = read(faulty_sweep["sweep"] / "sweep-result.json")
    records = [read(store / i["snapshot_id"] / "worker-model.json") for i in result["items"]]
    model_digest = read(store / result["items"][0]["snapshot_id"] / "model.json")["digest"]
    assert {r["model_digest"] for r in records} == {model_digest}
    by_worker: dict[str, list[dict]] = {}
    for record in records:
        by_worker.setdefault(record["worker"], []).append(record)
    for worker_records in by_worker.values():  # each worker loaded once (the first of its items), then reused
        assert sum(not r["reused"] for r in worker_records) == 1
    assert any(r["reused"] for r in records)
    # the lost item's retry ran in a live worker (whichever was free: the killed worker's replacement or the other one)
    retry = read(store / result["items"][KILLED]["snapshot_id"] / "worker-model.json")
    assert retry["pid"] != faulty_sweep["worker_pid"] and retry["worker"].startswith("local-")


def test_two_workers_share_the_cores_and_each_item_records_its_thread_count(faulty_sweep: dict) -> None:
    """Two workers each at torch's default (one thread per core) oversubscribe the machine: each gets its share."""
    from genrun.runner.sweep.local import threads_per_worker

    if os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS"):
        pytest.skip("OMP_NUM_THREADS / MKL_NUM_THREADS is set: the workers then follow the user's choice, not their share")
    store, result = faulty_sweep["store"], read(faulty_sweep["sweep"] / "sweep-result.json")
    ran = [i for n, i in enumerate(result["items"]) if n != FAILED]
    threads = {read(store / i["snapshot_id"] / layout.DETERMINISM)["torch_threads"] for i in ran}
    assert threads == {threads_per_worker(2)} == {max(1, (os.cpu_count() or 1) // 2)}


def test_verify_sweep_counts_the_hidden_cap_and_the_failure(faulty_sweep: dict) -> None:
    verdict = run_cli("verify", faulty_sweep["sweep"], "--json")
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr  # WARNs only, no FAIL
    import json

    document = json.loads(verdict.stdout)
    d = document["distribution"]
    assert d["statuses"] == {"succeeded": 4, "failed": 1}
    assert d["failed_items"] == [FAILED] and d["lost_items"] == [] and d["lost_attempts"] == 1
    assert d["stop_reasons"]["max_new_tokens"] == 1 and d["stop_reasons"]["eos"] == 3
    assert d["warn_checks"]["budget_truncation"] == 1
    assert d["units_min"] == 0 and d["units_max"] == 7  # the failed item generated nothing; "count down from 6 :" makes 6 + EOS
    assert document["exit_code"] == 0 and "examined" in document["summary_line"]
    capped = [i for i in document["items"] if i["index"] == CAPPED][0]
    assert "budget_truncation" in capped["warnings"]
    strict = run_cli("verify", faulty_sweep["sweep"], "--strict")
    assert strict.returncode == 1 and "5 items (1 failed, 4 succeeded)" in strict.stdout


def test_sweep_snapshot_passes_sha256sum_c(faulty_sweep: dict) -> None:
    sweep = faulty_sweep["sweep"]
    check = subprocess.run(["sha256sum", "-c", "manifest-sha256.txt"], cwd=sweep, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "sweep-result.json: OK" in check.stdout and "sweep-plan.json: OK" in check.stdout and "sweep-progress.ndjson: OK" in check.stdout


def test_signoff_accepts_the_whole_sweep_and_ls_groups_items(faulty_sweep: dict) -> None:
    sweep, store = faulty_sweep["sweep"], faulty_sweep["store"]
    signed = run_cli("signoff", sweep, "--decision", "accept", "--by", "owner", "--note", "all items reviewed")
    assert signed.returncode == 0, signed.stderr
    listing = run_cli("ls", "--store", store, "--json")
    rows = __import__("json").loads(listing.stdout)["snapshots"]
    assert rows[0]["id"] == sweep.name and rows[0]["state"] == "sweep completed" and "accept" in rows[0]["signoffs"]
    members = [r for r in rows if r["sweep"] == sweep.name]
    assert len(members) == 6  # 5 items, one of them with a lost attempt and its retry


def test_a_sealed_sweep_is_not_run_again(faulty_sweep: dict) -> None:
    again = run_cli("sweep", "resume", faulty_sweep["sweep"])
    assert again.returncode == 1 and "already sealed" in again.stderr


def test_sigint_while_a_worker_loads_the_model_leaves_the_item_planned(tmp_path) -> None:  # noqa: ANN001
    """The driver's SIGINT reaches a worker still loading the model for its item: the item is `not_run`, nothing executed."""
    marker = tmp_path / "loading.pid"
    rows = [{"model.loader": "sweep_entries:load_after_interrupt", "model.loader_kwargs.marker": str(marker)},
            {"input.prompt": "count down from 3 :"}]
    store = tmp_path / "store"
    sweep_file = write_sweep(tmp_path / "in", rows=rows, workers=1)
    assert run_cli("sweep", "plan", sweep_file, "--store", store).returncode == 0
    sweep = only_sweep(store)
    planned_files = [p.name for p in (store / read(sweep / "sweep-plan.json")["items"][0]["snapshot_id"]).iterdir()]
    driver = start_cli("sweep", "execute", sweep)
    wait_for(marker)
    driver.send_signal(signal.SIGINT)
    out, err = driver.communicate(timeout=PROCESS_TIMEOUT_S)
    assert driver.returncode == 130, err
    result = read(only_sweep(store) / "sweep-result.json")
    assert result["status"] == "interrupted" and result["counts"] == {"not_run": 2}
    prepared = result["items"][0]
    assert "SIGINT came while the worker prepared this item" in prepared["message"] and prepared["snapshot_digest"] is None
    planned = store / prepared["snapshot_id"]
    assert sorted(p.name for p in planned.iterdir()) == sorted(planned_files)  # never executed: only the plan's files
    plan_digest = read(only_sweep(store) / "sweep-plan.json")["items"][0]["plan_digest"]
    assert hashlib.sha256((planned / "frozen-sha256.txt").read_bytes()).hexdigest() == plan_digest  # the plan is intact


# -- a sweep is shown as a sweep by every command, given by its path or by the id `genrun ls` shows ----------------------


@pytest.mark.parametrize("by", ["path", "id"])
def test_verify_and_report_show_the_sweep_by_path_or_id(faulty_sweep: dict, by: str) -> None:
    import json

    sweep, store = faulty_sweep["sweep"], faulty_sweep["store"]
    ref = str(sweep) if by == "path" else sweep.name
    verdict = run_cli("verify", ref, "--store", store, "--json")
    document = json.loads(verdict.stdout)
    assert verdict.returncode == 0 and document["sweep_id"] == sweep.name, verdict.stdout + verdict.stderr
    assert document["distribution"]["statuses"] == {"succeeded": 4, "failed": 1}
    assert "sweep_signoffs" in [f["name"] for f in document["findings"]]
    failed_id = [i for i in document["items"] if i["index"] == FAILED][0]["snapshot_id"]
    report = run_cli("report", ref, "--store", store, env={"COLUMNS": "80"})
    assert report.returncode == 0, report.stderr
    assert f"report sweep {sweep.name}" in report.stdout.replace("\n", "") and "items needing attention" in report.stdout
    assert "verify sweep" not in report.stdout  # the report's table was titled after verify
    assert failed_id in report.stdout  # an item id is never folded in half, even at 80 columns
    assert "ended without a result" not in report.stdout and "external termination" not in report.stdout  # the single-run reading


def test_review_page_of_a_sweep_is_a_sweep_page(faulty_sweep: dict, tmp_path) -> None:  # noqa: ANN001
    sweep, store = faulty_sweep["sweep"], faulty_sweep["store"]
    page = tmp_path / "sweep.html"
    wrote = run_cli("report", sweep.name, "--store", store, "--html", page)
    assert wrote.returncode == 0 and "sweep completed" in wrote.stderr, wrote.stderr
    html = page.read_text()
    assert f"genrun sweep · <span class=\"mono\">{sweep.name}</span>" in html and "genrun review" not in html
    assert "1 failed, 4 succeeded" in html and "Items needing attention" in html
    assert f"genrun signoff {sweep} --decision accept" in html and "--decision approve" not in html  # the sweep's own sign-off
    index = tmp_path / "index.html"
    assert run_cli("report", "--store", store, "--html", index).returncode == 0
    row = [line for line in index.read_text().split("<tr class=\"snapshot\">") if sweep.name in line.split("</td>")[0]][0]
    assert "sweep completed (5 items: 1 failed, 4 succeeded)" in row


def test_watch_on_a_sealed_sweep_exits_as_the_sweep_did(faulty_sweep: dict) -> None:
    sweep, store = faulty_sweep["sweep"], faulty_sweep["store"]
    for ref in (str(sweep), sweep.name):
        watched = run_cli("watch", ref, "--store", store)
        assert watched.returncode == faulty_sweep["exit"] == 1, watched.stderr
        assert "sweep sealed: completed, 1 failed, 4 succeeded (exit 1)" in watched.stdout


def test_the_sweeps_own_signoffs_are_shown_by_verify(faulty_sweep: dict) -> None:
    import json

    sweep, store = faulty_sweep["sweep"], faulty_sweep["store"]
    signed = run_cli("signoff", sweep.name, "--store", store, "--decision", "reject", "--by", "reviewer")
    assert signed.returncode == 0 and f"sweep {sweep.name}" in signed.stderr, signed.stderr
    document = json.loads(run_cli("verify", sweep, "--json").stdout)
    (finding,) = [f for f in document["findings"] if f["name"] == "sweep_signoffs"]
    # an unsigned record binds the current digest but proves nothing: shown, not counted as the owner's verdict
    assert finding["status"] == "PASS" and "reject unsigned (reviewer)" in finding["message"]


@pytest.mark.parametrize("argv, instead", [
    (["diff", "{sweep}", "{sweep}"], "genrun diff ITEM_A ITEM_B"),
    (["export", "{sweep}", "--mlflow"], "genrun export ITEM --mlflow"),
    (["rerun", "{path}"], "genrun rerun ITEM"),
    (["execute", "{sweep}"], "genrun sweep execute"),
])
def test_run_only_commands_refuse_a_sweep_naming_what_to_run(faulty_sweep: dict, argv: list[str], instead: str) -> None:
    sweep, store = faulty_sweep["sweep"], faulty_sweep["store"]
    before = sorted(p.name for p in store.iterdir())
    done = run_cli(*(a.format(sweep=sweep.name, path=sweep) for a in argv), env={"GENRUN_STORE": str(store)})
    assert done.returncode == 1 and f"{sweep} is a sweep, not a run snapshot" in done.stderr and instead in done.stderr, done.stderr
    assert sorted(p.name for p in store.iterdir()) == before


@pytest.mark.parametrize("planted", ["fifo", "sparse-50gb", "dev-zero-link"])
def test_watch_on_a_running_sweep_reads_its_log_bounded(planted: str, faulty_sweep: dict, tmp_path) -> None:
    """The sweep's log read whole would hang on a FIFO (or count nothing forever) and exhaust memory on a 50 GB file:
    watch names the file and stops."""
    import shutil

    sweep = tmp_path / faulty_sweep["sweep"].name
    shutil.copytree(faulty_sweep["sweep"], sweep, symlinks=True)
    sweep.chmod(0o755)
    (sweep / layout.MANIFEST).unlink()  # unsealed again: watch reads the log
    log = sweep / layout.SWEEP_PROGRESS
    log.unlink()
    if planted == "fifo":
        os.mkfifo(log)
    elif planted == "sparse-50gb":
        log.touch()
        os.truncate(log, 50 << 30)
    else:
        log.symlink_to("/dev/zero")
    from _forked import run_cli_forked

    watched = run_cli_forked("watch", sweep, "--interval", "0.1", timeout=120, limits={"address_space_headroom": 2 << 30})
    assert watched.returncode == 1 and layout.SWEEP_PROGRESS in watched.stderr, watched.stderr[-2000:]
