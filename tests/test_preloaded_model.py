"""Load once, run many: `execute_snapshot(..., loaded=)` with a model from `load_for_snapshot` (the backend's `load`)."""

from pathlib import Path

import pytest

from conftest import tiny_request, write_request
from genrun.analysis import verify_snapshot
from genrun.runner.errors import SnapshotError
from genrun.runner.execute import execute_snapshot, load_for_snapshot
from genrun.runner.plan import plan_request
from genrun.schemas import GeneratedTokenIds, layout


def test_one_loaded_model_runs_two_planned_snapshots(tmp_path: Path, tiny_lm: Path) -> None:
    request = write_request(tmp_path, tiny_request(tiny_lm, generation="max_new_tokens = 6"))
    first, second = (plan_request(request, store=tmp_path / "store") for _ in range(2))
    loaded = load_for_snapshot(first)
    assert (loaded.backend, loaded.dtype, loaded.device) == ("transformers", "float32", "cpu")

    results = [execute_snapshot(s, live=False, loaded=loaded) for s in (first, second)]
    assert [r.status for r in results] == ["succeeded", "succeeded"]
    assert all(r.timings.load_s == loaded.load_s and loaded.reuse_note in r.notes for r in results)
    texts = [GeneratedTokenIds.model_validate_json((s / layout.TOKEN_IDS_SUMMARY).read_bytes()).sequences[0].text for s in (first, second)]
    assert texts[0] == texts[1] and texts[0].strip()  # same seed, same model object: same output
    for snapshot in (first, second):
        failed = [f for f in verify_snapshot(snapshot).findings if f.status == "FAIL"]
        assert not failed, [(f.name, f.message) for f in failed]


def test_a_loaded_model_of_another_plan_is_refused_before_anything_is_written(tmp_path: Path, tiny_lm: Path) -> None:
    first = plan_request(write_request(tmp_path, tiny_request(tiny_lm)), store=tmp_path / "store")
    other = write_request(tmp_path, tiny_request(tiny_lm).replace('dtype = "float32"', 'dtype = "bfloat16"'), name="other.toml")
    second = plan_request(other, store=tmp_path / "store")
    loaded = load_for_snapshot(first)
    with pytest.raises(SnapshotError, match=r"dtype 'float32' != planned 'bfloat16'"):
        execute_snapshot(second, live=False, loaded=loaded)
    assert not (second / layout.PROGRESS).exists() and not (second / layout.RESULT).exists()
