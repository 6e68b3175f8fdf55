"""A vLLM sweep on the Ray executor batches its items as the local executor does: one threaded actor per worker, its items
in flight together on the actor's one engine, each still its own snapshot. A SIGINT to the driver seals every item in
flight `interrupted` with its ids (the driver calls the actor's `interrupt`: no signal reaches a threaded actor's items),
and the actor stops its engine core before it is killed. Both sweeps use the session's one Ray instance (`local_ray`),
whose actors run vLLM at its default: the engine core a process of its own."""

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from _engine_processes import engine_cores, process_states
from _snapshot import ids, problems, stops
from conftest import RayInstance
from test_vllm_signals import PROGRESS_EVERY_TOKEN, _generated
from test_vllm_sweep import _items, _plan_and_run, _sweep

COUNTS = [f"Count: {d}" for d in range(4)]
"""Digits never reach EOS: each item generates until `max_tokens`."""


def _generating(item: Path) -> tuple[float, float]:
    """When the item's first token came and its generation ended (the wall clock, from its own progress records)."""
    events = [json.loads(line) for line in (item / "progress.ndjson").read_text().splitlines() if line.strip()]
    start = events[0]
    at = {e["event"]: datetime.fromisoformat(start["wall_time"]).timestamp() + e["t"] - start["t"] for e in events}
    return at["first_token"], at["end"]


def _gone(pids: set[int], timeout: float = 120) -> set[int]:
    """Those of `pids` still running after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (alive := {pid for pid in pids if Path(f"/proc/{pid}").exists()}) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_ray_sweep_runs_its_items_together_on_one_engine_in_one_actor(local_ray: RayInstance, tmp_path: Path, engine: Any,
                                                                        run_on: Any) -> None:
    """Four items, one actor (`workers = 1`): every item ran in the one actor process on the one engine it loaded, the four
    generated at once (their generation spans share an instant, which items run one after another never do), each starts
    with the ids of a run of its own (greedy: a shorter run's ids are their prefix; the session's engine runs the reference,
    slower per step than an engine core) and verifies, and the actor stopped its engine core before the driver killed it."""
    from genrun.analysis.sweep import verify_sweep

    generation = {"max_tokens": 600, "temperature": 0}  # ~2 s of generation each on an idle machine, the items admitted within ~10 ms of each other: a wide overlap under load too
    store = tmp_path / "store"
    before = engine_cores()
    run = _plan_and_run(_sweep(tmp_path / "sweep", [{"input.prompt": p} for p in COUNTS], generation, kind="ray"), store)
    assert run.exit_code == 0, run.result
    items = _items(run, store)
    workers = [json.loads((item / "worker-model.json").read_text()) for item in items]
    assert len({(w["worker"], w["pid"], w["loaded_for_snapshot"]) for w in workers}) == 1, "one actor, one engine load for every item"
    assert workers[0]["worker"] == "ray-0" and workers[0]["pid"] != os.getpid()  # ran in the actor's process
    assert sorted(w["items_before"] for w in workers) == [0, 1, 2, 3]
    spans = [_generating(item) for item in items]
    assert max(first for first, _ in spans) < min(end for _, end in spans), spans  # all four generating at one instant
    single, _ = run_on(engine, prompts=COUNTS, generation={**generation, "max_tokens": 30})
    for row, item in enumerate(items):
        assert problems(item) == [], item
        assert ids(item)[0][:30] == ids(single)[row], COUNTS[row]  # the actor's shared engine gives each item its own ids
        assert [(r["reason"], r["generated"]) for r in stops(item)] == [("max_new_tokens", 600)]
        call = json.loads((item / "vllm-config.before-generate.json").read_text())
        assert call["vllm_environment"].get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1", call["vllm_environment"]
    verification = verify_sweep(run.sweep_dir, jobs=1)
    assert verification.exit_code() == 0, [(f.name, f.status, f.message) for f in verification.findings]
    assert _gone({workers[0]["pid"]}) == set()  # the driver killed the actor at the end
    assert not (left := engine_cores() - before), process_states(left)  # after the actor stopped its engine core (a kill alone leaves it running)


def test_sigint_to_a_ray_sweeps_driver_seals_every_item_in_flight_interrupted_with_its_ids(local_ray: RayInstance,
                                                                                          tmp_path: Path) -> None:
    """A driver process joins the session's Ray instance; its actor takes four items at once (`max_num_seqs = 4`), the
    fifth waits. SIGINT once all four generate and none has ended: each seals `interrupted` with the ids it had, the fifth
    is `not_run`, the sweep seals `interrupted` (exit 130), and neither the actor nor its engine core stays behind."""
    store = tmp_path / "store"
    rows = [{"input.prompt": f"Count: {d}"} for d in range(5)]
    sweep_file = _sweep(tmp_path / "sweep", rows, {"max_tokens": 1000, "temperature": 0}, "max_num_seqs = 4\n" + PROGRESS_EVERY_TOKEN,
                        kind="ray", address=local_ray.address)
    before = engine_cores()
    driver = subprocess.Popen([sys.executable, "-m", "genrun", "sweep", str(sweep_file), "--store", str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **local_ray.env})
    deadline = time.monotonic() + 600
    seen: dict[str, int] = {}
    cores: set[int] = set()
    while time.monotonic() < deadline and driver.poll() is None:
        progress = list(store.glob("*/progress.ndjson"))
        seen = {p.parent.name: _generated(p) for p in progress}
        cores = engine_cores() - before
        if len(seen) == 4 and min(seen.values()) >= 3 and not any((p.parent / "result.json").exists() for p in progress):
            break  # four items generating at once, none ended: they share the engine (one item at a time never gets here)
        time.sleep(0.2)
    assert driver.poll() is None, f"the sweep ended before the signal: {driver.communicate()[1][-3000:]}"
    assert len(seen) == 4 and min(seen.values()) >= 3, f"the items never all generated at once: {seen}"
    (core,) = cores  # one engine for the four
    actor = _parent(core)
    driver.send_signal(signal.SIGINT)
    _, stderr = driver.communicate(timeout=300)
    assert driver.returncode == 130, stderr[-3000:]
    sweep = next(p for p in store.iterdir() if (p / "sweep-plan.json").is_file())
    result = json.loads((sweep / "sweep-result.json").read_text())
    assert result["status"] == "interrupted" and result["counts"] == {"interrupted": 4, "not_run": 1}, result["counts"]
    *running, queued = result["items"]
    for outcome in running:
        item = store / outcome["snapshot_id"]
        sealed = json.loads((item / "result.json").read_text())
        assert (sealed["status"], sealed["signal"]) == ("interrupted", "SIGINT")
        (row,) = stops(item)
        assert row["reason"] == "interrupted" and seen[item.name] <= row["generated"] == len(ids(item)[0]) < 1000  # kept what it had
        assert json.loads((item / "worker-model.json").read_text())["pid"] == actor  # the actor whose engine core that was
        assert problems(item, allowed_warns=("completeness",)) == []
    assert queued["status"] == "not_run" and not (store / queued["snapshot_id"] / "progress.ndjson").exists()
    assert _gone({actor, core}) == set()
    assert not (left := engine_cores() - before), process_states(left)
