"""`genrun gc`: the `.tmp-*` planning directories a killed planner left are listed as abandoned and removed on --yes;
a live planner's directory, planned and sealed snapshots are never touched.

The planner here is a real process running the store's own `create_snapshot`, held inside its freeze
step (a pipe it reads), so it is killed or kept alive exactly while it plans; the fault-injection test
kills the real `genrun plan` at each filesystem call and collects what it left with `gc --yes`.
"""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import run_cli, tiny_request, write_request

PLANNER = """
import sys
from pathlib import Path
from genrun.runner.store import create_snapshot

def freeze(directory):
    directory.write_bytes("request.json", b"{}")
    print(directory.path, flush=True)
    sys.stdin.read()  # held here, mid-plan, until the test closes the pipe

create_snapshot(Path(sys.argv[1]), "held", freeze)
"""


@pytest.fixture()
def store(tmp_path: Path, tiny_lm: Path) -> Path:
    """A store holding one sealed and one planned snapshot (gc must leave both alone)."""
    store = tmp_path / "store"
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 4"))
    for command in ("run", "plan"):
        done = run_cli(command, request, "--store", store, "--quiet")
        assert done.returncode == 0, done.stderr
    return store


@pytest.fixture()
def planner(store: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    """A planner process stopped mid-plan, and its `.tmp-*` directory."""
    proc = subprocess.Popen([sys.executable, "-c", PLANNER, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        tmp = Path(proc.stdout.readline().strip())
        assert tmp.name.startswith(".tmp-") and tmp.is_dir(), tmp
        yield proc, tmp
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def _snapshot_files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*"))
            if p.is_file() and not p.relative_to(store).parts[0].startswith(".")}


def _states(store: Path) -> dict[str, str]:
    listed = run_cli("ls", "--store", store, "--json")
    assert listed.returncode == 0, listed.stderr
    return {row["id"]: row["state"] for row in json.loads(listed.stdout)["snapshots"]}


def test_killed_planner_is_listed_abandoned_and_removed_only_with_yes(store: Path, planner: tuple[subprocess.Popen, Path]) -> None:
    proc, tmp = planner
    before = _snapshot_files(store)
    proc.kill()
    assert proc.wait(timeout=60) == -9 and tmp.is_dir()
    assert _states(store)[tmp.name] == "abandoned"

    dry = run_cli("gc", "--store", store)
    assert dry.returncode == 0, dry.stderr
    said = " ".join(dry.stdout.split())
    assert f"would remove 1 abandoned planning directory (2 B) from {store}: {tmp.name}; run again with --yes" in said, said
    assert tmp.is_dir()

    done = run_cli("gc", "--store", store, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["dry_run"], report["removed"], report["removed_bytes"], report["live"]) == (
        False, [{"path": str(tmp), "bytes": 2}], 2, [])
    assert not tmp.exists()
    assert _snapshot_files(store) == before  # the sealed and the planned snapshot, byte for byte
    assert sorted(_states(store).values()) == ["planned", "succeeded"]
    again = run_cli("gc", "--store", store, "--yes")
    assert again.returncode == 0 and "no abandoned planning directories" in again.stdout


def test_live_planner_is_never_collected(store: Path, planner: tuple[subprocess.Popen, Path]) -> None:
    proc, tmp = planner
    assert _states(store)[tmp.name] == "planning"
    done = run_cli("gc", "--store", store, "--yes", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["removed"] == [] and report["live"] == [{"path": str(tmp), "bytes": 2, "holder": f"PID {proc.pid}"}]
    human = run_cli("gc", "--store", store, "--yes")
    assert f"left {tmp.name}: PID {proc.pid} is planning into it" in " ".join(human.stdout.split())
    assert tmp.is_dir()
    proc.stdin.close()  # the planner finishes: its plan is renamed into place
    assert proc.wait(timeout=60) == 0
    assert not tmp.exists() and sorted(_states(store).values()) == ["planned", "planned", "succeeded"]


def test_gc_of_a_missing_store_has_nothing_to_do(tmp_path: Path) -> None:
    done = run_cli("gc", "--store", tmp_path / "none")
    assert done.returncode == 0 and "no abandoned planning directories" in done.stdout, done.stderr
    assert not (tmp_path / "none").exists()
