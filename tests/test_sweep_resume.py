"""The sweep driver killed (SIGKILL) mid-sweep, then `genrun sweep resume`; SIGINT sealing a sweep as interrupted."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


from _sweep_helpers import only_sweep, pid_alive, read, start_cli, wait_for, write_sweep
from conftest import run_cli
from genrun.runner.sweep.ownership import TOKEN_VAR, processes_carrying, stop_processes
from genrun.runner.sweep.store import copy_plan

BLOCKED = 2


def _rows(marker: Path, n: int) -> list[dict]:
    rows = [{"input.prompt": f"count down from {k + 3} :"} for k in range(n)]
    rows[BLOCKED] |= {"entrypoint.callable": "sweep_entries:block_once", "entrypoint.kwargs.marker": str(marker)}
    return rows


def test_driver_killed_then_resume_completes_without_rerunning(tmp_path: Path) -> None:
    marker = tmp_path / "blocked.pid"
    sweep_file = write_sweep(tmp_path / "in", rows=_rows(marker, 4), workers=1)
    store = tmp_path / "store"
    driver = start_cli("sweep", sweep_file, "--store", store)
    worker_pid = int(wait_for(marker))  # items 0 and 1 are done, item 2 is running
    driver.kill()
    driver.wait(timeout=60)
    for _ in range(100):  # the worker dies with its driver (PR_SET_PDEATHSIG)
        if not pid_alive(worker_pid):
            break
        time.sleep(0.1)
    assert not pid_alive(worker_pid)
    sweep = only_sweep(store)
    assert not (sweep / "manifest-sha256.txt").exists()
    interim = run_cli("verify", sweep)
    assert interim.returncode == 1 and "sweep resume" in interim.stdout
    plan = read(sweep / "sweep-plan.json")
    done_before = {i: (store / plan["items"][i]["snapshot_id"] / "manifest-sha256.txt").read_bytes() for i in (0, 1)}

    resumed = run_cli("sweep", "resume", sweep, timeout=900)
    assert resumed.returncode == 0, resumed.stderr
    counters = re.findall(r"^\[(\d+)/4\] item", resumed.stderr, re.M)
    assert counters == ["1", "2", "3", "4"], resumed.stderr  # the items found done counted one by one (it printed [2/4] twice)
    result = read(sweep / "sweep-result.json")
    assert result["status"] == "completed" and result["counts"] == {"succeeded": 4}
    for i, manifest in done_before.items():  # finished items were not re-run: same snapshot, same digest, one attempt
        item = result["items"][i]
        assert item["attempts"] == [plan["items"][i]["snapshot_id"]]
        assert (store / item["snapshot_id"] / "manifest-sha256.txt").read_bytes() == manifest
    blocked = result["items"][BLOCKED]
    assert len(blocked["attempts"]) == 2 and blocked["attempts"][0] == plan["items"][BLOCKED]["snapshot_id"]
    assert not (store / blocked["attempts"][0] / "manifest-sha256.txt").exists()  # the interrupted attempt is kept, incomplete
    assert result["items"][3]["attempts"] == [plan["items"][3]["snapshot_id"]]  # never started: ran in its planned snapshot
    assert run_cli("verify", sweep).returncode == 0


def test_sigint_stops_scheduling_and_seals_the_sweep_interrupted(tmp_path: Path) -> None:
    marker = tmp_path / "blocked.pid"
    sweep_file = write_sweep(tmp_path / "in", rows=_rows(marker, 4), workers=1)
    store = tmp_path / "store"
    driver = start_cli("sweep", sweep_file, "--store", store)
    wait_for(marker)
    driver.send_signal(signal.SIGINT)
    _, err = driver.communicate(timeout=300)
    assert driver.returncode == 130, err
    sweep = only_sweep(store)
    result = read(sweep / "sweep-result.json")
    assert result["status"] == "interrupted"
    assert [i["status"] for i in result["items"]] == ["succeeded", "succeeded", "interrupted", "not_run"]
    interrupted = store / result["items"][BLOCKED]["snapshot_id"]
    assert read(interrupted / "result.json")["signal"] == "SIGINT" and (interrupted / "manifest-sha256.txt").exists()
    assert (sweep / "manifest-sha256.txt").exists()
    verdict = run_cli("verify", sweep, "--json")
    document = json.loads(verdict.stdout)
    assert verdict.returncode == 0, verdict.stdout  # WARNs (an interrupted sweep and item), no FAIL: every file checks out
    assert document["status"] == "interrupted" and document["distribution"]["statuses"] == {"succeeded": 2, "interrupted": 1, "not_run": 1}
    assert [f["status"] for f in document["findings"] if f["name"] == "sweep_sealed"] == ["WARN"]
    assert [f["status"] for f in document["findings"] if f["name"] == "items_agree"] == ["PASS"]

    # the never-run item executed behind the sealed sweep's back: its record (not_run) and its snapshot now disagree
    assert run_cli("execute", store / result["items"][3]["snapshot_id"]).returncode == 0
    disagreeing = run_cli("verify", sweep, "--json")
    agreement = next(f for f in json.loads(disagreeing.stdout)["findings"] if f["name"] == "items_agree")
    assert disagreeing.returncode == 1 and agreement["status"] == "FAIL", agreement
    assert "item 3: the sweep records not_run" in agreement["message"] and "sealed succeeded" in agreement["message"], agreement


def test_a_second_driver_of_a_running_sweep_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "blocked.pid"
    sweep_file = write_sweep(tmp_path / "in", rows=_rows(marker, 3), workers=1)
    store = tmp_path / "store"
    driver = start_cli("sweep", sweep_file, "--store", store)
    try:
        wait_for(marker)  # the first driver is running item 2
        sweep = only_sweep(store)
        log_before = (sweep / "sweep-progress.ndjson").read_bytes()
        second = run_cli("sweep", "resume", sweep)
        message = " ".join(second.stderr.split())
        assert second.returncode != 0 and f"already being run by PID {driver.pid}" in message and "Traceback" not in message, message
        assert (sweep / "sweep-progress.ndjson").read_bytes() == log_before  # the refused driver recorded nothing
    finally:
        driver.kill()
        driver.wait(timeout=60)


def test_resume_stops_a_worker_the_killed_driver_left_running_and_records_it(tmp_path: Path) -> None:
    """A Ray actor can outlive a SIGKILLed driver and seal its item while `resume` retries it (the item runs twice, the
    record disagrees with the item). A local worker cannot outlive its driver (PR_SET_PDEATHSIG), so a real `genrun
    execute` of item 3 carrying the killed driver's token (as every process that driver started does) stands in for
    that actor. Resume stops it before judging any item from disk, logs what it did, and leaves no process behind."""
    marker, leftover_marker = tmp_path / "blocked.pid", tmp_path / "leftover.pid"
    rows = _rows(marker, 4)
    rows[3] |= {"entrypoint.callable": "sweep_entries:block_once", "entrypoint.kwargs.marker": str(leftover_marker)}
    sweep_file = write_sweep(tmp_path / "in", rows=rows, workers=1)
    store = tmp_path / "store"
    driver = start_cli("sweep", sweep_file, "--store", store)
    worker_pid = int(wait_for(marker))  # items 0 and 1 are done, item 2 is running
    driver.kill()
    driver.wait(timeout=60)
    sweep = only_sweep(store)
    item3 = store / read(sweep / "sweep-plan.json")["items"][3]["snapshot_id"]
    token = {TOKEN_VAR: f"{sweep.name}/{driver.pid}/0123456789abcdef"}  # exec'd: /proc/PID/environ holds it
    leftover = subprocess.Popen([sys.executable, "-m", "genrun.runner.cli", "execute", str(item3)], env={**os.environ, **token},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        leftover_pid = int(wait_for(leftover_marker))  # the leftover is executing item 3 (holding its execution lock)

        resumed = run_cli("sweep", "resume", sweep, timeout=900)
        assert resumed.returncode == 0, resumed.stderr
        assert leftover.wait(timeout=60) == -signal.SIGKILL  # stopped by the resuming driver, not left running
        assert not pid_alive(worker_pid) and not pid_alive(leftover_pid)
        assert "stopped 1 process" in resumed.stderr and str(leftover_pid) in resumed.stderr, resumed.stderr
        result = read(sweep / "sweep-result.json")
        assert result["status"] == "completed" and result["counts"] == {"succeeded": 4}
        retried = result["items"][3]
        assert retried["attempts"][0] == item3.name and len(retried["attempts"]) == 2
        assert not (item3 / "manifest-sha256.txt").exists()  # the leftover's attempt never sealed: kept, incomplete
        ended = [json.loads(line) for line in (sweep / "sweep-progress.ndjson").read_text().splitlines() if '"ended"' in line]
        taken_over = next(e for e in ended if e["snapshot_id"] == item3.name)
        assert taken_over["status"] == "lost" and f"its worker (PID {leftover_pid}) outlived that driver" in taken_over["message"]
        verdict = json.loads(run_cli("verify", sweep, "--json").stdout)
        assert [f["status"] for f in verdict["findings"] if f["name"] == "items_agree"] == ["PASS"]
    finally:
        leftover.kill()  # a no-op once the resuming driver stopped it
        leftover.wait()
    assert processes_carrying(sweep.name) == []  # no process of either driver remains


def test_leftover_processes_are_found_by_their_token_and_stopped() -> None:
    """A process carrying an earlier token of the sweep is a leftover; one carrying the current driver's own token, or
    another sweep's, is not; stopping waits until it has exited."""
    env = {**os.environ, TOKEN_VAR: "sweep-a/1/ffff"}
    leftover = subprocess.Popen(["sleep", "600"], env=env)
    other = subprocess.Popen(["sleep", "600"], env={**os.environ, TOKEN_VAR: "sweep-b/1/ffff"})
    try:
        assert processes_carrying("sweep-a", own="sweep-a/2/eeee") == [leftover.pid]
        assert processes_carrying("sweep-a", own="sweep-a/1/ffff") == []
        assert processes_carrying("sweep-a", own="sweep-a/1/ffff", only_own=True) == [leftover.pid]
        assert stop_processes([leftover.pid, other.pid], "sweep-a/") == [leftover.pid]  # never one of another sweep
        assert leftover.wait(timeout=60) == -signal.SIGKILL and other.poll() is None
    finally:
        for process in (leftover, other):
            process.kill()
            process.wait()


def test_verify_fails_when_an_item_plan_ran_outside_the_sweeps_record(tmp_path: Path) -> None:
    """A retry snapshot the record does not list (what a second driver, or a worker outliving its driver, leaves) that
    ran an item's plan is a FAIL of `items_agree`; a second sweep of the same file in the same store is not."""
    sweep_file = write_sweep(tmp_path / "in", rows=[{"input.prompt": "count down from 3 :"}, {"input.prompt": "count down from 4 :"}])
    store = tmp_path / "store"
    assert run_cli("sweep", sweep_file, "--store", store).returncode == 0
    sweep = only_sweep(store)
    assert run_cli("sweep", "plan", sweep_file, "--store", store).returncode == 0  # same names and plan digests, its own items
    assert run_cli("verify", sweep).returncode == 0
    item = store / read(sweep / "sweep-result.json")["items"][1]["snapshot_id"]
    extra = copy_plan(store, item)  # the retry copy a driver makes, run outside the record
    assert run_cli("execute", extra).returncode == 0
    verdict = run_cli("verify", sweep, "--json")
    agreement = next(f for f in json.loads(verdict.stdout)["findings"] if f["name"] == "items_agree")
    assert verdict.returncode == 1 and agreement["status"] == "FAIL", agreement
    assert f"item 1: snapshot {extra.name} ran its plan (sealed) but is not among the attempts the sweep records" in agreement["message"]
