"""Signals that reach a local sweep while its worker processes are still starting: no `KeyboardInterrupt` traceback
out of `multiprocessing`'s bootstrap, no item recorded `lost`: items whose snapshots are still planned are `not_run`
(as for a signal while a worker loads the model), and the sweep is sealed `interrupted`."""

import os
import signal
import time
from pathlib import Path

import pytest

from _sweep_helpers import only_sweep, pid_alive, read, spawned_workers, start_cli, write_sweep
from conftest import PROCESS_TIMEOUT_S, run_cli


def _waiting_for_the_signal(marker: Path, n: int) -> list[dict]:
    """Items whose model loader waits until the worker noted a SIGINT: none can run before the signal comes."""
    return [{"input.prompt": f"count down from {k + 3} :", "model.loader": "sweep_entries:load_after_interrupt",
             "model.loader_kwargs.marker": str(marker)} for k in range(n)]


@pytest.mark.parametrize(("sig", "to_group", "code"), [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143)],
                         ids=["ctrl-c-to-the-group", "sigterm-to-the-driver"])
def test_a_signal_while_local_workers_start_leaves_items_not_run(tmp_path: Path, sig: int, to_group: bool, code: int) -> None:
    store = tmp_path / "store"
    sweep_file = write_sweep(tmp_path / "in", rows=_waiting_for_the_signal(tmp_path / "loading.pid", 4), workers=2)
    assert run_cli("sweep", "plan", sweep_file, "--store", store).returncode == 0
    sweep = only_sweep(store)
    driver = start_cli("sweep", "execute", sweep, start_new_session=True)
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while not spawned_workers(driver.pid) and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = spawned_workers(driver.pid)
    assert workers, "the driver started no worker process"
    if to_group:  # what a terminal's Ctrl-C does: every process of the foreground group gets it
        os.killpg(driver.pid, sig)
    else:
        driver.send_signal(sig)
    out, err = driver.communicate(timeout=PROCESS_TIMEOUT_S)
    assert driver.returncode == code, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    result = read(sweep / "sweep-result.json")
    assert result["status"] == "interrupted" and result["counts"] == {"not_run": 4}, result
    plan = read(sweep / "sweep-plan.json")
    for item in plan["items"]:  # never executed: each snapshot is exactly as planned
        assert not (store / item["snapshot_id"] / "progress.ndjson").exists()
    assert run_cli("verify", sweep).returncode == 0
    deadline = time.monotonic() + 60
    while any(pid_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(w) for w in workers)
