"""The suite's fork server (`tests/_forked.py`) gives the same CLI a fresh `python -m genrun.runner.cli` gives.

Signal, kill and concurrency tests run genrun as children of that server to skip the interpreter start;
these tests hold it to a real process: same exit codes, same output, same tokens, its own pid, and the
settings only an interpreter start can apply are refused rather than silently ignored.
"""

import os
import signal
from pathlib import Path

import orjson
import pytest

from _forked import run_cli_forked, spawn_cli
from conftest import EXAMPLES, run_cli_subprocess
from genrun.schemas import layout


def test_a_refusal_reads_the_same_as_from_a_fresh_interpreter(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    fresh = run_cli_subprocess("plan", missing, "--store", tmp_path / "store")
    forked = run_cli_forked("plan", missing, "--store", tmp_path / "store")
    assert fresh.returncode == 2 and "does not exist" in fresh.stderr
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_a_forked_run_makes_the_snapshot_a_fresh_one_makes(tmp_path: Path) -> None:
    snapshots = []
    for label, runner in (("fresh", run_cli_subprocess), ("forked", run_cli_forked)):
        done = runner("run", EXAMPLES / "tiny.toml", "--store", tmp_path / label, "--json")
        assert done.returncode == 0, done.stderr
        snapshots.append(Path(orjson.loads(done.stdout)["snapshot"]))
    fresh, forked = snapshots
    # model.json (hash cache hit) and token-budget.json (free memory) may differ between any two runs
    for name in (layout.TOKEN_IDS, f"{layout.OUTPUTS_DIR}/sequence_0.txt", layout.CODE, layout.ENVIRONMENT, layout.REQUEST):
        assert (fresh / name).read_bytes() == (forked / name).read_bytes(), name
    assert orjson.loads((forked / "result.json").read_bytes())["status"] == "succeeded"


def test_the_child_is_its_own_process_and_dies_by_the_signal_it_gets(tmp_path: Path) -> None:
    child = spawn_cli("watch", tmp_path / "not-yet", "--interval", "0.1")  # a nonexistent snapshot: exits 1 at once
    child.communicate(timeout=600)
    assert child.pid != os.getpid() and child.returncode != 0
    sleeper = spawn_cli("plan", EXAMPLES / "tiny.toml", "--store", tmp_path / "store")
    sleeper.send_signal(signal.SIGKILL)
    sleeper.communicate(timeout=600)
    assert sleeper.returncode == -signal.SIGKILL


def test_interpreter_start_settings_are_refused_not_ignored(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="PYTHONPATH"):
        spawn_cli("ls", "--store", tmp_path, env={"PYTHONPATH": str(tmp_path)})


def test_limits_bind_the_child(tmp_path: Path) -> None:
    """`limits` reach the child: with no address space beyond what it holds at the fork the run fails (at its first new
    mapping: an arena, a thread's stack, the weights). Any headroom above zero fits a tiny run in some states of the
    shared fork server (one that already holds the imports and free arenas ran it in 4 MiB), so zero is the bound that
    always binds; the same call without limits succeeds."""
    args = ("run", EXAMPLES / "tiny.toml", "--store", tmp_path / "store")
    starved = run_cli_forked(*args, limits={"address_space_headroom": 0})
    assert starved.returncode != 0, starved.stdout[-2000:]
    assert run_cli_forked(*args).returncode == 0
