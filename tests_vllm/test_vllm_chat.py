"""`[input] messages` on vLLM: rendered by vLLM's own chat path with the checkpoint's chat template; the rendered prompt, the
template's hash and the prompt ids are in the call config (written before generation), and the ids equal `LLM.chat`'s."""

import hashlib
import json
from pathlib import Path
from typing import Any

from _snapshot import ids, problems, stops
from conftest import MODEL, write_request

CONVERSATION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_a_conversation_runs_through_vllms_chat_path_and_equals_llm_chat(tmp_path: Path, store: Path, engine: Any) -> None:
    from safetensors.numpy import load_file
    from vllm import SamplingParams

    from genrun.runner.execute import execute_snapshot
    from genrun.runner.plan import plan_request

    request = write_request(tmp_path, prompts=["placeholder"], generation={"max_tokens": 40, "temperature": 0})
    text = request.read_text()
    messages = ", ".join(f'{{role = "{m["role"]}", content = "{m["content"]}"}}' for m in CONVERSATION)
    request.write_text(text[:text.index("[input]")] + f"[input]\nmessages = [{messages}]\n\n" + text[text.index("[generation]"):])
    snapshot = plan_request(request, store)
    result = execute_snapshot(snapshot, loaded=engine, live=False)
    assert result.status == "succeeded", result

    (bare,) = engine.model.chat(CONVERSATION, SamplingParams(max_tokens=40, temperature=0, seed=0), use_tqdm=False)
    chat = json.loads((snapshot / "vllm-config.before-generate.json").read_text())["chat"]
    assert chat["rendered_prompt"] == bare.prompt == "system: be brief\nuser: hi\nassistant:"
    assert chat["prompt_token_ids"] == list(bare.prompt_token_ids)
    assert chat["template_sha256"] == hashlib.sha256((MODEL / "chat_template.jinja").read_bytes()).hexdigest()
    assert load_file(str(snapshot / "prompt-token-ids.safetensors"))["prompt_0"].tolist() == list(bare.prompt_token_ids)
    assert ids(snapshot)[0] == list(bare.outputs[0].token_ids) and len(ids(snapshot)[0]) == 28  # " abc...z" + EOS, by construction
    assert [s["reason"] for s in stops(snapshot)] == ["eos"]
    assert problems(snapshot) == []
