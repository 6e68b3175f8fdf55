"""Every generate call user code makes is instrumented, and the patch is gone afterwards (even on error)."""

import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.generation.streamers import BaseStreamer
from transformers.generation.utils import GenerationMixin

from _lm_helpers import EOS, assert_counts_agree, plan, read_ids, read_json, request_text, write_entry_module
from genrun.runner.execute import execute_snapshot
from genrun.runner.backends.transformers.instrument import CaptureSession, instrument_generate, is_instrumented

ORIGINAL_GENERATE = GenerationMixin.__dict__["generate"]


def execute(tmp_path: Path, text: str) -> tuple[Path, dict]:
    snapshot = plan(tmp_path, text)
    result = execute_snapshot(snapshot, live=False).model_dump(mode="json")
    assert GenerationMixin.__dict__["generate"] is ORIGINAL_GENERATE and not is_instrumented()
    assert_counts_agree(snapshot)
    return snapshot, result


def test_text_only_helper_still_yields_full_ids_and_the_real_stop(tmp_path: Path, tiny_lm: Path) -> None:
    """A helper that decodes with skip_special_tokens=True and keeps only text; the ids survive anyway."""
    module = write_entry_module(tmp_path, "entries_decode_only")
    snapshot, result = execute(tmp_path, request_text(tiny_lm, prompt="count down from 5 :", generation={"max_new_tokens": 30}, entrypoint=f"{module}:decode_only"))
    assert (snapshot / "outputs" / "entrypoint-result.txt").read_text() == "4 3 2 1 0"  # what the helper returned
    assert read_json(snapshot, "outputs/entrypoint-result.json") == "4 3 2 1 0"
    ids = read_ids(snapshot)["sequence_0"]
    assert len(ids) == 6 and ids[-1] == EOS  # the EOS the helper threw away
    stop = read_json(snapshot, "generation-stop.json")["sequences"][0]
    assert (stop["reason"], stop["evidence"]["eos_token_id"]) == ("eos", EOS)
    assert set(result["outputs"]) == {"sequence_0.txt", "entrypoint-result.json", "entrypoint-result.txt"}
    assert read_json(snapshot, "generation-config.before-generate.json")["overrides"] == {"max_new_tokens": 30}


def test_remote_code_style_override_calling_super_is_caught(tmp_path: Path, tiny_lm: Path) -> None:
    module = write_entry_module(tmp_path, "entries_remote_style")
    text = request_text(tiny_lm, generation={"max_new_tokens": 16}, model_extra={"loader": f"{module}:load_remote_style"})
    snapshot, _ = execute(tmp_path, text)
    assert sys.modules[module].RemoteStyleLM.calls == 1  # the override really ran
    config = read_json(snapshot, "generation-config.before-generate.json")
    assert config["model_class"] == "RemoteStyleLM"
    assert read_json(snapshot, "generation-stop.json")["sequences"][0]["reason"] == "eos"


def test_generate_in_a_worker_thread_is_caught(tmp_path: Path, tiny_lm: Path) -> None:
    module = write_entry_module(tmp_path, "entries_thread")
    snapshot, _ = execute(tmp_path, request_text(tiny_lm, generation={"max_new_tokens": 16}, entrypoint=f"{module}:in_a_thread"))
    assert read_json(snapshot, "generation-stop.json")["sequences"][0]["reason"] == "eos"


def test_two_outermost_calls_get_two_configs_and_numbered_rows(tmp_path: Path, tiny_lm: Path) -> None:
    module = write_entry_module(tmp_path, "entries_two_calls")
    snapshot, result = execute(tmp_path, request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 16}, entrypoint=f"{module}:two_calls"))
    assert read_json(snapshot, "generation-config.before-generate.1.json")["call_index"] == 1
    stops = read_json(snapshot, "generation-stop.json")["sequences"]
    assert [(s["index"], s["call_index"], s["reason"], s["generated"]) for s in stops] == [(0, 0, "eos", 4), (1, 1, "max_new_tokens", 3)]
    assert read_json(snapshot, "outputs/entrypoint-result.json") == {"first": "2 1 0", "second": "4 3 2"}
    assert result["generated"] == 7


def test_patch_is_removed_after_an_error_in_user_code(tmp_path: Path, tiny_lm: Path) -> None:
    module = write_entry_module(tmp_path, "entries_error")
    _, result = execute(tmp_path, request_text(tiny_lm, prompt="count down from 40 :", generation={"max_new_tokens": 20}, entrypoint=f"{module}:raise_mid_run"))
    assert result["status"] == "failed"
    assert GenerationMixin.__dict__["generate"] is ORIGINAL_GENERATE


def _session(steps: list[int]) -> CaptureSession:
    return CaptureSession(caller="request", on_step=steps.append, on_config=lambda call: None)


def test_context_manager_restores_on_exception_and_refuses_nesting(tiny_lm: Path) -> None:
    with pytest.raises(KeyError), instrument_generate(_session([])):
        assert is_instrumented()
        with pytest.raises(RuntimeError, match="already instrumented"), instrument_generate(_session([])):
            pass
        raise KeyError("boom")
    assert GenerationMixin.__dict__["generate"] is ORIGINAL_GENERATE


class ListStreamer(BaseStreamer):
    def __init__(self) -> None:
        self.puts: list[torch.Tensor] = []
        self.ended = False

    def put(self, value: torch.Tensor) -> None:
        self.puts.append(value)

    def end(self) -> None:
        self.ended = True


def test_the_callers_own_streamer_still_gets_everything(tiny_lm: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    enc = tok(["count down from 3 :"], return_tensors="pt")
    mine, steps = ListStreamer(), []
    session = _session(steps)
    with instrument_generate(session):
        out = model.generate(**enc, max_new_tokens=8, streamer=mine)
    assert mine.ended and len(mine.puts) == 1 + 4 and steps == [1, 1, 1, 1]
    (call,) = session.calls
    assert call.stream.tokens()[:, 0].tolist() == out[0, 6:].tolist()
    assert call.config.overrides == {"max_new_tokens": 8, "streamer": "ListStreamer"}


def test_nested_calls_pass_through_uninstrumented(tiny_lm: Path) -> None:
    """Assisted decoding calls the assistant's generate from inside the outer one."""
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    assistant = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    enc = tok(["count down from 9 :"], return_tensors="pt")
    session = _session([])
    with instrument_generate(session):
        out = model.generate(**enc, max_new_tokens=20, assistant_model=assistant)
    (call,) = session.calls
    assert session.nested_calls >= 1
    (row,) = call.row_tokens()
    assert row.ids.tolist() == out[0, 6:].tolist() and row.criteria.kinds == ("eos",)


def test_beam_search_gets_no_streamer_and_the_finished_hypothesis_reason(tmp_path: Path, tiny_lm: Path) -> None:
    snapshot, _ = execute(tmp_path, request_text(tiny_lm, prompt="count down from 3 :", generation={"max_new_tokens": 8, "num_beams": 2}))
    stop = read_json(snapshot, "generation-stop.json")["sequences"][0]
    assert (stop["reason"], stop["evidence"]["fired"]) == ("eos", ["EosTokenCriteria"])
    assert read_json(snapshot, "generated-token-ids.json")["sequences"][0]["text"] == "2 1 0"
