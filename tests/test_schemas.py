"""Schema models: JSON round trips, refusal of unknown keys in every artifact, and no drift
between the pydantic models and the committed `schemas/json/*.schema.json` files."""

from pathlib import Path
from typing import get_args

import orjson
import pytest
from pydantic import BaseModel, ValidationError

from conftest import run_cli, tiny_request, write_request
from genrun.runner.plan import plan_request
from genrun.schemas import (
    EVENT_ADAPTER,
    BackendDeclaration,
    AudioEvidence,
    CallEvidence,
    Determinism,
    Lineage,
    RequestChange,
    CodeIdentity,
    Environment,
    ExceptionInfo,
    ExecutionIdentity,
    GeneratedTokenIds,
    GenerationCalls,
    GenerationConfigBeforeGenerate,
    GenerationStop,
    ModelIdentity,
    PeakMemory,
    Phases,
    Request,
    Result,
    RunLogLine,
    STOP_REASON_MEANING,
    SequenceStop,
    Signoff,
    StopReason,
    Timings,
    TokenBudget,
    TokenSequenceSummary,
    layout,
)
from genrun.schemas.artifacts import SNAPSHOT_ARTIFACTS, SWEEP_ARTIFACTS, artifact_for
from genrun.schemas.evidence import stop_evidence_adapter
from genrun.schemas.export import EVIDENCE_SCHEMAS, JSON_DIR, SCHEMA_SOURCES, render_json_schemas
from genrun.schemas.format_doc import DOC_PATH, render_format_doc
from genrun.runner.backends.transformers.evidence import EVIDENCE, EosEvidence, ExceptionEvidence

FROZEN_MODELS = {
    layout.REQUEST: Request,
    layout.ENVIRONMENT: Environment,
    layout.CODE: CodeIdentity,
    layout.MODEL: ModelIdentity,
    layout.TOKEN_BUDGET: TokenBudget,
    layout.BACKEND: BackendDeclaration,
}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory, tiny_lm: Path) -> Path:
    directory = tmp_path_factory.mktemp("planned")
    return plan_request(write_request(directory, tiny_request(tiny_lm)), store=directory / "store")


def _stops() -> GenerationStop:
    """Two language-model rows: the core record, the token facts and the reason's facts in the evidence."""
    facts = dict(last_token_id=2, fired=("EosTokenCriteria",), eos_token_ids=(2,), max_new_tokens=16, max_length=22, prompt_length=6)
    stop = SequenceStop(index=0, call_index=0, reason="eos", generated=3,
                        evidence=EosEvidence(eos_token_id=2, source="model_generation_config", stop_length=9, **facts))
    return GenerationStop(sequences=(stop, stop.model_copy(update={"index": 1, "reason": "exception",
                          "exception": ExceptionInfo(type="ValueError", message="m", traceback="tb"),
                          "evidence": ExceptionEvidence(type="ValueError", message="m", **facts)})))


def _hand_made() -> list[BaseModel]:
    """One instance of each execution-time artifact, filled the way the runner fills them."""
    return [
        _stops(),
        GeneratedTokenIds(prompt_length=6, eos_token_ids=(2,), pad_token_id=0, sequences=(TokenSequenceSummary(
            index=0, call_index=0, count=3, last_ids=(9, 8, 2), eos_positions=(2,), text="1 0", text_with_special="1 0 <eos>"),)),
        GenerationConfigBeforeGenerate(call_index=0, model_class="LlamaForCausalLM", model_generation_config={"eos_token_id": 2},
                                       overrides={"max_new_tokens": 16}, effective={"max_length": 22, "eos_token_id": [2]},
                                       limit_sources={"max_length": "request"}, eos_token_ids=(2,), pad_token_id=0,
                                       pad_defaulted_to_eos=False, prompt_length=6, batch_rows=1, context_limit=256,
                                       dtype="float32", device="cpu"),
        Result(status="succeeded", exit_code=0, unit="token", generated=3, generated_tokens=3, units_per_s=100.0,
               produced_seconds=None, requested_seconds=None,
               timings=Timings(load_s=0.1, first_token_s=0.01, decode_s=0.02, total_s=0.2,
                               phases=Phases(checks_s=0.02, imports_s=0.01, prepare_s=0.01, load_s=0.1, generate_s=0.04, evidence_s=0.02)),
               peak_memory=PeakMemory(rss_bytes=1, cuda_allocated_bytes=None, cuda_reserved_bytes=None),
               exception=None, signal=None, execution_identity=ExecutionIdentity(code_digest="a", model_digest="b", plan_digest="c"),
               outputs=("outputs/sequence_0.txt",), forced=False),
        GenerationCalls(transformers_version="5.24.0", self_check_problems=(), evidence_level="partial", foreign_thread_calls=1, calls=(
            CallEvidence(call_index=0, model_class="MusicgenForConditionalGeneration", path="own_generate", evidence_level="full", missing=(),
                         nested_calls=0, audio=AudioEvidence(codebooks=4, frames_per_second=50.0, sampling_rate=32000, frames=(9,),
                                                             seconds=(0.18,), files=("audio_0.wav",))),
            CallEvidence(call_index=1, model_class="LlamaForCausalLM", path="continuous_batching", evidence_level="partial",
                         missing=("per-step progress",), nested_calls=0),
            CallEvidence(call_index=2, model_class="LlamaForCausalLM", path="assisted", evidence_level="full", missing=(), nested_calls=3,
                         draft_tokens_proposed=12, draft_tokens_accepted=5))),
        Signoff(decision="accept", digest_kind="snapshot", digest="0" * 64, snapshot_id="x", by="a@b", at="2026-11-29T00:00:00Z",
                note=None, accepted_gaps=("no scores",), genrun_version="0.1.0", signed=False),
        Lineage(parent_id="p", parent_path="/s/p", parent_snapshot_digest="1" * 64, parent_plan_digest="2" * 64,
                changes=(RequestChange(key="generation.max_new_tokens", action="set", parent_value=16, child_value=64),
                         RequestChange(key="generation.top_k", action="unset", parent_value=5, child_absent=True)),
                note="EOS or cap?", allow_changed=True, changed_since_parent=("the model files changed",)),
        RunLogLine(t=-0.5, stream="stderr", source="tqdm", shown=False, text="Loading weights: 100%|██████████| 20/20"),
        Determinism(seed=0, strict_requested=True, deterministic_algorithms=True, deterministic_warn_only=False, sampling=False,
                    device="cuda:0", torch_threads=2, torch_interop_threads=2, cudnn_deterministic=True, cudnn_benchmark=False,
                    cuda_matmul_allow_tf32=False, cublas_workspace_config=":4096:8"),
    ]


def test_frozen_artifacts_round_trip(planned: Path) -> None:
    for name, model in FROZEN_MODELS.items():
        raw = (planned / name).read_bytes()
        loaded = model.model_validate_json(raw)
        assert model.model_validate_json(orjson.dumps(loaded.model_dump(mode="json"))) == loaded
        assert orjson.loads(raw) == loaded.model_dump(mode="json"), f"{name} is not in normalised form"


@pytest.mark.parametrize("instance", _hand_made(), ids=lambda m: type(m).__name__)
def test_execution_artifacts_round_trip(instance: BaseModel) -> None:
    again = type(instance).model_validate_json(orjson.dumps(instance.model_dump(mode="json")))
    if isinstance(instance, GenerationStop):  # a stop record's evidence loads untyped; its facts and declared model round-trip below
        assert again.model_dump(mode="json") == instance.model_dump(mode="json")
        return
    assert again == instance


def test_stop_evidence_round_trips_through_its_declared_models() -> None:
    """Loaded, a row's evidence keeps every fact; validated with the family's models (as backend.json records them) it is the typed model again."""
    stops = _stops()
    loaded = GenerationStop.model_validate_json(stops.model_dump_json())
    adapter = stop_evidence_adapter(EVIDENCE.stop_evidence)
    assert [adapter.validate_python(s.evidence.model_dump(mode="json")) for s in loaded.sequences] == [s.evidence for s in stops.sequences]
    with pytest.raises(ValidationError, match="surprise"):
        adapter.validate_python(loaded.sequences[0].evidence.model_dump(mode="json") | {"surprise": 1})


@pytest.mark.parametrize("instance", _hand_made(), ids=lambda m: type(m).__name__)
def test_unknown_key_in_an_artifact_is_refused(instance: BaseModel) -> None:
    data = instance.model_dump(mode="json") | {"surprise": 1}
    with pytest.raises(ValidationError, match="surprise"):
        type(instance).model_validate(data)


def test_frozen_artifact_with_unknown_key_is_refused(planned: Path) -> None:
    for name, model in FROZEN_MODELS.items():
        data = orjson.loads((planned / name).read_bytes()) | {"surprise": 1}
        with pytest.raises(ValidationError, match="surprise"):
            model.model_validate(data)


def test_progress_events_parse_by_tag() -> None:
    line = b'{"seq": 3, "event": "progress", "t": 1.5, "generated": 8, "units_per_s": 5.0, "window_units_per_s": 6.0}'
    event = EVENT_ADAPTER.validate_json(line)
    assert type(event).__name__ == "ProgressEvent" and event.generated == 8
    with pytest.raises(ValidationError):
        EVENT_ADAPTER.validate_json(b'{"seq": 0, "event": "progres", "t": 0, "generated": 0}')


def test_loaded_models_are_immutable(planned: Path) -> None:
    budget = TokenBudget.model_validate_json((planned / layout.TOKEN_BUDGET).read_bytes())
    with pytest.raises(ValidationError):
        budget.fits_context = False  # type: ignore[misc]


def test_committed_json_schemas_match_the_models() -> None:
    rendered = render_json_schemas()
    on_disk = {p.name: p.read_bytes() for p in JSON_DIR.glob("*.schema.json")}
    stale = sorted(name for name in rendered.keys() | on_disk.keys() if rendered.get(name) != on_disk.get(name))
    assert not stale, f"schemas/json drifted from the models: {stale}; run 'genrun schema' and commit the result"
    assert len(rendered) == len(SCHEMA_SOURCES)
    with_schema = [spec.schema for spec in (*SNAPSHOT_ARTIFACTS, *SWEEP_ARTIFACTS) if spec.schema is not None]
    assert sorted(SCHEMA_SOURCES) == sorted(set(with_schema) | set(EVIDENCE_SCHEMAS)), \
        "one schema file per registry entry that has a schema, and one per built-in family's stop evidence"


def test_committed_format_doc_matches_the_models() -> None:
    assert DOC_PATH.read_text() == render_format_doc(), "docs/snapshot-format.md drifted from the schemas; run 'genrun schema' and commit it"


def test_format_doc_covers_every_file_reason_and_state() -> None:
    doc = render_format_doc()
    assert set(STOP_REASON_MEANING) == set(get_args(StopReason)), "every stop reason has its wording, and only those"
    assert set(layout.STATE_MEANING) == set(layout.SnapshotState)
    for spec in (*SNAPSHOT_ARTIFACTS, *SWEEP_ARTIFACTS):
        assert f"| `{spec.name}` | {spec.phase} |" in doc, spec.name
    for name in (*layout.FROZEN_FILES, *layout.OPTIONAL_FROZEN_FILES, layout.FROZEN_MANIFEST, *layout.EXECUTION_FILES, layout.MANIFEST):
        assert artifact_for(name) is not None, f"{name} has no entry in genrun.schemas.artifacts"
    models = {spec.model for spec in (*SNAPSHOT_ARTIFACTS, *SWEEP_ARTIFACTS) if isinstance(spec.model, type)}
    assert all(f"### {model.__name__}\n" in doc for model in models), "every artifact model has its fields table"
    assert all(f"| `{reason}` |" in doc for reason in STOP_REASON_MEANING)
    assert "| 1 | genrun 0.1.0" in doc


def test_schema_command_writes_every_file(tmp_path: Path) -> None:
    proc = run_cli("schema", "--out", tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr
    written = orjson.loads(proc.stdout)
    assert sorted(Path(p).name for p in written) == sorted(render_json_schemas())
    assert all(Path(p).read_bytes() == render_json_schemas()[Path(p).name] for p in written)


def test_field_docstrings_become_schema_descriptions() -> None:
    schema = orjson.loads((JSON_DIR / "generation-stop.schema.json").read_bytes())
    stop = schema["$defs"]["SequenceStop"]["properties"]["reason"]
    assert "never guessed" in stop["description"] or "unknown" in stop["description"]
