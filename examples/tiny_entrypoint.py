"""An entry point: your own code calls `generate`; genrun loads the model and instruments every call.

genrun calls `fn(model, tokenizer, inputs, generation, **kwargs)`:
- `model`, `tokenizer`: what genrun loaded from `[model]` (or what your `[model] loader` returned);
- `inputs`: the request's `[input]` table as a dict, only the keys you set:
  `{"prompt": "..."}`, `{"prompts": ["...", ...]}` or `{"messages": [{"role": "user", "content": "..."}]}`;
- `generation`: the `[generation]` table as a dict, e.g. `{"max_new_tokens": 16}`;
- `kwargs`: the `[entrypoint] kwargs` table.
The return value is saved as `outputs/result.json` (and `outputs/result.txt` when it is a string).
"""


def count_down(model, tokenizer, inputs, generation, **kwargs):
    """Pass the request's generation settings through, so the limits genrun records are the request's own."""
    enc = tokenizer(inputs["prompt"], return_tensors="pt")
    out = model.generate(**enc, **generation)
    return tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
