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
