"""The transformers instrumentation where it used to be wrong (issue 42 item 8): continuous batching with prompts of
unequal length (each row's stop evidence carries its own prompt length, so `stop_length - prompt_length` is what the
row generated), and a failure of genrun's own preparation (the call runs exactly as without genrun, and the progress
recorder keeps no ids of the previous call)."""

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from genrun.runner.backends.transformers.instrument import CaptureSession, instrument_generate
from genrun.runner.backends.transformers.instrument.stops import classify_calls
from genrun.runner.backends import exception_info


def test_each_row_of_generate_batch_keeps_its_own_prompt_length(tiny_lm: Path) -> None:
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    prompts = [tok(text)["input_ids"] for text in ("count down from 3 :", "count down from 3 : 2 1 :", "count down from 9 : 8 7 6 :")]
    assert len({len(p) for p in prompts}) == 3, [len(p) for p in prompts]
    session = CaptureSession(caller="entrypoint", on_step=lambda n: None, on_config=lambda call: None)
    small = ContinuousBatchingConfig(page_size=16, num_blocks=16, max_batch_tokens=64, max_requests_per_batch=4)
    with instrument_generate(session):
        model.generate_batch(inputs=prompts, generation_config=GenerationConfig(max_new_tokens=3, eos_token_id=2, do_sample=False),
                             continuous_batching_config=small)
    rows = classify_calls(session.calls, tok, exception_info)
    assert [r.stop.evidence.prompt_length for r in rows] == [len(p) for p in prompts]  # was the longest prompt's, for every row
    lengths = [(r.stop.evidence.fact("stop_length"), r.stop.evidence.prompt_length, r.stop.generated) for r in rows]
    assert all(stop - prompt == generated for stop, prompt, generated in lengths), lengths


def test_a_failing_call_start_runs_the_call_as_without_genrun_and_drops_the_previous_ids(tiny_lm: Path) -> None:
    """`session.on_call_start` (the backend's) and the instance hooks ran outside the protection, so their failure broke the
    user's call; and when the protection's fallback was taken, the recorder kept reading the previous call's last ids."""
    model = AutoModelForCausalLM.from_pretrained(tiny_lm).eval()
    tok = AutoTokenizer.from_pretrained(tiny_lm)
    enc = tok("count down from 5 :", return_tensors="pt")
    with torch.no_grad():
        expected = model.generate(**enc, max_new_tokens=4, do_sample=False)
    last_ids = [tuple]  # what ProgressRecorder.set_last_ids holds: where `last_ids` come from

    def on_call_start(call):  # the backend's callback; it fails for the second prepared call
        if call.stream is not None and call.index == 1:
            raise RuntimeError("genrun's own bookkeeping failed")
        last_ids[0] = call.stream.last_ids if call.stream else tuple

    session = CaptureSession(caller="entrypoint", on_step=lambda n: None, on_config=lambda call: None, on_call_start=on_call_start)
    with instrument_generate(session), torch.no_grad():
        first = model.generate(**enc, max_new_tokens=4, do_sample=False)
        assert last_ids[0]() != ()  # the first call's ids feed the progress records
        second = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert torch.equal(first, expected) and torch.equal(second, expected)
    assert len(session.calls) == 2 and "the call ran uninstrumented" in session.calls[1].missing[0]
    assert last_ids[0]() == ()  # not the first call's ids
