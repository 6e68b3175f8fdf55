"""Nothing escapes the store: `execute` refuses a plan holding a link or a file `frozen-sha256.txt` does not list."""

import os
from pathlib import Path

import pytest

from conftest import run_cli

from _lm_helpers import TINY_LM, plan, request_text
from genrun.schemas import layout


def _plant_outputs_link(snapshot: Path, outside: Path) -> None:
    os.symlink(outside, snapshot / layout.OUTPUTS_DIR)


def _plant_signoffs_link(snapshot: Path, outside: Path) -> None:
    os.symlink(outside, snapshot / layout.SIGNOFFS_DIR)


def _plant_unlisted_file(snapshot: Path, outside: Path) -> None:
    (snapshot / "notes.txt").write_text("added after planning\n")


def _plant_unlisted_link(snapshot: Path, outside: Path) -> None:
    os.symlink(outside / "target.txt", snapshot / "extra.json")


PLANTS = {"outputs-link": _plant_outputs_link, "signoffs-link": _plant_signoffs_link,
          "unlisted-file": _plant_unlisted_file, "unlisted-link": _plant_unlisted_link}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_execute_refuses_a_plan_with_a_planted_entry(plant: str, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.txt").write_text("not genrun's\n")
    before = sorted(p.name for p in outside.iterdir())
    snapshot = plan(tmp_path, request_text(TINY_LM, generation={"max_new_tokens": 4}), store=tmp_path / "store")
    PLANTS[plant](snapshot, outside)

    done = run_cli("execute", snapshot)
    assert done.returncode == 1, done.stderr
    assert "remove it or plan again" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in outside.iterdir()) == before  # nothing written through the link
    assert (outside / "target.txt").stat().st_mode & 0o200  # and nothing made read-only there
    assert not (snapshot / layout.PROGRESS).exists()  # refused before the first execution file


def test_signoff_never_writes_through_a_planted_signoffs_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = plan(tmp_path, request_text(TINY_LM, generation={"max_new_tokens": 4}), store=tmp_path / "store")
    os.symlink(outside, snapshot / layout.SIGNOFFS_DIR)
    done = run_cli("signoff", snapshot, "--decision", "approve", "--by", "tester")
    assert done.returncode == 2 and "never written outside" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert list(outside.iterdir()) == []


def _hard_link_outside(snapshot: Path, outside: Path, rel: str) -> Path:
    """Replace `snapshot/rel` by a hard link to an identical file outside the store (same bytes, so digests still match)."""
    victim = outside / "config.json"
    victim.write_bytes((snapshot / rel).read_bytes())
    victim.chmod(0o644)
    (snapshot / rel).unlink()
    os.link(victim, snapshot / rel)
    return victim


def test_execute_refuses_a_frozen_file_hard_linked_outside(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = plan(tmp_path, request_text(TINY_LM, generation={"max_new_tokens": 4}), store=tmp_path / "store")
    victim = _hard_link_outside(snapshot, outside, layout.REQUEST)

    done = run_cli("execute", snapshot)
    assert done.returncode == 1 and "hard links" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert victim.stat().st_mode & 0o777 == 0o644  # the seal never chmods through the link
    assert not (snapshot / layout.PROGRESS).exists()


def test_the_seal_never_chmods_a_hard_linked_file(tmp_path: Path) -> None:
    from genrun.runner.errors import SnapshotError
    from genrun.runner.store import seal_snapshot

    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = tmp_path / "snap"
    snapshot.mkdir()
    (snapshot / "result.json").write_text("{}\n")
    victim = _hard_link_outside(snapshot, outside, "result.json")
    with pytest.raises(SnapshotError, match="hard links"):
        seal_snapshot(snapshot)
    assert victim.stat().st_mode & 0o777 == 0o644
    assert not (snapshot / layout.MANIFEST).exists()


def test_the_seal_never_follows_a_folder_swapped_for_a_link_inside_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`outputs/sub/` is listed as a folder, then replaced by a link to a folder outside holding a file of the same name:
    the seal neither hashes nor chmods through it, and leaves the snapshot unsealed naming the link."""
    from genrun.runner import store
    from genrun.runner.errors import SnapshotError

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("outside\n")
    snapshot = tmp_path / "snap"
    (snapshot / layout.OUTPUTS_DIR / "sub").mkdir(parents=True)
    (snapshot / layout.OUTPUTS_DIR / "sub" / "x.txt").write_text("inside\n")
    (snapshot / "result.json").write_text("{}\n")
    listed = store.manifest_candidates

    def list_then_swap(directory: Path) -> list[str]:
        files = listed(directory)
        sub = snapshot / layout.OUTPUTS_DIR / "sub"
        (sub / "x.txt").unlink()
        sub.rmdir()
        sub.symlink_to(outside)
        return files

    monkeypatch.setattr(store, "manifest_candidates", list_then_swap)
    with pytest.raises(SnapshotError, match="sub/, a symbolic link"):
        store.seal_snapshot(snapshot)
    assert (outside / "x.txt").stat().st_mode & 0o777 == 0o644
    assert not (snapshot / layout.MANIFEST).exists()


def test_verify_names_a_sealed_file_hard_linked_or_loosened(tmp_path: Path) -> None:
    import json

    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = plan(tmp_path, request_text(TINY_LM, generation={"max_new_tokens": 4}), store=tmp_path / "store")
    assert run_cli("execute", snapshot).returncode == 0
    (snapshot / layout.DETERMINISM).chmod(0o666)
    (snapshot / layout.ENVIRONMENT).chmod(0o4444)
    (snapshot / layout.REQUEST).chmod(0o644)
    _hard_link_outside(snapshot, outside, layout.REQUEST)

    verified = run_cli("verify", snapshot, "--json")
    assert verified.returncode == 1, verified.stdout
    integrity = next(f for f in json.loads(verified.stdout)["findings"] if f["name"] == "manifest_integrity")
    assert integrity["status"] == "FAIL", integrity
    assert f"{layout.DETERMINISM} (0o666)" in integrity["message"] and f"{layout.ENVIRONMENT} (0o4444)" in integrity["message"], integrity
    assert f"{layout.REQUEST} (2 links)" in integrity["message"], integrity


def test_a_link_planted_at_outputs_during_the_run_is_never_written_through(tmp_path: Path) -> None:
    import subprocess
    import time

    from _analysis_helpers import SLOW_ENTRYPOINT, request_toml
    from _forked import spawn_cli
    from conftest import PROCESS_TIMEOUT_S

    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "slow_entry.py").write_text(SLOW_ENTRYPOINT)
    (work / "request.toml").write_text(request_toml("swap", TINY_LM, "count down from 20 :", {"max_new_tokens": 20, "do_sample": False},
                                                    entrypoint={"callable": "slow_entry:generate_slowly"}, progress={"every_units": 1}))
    snapshot = plan(work, (work / "request.toml").read_text(), store=tmp_path / "store")
    proc = spawn_cli("execute", snapshot, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while b'"event":"progress"' not in ((snapshot / layout.PROGRESS).read_bytes() if (snapshot / layout.PROGRESS).exists() else b""):
            assert time.monotonic() < deadline and proc.poll() is None, "the run ended before it generated"
            time.sleep(0.02)
        os.rename(snapshot / layout.OUTPUTS_DIR, snapshot / "moved")  # genrun made outputs/ before generating
        os.symlink(outside, snapshot / layout.OUTPUTS_DIR)
        proc.wait(timeout=PROCESS_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(outside.iterdir()) == []  # nothing written outside the store
    assert "sequence_0.txt" in {p.name for p in (snapshot / "moved").iterdir()}  # the outputs went where genrun made them
    assert run_cli("verify", snapshot).returncode == 1  # and the planted link is named
