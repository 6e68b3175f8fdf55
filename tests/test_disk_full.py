"""A full disk during a run: exit 1, one sentence naming the store and its free space, never a traceback, and either
a sealed `failed` snapshot with every generated id or the plan left intact (nothing run).

Stores are small tmpfs mounts (mounting needs CAP_SYS_ADMIN: without it these tests skip and say so).
"""

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from _forked import ForkedProcess, spawn_cli
from conftest import PROCESS_TIMEOUT_S

from _lm_helpers import TINY_LM, FixtureModels, read_ids, request_text
from genrun.runner.store import snapshot_state
from genrun.schemas import layout


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    size = getattr(request, "param", "4m")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): the disk-full cases need CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _genrun(*args: str | Path) -> ForkedProcess:
    return spawn_cli(*args)


def _generating(tmp_path: Path, fixture_models: FixtureModels, store: Path, max_new_tokens: int) -> ForkedProcess:
    """`genrun run` of a model that never emits EOS into `store`, returned once generation is under way."""
    request = tmp_path / "endless.toml"
    request.write_text(request_text(fixture_models.get("random-no-eos"), name="full", generation={"max_new_tokens": max_new_tokens},
                                    progress={"every_units": 1}))
    proc = _genrun("run", request, "--store", store)
    _wait_for_generation(proc, store)
    return proc


def _wait_for_generation(proc: ForkedProcess, store: Path) -> None:
    """Until the run's first progress record (generation under way), failing if the run ends first."""
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while not any(store.glob(f"*/{layout.PROGRESS}")) or b'"event":"progress"' not in next(store.glob(f"*/{layout.PROGRESS}")).read_bytes():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.02)


@pytest.mark.parametrize("small_disk", ["256k"], indirect=True)  # room for the plan (~80 KB in blocks), not for the 1 MiB sealing reserve
def test_no_room_to_seal_refuses_before_running_and_keeps_the_plan(small_disk: Path, tmp_path: Path) -> None:
    request = tmp_path / "tiny.toml"
    request.write_text(request_text(TINY_LM, generation={"max_new_tokens": 8}))
    proc = _genrun("run", request, "--store", small_disk / "store")
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "the filesystem is full" in err and "free" in err and str(small_disk / "store") in err, err
    (snapshot,) = (small_disk / "store").iterdir()
    assert snapshot_state(snapshot) is layout.SnapshotState.PLANNED  # intact: run it again on a larger disk
    assert not any(p.name.startswith(".") for p in snapshot.iterdir())


@pytest.mark.parametrize("small_disk", ["8m"], indirect=True)
def test_disk_filled_during_generation_seals_failed_with_every_id(small_disk: Path, tmp_path: Path, fixture_models: FixtureModels) -> None:
    store = small_disk / "store"
    proc = _generating(tmp_path, fixture_models, store, max_new_tokens=6000)
    # another program fills the disk mid-run; unbuffered, so closing the file has nothing left to fail on
    with open(small_disk / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * (1 << 16))
        except OSError:
            pass
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert "Traceback" not in err, err
    (snapshot,) = [p for p in store.iterdir() if not p.name.startswith(".")]
    assert snapshot_state(snapshot) is layout.SnapshotState.SEALED, (err, sorted(p.name for p in snapshot.iterdir()))
    result = json.loads((snapshot / layout.RESULT).read_text())
    assert (proc.returncode, result["status"]) == (1, "failed"), err
    assert "No space left" in result["exception"]["message"] or "ENOSPC" in json.dumps(result["exception"]) or "28" in json.dumps(result["exception"])
    ids = read_ids(snapshot)["sequence_0"]
    assert 0 < len(ids) == result["generated"]  # every generated id was kept


@pytest.mark.parametrize("small_disk", ["8m,nr_inodes=400"], indirect=True)
def test_inodes_exhausted_during_generation_are_named_by_verify_not_blamed_on_a_kill(
        small_disk: Path, tmp_path: Path, fixture_models: FixtureModels) -> None:
    """Another program takes every free inode mid-run: the run ends and its terminal record is appended (no inode needed),
    but the evidence files cannot be created. Exit 1 naming the store; verify says sealing failed after generation, never
    'external termination?'. (The seal itself needs inodes the byte reserve does not hold: the snapshot stays unsealed.)"""
    from genrun.analysis import verify_snapshot

    store = small_disk / "store"
    proc = _generating(tmp_path, fixture_models, store, max_new_tokens=400)
    (small_disk / "filler").mkdir()
    count = 0
    try:
        while True:  # empty files: inodes, not blocks
            (small_disk / "filler" / str(count)).touch()
            count += 1
    except OSError:
        pass
    _, err = proc.communicate(timeout=PROCESS_TIMEOUT_S)
    assert proc.returncode == 1 and "Traceback" not in err and str(store) in err, err
    (snapshot,) = [p for p in store.iterdir() if not p.name.startswith(".")]
    completeness = next(f for f in verify_snapshot(snapshot).findings if f.name == "completeness")
    assert completeness.status == "FAIL" and "external termination" not in completeness.message, completeness.message
    assert "its result was never saved: sealing failed after generation" in completeness.message, completeness.message
