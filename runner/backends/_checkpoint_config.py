"""A checkpoint's `config.json` and `generation_config.json` as the plan reads them: once per sweep plan session.

Every plan-time check of a transformers request reads the same two files (key validation, decoding mode,
generate's value builders, the budget). Within `genrun sweep plan` each is read once per model directory
(`_plan_session.once`); callers get their own copy, since transformers' objects are mutable and some
checks update them.
"""

import copy
from pathlib import Path
from typing import Any

from .._plan_session import once


def checkpoint_config(model_dir: Path, trust_remote_code: bool) -> Any:
    """`AutoConfig.from_pretrained(model_dir)` (offline); raises what transformers raises."""
    from transformers import AutoConfig

    shared = once(("config", str(model_dir), trust_remote_code),
                  lambda: AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code, local_files_only=True))
    return copy.deepcopy(shared)


def checkpoint_generation_config(model_dir: Path, config: Any | None = None) -> Any:
    """The checkpoint's `generation_config.json`, else the one transformers derives from its config (as `from_pretrained`
    sets `model.generation_config`), else the defaults."""
    from transformers import GenerationConfig

    if (model_dir / "generation_config.json").is_file():
        return copy.deepcopy(once(("generation-config", str(model_dir)), lambda: GenerationConfig.from_pretrained(model_dir)))
    return GenerationConfig.from_model_config(config) if config is not None else GenerationConfig()  # no file to read
