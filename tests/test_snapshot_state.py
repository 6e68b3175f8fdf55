"""One rule for a snapshot's state, from the files present: sealed means the manifest (written last) is
there; an unsealed snapshot with `result.json` is `incomplete`, never `succeeded` — in ls, report and verify."""

import shutil
import stat
from pathlib import Path

import orjson
import pytest

from genrun.runner.cli import main
from genrun.schemas import layout
from genrun.schemas.layout import SnapshotState, snapshot_state

FIXTURE = Path(__file__).parent / "fixtures" / "format-1" / "20261201T003156Z-tiny-6f6cc2"
PLAN = [layout.REQUEST_SOURCE_PREFIX + ".toml", *layout.FROZEN_FILES]


@pytest.mark.parametrize(("names", "state"), [
    (PLAN, SnapshotState.PLANNING),
    ([*PLAN, layout.FROZEN_MANIFEST], SnapshotState.PLANNED),
    ([*PLAN, layout.FROZEN_MANIFEST, layout.PROGRESS], SnapshotState.RUNNING),
    ([*PLAN, layout.FROZEN_MANIFEST, layout.generation_config_name(2)], SnapshotState.RUNNING),
    ([*PLAN, layout.FROZEN_MANIFEST, layout.sequence_text_path(0)], SnapshotState.RUNNING),
    ([*PLAN, layout.FROZEN_MANIFEST, layout.PROGRESS, layout.RESULT], SnapshotState.INCOMPLETE),
    ([*PLAN, layout.FROZEN_MANIFEST, layout.PROGRESS, layout.RESULT, layout.MANIFEST], SnapshotState.SEALED),
])
def test_state_from_the_files_present(names: list[str], state: SnapshotState) -> None:
    assert snapshot_state(names) is state


def test_names_round_trip_through_the_format_module() -> None:
    assert layout.sequence_index(layout.sequence_name(12)) == 12 and layout.sequence_index("sequence_x") is None
    assert layout.generation_config_call_index(layout.generation_config_name(3)) == 3
    assert layout.generation_config_call_index(layout.GENERATION_CONFIG) == 0
    assert layout.generation_config_call_index(layout.PIPELINE_CALL) is None


def test_unsealed_snapshot_with_a_result_is_incomplete_everywhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    copy = store / FIXTURE.name
    shutil.copytree(FIXTURE, copy)
    copy.chmod(copy.stat().st_mode | stat.S_IWUSR)
    (copy / layout.MANIFEST).unlink()  # died after result.json, before the seal
    assert main(["ls", "--store", str(store), "--json"]) == 0
    (row,) = orjson.loads(capsys.readouterr().out)["snapshots"]
    assert (row["state"], row["sealed"]) == ("incomplete", False)
    assert main(["report", str(copy), "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["state"] == "incomplete" and not report["headline"].startswith("succeeded"), report["headline"]
    assert main(["verify", str(copy), "--json"]) != 0
    completeness = next(f for f in orjson.loads(capsys.readouterr().out)["findings"] if f["name"] == "completeness")
    assert completeness["status"] == "FAIL" and "never sealed" in completeness["message"]
