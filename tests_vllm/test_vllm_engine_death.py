"""The engine-core process killed mid-run (vLLM's multiprocessing on, as by default): the run seals `failed` naming
vLLM's EngineDeadError, keeps the ids so far and verifies; it never hangs. Here the engine core is a child process of
`genrun run`, started for this test (its death is the point)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from _engine_processes import engine_core_under
from _snapshot import ids, problems, stops
from conftest import write_request
from test_vllm_signals import PROGRESS_EVERY_TOKEN, _generated


def test_a_dead_engine_core_seals_a_failure_naming_it(tmp_path: Path) -> None:
    store = tmp_path / "store"
    request = write_request(tmp_path, prompts=["Count: 0", "Count: 5"], generation={"max_tokens": 1000, "temperature": 0},
                            extra=PROGRESS_EVERY_TOKEN)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    child = subprocess.Popen([sys.executable, "-m", "genrun", "run", str(request), "--store", str(store), "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 600
    core, seen = None, 0
    while time.monotonic() < deadline and child.poll() is None:
        progress = list(store.glob("*/progress.ndjson"))
        if progress and (seen := _generated(progress[0])) >= 3:
            core = engine_core_under(child.pid)
            break
        time.sleep(0.2)
    assert child.poll() is None and core is not None, f"no running engine core to kill: {child.communicate()[1][-2000:] if child.poll() is not None else ''}"
    os.kill(core, signal.SIGKILL)
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 1, stderr[-2000:]
    (snapshot,) = [p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")]
    result = json.loads((snapshot / "result.json").read_text())
    assert result["status"] == "failed" and result["exception"]["type"].endswith("EngineDeadError")
    rows = stops(snapshot)
    assert [r["reason"] for r in rows] == ["exception", "exception"]
    assert all(r["generated"] == len(ids(snapshot)[r["index"]]) for r in rows)
    # what progress showed before the kill is kept (it counts the longest row; the second prompt starts a step later, so
    # its row has one id fewer, and how many the rows have beyond that depends on when the kill lands)
    assert max(r["generated"] for r in rows) >= seen >= 3
    assert problems(snapshot, allowed_warns=("completeness",)) == []  # completeness WARNs that the run failed


STOP_A_STUCK_CORE = """
import json, os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from _engine_processes import engine_core_under
from conftest import write_request
from genrun.runner.execute import load_for_snapshot
from genrun.runner.plan import plan_request

snapshot = plan_request(write_request(Path(sys.argv[1]), prompts=["uvw"], generation={"max_tokens": 4, "temperature": 0}), Path(sys.argv[2]))
loaded = load_for_snapshot(snapshot)
core = engine_core_under(os.getpid())
os.kill(core, signal.SIGSTOP)  # a core that cannot act on SIGTERM: vLLM's shutdown SIGKILLs it after its grace period
loaded.release()
try:
    state = Path(f"/proc/{core}/stat").read_text().rsplit(")", 1)[1].split()[0]
except OSError:
    state = None
print(json.dumps({"core": core, "state": state}))
"""


def test_a_released_engine_core_is_gone_even_one_vllm_had_to_kill(tmp_path: Path) -> None:
    """`LoadedModel.release` (a sweep worker ending) leaves no engine core behind, not even a zombie: vLLM's shutdown
    SIGKILLs a core that outlives its SIGTERM grace and does not reap it, and once the worker is killed (a Ray actor) the
    zombie passes to PID 1, which in a container may never reap it. The core here is stopped (SIGSTOP) so that it cannot
    act on SIGTERM; the process that loaded it is still alive when its state is read."""
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    done = subprocess.run([sys.executable, "-c", STOP_A_STUCK_CORE, str(tmp_path), str(tmp_path / "store"), str(Path(__file__).parent)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["core"] is not None and report["state"] is None, report  # "Z": killed, never reaped
