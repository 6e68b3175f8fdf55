"""A run whose `[model] loader` raises before generation: classified, sealed, and verify agrees with itself."""

from pathlib import Path

from genrun.analysis import verify_snapshot
from conftest import tiny_request, write_request
from genrun.runner.execute import execute_snapshot
from genrun.runner.plan import plan_request
from genrun.schemas import EVENT_ADAPTER, GenerationStop, layout

# A module name of its own: tests run in one process, and another test already imported a "failing_loader".
LOADER = '''
def load(path, dtype, device, **kwargs):
    raise RuntimeError("cannot place the weights on the device")
'''


def test_loader_failure_is_a_sealed_failed_run_that_verifies(tmp_path: Path, tiny_lm: Path) -> None:
    (tmp_path / "raising_lm_loader.py").write_text(LOADER)
    text = tiny_request(tiny_lm).replace('device = "cpu"\n', 'device = "cpu"\nloader = "raising_lm_loader:load"\n')
    snapshot = plan_request(write_request(tmp_path, text), store=tmp_path / "store")
    result = execute_snapshot(snapshot, live=False)
    assert (result.status, result.exit_code, result.exception.type) == ("failed", 1, "RuntimeError")
    assert (snapshot / layout.MANIFEST).is_file()
    # No row was ever decoded, so there is no per-sequence record; the exception is in result.json.
    assert GenerationStop.model_validate_json((snapshot / layout.STOP).read_bytes()).sequences == ()
    events = [EVENT_ADAPTER.validate_json(line) for line in (snapshot / layout.PROGRESS).read_bytes().splitlines()]
    assert [e.event for e in events] == ["exception"]  # no 'start': generation never began

    findings = {f.name: f for f in verify_snapshot(snapshot).findings}
    assert findings["progress_stream"].status == "PASS", findings["progress_stream"].message
    assert not [f for f in findings.values() if f.status == "FAIL"], [(f.name, f.message) for f in findings.values() if f.status == "FAIL"]
    assert findings["completeness"].status == "WARN"  # sealed, but the run failed: the outputs are partial
