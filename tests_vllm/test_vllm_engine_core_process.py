"""The engine-core process at vLLM's default (VLLM_ENABLE_V1_MULTIPROCESSING=1): what it and its workers write goes to the
run's run-log.ndjson, never the terminal; it dies with the process that started it, even one killed by SIGKILL, for
`genrun run` and for a sweep worker. Each test starts a real engine core (its process is the point). A sweep's terminal
and its worker's run log are tested on test_vllm_sweep.py's `default_sweep`."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from _engine_processes import descendants, engine_core_under, is_engine_core, process_states
from conftest import write_request
from test_vllm_signals import PROGRESS_EVERY_TOKEN, _generated
from test_vllm_sweep import MULTIPROCESSING, _sweep

GONE_WITHIN_S = 120.0
"""Generous: the core polls its parent every 0.5 s; the rest is the kernel's and a loaded machine's time."""


def _wait_gone(pids: list[int]) -> dict[int, str]:
    """Poll /proc until every pid is gone (or a zombie whose parent must reap it); what is left after the timeout."""
    deadline = time.monotonic() + GONE_WITHIN_S
    while time.monotonic() < deadline:
        left = {pid: state for pid, state in process_states(set(pids)).items() if state not in ("gone", "Z")}
        if not left:
            return {}
        time.sleep(0.2)
    return {pid: state for pid, state in process_states(set(pids)).items() if state not in ("gone", "Z")}


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _kill_when_generating(store: Path, parent: int, rows: int) -> int | None:
    """Wait until `rows` items show 3 tokens, then return `parent`'s engine core (None: the parent ended first)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        progress = list(store.glob("*/progress.ndjson"))
        if len(progress) >= rows and all(_generated(p) >= 3 for p in progress):
            return engine_core_under(parent)
        time.sleep(0.2)
    return None


def test_the_terminal_holds_genruns_lines_and_the_run_log_the_engine_cores(tmp_path: Path) -> None:
    """genrun's lines: the plan block (`planned <snapshot> ...` and its indented lines) and the result block (`succeeded:
    <snapshot>` and its indented lines), all on stderr; nothing on stdout. vLLM's lines from the engine core and its
    worker (INFO lines, warnings issued at import, the weight-loading bar) are in run-log.ndjson; the engine core's
    shutdown, after the seal, in neither."""
    store = tmp_path / "store"
    request = write_request(tmp_path, prompts=["uvw"], generation={"max_tokens": 4, "temperature": 0})
    done = subprocess.run([sys.executable, "-m", "genrun", "run", str(request), "--store", str(store)], capture_output=True, text=True,
                          env={**os.environ, **MULTIPROCESSING}, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (snapshot,) = [p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    start = lines.index(f"succeeded: {snapshot}")
    assert lines[0].startswith(f"planned {snapshot} ") and all(line.startswith("  ") for line in lines[1:start] + lines[start + 1:]), done.stderr
    logged = [json.loads(line) for line in (snapshot / "run-log.ndjson").read_text().splitlines()]
    texts = [line["text"] for line in logged if line["source"] == "vllm"]
    assert any(text.startswith("(EngineCore pid=") for text in texts), texts[:20]
    assert any("Loading safetensors checkpoint shards: 100%" in text for text in texts), texts[:20]
    assert not any(line["shown"] for line in logged if line["source"] == "vllm")
    # the engine is stopped once the snapshot is sealed: its shutdown is in no run log (nor on the terminal, above)
    assert not any("[shutdown]" in text for text in texts), [t for t in texts if "[shutdown]" in t]


def test_a_sigkilled_genrun_run_leaves_no_engine_core(tmp_path: Path) -> None:
    store = tmp_path / "store"
    request = write_request(tmp_path, prompts=["Count: 0"], generation={"max_tokens": 1000, "temperature": 0}, extra=PROGRESS_EVERY_TOKEN)
    child = subprocess.Popen([sys.executable, "-m", "genrun", "run", str(request), "--store", str(store), "--json"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **MULTIPROCESSING})
    try:
        core = _kill_when_generating(store, child.pid, 1)
        assert core is not None and child.poll() is None, child.stderr.read()[-2000:] if child.poll() is not None else "no core"
        family = descendants(child.pid)  # the core and its worker
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert _wait_gone(family) == {}, process_states(set(family))
    finally:
        if child.poll() is None:
            child.kill()


def test_a_sigkilled_sweep_worker_leaves_no_engine_core(tmp_path: Path) -> None:
    """The worker (the core's parent) is killed; the sweep driver then retries its item on a fresh worker, which this
    test does not wait for: the driver's whole process group is killed after the check."""
    store = tmp_path / "store"
    sweep = _sweep(tmp_path / "sweep", [{"input.prompt": "Count: 0"}], {"max_tokens": 1000, "temperature": 0}, extra=PROGRESS_EVERY_TOKEN)
    driver = subprocess.Popen([sys.executable, "-m", "genrun", "sweep", str(sweep), "--store", str(store)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, **MULTIPROCESSING}, start_new_session=True)
    try:
        deadline, worker = time.monotonic() + 600, None
        while worker is None and time.monotonic() < deadline and driver.poll() is None:
            core = next((pid for pid in descendants(driver.pid) if is_engine_core(pid)), None)
            worker = _parent(core) if core is not None else None
            time.sleep(0.5)
        assert worker is not None, driver.stderr.read()[-2000:] if driver.poll() is not None else "no worker with an engine core"
        core = _kill_when_generating(store, worker, 1)
        assert core is not None, "the worker's item never generated"
        family = descendants(worker)
        os.kill(worker, signal.SIGKILL)
        assert _wait_gone(family) == {}, process_states(set(family))
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
