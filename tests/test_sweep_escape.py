"""A sweep never runs anything outside its store: snapshot ids read from its files are plain names inside it."""

import json
import shutil
from pathlib import Path

import pytest

from _sweep_helpers import only_sweep, read, write_sweep
from conftest import run_cli
from genrun.schemas import layout

FORGED_IDS = {"parent": "../outside/{id}", "absolute": "{outside}/{id}", "dot": ".{id}", "nested": "{id}/x"}


@pytest.mark.parametrize("case", sorted(FORGED_IDS))
def test_resume_refuses_a_forged_attempt_naming_a_snapshot_outside_the_store(case: str, tmp_path: Path) -> None:
    sweep_file = write_sweep(tmp_path / "in", rows=[{"input.prompt": "count down from 3 :"}, {"input.prompt": "count down from 4 :"}])
    store = tmp_path / "store"
    planned = run_cli("sweep", "plan", sweep_file, "--store", store)
    assert planned.returncode == 0, planned.stderr
    sweep = only_sweep(store)
    first_id = read(sweep / layout.SWEEP_PLAN)["items"][0]["snapshot_id"]
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copytree(store / first_id, outside / first_id)  # a real plan, outside the store
    forged = {"event": "started", "item": 0, "attempt": 2, "t": 1.0,
              "snapshot_id": FORGED_IDS[case].format(id=first_id, outside=outside)}
    with open(sweep / layout.SWEEP_PROGRESS, "a") as log:
        log.write(json.dumps(forged) + "\n")

    resumed = run_cli("sweep", "resume", sweep)
    assert resumed.returncode != 0 and "sweep's log was altered" in resumed.stderr and "Traceback" not in resumed.stderr, resumed.stderr
    assert not (outside / first_id / layout.PROGRESS).exists()  # nothing ran there
    assert not (outside / first_id / layout.MANIFEST).exists()


def test_resume_refuses_a_forged_attempt_for_an_item_the_sweep_does_not_plan(tmp_path: Path) -> None:
    sweep_file = write_sweep(tmp_path / "in", rows=[{"input.prompt": "count down from 3 :"}])
    store = tmp_path / "store"
    assert run_cli("sweep", "plan", sweep_file, "--store", store).returncode == 0
    sweep = only_sweep(store)
    first_id = read(sweep / layout.SWEEP_PLAN)["items"][0]["snapshot_id"]
    with open(sweep / layout.SWEEP_PROGRESS, "a") as log:
        log.write(json.dumps({"event": "started", "item": -1, "attempt": 2, "t": 1.0, "snapshot_id": first_id}) + "\n")
    resumed = run_cli("sweep", "resume", sweep)
    assert resumed.returncode != 0 and "names item -1" in resumed.stderr and "Traceback" not in resumed.stderr, resumed.stderr
    assert not (store / first_id / layout.PROGRESS).exists()
