"""Refuse at plan time the decoding modes generate cannot run here, instead of a failed run at execute.

transformers 5.x moved group beam search, contrastive search, DoLa and constrained beam search out of
the library into Hub `custom_generate` repositories (`GENERATION_MODES_MAPPING` in
`transformers.generation.utils` maps those modes to a repo name, the others to a method name):
generate then needs `trust_remote_code=True` and a download, which genrun's offline runs never have.
MusicGen-style models' own `generate` runs greedy search and sampling only.
"""

from pathlib import Path
from typing import Any
from genrun.backends import PlanContext

from ._checkpoint_config import checkpoint_generation_config

# Per mode: the request keys that select it (`GenerationConfig.get_generation_mode`), named in the refusal, and the fix.
_MODE_KEYS = {
    "GROUP_BEAM_SEARCH": (("num_beam_groups", "num_beams"), "remove num_beam_groups (plain beam search with num_beams still runs)"),
    "CONTRASTIVE_SEARCH": (("penalty_alpha", "top_k"), "remove penalty_alpha"),
    "DOLA_GENERATION": (("dola_layers",), "remove dola_layers"),
    "CONSTRAINED_BEAM_SEARCH": (("constraints", "force_words_ids"), "remove constraints / force_words_ids"),
    "BEAM_SEARCH": (("num_beams",), "set num_beams = 1"),
    "BEAM_SAMPLE": (("num_beams", "do_sample"), "set num_beams = 1"),
}
_OWN_LOOP_MODES = ("GREEDY_SEARCH", "SAMPLE")
"""What MusicGen's `generate` accepts (anything else raises ValueError inside it)."""


def mode_problems(context: PlanContext, generation: dict[str, Any], model_dir: Path, own_loop: bool) -> list[str]:
    """Why the decoding mode `[generation]` selects (over the checkpoint's generation config) cannot run; `[]` when it can.

    `own_loop`: the model's `generate` override runs its own greedy/sampling loop (MusicGen)."""
    import transformers

    try:
        from transformers.generation.utils import GENERATION_MODES_MAPPING
    except ImportError:  # a transformers without the mapping: nothing to compare with, generate decides
        return []
    config = checkpoint_generation_config(context, model_dir)
    config.update(**generation)
    mode = config.get_generation_mode()
    selected_by = _selected_by(mode.name, generation)
    target = GENERATION_MODES_MAPPING.get(mode, "")
    if "/" in target:
        return [f"{selected_by} selects {_words(mode.name)}, which transformers {transformers.__version__} no longer ships: it moved to "
                f"the Hub repository {target} (custom_generate, needs trust_remote_code and a download), and genrun runs offline; "
                f"{_fix(mode.name)}"]
    if own_loop and mode.name not in _OWN_LOOP_MODES:
        return [f"{selected_by} selects {_words(mode.name)}, but this model's own generate (MusicGen) runs greedy search and sampling "
                f"only; {_fix(mode.name)}"]
    return []


def _selected_by(mode: str, generation: dict[str, Any]) -> str:
    keys = _MODE_KEYS[mode][0] if mode in _MODE_KEYS else ()
    given = [f"{key} = {generation[key]!r}" for key in keys if key in generation]
    return f"[generation] {', '.join(given)}" if given else "the checkpoint's generation_config.json"


def _fix(mode: str) -> str:
    return _MODE_KEYS[mode][1] if mode in _MODE_KEYS else "use greedy search, sampling or beam search"


def _words(mode: str) -> str:
    return mode.lower().replace("_", " ")
