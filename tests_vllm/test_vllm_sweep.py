"""A vLLM sweep runs its items on one engine per worker, many at once (continuous batching), and every item is still its
own ordinary snapshot: its own ids, stops, progress, verified on its own. A SIGINT to the sweep seals every item in flight
`interrupted` with its ids; an item refused at execution fails alone. Each sweep's worker starts its own engine (in its
own process, as a real sweep does); the single runs the items are compared with use the session's engine."""

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from _engine_processes import engine_cores, process_states
from _snapshot import ids, problems, stops
from conftest import MODEL, SMALL_ENGINE, toml_value

PROMPTS = ["uvw", "Hi!", "Count: 0", "q"]


def _sweep(directory: Path, rows: list[dict[str, Any]], generation: dict[str, Any], extra: str = "", *, kind: str = "local",
           address: str | None = None) -> Path:
    """A base request for tiny-vllm-lm (one prompt, set per item by the dataset) and a one-worker sweep over `rows` (`kind`:
    its executor; `address`: the Ray instance to join)."""
    directory.mkdir(parents=True, exist_ok=True)
    base = ['name = "vllm-sweep"', "seed = 0", "", "[model]", f"path = {toml_value(str(MODEL))}", 'backend = "vllm"',
            'dtype = "float32"', 'device = "cpu"', "", "[input]", 'prompt = "placeholder"', "", "[generation]"]
    base += [f"{k} = {toml_value(v)}" for k, v in generation.items()] + ["", "[engine]", "enforce_eager = true"]
    (directory / "base.toml").write_text("\n".join(base) + "\n" + extra)
    (directory / "items.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    sweep = directory / "sweep.toml"
    sweep.write_text('[sweep]\nname = "vllm-sweep"\nrequest = "base.toml"\n\n[sweep.dataset]\npath = "items.jsonl"\n\n'
                     f'[sweep.executor]\nkind = "{kind}"\nworkers = 1\n' + (f'address = "{address}"\n' if address else ""))
    return sweep


def _plan_and_run(sweep_file: Path, store: Path) -> Any:
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.executors import make_pool
    from genrun.runner.sweep.store import plan_sweep

    return execute_sweep(plan_sweep(sweep_file, store), make_pool)


def _items(run: Any, store: Path) -> list[Path]:
    return [store / item.snapshot_id for item in run.result.items]


def test_a_vllm_sweep_runs_its_items_on_one_engine_and_each_verifies(tmp_path: Path, engine: Any, run_on: Any,
                                                                    monkeypatch: Any) -> None:
    """At vLLM's default (VLLM_ENABLE_V1_MULTIPROCESSING=1, which this suite turns off elsewhere): the worker starts the
    engine core as a process of its own (a daemonic worker may not: every item failed, "daemonic processes are not
    allowed to have children") and stops it when it ends."""
    from genrun.analysis.sweep import verify_sweep
    from genrun.runner.sweep.batch_pool import lanes_per_worker
    from genrun.runner.sweep.store import open_sweep

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # the spawned worker inherits it
    generation = {"max_tokens": 30, "temperature": 0}
    store = tmp_path / "store"
    before = engine_cores()
    run, pool = _plan_and_run_keeping_pool(_sweep(tmp_path / "sweep", [{"input.prompt": p} for p in PROMPTS], generation), store)
    assert run.exit_code == 0, run.result
    _assert_the_worker_ended_by_itself(pool, before)
    assert lanes_per_worker(open_sweep(run.sweep_dir)[1]) == 256  # vLLM's max_num_seqs over one row per item
    items = _items(run, store)
    workers = [json.loads((item / "worker-model.json").read_text()) for item in items]
    assert len({(w["pid"], w["loaded_for_snapshot"]) for w in workers}) == 1, "one worker, one engine load for every item"
    assert sorted(w["items_before"] for w in workers) == [0, 1, 2, 3]
    for prompt, item in zip(PROMPTS, items):
        assert problems(item) == [], item
        single, _ = run_on(engine, prompts=[prompt], generation=generation)
        assert ids(item) == ids(single), prompt  # greedy: the shared engine gives each item the ids of a run of its own
        assert [r["reason"] for r in stops(item)] == [r["reason"] for r in stops(single)]
        call = json.loads((item / "vllm-config.before-generate.json").read_text())
        assert call["requests"][0]["params"]["seed"] == 0 and call["vllm_version"] == "0.32.0"
        assert call["vllm_environment"].get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1", call["vllm_environment"]
    verification = verify_sweep(run.sweep_dir, jobs=1)
    assert verification.exit_code() == 0, [(f.name, f.status, f.message) for f in verification.findings]


def test_a_one_item_worker_at_vllms_default_starts_and_stops_its_engine_core(tmp_path: Path, monkeypatch: Any) -> None:
    """The same for the pool that runs one item at a time (`max_num_seqs = 1`: one lane per worker)."""
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    before = engine_cores()
    store = tmp_path / "store"
    sweep_file = _sweep(tmp_path / "sweep", [{"input.prompt": p} for p in PROMPTS[:2]], {"max_tokens": 12, "temperature": 0},
                        "max_num_seqs = 1\n")
    run, pool = _plan_and_run_keeping_pool(sweep_file, store)
    assert [o.status for o in run.result.items] == ["succeeded", "succeeded"], run.result
    for item in _items(run, store):
        assert problems(item) == [], item
        call = json.loads((item / "vllm-config.before-generate.json").read_text())
        assert call["vllm_environment"].get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1", call["vllm_environment"]
    _assert_the_worker_ended_by_itself(pool, before)


def _plan_and_run_keeping_pool(sweep_file: Path, store: Path) -> tuple[Any, Any]:
    """`_plan_and_run`, and the worker pool the sweep used (to read its workers' exit codes)."""
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.executors import make_pool
    from genrun.runner.sweep.store import plan_sweep

    pools: list[Any] = []

    def kept_pool(plan: Any) -> Any:
        pools.append(make_pool(plan))
        return pools[-1]

    return execute_sweep(plan_sweep(sweep_file, store), kept_pool), pools[0]


def _assert_the_worker_ended_by_itself(pool: Any, engine_cores_before: set[int]) -> None:
    """The worker stopped its engine core and ended on its own: unstopped, its exit waited for the engine core until the
    driver gave up and killed it (exit code -9). The pool is read through its private list (test only)."""
    workers = getattr(pool, "_workers", None) or pool._slots  # BatchPool / LocalPool
    assert [worker.process.exitcode for worker in workers] == [0]
    assert not (left := engine_cores() - engine_cores_before), process_states(left)  # and no engine core outlived it


def test_items_planned_with_other_engine_arguments_get_an_engine_of_their_own(tmp_path: Path) -> None:
    """The third item plans another engine (`max_model_len` 64): the worker lets the items on its engine finish, stops it
    and starts one with the item's arguments (an engine serves only the snapshots planned with its arguments; the item
    used to be refused). Which engine the fourth item finds depends on when its thread ran: it reuses the first one or
    starts it again; either way it runs on arguments it planned."""
    store = tmp_path / "store"
    rows = [{"input.prompt": "uvw"}, {"input.prompt": "q"}, {"input.prompt": "abc", "engine.max_model_len": SMALL_ENGINE["max_model_len"]},
            {"input.prompt": "Hi!"}]
    run = _plan_and_run(_sweep(tmp_path / "sweep", rows, {"max_tokens": 12, "temperature": 0}), store)
    assert run.exit_code == 0, run.result
    items = _items(run, store)
    engines = [json.loads((item / "vllm-config.before-generate.json").read_text())["engine"]["max_model_len"] for item in items]
    assert engines == [1024, 1024, 64, 1024]  # each ran on an engine started with its own arguments
    models = [json.loads((item / "worker-model.json").read_text()) for item in items]
    planned = {item.name: engine for item, engine in zip(items, engines)}
    assert all(planned[m["loaded_for_snapshot"]] == planned[item.name] for item, m in zip(items, models)), models
    assert not models[2]["reused"] and models[2]["loaded_for_snapshot"] == items[2].name
    assert len({m["pid"] for m in models}) == 1, "one worker"
    for item in items:
        assert problems(item) == [], item


def test_sigint_seals_every_item_in_flight_interrupted_with_its_ids(tmp_path: Path) -> None:
    """Digits never reach EOS: four items of up to 1,000 tokens each are in flight together on the one engine when the
    sweep gets SIGINT; each seals `interrupted` with the ids it had, and the sweep seals `interrupted`."""
    store = tmp_path / "store"
    rows = [{"input.prompt": f"Count: {d}"} for d in range(4)]
    sweep_file = _sweep(tmp_path / "sweep", rows, {"max_tokens": 1000, "temperature": 0},
                        extra="\n[progress]\nevery_units = 1\nevery_seconds = 0.5\n")
    sent = threading.Event()

    def interrupt_once_all_generate() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            progress = list(store.glob("*/progress.ndjson"))
            if len(progress) == len(rows) and all(_generated(p) >= 3 for p in progress):
                os.kill(os.getpid(), signal.SIGINT)  # the driver's handler (main thread) passes it to the worker
                sent.set()
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=interrupt_once_all_generate, daemon=True)
    watcher.start()
    run = _plan_and_run(sweep_file, store)
    watcher.join()
    assert sent.is_set(), "the items never all generated at once"
    assert (run.result.status, run.exit_code) == ("interrupted", 130)
    assert [o.status for o in run.result.items] == ["interrupted"] * len(rows)
    for item in _items(run, store):
        result = json.loads((item / "result.json").read_text())
        assert (result["status"], result["signal"]) == ("interrupted", "SIGINT")
        saved = ids(item)
        (row,) = stops(item)
        assert row["reason"] == "interrupted" and 3 <= row["generated"] == len(saved[0]) < 1000
        assert problems(item, allowed_warns=("completeness",)) == []


def _generated(progress: Path) -> int:
    """Tokens of the longest row in the latest progress record (0 before the first)."""
    lines = [json.loads(line) for line in progress.read_text().splitlines() if line.strip()]
    return max((r.get("generated", 0) for r in lines), default=0)


def test_a_worker_killed_mid_sweep_loses_its_items_and_they_run_again_on_a_fresh_engine(tmp_path: Path) -> None:
    """SIGKILL of the worker while its three items generate: each is `lost` once (its incomplete snapshot kept) and
    retried as a new snapshot on a fresh worker and engine, where it succeeds and verifies."""
    from genrun.runner.sweep.driver import execute_sweep
    from genrun.runner.sweep.executors import make_pool
    from genrun.runner.sweep.store import plan_sweep

    store = tmp_path / "store"
    rows = [{"input.prompt": f"Count: {d}"} for d in range(3)]
    sweep_dir = plan_sweep(_sweep(tmp_path / "sweep", rows, {"max_tokens": 600, "temperature": 0},
                                  extra="\n[progress]\nevery_units = 1\nevery_seconds = 0.5\n"), store)
    pools: list[Any] = []
    killed: list[int] = []

    def kill_once_all_generate() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            progress = list(store.glob("*/progress.ndjson"))
            if len(progress) == len(rows) and all(_generated(p) >= 3 for p in progress):
                killed.append(pools[0].pid(0))
                os.kill(killed[0], signal.SIGKILL)
                return
            time.sleep(0.2)

    watcher = threading.Thread(target=kill_once_all_generate, daemon=True)
    watcher.start()
    run = execute_sweep(sweep_dir, lambda plan: pools.append(make_pool(plan)) or pools[-1])
    watcher.join()
    assert killed, "the items never all generated at once"
    assert run.exit_code == 0, run.result
    for outcome in run.result.items:
        assert outcome.status == "succeeded" and len(outcome.attempts) == 2
        assert not (store / outcome.attempts[0] / "manifest-sha256.txt").exists()  # the lost attempt: kept, unsealed
        final = store / outcome.snapshot_id
        assert problems(final) == [] and len(ids(final)[0]) == 600
        assert json.loads((final / "worker-model.json").read_text())["pid"] != killed[0]


def test_an_item_on_the_shared_engine_writes_its_prompt_ids_while_the_engine_generates(tmp_path: Path, engine: Any, store: Path,
                                                                                      monkeypatch: Any) -> None:
    """Every item of a sweep ends at about the same time, so what an item writes after its rows end is the sweep's tail:
    on a shared engine the prompt ids (known from each request's first output) are written before generation ends, once,
    with the same content a single run writes after it."""
    from conftest import write_request
    from safetensors.numpy import load_file

    from genrun.runner.backends import get_backend
    from genrun.runner.backends.vllm import _run
    from genrun.runner.execute import execute_snapshot
    from genrun.runner.plan import plan_request
    from genrun.runner.recorder import ProgressRecorder

    steps: list[str] = []
    save_prompt_ids, mark_generation_end = _run.save_prompt_ids, ProgressRecorder.mark_generation_end

    def noted_save(*args: Any, **kwargs: Any) -> None:
        steps.append("prompt ids written")
        save_prompt_ids(*args, **kwargs)

    def noted_end(recorder: ProgressRecorder) -> None:
        steps.append("generation ended")
        mark_generation_end(recorder)

    monkeypatch.setattr(_run, "save_prompt_ids", noted_save)
    monkeypatch.setattr(ProgressRecorder, "mark_generation_end", noted_end)
    prompts = ["uvw", "Count: 0"]
    request = write_request(tmp_path, prompts=prompts, generation={"max_tokens": 40, "temperature": 0})
    snapshots = [plan_request(request, store), plan_request(request, store, force=True)]
    batch = get_backend("vllm").open_batch(engine)
    try:
        assert execute_snapshot(snapshots[0], loaded=engine, live=False).status == "succeeded"
    finally:
        batch.close()
    assert steps == ["prompt ids written", "generation ended"]
    steps.clear()
    assert execute_snapshot(snapshots[1], loaded=engine, live=False).status == "succeeded"  # alone: its own step loop
    assert steps == ["generation ended", "prompt ids written"]
    for snapshot in snapshots:
        assert problems(snapshot) == [], snapshot
    saved = [load_file(str(s / "prompt-token-ids.safetensors")) for s in snapshots]
    assert {k: v.tolist() for k, v in saved[0].items()} == {k: v.tolist() for k, v in saved[1].items()}
    assert [saved[0][f"prompt_{i}"].tolist() for i in (0, 1)] == [engine.processor.encode(p, add_special_tokens=False) for p in prompts]
