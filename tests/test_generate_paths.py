"""The same evidence on every generate path: beam search, assisted decoding, paged batching, threads, a changed transformers.

Runs go through the real `genrun run` CLI (in-process `main`) on the bundled countdown model
("count down from N :" -> "N-1 ... 0 <eos>"), so every expected count is known exactly.
"""

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from _lm_helpers import EOS, assert_counts_agree, read_ids, read_json, read_progress, request_text
from genrun.runner.cli import main
from genrun.runner.backends.transformers.instrument import CaptureSession, instrument_generate

ENTRIES = '''
import torch

def _enc(tok, inputs):
    return tok(inputs["prompt"], return_tensors="pt")

def self_assisted(model, tok, inputs, generation):
    """assistant_model=model: the nested drafts run on the very instance the outer call hooked."""
    enc = _enc(tok, inputs)
    # one draft token per nested call, so later nested calls see a longer input than the outer prompt
    model.generation_config.num_assistant_tokens = 1
    model.generation_config.num_assistant_tokens_schedule = "constant"
    out = model.generate(**enc, assistant_model=model, **generation)
    return {"new_tokens": int(out.shape[1] - enc["input_ids"].shape[1]), "ids": out[0].tolist()}

def small_paged_cache():
    """A cache sized for a few tokens: the default sizes itself from free memory (GiBs, a minute on CPU)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig
    return ContinuousBatchingConfig(page_size=16, num_blocks=16, max_batch_tokens=64, max_requests_per_batch=4)

def paged(model, tok, inputs, generation):
    enc = _enc(tok, inputs)
    out = model.generate(enc["input_ids"], cache_implementation="paged", continuous_batching_config=small_paged_cache(), **generation)
    return {"ids": out.tolist()}
'''


def run(tmp_path: Path, text: str) -> Path:
    """`genrun run` through the real CLI; returns the sealed snapshot."""
    request = tmp_path / "request.toml"
    request.write_text(text)
    store = tmp_path / "store"
    assert main(["run", str(request), "--store", str(store)]) == 0
    (snapshot,) = store.iterdir()
    return snapshot


def verify(snapshot: Path) -> dict:
    """The real verify (every check); a partial snapshot is a WARN, never a crash."""
    import genrun

    findings = genrun.verify(snapshot).findings
    return {f.name: f.model_dump() for f in findings}


def entry(tmp_path: Path, name: str) -> str:
    (tmp_path / f"{name}.py").write_text(ENTRIES)
    return name


# -- beam search --------------------------------------------------------------------------------


def test_beam_search_rows_ending_by_eos_and_by_length(tmp_path: Path, tiny_lm: Path) -> None:
    """Two prompts, two beams, a budget that cuts the longer countdown: the real reason per returned row."""
    text = request_text(tiny_lm, prompts=["count down from 3 :", "count down from 9 :"], generation={"max_new_tokens": 5, "num_beams": 2},
                        progress={"every_units": 1})
    snapshot = run(tmp_path, text)
    stops = read_json(snapshot, "generation-stop.json")["sequences"]
    assert [(s["reason"], s["generated"]) for s in stops] == [("eos", 4), ("max_new_tokens", 5)]
    assert stops[0]["evidence"]["fired"] == ["EosTokenCriteria"] and stops[1]["evidence"]["fired"] == ["MaxLengthCriteria"]
    ids = read_ids(snapshot)
    assert ids["sequence_0"][-1] == EOS and len(ids["sequence_1"]) == 5
    assert_counts_agree(snapshot)
    events = [e["event"] for e in read_progress(snapshot)]
    assert "first_token" in events and events.count("progress") >= 1
    result = read_json(snapshot, "result.json")
    assert result["timings"]["first_token_s"] is not None and result["units_per_s"] > 0
    calls = read_json(snapshot, "generation-calls.json")
    assert [(c["path"], c["evidence_level"]) for c in calls["calls"]] == [("beam_search", "full")]
    assert verify(snapshot)["stop_reasons"]["status"] == "PASS"


def test_group_beam_search_is_refused_at_plan_time(tmp_path: Path, tiny_lm: Path, capsys) -> None:
    """transformers 5.x moved group beam search to a Hub custom_generate repo: offline it can never run, so the plan says so
    (exit 2, the key and the reason named, nothing written) instead of a run failing inside generate."""
    import transformers
    from transformers.generation.utils import GENERATION_MODES_MAPPING, GenerationMode

    assert "/" in GENERATION_MODES_MAPPING[GenerationMode.GROUP_BEAM_SEARCH]  # the installed version's fact this refusal rests on
    request = tmp_path / "request.toml"
    request.write_text(request_text(tiny_lm, generation={"max_new_tokens": 4, "num_beams": 4, "num_beam_groups": 2, "diversity_penalty": 0.5}))
    store = tmp_path / "store"
    capsys.readouterr()
    assert main(["run", str(request), "--store", str(store)]) == 2
    message = " ".join(capsys.readouterr().err.split())
    assert "[generation] num_beam_groups = 2, num_beams = 4 selects group beam search" in message
    assert f"transformers {transformers.__version__} no longer ships" in message and "transformers-community/group-beam-search" in message
    assert "remove num_beam_groups" in message
    assert not store.exists()


# -- assisted decoding ----------------------------------------------------------------------------


def test_self_assisted_decoding_keeps_the_outer_calls_counts(tmp_path: Path, tiny_lm: Path) -> None:
    """The nested assistant calls run on the hooked instance; the outer record must stay the outer call's."""
    module = entry(tmp_path, "entries_self_assisted")
    snapshot = run(tmp_path, request_text(tiny_lm, prompt="count down from 5 :", generation={"max_new_tokens": 4},
                                          entrypoint=f"{module}:self_assisted"))
    returned = read_json(snapshot, "outputs/entrypoint-result.json")
    assert returned["new_tokens"] == 4
    (stop,) = read_json(snapshot, "generation-stop.json")["sequences"]
    assert (stop["reason"], stop["generated"], stop["evidence"]["prompt_length"]) == ("max_new_tokens", 4, 6)
    assert read_ids(snapshot)["sequence_0"] == returned["ids"][6:]
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert (config["prompt_length"], config["batch_rows"], config["effective"]["max_length"]) == (6, 1, 10)
    (call,) = read_json(snapshot, "generation-calls.json")["calls"]
    assert call["path"] == "assisted" and call["nested_calls"] >= 2  # before the fix, the last one left prompt_length 8: 2 ids kept
    assert call["draft_tokens_proposed"] == call["nested_calls"] and 0 <= call["draft_tokens_accepted"] <= call["nested_calls"]
    assert_counts_agree(snapshot)


# -- continuous batching --------------------------------------------------------------------------


def test_paged_cache_runs_under_genrun_with_the_same_ids(tmp_path: Path, tiny_lm: Path) -> None:
    """generate refuses a streamer with cache_implementation="paged"; genrun must not attach one."""
    module = entry(tmp_path, "entries_paged")
    sys.path.insert(0, str(tmp_path))
    try:
        small_paged_cache = __import__(module).small_paged_cache
    finally:
        sys.path.remove(str(tmp_path))
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    prompt = tok("count down from 4 :", return_tensors="pt")["input_ids"]
    plain = model.generate(prompt, cache_implementation="paged", continuous_batching_config=small_paged_cache(), max_new_tokens=8)
    snapshot = run(tmp_path, request_text(tiny_lm, prompt="count down from 4 :", generation={"max_new_tokens": 8}, entrypoint=f"{module}:paged"))
    assert read_json(snapshot, "outputs/entrypoint-result.json")["ids"] == plain.tolist()
    assert read_ids(snapshot)["sequence_0"] == plain[0, 0, 6:].tolist() and len(plain[0, 0, 6:]) == 5  # "3 2 1 0 <eos>"
    (stop,) = read_json(snapshot, "generation-stop.json")["sequences"]
    assert (stop["reason"], stop["evidence"]["fired"], stop["evidence"]["last_token_id"]) == ("eos", ["generate_batch"], EOS)
    assert read_json(snapshot, "generation-config.before-generate.json")["effective"]["max_new_tokens"] == 8
    calls = read_json(snapshot, "generation-calls.json")
    assert calls["evidence_level"] == "partial" and calls["calls"][0]["path"] == "continuous_batching"
    assert "streamer" in calls["calls"][0]["missing"][0]
    finding = verify(snapshot)["call_evidence"]
    assert finding["status"] == "WARN" and "continuous batching" in finding["message"]


# -- threads --------------------------------------------------------------------------------------


def test_a_call_from_a_foreign_thread_is_not_recorded(tiny_lm: Path) -> None:
    """A thread that existed before the run (a server's worker) calls generate during it: passed through, counted."""
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    enc = tok(["count down from 3 :"], return_tensors="pt")
    go, done, box = threading.Event(), threading.Event(), {}

    def worker() -> None:
        go.wait(60)
        box["out"] = model.generate(**enc, max_new_tokens=8)
        done.set()

    foreign = threading.Thread(target=worker)
    foreign.start()  # started before instrumentation: not the run's
    session = CaptureSession(caller="request", on_step=lambda n: None, on_config=lambda call: None)
    with instrument_generate(session):
        go.set()
        assert done.wait(60)
        mine = model.generate(**enc, max_new_tokens=8)
    foreign.join()
    assert session.foreign_thread_calls == 1 and len(session.calls) == 1
    assert torch.equal(box["out"], mine)  # the foreign call ran untouched
    assert "_prepare_generated_length" not in model.__dict__  # hooks removed


# -- a changed transformers -----------------------------------------------------------------------

SIMULATION = textwrap.dedent('''
    import sys
    from transformers.generation.utils import GenerationMixin
    original = GenerationMixin._get_stopping_criteria
    if sys.argv[1] == "signature":  # a future transformers: same job, different parameters
        def _get_stopping_criteria(self, *args, **kwargs):
            return original(self, *args, **kwargs)
        GenerationMixin._get_stopping_criteria = _get_stopping_criteria
    else:  # renamed: the old name is gone (generate itself then fails the same way without genrun)
        GenerationMixin._build_stopping_criteria = original
        del GenerationMixin._get_stopping_criteria
    from genrun.runner.backends.transformers.instrument.selfcheck import IMPORT_CHECK
    print("SELFCHECK", IMPORT_CHECK.problems, flush=True)
    from genrun.runner.cli import main
    sys.exit(main(["run", sys.argv[2], "--store", sys.argv[3]]))
''')


def _simulate(tmp_path: Path, tiny_lm: Path, change: str) -> tuple[subprocess.CompletedProcess, Path]:
    request = tmp_path / "request.toml"
    request.write_text(request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 8}))
    store = tmp_path / "store"
    done = subprocess.run([sys.executable, "-c", SIMULATION, change, str(request), str(store)], capture_output=True, text=True, timeout=300)
    (snapshot,) = store.iterdir()
    return done, snapshot


def test_changed_private_signature_runs_with_reduced_evidence_and_says_so(tmp_path: Path, tiny_lm: Path) -> None:
    import transformers

    done, snapshot = _simulate(tmp_path, tiny_lm, "signature")
    assert done.returncode == 0, done.stderr
    assert "_get_stopping_criteria lacks parameter(s) generation_config, stopping_criteria" in done.stdout
    assert read_ids(snapshot)["sequence_0"] == [10, 9, 8, EOS]  # "2 1 0 <eos>": the run itself is unchanged
    calls = read_json(snapshot, "generation-calls.json")
    assert calls["evidence_level"] == "partial" and calls["transformers_version"] == transformers.__version__
    assert transformers.__version__ in calls["self_check_problems"][0]
    assert not (snapshot / "generation-config.before-generate.json").exists()
    (stop,) = read_json(snapshot, "generation-stop.json")["sequences"]
    assert stop["reason"] == "unknown" and "_get_stopping_criteria" in stop["evidence"]["note"]
    findings = verify(snapshot)
    assert findings["call_evidence"]["status"] == "WARN" and transformers.__version__ in findings["call_evidence"]["message"]


def test_renamed_private_method_fails_as_without_genrun_and_the_snapshot_says_why(tmp_path: Path, tiny_lm: Path) -> None:
    done, snapshot = _simulate(tmp_path, tiny_lm, "renamed")
    assert done.returncode == 1, done.stderr  # generate itself cannot run; genrun records it, sealed
    result = read_json(snapshot, "result.json")
    assert result["exception"]["type"] == "AttributeError" and "_get_stopping_criteria" in result["exception"]["message"]
    assert "GenerationMixin._get_stopping_criteria does not exist" in done.stdout
    calls = read_json(snapshot, "generation-calls.json")
    assert calls["evidence_level"] == "partial" and "does not exist" in calls["self_check_problems"][0]
    assert verify(snapshot)["call_evidence"]["status"] == "WARN"


def test_prompt_lookup_decoding_keeps_ids_and_counts_accepted_drafts(tiny_lm: Path) -> None:
    """Prompt-lookup drafts come from the prompt itself (no nested call); accepted drafts arrive as multi-token puts."""
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    enc = tok(["count down from 9 :"], return_tensors="pt")
    session = CaptureSession(caller="request", on_step=lambda n: None, on_config=lambda call: None)
    with instrument_generate(session):
        out = model.generate(**enc, max_new_tokens=20, prompt_lookup_num_tokens=2)
    (call,) = session.calls
    (row,) = call.row_tokens()
    assert call.path == "assisted" and call.nested_calls == 0 and call.draft_tokens_proposed is None
    assert row.ids.tolist() == out[0, 6:].tolist() and row.criteria.kinds == ("eos",)
    assert 0 <= call.draft_tokens_accepted < call.stream.steps == out.shape[1] - 6


def test_generate_batch_called_directly_is_an_outermost_call(tiny_lm: Path) -> None:
    """Continuous batching without generate: config, ids and per-request stops, evidence partial."""
    from transformers import GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    prompts = [tok("count down from 2 :")["input_ids"], tok("count down from 9 :")["input_ids"]]
    small = ContinuousBatchingConfig(page_size=16, num_blocks=16, max_batch_tokens=64, max_requests_per_batch=4)
    configs: list = []
    session = CaptureSession(caller="entrypoint", on_step=lambda n: None, on_config=configs.append)
    with instrument_generate(session):
        out = model.generate_batch(inputs=prompts, generation_config=GenerationConfig(max_new_tokens=4, eos_token_id=2, do_sample=False),
                                   continuous_batching_config=small)
    (call,) = session.calls
    assert call.path == "continuous_batching" and configs == [call] and "streamer" in call.missing[0]
    rows = call.row_tokens()
    assert [r.ids.tolist() for r in rows] == [out["req_0"].generated_tokens, out["req_1"].generated_tokens]
    assert [r.criteria.kinds for r in rows] == [("eos",), ("max_new_tokens",)]  # "1 0 <eos>" vs cut at 4 of "8 7 ... 0"
    assert call.config.limit_sources["max_new_tokens"] == "entrypoint"
