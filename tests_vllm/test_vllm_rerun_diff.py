"""Reproducibility of vLLM snapshots: `genrun rerun` plans and runs a child (its own engine, as the command does), and
`genrun diff` compares two vLLM snapshots field by field: request, sampling parameters and their sources, the engine's
arguments and resolved configuration, ids and stops. Seeds per request, vLLM's version and the user's `VLLM_*` settings
are in each snapshot."""

import json
from typing import Any

import pytest

from _snapshot import ids, problems, stops
from conftest import SMALL_ENGINE


def _paths(changes: Any) -> dict[str, tuple[Any, Any]]:
    return {c.path: (c.a, c.b) for c in changes}


def test_rerun_of_a_vllm_snapshot_runs_and_diff_names_what_changed(engine: Any, run_on: Any) -> None:
    from genrun.analysis.diff import diff_snapshots
    from genrun.runner.rerun import rerun_snapshot

    parent, _ = run_on(engine, prompts=["Count: 0"], generation={"max_tokens": 12, "temperature": 0})
    outcome = rerun_snapshot(parent, sets=["generation.max_tokens=5"], note="shorter", live=False)
    child = outcome.child
    assert outcome.result.status == "succeeded"
    assert problems(child) == []
    assert json.loads((child / "lineage.json").read_text())["parent_id"] == parent.name
    assert ids(child)[0] == ids(parent)[0][:5]
    config = json.loads((child / "vllm-config.before-generate.json").read_text())
    assert config["requests"][0]["params"]["seed"] == 0  # the request's seed, on every request
    assert config["vllm_version"] == "0.32.0" and config["vllm_environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1"

    diff = diff_snapshots(parent, child)
    assert _paths(diff.request)["generation.max_tokens"] == (12, 5)
    config_changes = _paths(diff.effective_config)
    assert config_changes["call_config.requests[0].params.max_tokens"] == (12, 5), sorted(config_changes)
    assert not [p for p in config_changes if p.startswith(("call_config.engine", "call_config.vllm"))], "same engine, same vLLM"
    (row,) = diff.sequences
    assert (row.reason_a, row.reason_b, row.count_a, row.count_b, row.first_divergence) == ("max_new_tokens", "max_new_tokens", 12, 5, 5)
    assert diff.lineage is not None


def test_diff_of_two_vllm_snapshots_compares_engine_sampling_ids_and_stops(engine: Any, small_engine: Any, run_on: Any) -> None:
    from genrun.analysis.diff import diff_snapshots

    a, _ = run_on(engine, prompts=["abc"], generation={"max_tokens": 30, "temperature": 0})
    b, _ = run_on(small_engine, prompts=["abc"], generation={"max_tokens": 30, "temperature": 0, "stop": ["fgh"]}, engine=SMALL_ENGINE)
    again, _ = run_on(engine, prompts=["abc"], generation={"max_tokens": 30, "temperature": 0})

    same = diff_snapshots(a, again)
    assert same.effective_config == () and same.request == () and all(s.identical for s in same.sequences)

    diff = diff_snapshots(a, b)
    changes = _paths(diff.effective_config)
    assert changes["call_config.engine.max_model_len"] == (1024, 64)
    assert changes["call_config.engine.generation_config"] == ("auto", "vllm")
    assert changes["call_config.engine_arguments.max_model_len"][1] == 64
    assert changes["call_config.requests[0].params.stop"] == ([], ["fgh"])
    assert changes["call_config.requests[0].sources.stop"] == ("vllm_default", "request")
    (row,) = diff.sequences
    assert (row.reason_a, row.reason_b) == ("eos", "stop_string") and stops(b)[0]["evidence"]["stop_string"] == "fgh"
    assert row.first_divergence == len(ids(b)[0]) and not row.identical


def test_rerun_sets_engine_arguments_by_the_tables_name(engine: Any, run_on: Any) -> None:
    """`--set engine.max_model_len=64` reaches `[engine]`: the child's plan holds its budget against that context (refused
    while max_tokens is 100: no engine starts). Not run to the end here: a child's own in-process engine, released, tears
    down vLLM's process-wide parallel groups under the session's engines (`test_rerun_of_a_vllm_snapshot...` runs one)."""
    from genrun.runner.errors import BudgetRefused
    from genrun.runner.rerun import plan_rerun, rerun_snapshot

    parent, _ = run_on(engine, prompts=["Count: 0"], generation={"max_tokens": 100, "temperature": 0})
    with pytest.raises(BudgetRefused) as refused:
        rerun_snapshot(parent, sets=["engine.max_model_len=64"], live=False)
    assert "exceeds the model's context limit 64; lower [generation] max_tokens to at most 56" in str(refused.value)
    planned = plan_rerun(parent, sets=["engine.max_model_len=64", "generation.max_tokens=20"])
    assert planned.request.backend_tables["engine"] == {"enforce_eager": True, "max_model_len": 64}
    assert [(c.key, c.action, c.parent_absent) for c in planned.lineage.changes] == [("engine.max_model_len", "set", True),
                                                                                    ("generation.max_tokens", "set", False)]
