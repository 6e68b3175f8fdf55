"""Turn `[input]` into model inputs the same way at plan time (for the budget) and at execution."""

from typing import Any

from genrun.backends import InputSpec, RequestError



def prepare_tokenizer(tokenizer: Any) -> Any:
    """Left padding, so every row's new tokens start at the same column (what generate expects for decoders)."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        # Batches need a pad token to build the tensor; generate records the pad it really used.
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode_input(tokenizer: Any, spec: InputSpec) -> Any:
    """`BatchEncoding` with `input_ids` [batch, padded_prompt] and `attention_mask`, as PyTorch tensors."""
    prepare_tokenizer(tokenizer)
    if spec.messages is not None:
        if not getattr(tokenizer, "chat_template", None):  # transformers would raise a ValueError at plan or execute time
            raise RequestError("[input] messages needs a chat template, but this model's tokenizer has none "
                               "(no chat_template in tokenizer_config.json); give 'prompt' or 'prompts' instead")
        conversation = [m.model_dump() for m in spec.messages]
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
        return tokenizer([text], return_tensors="pt", padding=True, add_special_tokens=False)
    texts = spec.texts()
    if texts is None:
        raise RequestError("[input] gives no 'prompt', 'prompts' or 'messages', so there is no text to tokenise; give one of them")
    return tokenizer(list(texts), return_tensors="pt", padding=True)
