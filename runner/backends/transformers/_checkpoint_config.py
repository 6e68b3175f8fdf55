"""A checkpoint's `config.json`, `generation_config.json` and tokenizer as the plan reads them: once per plan context.

Every plan-time check of a transformers request reads the same files (key validation, decoding mode,
generate's value builders, the frame rate, the budget). Each is read once per directory and
`PlanContext` (one per `genrun plan`, one for a whole `genrun sweep plan`). Configs are handed out as
copies, since transformers' config objects are mutable and some checks update them; the tokenizer is
shared (see `checkpoint_tokenizer`).
"""

import copy
from pathlib import Path
from typing import Any
from genrun.backends import PlanContext



def checkpoint_config(context: PlanContext, model_dir: Path, trust_remote_code: bool) -> Any:
    """`AutoConfig.from_pretrained(model_dir)` (offline), a copy per caller; raises what transformers raises."""
    from transformers import AutoConfig

    shared = context.cached(("transformers", "config", str(model_dir), trust_remote_code),
                            lambda: AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code, local_files_only=True))
    return copy.deepcopy(shared)


def checkpoint_generation_config(context: PlanContext, model_dir: Path, config: Any | None = None) -> Any:
    """The checkpoint's `generation_config.json`, else the one transformers derives from its config (as `from_pretrained`
    sets `model.generation_config`), else the defaults; a copy per caller."""
    from transformers import GenerationConfig

    if (model_dir / "generation_config.json").is_file():
        shared = context.cached(("transformers", "generation-config", str(model_dir)), lambda: GenerationConfig.from_pretrained(model_dir))
        return copy.deepcopy(shared)
    return GenerationConfig.from_model_config(config) if config is not None else GenerationConfig()  # no file to read


def checkpoint_tokenizer(context: PlanContext, tokenizer_dir: Path, trust_remote_code: bool) -> Any:
    """`AutoTokenizer.from_pretrained(tokenizer_dir)` (offline): the checkpoint's, or `[model] processor`'s. Shared, not
    copied (a copy costs as much as a load): plan-time checks encode prompts with it and index its vocabulary, and the
    only change made to it, the padding setup of `_prompts.prepare_tokenizer`, is the same for every item."""
    from transformers import AutoTokenizer

    return context.cached(("transformers", "tokenizer", str(tokenizer_dir), trust_remote_code),
                          lambda: AutoTokenizer.from_pretrained(tokenizer_dir, trust_remote_code=trust_remote_code, local_files_only=True))
