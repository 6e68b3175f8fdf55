"""A vLLM sweep runs its items on one engine per worker, many at once (continuous batching), and every item is still its
own ordinary snapshot: its own ids, stops, progress, verified on its own. A SIGINT to the sweep seals every item in flight
`interrupted` with its ids; an item refused at execution fails alone. Each sweep's worker starts its own engine (in its
own process, as a real sweep does); the single runs the items are compared with use the session's engine. One sweep at
vLLM's default (`default_sweep`, a `genrun sweep` process) serves the tests of its terminal, its items and its worker.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from _engine_processes import engine_cores, process_states
from _snapshot import ids, problems, stops
from conftest import MODEL, SMALL_ENGINE, toml_value

PROMPTS = ["uvw", "Hi!", "Count: 0", "q"]
MULTIPROCESSING = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
"""vLLM's default, which this suite turns off elsewhere (conftest): the engine core a process of its own."""


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


class DefaultSweep(NamedTuple):
    """What one `genrun sweep` at vLLM's default left: its terminal, its store, its worker's exit and the engine cores."""

    done: subprocess.CompletedProcess[str]
    store: Path
    worker_exit_codes: list[int | None]
    """The batching pool's workers' exit codes when the driver closed the pool (`_RECORDING_WORKER_EXITS`)."""
    engine_cores_left: dict[int, str]
    """Engine cores that outlived the driver, with their states."""

    def sweep_dir(self) -> Path:
        return next(p for p in self.store.iterdir() if (p / "sweep-plan.json").is_file())

    def items(self) -> list[Path]:
        """The item snapshots, in dataset order (`sweep-result.json` lists one per planned item, in order)."""
        result = json.loads((self.sweep_dir() / "sweep-result.json").read_text())
        return [self.store / item["snapshot_id"] for item in result["items"]]


_RECORDING_WORKER_EXITS = """
import json, sys
from genrun.runner.sweep import batch_pool
LOG = sys.argv.pop(1)
close_workers = batch_pool.close_workers
def close_and_record(workers, timeout):
    close_workers(workers, timeout)
    with open(LOG, "w") as log:
        json.dump([process.exitcode for _, process in workers], log)
batch_pool.close_workers = close_and_record
from genrun.runner.cli import main
sys.exit(main())
"""
"""`python -c` of the default sweep's driver: genrun's command line (as `python -m genrun`), which also writes the
batching pool's workers' exit codes, once it has closed them, to the file named by its first argument. Unstopped, a
worker's exit waited for its engine core until the driver gave up and killed it (exit code -9)."""

DEFAULT_SWEEP_GENERATION = {"max_tokens": 30, "temperature": 0}


@pytest.fixture(scope="module")
def default_sweep(tmp_path_factory: pytest.TempPathFactory) -> DefaultSweep:
    """One `genrun sweep` of `PROMPTS` at vLLM's default (VLLM_ENABLE_V1_MULTIPROCESSING=1, which this suite turns off
    elsewhere), in a process of its own; the tests below each assert one side of it (its terminal, its items, its worker
    and engine core), reading it only."""
    directory = tmp_path_factory.mktemp("default-sweep")
    store, exits = directory / "store", directory / "worker-exit-codes.json"
    sweep_file = _sweep(directory / "sweep", [{"input.prompt": p} for p in PROMPTS], DEFAULT_SWEEP_GENERATION)
    before = engine_cores()
    done = subprocess.run([sys.executable, "-c", _RECORDING_WORKER_EXITS, str(exits), "sweep", str(sweep_file), "--store", str(store)],
                          capture_output=True, text=True, env={**os.environ, **MULTIPROCESSING}, timeout=900)
    left = process_states(engine_cores() - before)
    return DefaultSweep(done, store, json.loads(exits.read_text()) if exits.exists() else [], left)


def test_a_vllm_sweep_runs_its_items_on_one_engine_and_each_verifies(default_sweep: DefaultSweep, engine: Any, run_on: Any) -> None:
    """At vLLM's default the worker starts the engine core as a process of its own (a daemonic worker may not: every item
    failed, "daemonic processes are not allowed to have children") and stops it when it ends."""
    from genrun.analysis.sweep import verify_sweep
    from genrun.runner.sweep.batch_pool import lanes_per_worker
    from genrun.runner.sweep.store import open_sweep

    assert default_sweep.done.returncode == 0, default_sweep.done.stderr[-3000:]
    assert default_sweep.worker_exit_codes == [0]  # the worker ended by itself, after stopping its engine core
    assert default_sweep.engine_cores_left == {}  # and no engine core outlived it
    assert lanes_per_worker(open_sweep(default_sweep.sweep_dir())[1]) == 256  # vLLM's max_num_seqs over one row per item
    items = default_sweep.items()
    workers = [json.loads((item / "worker-model.json").read_text()) for item in items]
    assert len({(w["pid"], w["loaded_for_snapshot"]) for w in workers}) == 1, "one worker, one engine load for every item"
    assert sorted(w["items_before"] for w in workers) == [0, 1, 2, 3]
    for prompt, item in zip(PROMPTS, items, strict=True):
        assert problems(item) == [], item
        single, _ = run_on(engine, prompts=[prompt], generation=DEFAULT_SWEEP_GENERATION)
        assert ids(item) == ids(single), prompt  # greedy: the shared engine gives each item the ids of a run of its own
        assert [r["reason"] for r in stops(item)] == [r["reason"] for r in stops(single)]
        call = json.loads((item / "vllm-config.before-generate.json").read_text())
        assert call["requests"][0]["params"]["seed"] == 0 and call["vllm_version"] == "0.32.0"
        assert call["vllm_environment"].get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1", call["vllm_environment"]
    verification = verify_sweep(default_sweep.sweep_dir(), jobs=1)
    assert verification.exit_code() == 0, [(f.name, f.status, f.message) for f in verification.findings]


def test_a_sweeps_terminal_holds_genruns_lines_and_the_engine_start_goes_to_an_items_run_log(default_sweep: DefaultSweep) -> None:
    """A batching sweep worker starts vLLM's engine for its first item and shuts it down after the last: those lines go to
    that item's run-log.ndjson (the start) or nowhere (the shutdown, which no item owns), never the terminal. What vLLM
    logs in the driver while the items are checked is held and summarised after genrun's lines (a few, then a count)."""
    done, count = default_sweep.done, len(PROMPTS)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    completed = next(i for i, line in enumerate(lines) if line.startswith(f"sweep completed: {count} succeeded"))
    genruns = lines[:completed + 1]
    shown = ("validated ", f"planned {count} items in ", *(f"[{i}/{count}] item " for i in range(1, count + 1)))
    assert all(line.startswith(shown) for line in genruns[:-1]), done.stderr
    held = lines[completed + 1:]
    assert all(line.startswith("  vllm: ") for line in held), done.stderr
    assert len(held) <= 4 and (len(held) < 4 or "more lines" in held[-1]), held
    assert not any("genrun-local-" in line or "EngineCore" in line for line in lines), done.stderr
    logged = [json.loads(line) for item in sorted(default_sweep.store.glob("*-vllm-sweep-0*")) if (item / "run-log.ndjson").exists()
              for line in (item / "run-log.ndjson").read_text().splitlines()]
    texts = [line["text"] for line in logged if line["source"] == "vllm"]
    assert any(text.startswith("(genrun-local-0 pid=") for text in texts), texts[:20]  # the worker's engine start
    assert not any("[shutdown]" in text for text in texts), [t for t in texts if "[shutdown]" in t]


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
