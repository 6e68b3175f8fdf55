"""The Ray executor on a real local Ray instance: the same greedy items give the same token ids as the local
executor; an actor SIGKILLed mid-item costs that attempt only (lost, kept, retried), a batching actor's every busy lane
included (one fresh actor for them all); SIGINT to the driver interrupts the running item and seals the sweep
interrupted."""

import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

import ray  # the 'test' extra installs it; never importorskip: a missing Ray must fail the suite, not hide it

from _lm_helpers import read_ids, read_progress
from _sweep_helpers import only_sweep, pid_alive, read, start_cli, wait_for, write_sweep
from conftest import PROCESS_TIMEOUT_S, run_cli
from genrun.runner.cli import main

ROWS = [{"input.prompt": "count down from 4 :"}, {"input.prompt": "count down from 9 :"}, {"input.prompt": "count down from 12 :"}]


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """One local instance for the module: temp RAY_TMPDIR and HOME (token auth writes ~/.ray), workers not niced,
    shut down after."""
    root = tmp_path_factory.mktemp("ray")
    # Ray's socket paths live under RAY_TMPDIR and must fit AF_UNIX's 107 bytes: pytest's per-worker temp paths
    # (/tmp/pytest-of-<user>/pytest-<n>/popen-gw<i>/ray0/...) do not, so Ray gets a short directory of its own.
    ray_tmp = Path(tempfile.mkdtemp(prefix="genrun-ray-"))
    saved = {k: os.environ.get(k) for k in ("HOME", "RAY_TMPDIR", "RAY_worker_niceness")}
    os.environ["HOME"], os.environ["RAY_TMPDIR"] = str(root / "home"), str(ray_tmp)
    # Ray starts its workers at nice 15: beside the suite's other workers (or a busy machine) the actors then
    # starve and this module's wall time triples. The test instance runs them at the suite's own priority.
    os.environ["RAY_worker_niceness"] = "0"
    (root / "home").mkdir()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_ray_and_local_sweeps_give_identical_token_ids(local_ray, tmp_path: Path) -> None:  # noqa: ANN001
    ids = {}
    for kind in ("local", "ray"):
        sweep_file = write_sweep(tmp_path / kind, name=kind, rows=ROWS, kind=kind, workers=1, max_new_tokens=16)
        store = tmp_path / kind / "store"
        assert main(["sweep", str(sweep_file), "--store", str(store)]) == 0
        sweep = only_sweep(store)
        result = read(sweep / "sweep-result.json")
        assert result["counts"] == {"succeeded": 3}
        ids[kind] = [read_ids(store / item["snapshot_id"])["sequence_0"] for item in result["items"]]
        if kind == "ray":
            records = [read(store / item["snapshot_id"] / "worker-model.json") for item in result["items"]]
            assert [r["reused"] for r in records] == [False, True, True] and {r["worker"] for r in records} == {"ray-0"}
            assert {r["pid"] for r in records} != {os.getpid()}  # ran in the actor's process
            assert main(["verify", str(sweep)]) == 0
    assert ids["ray"] == ids["local"]
    assert [len(x) for x in ids["local"]] == [5, 10, 13]  # n-1 .. 0, then EOS


def _blocking_rows(marker: Path) -> list[dict]:
    """Item 0 writes its process id (the actor's) to `marker` and waits; item 1 is an ordinary countdown."""
    block = {"entrypoint.callable": "sweep_entries:block_once", "entrypoint.kwargs.marker": str(marker)}
    return [{"input.prompt": "count down from 6 :", **block}, {"input.prompt": "count down from 3 :"}]


def _sweep_with_the_actor_killed(tmp_path: Path, retries: int | None) -> tuple[int, Path, Path, int]:
    """Run a 2-item Ray sweep in this process, SIGKILL the actor while it holds item 0; (exit, store, sweep, killed pid)."""
    marker = tmp_path / "actor.pid"
    sweep_file = write_sweep(tmp_path / "in", name="killed", rows=_blocking_rows(marker), kind="ray", workers=1, max_new_tokens=16,
                             retries=retries)
    store = tmp_path / "store"
    killed: list[int] = []

    def kill_the_actor() -> None:  # the driver runs in this process's main thread; the actor is its own process
        killed.append(int(wait_for(marker)))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_actor, daemon=True)
    killer.start()
    code = main(["sweep", str(sweep_file), "--store", str(store)])
    killer.join(timeout=5)
    return code, store, only_sweep(store), killed[0]


def test_killed_actor_item_is_lost_kept_and_retried(local_ray, tmp_path: Path) -> None:  # noqa: ANN001
    code, store, sweep, killed = _sweep_with_the_actor_killed(tmp_path, retries=None)  # default: 1 retry
    assert code == 0  # the retry succeeded, so every item did
    result = read(sweep / "sweep-result.json")
    assert result["status"] == "completed" and result["counts"] == {"succeeded": 2}
    item = result["items"][0]
    lost, retry = item["attempts"]
    assert item["snapshot_id"] == retry and item["stop_reasons"] == ["eos"] and item["generated"] == 7  # 5 .. 0, EOS
    assert (store / lost / "progress.ndjson").exists() and not (store / lost / "manifest-sha256.txt").exists()  # kept, incomplete
    assert (store / lost / "frozen-sha256.txt").read_bytes() == (store / retry / "frozen-sha256.txt").read_bytes()  # same plan
    log = [read_line for read_line in (sweep / "sweep-progress.ndjson").read_text().splitlines() if '"item":0,' in read_line]
    assert [("started" in line, '"status":"lost"' in line) for line in log] == [(True, False), (False, True), (True, False), (False, False)]
    assert "actor ray-0 died mid-item" in log[1]
    retried_by = read(store / retry / "worker-model.json")
    assert retried_by["worker"] == "ray-0.1" and retried_by["pid"] != killed and not retried_by["reused"]  # a fresh actor
    verdict = run_cli("verify", store / lost)
    assert verdict.returncode == 1 and "incomplete" in verdict.stdout  # verify FAILs it as for any killed run
    assert main(["verify", str(sweep)]) == 0


def test_killed_actor_item_without_retries_left_ends_lost(local_ray, tmp_path: Path) -> None:  # noqa: ANN001
    code, store, sweep, _ = _sweep_with_the_actor_killed(tmp_path, retries=0)
    assert code == 1  # an item was lost
    result = read(sweep / "sweep-result.json")
    assert result["status"] == "completed" and result["counts"] == {"lost": 1, "succeeded": 1}
    lost, done = result["items"]
    assert (lost["status"], lost["snapshot_digest"], len(lost["attempts"])) == ("lost", None, 1)  # not retried, not sealed
    assert "actor ray-0 died mid-item" in lost["message"]
    assert (store / lost["snapshot_id"] / "progress.ndjson").exists()  # the incomplete snapshot is kept
    assert done["status"] == "succeeded" and read(store / done["snapshot_id"] / "worker-model.json")["worker"] == "ray-0.1"
    assert main(["verify", str(sweep)]) == 1  # the lost item is a FAIL of the sweep


def test_a_batching_actor_killed_mid_items_loses_every_busy_lane_and_one_fresh_actor_takes_them(local_ray, tmp_path: Path) -> None:  # noqa: ANN001
    """Two lanes on one threaded actor (`lanes = 2`, as for items whose backend batches them; tiny-lm's do not, so inside
    the actor they run one after the other): SIGKILL while the actor holds both items (the first to run blocks, the other
    waits for it, whichever Ray started first) reports each lane `Died`; the first `replace` starts one fresh actor for
    both lanes, the second finds it running, and both items run again there."""
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.ray_executor import RayPool
    from genrun.runner.sweep.store import plan_sweep

    marker = tmp_path / "actor.pid"
    block = _blocking_rows(marker)[0]
    rows = [block, {**block, "input.prompt": "count down from 3 :"}]
    sweep_file = write_sweep(tmp_path / "in", name="lanes", rows=rows, kind="ray", workers=1, max_new_tokens=16)
    store = tmp_path / "store"
    pools: list[RayPool] = []
    killed: list[int] = []

    def kill_the_actor() -> None:
        killed.append(int(wait_for(marker)))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_actor, daemon=True)
    killer.start()
    run = execute_sweep(plan_sweep(sweep_file, store), lambda plan: pools.append(RayPool(plan.sweep.executor, lanes=2)) or pools[-1])
    killer.join(timeout=5)
    assert (pools[0].slots, pools[0].names()) == (2, ["ray-0.1", "ray-0.1"])  # one fresh actor for both lanes
    assert run.exit_code == 0 and run.result.counts == {"succeeded": 2}, run.result
    log = [read_line for read_line in (run.sweep_dir / "sweep-progress.ndjson").read_text().splitlines() if '"status":"lost"' in read_line]
    assert len(log) == 2 and all("actor ray-0 died mid-item" in line and '"worker":"ray-0"' in line for line in log)  # each busy lane, once
    records = [read(store / item.snapshot_id / "worker-model.json") for item in run.result.items]
    assert {r["worker"] for r in records} == {"ray-0.1"} and len({r["pid"] for r in records}) == 1 and records[0]["pid"] != killed[0]
    assert sorted(r["items_before"] for r in records) == [0, 1]  # one model load in the fresh actor served both


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_driver_interrupts_the_running_actor_item(local_ray, tmp_path: Path, sig: int, code: int) -> None:  # noqa: ANN001
    """A real driver process joins this Ray instance (`address`) and gets the signal while an actor runs item 0.

    SIGTERM also checks that the driver keeps its handler after `ray.init` installed Ray's own (exit at once).
    """
    marker = tmp_path / "actor.pid"
    address = local_ray.get_runtime_context().gcs_address
    sweep_file = write_sweep(tmp_path / "in", name="stopped", rows=_blocking_rows(marker), kind="ray", workers=1, address=address)
    store = tmp_path / "store"
    driver = start_cli("sweep", sweep_file, "--store", store)  # inherits HOME / RAY_TMPDIR (the token) from the fixture
    actor_pid = int(wait_for(marker))
    driver.send_signal(sig)
    out, err = driver.communicate(timeout=PROCESS_TIMEOUT_S)
    assert driver.returncode == code, err
    sweep = only_sweep(store)
    result = read(sweep / "sweep-result.json")
    assert result["status"] == "interrupted" and result["counts"] == {"interrupted": 1, "not_run": 1}
    running, queued = result["items"]
    item = store / running["snapshot_id"]
    sealed = read(item / "result.json")
    assert (sealed["status"], sealed["signal"], sealed["exit_code"]) == ("interrupted", "SIGINT", 130)  # the driver passes on SIGINT
    events = read_progress(item)  # interrupted inside the item's own code, before generate made a token
    assert events[-1]["event"] == "interrupted" and events[-1]["signal"] == "SIGINT"
    assert running["snapshot_digest"] and running["attempts"] == [running["snapshot_id"]]  # sealed, never retried
    assert read(item / "worker-model.json")["pid"] == actor_pid  # it ran in the actor, which got the SIGINT
    assert queued["status"] == "not_run" and not (store / queued["snapshot_id"] / "progress.ndjson").exists()
    assert (sweep / "manifest-sha256.txt").exists() and "sweep interrupted" in err
    deadline = time.monotonic() + 60
    while pid_alive(actor_pid) and time.monotonic() < deadline:  # the driver's actors end with it
        time.sleep(0.2)
    assert not pid_alive(actor_pid)


def _processes_with(variable: str, value: str) -> list[int]:
    """PIDs whose environment (as started) has `variable=value`: every process a Ray instance started inherits it."""
    wanted, found = f"{variable}={value}".encode(), []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_sigterm_while_the_driver_starts_its_own_ray_seals_the_sweep_interrupted(tmp_path: Path) -> None:
    """Without `address` the driver starts its own Ray instance; SIGTERM while it starts (its session directory exists)
    seals the sweep `interrupted` (exit 143, no item run or lost) and no process of that instance stays behind.
    `ray.init` swaps in Ray's own SIGTERM handler (exit at once) for its duration: the driver must not die of it."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="genrun-ray-"))  # its own instance: a directory of its own (AF_UNIX paths)
    try:
        sweep_file = write_sweep(tmp_path / "in", name="starting", rows=ROWS[:2], kind="ray", workers=1)
        store = tmp_path / "store"
        assert run_cli("sweep", "plan", sweep_file, "--store", store).returncode == 0
        sweep = only_sweep(store)
        (tmp_path / "home").mkdir()
        driver = start_cli("sweep", "execute", sweep, env={"RAY_TMPDIR": str(ray_tmp), "HOME": str(tmp_path / "home"),
                                                           "RAY_worker_niceness": "0"})
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while not any((ray_tmp / "ray").glob("session_2*")) and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        driver.send_signal(signal.SIGTERM)
        out, err = driver.communicate(timeout=PROCESS_TIMEOUT_S)
        assert driver.returncode == 143, err
        assert "Traceback" not in err and "sweep interrupted" in err, err
        result = read(sweep / "sweep-result.json")
        assert result["status"] == "interrupted" and set(result["counts"]) <= {"not_run", "interrupted"}, result
        assert (sweep / "manifest-sha256.txt").exists()
        deadline = time.monotonic() + 120
        while _processes_with("RAY_TMPDIR", str(ray_tmp)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _processes_with("RAY_TMPDIR", str(ray_tmp)) == []  # the driver's Ray instance stopped with it
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
