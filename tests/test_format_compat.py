"""Versioned reading: snapshots written by earlier genrun releases verify and report forever, migrated in
memory only; an artifact from a newer genrun is refused with a message that says which genrun wrote it.

tests/fixtures/format-1/ holds two snapshots written by genrun 0.1.0 (format 1). Never edit or regenerate
them (see their README); copies are changed here, never the fixtures.
"""

import shutil
import stat
from pathlib import Path

import orjson
import pytest

from genrun.analysis.report import Report
from genrun.runner.cli import main
from genrun.runner.plan import plan_request
from genrun.schemas import (
    BackendDeclaration,
    FORMAT_HISTORY,
    FORMAT_VERSION,
    Environment,
    GenerationStop,
    NewerFormat,
    Result,
    SequenceStop,
    layout,
)
from genrun.schemas.evidence import stop_evidence_adapter
from genrun.runner.backends.diffusers.evidence import DIFFUSION_STOP_EVIDENCE, CompletedEvidence
from genrun.runner.backends.transformers.evidence import TOKEN_STOP_EVIDENCE, EosEvidence
from genrun.schemas.digests import manifest_candidates, render_sha256sum, sha256_file
from conftest import tiny_request, write_request

FIXTURES = Path(__file__).parent / "fixtures" / "format-1"
LM = FIXTURES / "20261201T003156Z-tiny-6f6cc2"
DIFFUSION = FIXTURES / "20261201T003210Z-tiny-diffusion-cab1ea"
FORMAT_2 = Path(__file__).parent / "fixtures" / "format-2"
LM_2 = FORMAT_2 / "20261201T150421Z-tiny-fd0549"
DIFFUSION_2 = FORMAT_2 / "20261201T150426Z-tiny-diffusion-13bd79"
SWEEP_2 = FORMAT_2 / "sweep-store" / "20261201T150437Z-countdowns-f7bdc4"
FORMAT_3 = Path(__file__).parent / "fixtures" / "format-3"
LM_3 = FORMAT_3 / "20261203T205014Z-tiny-d42ab2"
DIFFUSION_3 = FORMAT_3 / "20261203T205028Z-tiny-diffusion-f6224e"
LOOP_3 = FORMAT_3 / "20261203T205031Z-tiny-onnx-loop-0ea41e"


def _cli_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, dict]:
    code = main([*map(str, args), "--json"])
    return code, orjson.loads(capsys.readouterr().out)


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}


def _writable_copy(source: Path, tmp_path: Path) -> Path:
    copy = tmp_path / source.name
    shutil.copytree(source, copy)
    for path in [copy, *copy.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    return copy


def _bump(path: Path, **changes: object) -> None:
    path.write_bytes(orjson.dumps(orjson.loads(path.read_bytes()) | changes))


def test_fixtures_are_format_1_written_by_0_1_0() -> None:
    assert FORMAT_HISTORY[1].startswith("genrun 0.1.0") and FORMAT_VERSION in FORMAT_HISTORY
    for snapshot in (LM, DIFFUSION):
        assert orjson.loads((snapshot / layout.STOP).read_bytes())["schema_version"] == 1
        assert orjson.loads((snapshot / layout.ENVIRONMENT).read_bytes())["genrun_version"] == "0.1.0"


@pytest.mark.parametrize("snapshot", [LM, DIFFUSION, LM_2, DIFFUSION_2, LM_3, DIFFUSION_3, LOOP_3],
                         ids=["lm-1", "diffusion-1", "lm-2", "diffusion-2", "lm-3", "diffusion-3", "loop-3"])
def test_an_older_format_snapshot_verifies_and_reports_unchanged(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _digests(snapshot)
    code, verified = _cli_json(capsys, "verify", snapshot)
    failed = [f"{f['name']}: {f['message']}" for f in verified["findings"] if f["status"] in ("FAIL", "WARN")]
    assert code == 0 and not failed, failed
    code, report = _cli_json(capsys, "report", snapshot)
    assert code == 0 and report["state"] == "sealed" and report["status"] == "succeeded", report["headline"]
    assert report["sequences"][0]["evidence"]["reason"] == report["sequences"][0]["reason"]  # migrated to typed evidence
    assert Report.model_validate(report).budget.plan is not None  # the --json document is the typed Report
    assert _digests(snapshot) == before, "reading migrated in memory only: no file may change"


def test_format_2_fixtures_were_written_by_0_2_0() -> None:
    for snapshot in (LM_2, DIFFUSION_2):
        assert orjson.loads((snapshot / layout.STOP).read_bytes())["schema_version"] == 2
        assert orjson.loads((snapshot / layout.ENVIRONMENT).read_bytes())["genrun_version"] == "0.2.0"


def test_format_2_sweep_and_its_items_verify(capsys: pytest.CaptureFixture[str]) -> None:
    before = _digests(FORMAT_2 / "sweep-store")
    code, _ = _cli_json(capsys, "verify", SWEEP_2)
    assert code == 0, capsys.readouterr()
    items = sorted(p for p in SWEEP_2.parent.iterdir() if p != SWEEP_2)
    assert len(items) == 6
    for item in items:
        code, verified = _cli_json(capsys, "verify", item)
        assert code == 0, [f for f in verified["findings"] if f["status"] == "FAIL"]
    assert _digests(FORMAT_2 / "sweep-store") == before


def test_format_3_fixtures_name_the_built_in_models_where_they_were_before_they_moved() -> None:
    for snapshot, where in ((LM_3, "genrun.schemas.stop_tokens:"), (DIFFUSION_3, "genrun.schemas.stop_diffusion:")):
        declared = BackendDeclaration.model_validate_json((snapshot / layout.BACKEND).read_bytes())
        assert declared.stop_evidence_models and all(m.startswith(where) for m in declared.stop_evidence_models)
        assert declared.stop_evidence_schema is None  # named only: readers resolve them by that name
    loop = BackendDeclaration.model_validate_json((LOOP_3 / layout.BACKEND).read_bytes())
    assert loop.call_config is not None and loop.call_config.model == "genrun.schemas.stages:LoopCall" and loop.call_config.json_schema


@pytest.mark.parametrize("snapshot", [LM_3, DIFFUSION_3], ids=["lm-3", "diffusion-3"])
def test_a_model_named_where_it_was_validates_as_the_model_it_moved_into(snapshot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    declared = BackendDeclaration.model_validate_json((snapshot / layout.BACKEND).read_bytes())
    code, verified = _cli_json(capsys, "verify", snapshot)
    found = {f["name"]: f for f in verified["findings"]}
    assert code == 0 and (found["stop_evidence"]["status"], found["call_config"]["status"]) == ("PASS", "PASS")
    assert found["stop_evidence"]["evidence"]["models"] == list(declared.stop_evidence_models)  # reported as recorded


def test_a_model_name_genrun_never_wrote_is_refused_not_guessed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / LM_3.name
    shutil.copytree(LM_3, copy)
    backend = copy / layout.BACKEND
    backend.chmod(0o644)
    backend.write_bytes(backend.read_bytes().replace(b"genrun.schemas.stop_tokens:EosEvidence", b"genrun.schemas.stop_tokens:EosEvidenz"))
    _, verified = _cli_json(capsys, "verify", copy)
    stop = next(f for f in verified["findings"] if f["name"] == "stop_evidence")
    assert stop["status"] == "FAIL" and "not genrun's and records no schema for them: genrun.schemas.stop_tokens:EosEvidenz" in stop["message"]


def test_a_moved_store_verifies_the_sweep_items_it_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The format-2 sweep was planned into /tmp/gf2/sweepstore (recorded in its plan) and travels in this repository:
    its items are found beside it, in the store as it is now, and a damaged one there is named."""
    recorded = Path(orjson.loads((SWEEP_2 / layout.SWEEP_PLAN).read_bytes())["store"])
    moved = tmp_path / "reviewed-here"
    shutil.copytree(FORMAT_2 / "sweep-store", moved)
    assert recorded != moved and not (recorded / SWEEP_2.name).is_dir()
    code, verified = _cli_json(capsys, "verify", moved / SWEEP_2.name)
    assert code == 0, verified
    assert len(verified["items"]) == 6 and not any(item["failures"] for item in verified["items"])
    damaged = sorted(p for p in moved.iterdir() if p.name != SWEEP_2.name)[2]
    result = damaged / layout.RESULT
    result.chmod(0o644)
    result.write_bytes(result.read_bytes().replace(b"succeeded", b"failed", 1))
    code, verified = _cli_json(capsys, "verify", moved / SWEEP_2.name)
    assert code == 1
    failing = [item for item in verified["items"] if item["failures"]]
    assert [item["snapshot_id"] for item in failing] == [damaged.name], failing


def test_format_1_stop_evidence_migrates_to_one_model_per_reason() -> None:
    lm = GenerationStop.model_validate_json((LM / layout.STOP).read_bytes())
    diffusion = GenerationStop.model_validate_json((DIFFUSION / layout.STOP).read_bytes())
    assert lm.schema_version == FORMAT_VERSION and diffusion.schema_version == FORMAT_VERSION
    # the record's language-model facts moved into the evidence (format 3), which validates with the family's models
    assert _typed(lm.sequences[0], TOKEN_STOP_EVIDENCE) == EosEvidence(
        eos_token_id=2, source="model_generation_config", stop_length=19, last_token_id=2, fired=("EosTokenCriteria",),
        eos_token_ids=(2,), max_new_tokens=64, max_length=70, prompt_length=6)
    evidence = _typed(diffusion.sequences[0], DIFFUSION_STOP_EVIDENCE)
    assert isinstance(evidence, CompletedEvidence) and (evidence.steps.steps_done, evidence.steps.steps_planned) == (10, 10)


def _typed(stop: SequenceStop, family: tuple) -> object:
    """A loaded row's evidence validated with a family's declared models (what `backend.json` records the schema of)."""
    return stop_evidence_adapter(family).validate_python(stop.evidence.model_dump(mode="json"))


def test_format_2_records_move_their_family_facts_into_the_evidence() -> None:
    lm = GenerationStop.model_validate_json((LM_2 / layout.STOP).read_bytes()).sequences[0]
    diffusion = GenerationStop.model_validate_json((DIFFUSION_2 / layout.STOP).read_bytes()).sequences[0]
    raw = orjson.loads((LM_2 / layout.STOP).read_bytes())["sequences"][0]
    facts = _typed(lm, TOKEN_STOP_EVIDENCE)
    assert (facts.last_token_id, facts.eos_token_ids, facts.prompt_length) == (raw["last_token_id"], tuple(raw["eos_token_ids"]), raw["prompt_length"])
    steps = _typed(diffusion, DIFFUSION_STOP_EVIDENCE)
    assert isinstance(steps, CompletedEvidence) and steps.steps.steps_planned == 10  # format 2's record-level steps_planned, kept once
    assert "steps_planned" not in diffusion.model_dump() and "last_token_id" not in lm.model_dump()


@pytest.mark.parametrize("record", [
    {"reason": "interrupted", "evidence": {"signal": "SIGTERM"}},
    {"reason": "exception", "evidence": {"type": "ValueError", "message": "m"}},
    {"reason": "unknown", "evidence": {"note": "beam search"}},
    {"reason": "unknown", "evidence": {"stop_length": 9, "custom_criteria": ["Mine"], "note": "only custom"}},
    {"reason": "max_new_tokens", "evidence": {"stop_length": 9, "limit": 3, "source": "request"}},
    {"reason": "max_length", "evidence": {"stop_length": 9, "limit": 9, "source": "library_default"}},
    {"reason": "max_time", "evidence": {"stop_length": 9, "max_time": 0.5, "source": "request"}},
    {"reason": "stop_string", "evidence": {"stop_length": 9, "stop_strings": ["1"], "stop_string": "1", "source": "request"}},
    {"reason": "interrupted", "evidence": {"steps_done": 2, "steps_planned": 10, "steps_planned_source": "denoising_loop",
     "num_inference_steps": 10, "timesteps_planned_dry_run": 10, "step_observation": "progress_bar", "denoising_loops": 1,
     "output_returned": False, "signal": "SIGINT", "interrupt_flag_set_at_step": 2}},
    {"reason": "exception", "exception": {"type": "RuntimeError", "message": "boom", "traceback": "tb"}, "evidence": {
     "steps_done": 0, "steps_planned": 10, "steps_planned_source": "requested_num_inference_steps", "num_inference_steps": 10,
     "timesteps_planned_dry_run": None, "step_observation": None, "denoising_loops": 0, "output_returned": False}},
], ids=lambda r: r["reason"] + ("-steps" if "steps_done" in r["evidence"] else ""))
def test_every_format_1_evidence_shape_migrates(record: dict) -> None:
    """The format-1 evidence dicts genrun 0.1.0 wrote, per reason (runner/backends/transformers/instrument/stops.py, diffusers stop_record)."""
    row = {"index": 0, "call_index": 0, "generated": 2, "last_token_id": None, "fired": [], "eos_token_ids": [],
           "max_new_tokens": None, "max_length": None, "prompt_length": None, "exception": None} | record
    stop = GenerationStop.model_validate({"schema_version": 1, "sequences": [row]}).sequences[0]
    assert stop.evidence.reason == stop.reason
    family = DIFFUSION_STOP_EVIDENCE if "steps_done" in record["evidence"] else TOKEN_STOP_EVIDENCE
    assert _typed(stop, family).reason == stop.reason  # valid for the family's declared models
    again = GenerationStop.model_validate_json(GenerationStop(sequences=(stop,)).model_dump_json())
    assert again.sequences[0] == stop


def test_evidence_tagged_for_another_reason_is_refused() -> None:
    row = {"index": 0, "call_index": 0, "reason": "eos", "generated": 2, "evidence": {"reason": "interrupted", "signal": "SIGINT"}}
    with pytest.raises(ValueError, match="evidence is tagged 'interrupted' but reason is 'eos'"):
        GenerationStop.model_validate({"schema_version": FORMAT_VERSION, "sequences": [row]})


def test_newer_artifact_is_refused_naming_the_genrun_that_wrote_it() -> None:
    """Not a validation error (which would read as damage): `NewerFormat`, naming the writer when the file records it."""
    result = orjson.loads((LM / layout.RESULT).read_bytes()) | {"schema_version": 99}
    with pytest.raises(NewerFormat, match=rf"^written by a newer genrun \(format 99\); this genrun reads up to {FORMAT_VERSION}: upgrade"):
        Result.model_validate(result)
    environment = orjson.loads((LM / layout.ENVIRONMENT).read_bytes()) | {"schema_version": 99, "genrun_version": "7.0.0"}
    with pytest.raises(NewerFormat, match=rf"^written by genrun 7\.0\.0 \(format 99\); this genrun reads up to {FORMAT_VERSION}: upgrade"):
        Environment.model_validate(environment)


def test_verify_and_report_refuse_a_newer_snapshot_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = _writable_copy(LM, tmp_path)
    _bump(copy / layout.STOP, schema_version=99)
    _bump(copy / layout.ENVIRONMENT, schema_version=99, genrun_version="7.0.0")
    expected = f"written by genrun 7.0.0 (format 99); this genrun reads up to {FORMAT_VERSION}: upgrade"
    code, verified = _cli_json(capsys, "verify", copy)
    artifacts = next(f for f in verified["findings"] if f["name"] == "artifacts_valid")
    assert code != 0 and artifacts["status"] == "FAIL"
    assert artifacts["evidence"]["problems"] == {layout.STOP: expected, layout.ENVIRONMENT: expected}
    code, report = _cli_json(capsys, "report", copy)
    assert code == 0 and f"{layout.STOP}: {expected}" in report["notes"]


def test_a_newer_progress_stream_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = _writable_copy(LM, tmp_path)
    lines = (copy / layout.PROGRESS).read_bytes().splitlines(keepends=True)
    lines[0] = orjson.dumps(orjson.loads(lines[0]) | {"schema_version": 99}) + b"\n"
    (copy / layout.PROGRESS).write_bytes(b"".join(lines))
    code, verified = _cli_json(capsys, "verify", copy)
    artifacts = next(f for f in verified["findings"] if f["name"] == "artifacts_valid")
    assert code != 0 and artifacts["evidence"]["problems"] == {
        layout.PROGRESS: f"written by genrun 0.1.0 (format 99); this genrun reads up to {FORMAT_VERSION}: upgrade"}


def test_execute_refuses_a_plan_from_a_newer_genrun(tmp_path: Path, tiny_lm: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = plan_request(write_request(tmp_path, tiny_request(tiny_lm)), store=tmp_path / "store")
    _bump(snapshot / layout.MODEL, schema_version=99)
    _bump(snapshot / layout.ENVIRONMENT, genrun_version="7.0.0")
    entries = [(rel, sha256_file(snapshot / rel)) for rel in manifest_candidates(snapshot) if rel != layout.FROZEN_MANIFEST]
    (snapshot / layout.FROZEN_MANIFEST).write_bytes(render_sha256sum(entries))  # a consistent plan, just newer
    code = main(["execute", str(snapshot)])
    err = capsys.readouterr().err
    assert code != 0 and "written by genrun 7.0.0 (format 99)" in " ".join(err.split()), err
    assert not (snapshot / layout.PROGRESS).exists() and not (snapshot / layout.RESULT).exists()


def test_a_newer_signoff_is_reported_not_raised(tmp_path: Path) -> None:
    from genrun.analysis.signoffs import evaluate_signoffs

    copy = _writable_copy(LM, tmp_path)
    (record,) = (copy / layout.SIGNOFFS_DIR).glob("*.json")
    _bump(record, schema_version=99)
    (status,) = evaluate_signoffs(copy, None)
    assert status.state == "invalid" and "written by genrun 0.1.0 (format 99)" in status.reason
