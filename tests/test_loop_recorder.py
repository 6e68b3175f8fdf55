"""The loop recorder `rec` in process, on real files: which records it writes, and what `emit` accepts.

The hot path tells the run's ProgressRecorder its count only when a record is due (tests/test_loop_backend.py
runs whole loops); here the records are compared with those of a ProgressRecorder told every unit, the
behaviour the shortcut must keep.
"""

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from genrun.runner.backends.loop.recorder import LoopRecorder, RecorderMisuse, Stage
from genrun.runner.recorder import ProgressRecorder
from genrun.snapshot_dir import SnapshotDir

EVERY = 4
NEVER_S = 1e9  # no record is due by time: the counts alone decide, so the test is the same on a busy machine


def _core(path: Path) -> ProgressRecorder:
    return ProgressRecorder(SnapshotDir(path.parent, writable=True).open_stream(path.name), origin=time.monotonic(), unit="token", every_units=EVERY, every_seconds=NEVER_S)


def _recorder(directory: Path) -> tuple[LoopRecorder, ProgressRecorder, int]:
    core = _core(directory / "progress.ndjson")
    fd = os.open(directory / "stage-progress.ndjson", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
    rec = LoopRecorder(core=core, progress_fd=fd, every_units=EVERY, every_seconds=NEVER_S, on_config=lambda _c: None,
                       outputs_dir=directory)
    return rec, core, fd


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


Call = tuple[str, int, int]
"""(`emit` or `advance`, row, units)."""
STAGES: dict[str, list[tuple[str, list[Call]]]] = {
    "one id at a time": [("lm", [("emit", 0, 1)] * 11)],
    "chunks crossing the cadence": [("lm", [("emit", 0, 3), ("emit", 1, 3), ("emit", 0, 5), ("emit", 1, 0), ("emit", 1, 9)])],
    "ids and counted units, two rows": [("lm", [("emit", 0, 2), ("advance", 1, 3), ("emit", 1, 1), ("advance", 0, 6), ("emit", 0, 1)])],
    "two stages counting tokens": [("draft", [("emit", 0, 1)] * 6), ("final", [("emit", 0, 2)] * 5)],
}


def _play(stage: Stage, calls: list[Call]) -> None:
    for call, row, units in calls:
        if call == "emit":
            stage.emit(row, list(range(units)))
        else:
            stage.advance(row, units)


def _records(path: Path) -> list[tuple[str, int]]:
    return [(r["event"], r["generated"]) for r in _lines(path)]


@pytest.mark.parametrize("stages", list(STAGES.values()), ids=list(STAGES))
def test_records_are_written_at_the_counts_a_recorder_told_every_unit_writes(tmp_path: Path, stages: list[tuple[str, list[Call]]]) -> None:
    (tmp_path / "rec").mkdir()
    rec, core, fd = _recorder(tmp_path / "rec")
    core.start(None, None)
    reference = _core(tmp_path / "reference.ndjson")
    reference.start(None, None)
    expected_stage_records = []
    for name, calls in stages:
        rows = 1 + max(row for _, row, _ in calls)
        with rec.stage(name, unit="token", rows=rows) as stage:
            counted, due = 0, EVERY
            for call in calls:
                _play(stage, [call])
                reference.step(call[2])  # what the recorder did before: the core told every call's units
                counted += call[2]
                if counted >= due:
                    expected_stage_records.append((name, counted))
                    due = counted + EVERY
        assert core.steps == reference.steps  # told at the stage's end, whatever was due
    core.end()
    reference.end()
    os.close(fd)
    assert _records(tmp_path / "rec" / "progress.ndjson") == _records(tmp_path / "reference.ndjson")
    progress = [(r["stage"], sum(r["units"])) for r in _lines(tmp_path / "rec" / "stage-progress.ndjson") if r["event"] == "progress"]
    assert progress == expected_stage_records


def test_a_stage_in_another_unit_never_counts_in_progress_ndjson(tmp_path: Path) -> None:
    rec, core, fd = _recorder(tmp_path)
    core.start(None, None)
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [1, 2, 3])
    with rec.stage("decode", unit="window", rows=1, consumes="lm") as decode:
        decode.advance(0, 9, consumed=3)
    core.end()
    os.close(fd)
    assert core.steps == 3 and _records(tmp_path / "progress.ndjson")[-1] == ("end", 3)
    assert [r["units"] for r in _lines(tmp_path / "stage-progress.ndjson") if r["event"] == "end"] == [[3], [9]]


@pytest.mark.parametrize(("ids", "expected"), [
    pytest.param([1.5], "1.5 is not an integer id", id="a float"),
    pytest.param([3, True], "True is not an integer id", id="a bool"),
    pytest.param(["7"], "'7' is not an integer id", id="a string"),
    pytest.param(np.array([1.0, 2.0]), "1.0 is not an integer id", id="a float array"),
    pytest.param(5, "ids is a int; pass a sequence of ids", id="a bare int"),
    pytest.param(np.int64(5), "ids is a int64; pass a sequence of ids", id="a numpy scalar"),
])
def test_emit_refuses_what_is_not_a_sequence_of_integer_ids_and_keeps_nothing(tmp_path: Path, ids: Any, expected: str) -> None:
    rec, core, fd = _recorder(tmp_path)
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, [9])
        with pytest.raises(RecorderMisuse, match="stage 'lm': emit\\(row 0") as raised:
            lm.emit(0, ids)
        assert expected in str(raised.value)
        assert lm.ids == [[9]] and lm.units() == (1,)
    core.close()
    os.close(fd)


@pytest.mark.parametrize("make", [list, tuple, np.array, lambda ids: [np.int64(i) for i in ids], lambda ids: np.array(ids, dtype=np.uint16)],
                         ids=["list", "tuple", "numpy array", "numpy scalars in a list", "uint16 array"])
def test_emit_takes_any_sequence_of_integers_and_keeps_python_ints(tmp_path: Path, make: Callable[[list[int]], Any]) -> None:
    rec, core, fd = _recorder(tmp_path)
    with rec.stage("lm", unit="token", rows=1) as lm:
        lm.emit(0, make([5, 6, 7]))
    core.close()
    os.close(fd)
    assert lm.ids == [[5, 6, 7]] and all(type(i) is int for i in lm.ids[0])
