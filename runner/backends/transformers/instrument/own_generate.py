"""Models whose `generate` override never calls transformers' (MusicGen, MusicGen-Melody).

Such an override merges the config itself and calls `self._sample` directly, so a patch on
`GenerationMixin.generate` alone never sees it. It still calls `self._prepare_generated_length`
and `self._get_stopping_criteria` and accepts a `streamer`, so wrapping the override's class
attribute with the same wrapper gives the same evidence. Only an override that runs a decoding
loop itself (`self._sample(`) is wrapped; one that calls up
(`super().generate(...)`, e.g. Whisper, remote-code models) or delegates to sub-models (Bark) is left alone: the
`GenerationMixin.generate` patch already reaches it, once per call it makes.
"""

import inspect
import re
from collections.abc import Iterable
from typing import Any

from transformers.generation.utils import GenerationMixin

_CALLS_UP = re.compile(r"super\([^)]*\)\.generate\(|GenerationMixin\.generate\(")
_RUNS_THE_LOOP = re.compile(r"self\._(sample|beam_search|assisted_decoding)\(")


def defining_class(cls: type) -> type | None:
    """The class in `cls`'s MRO whose `generate` instances use (`None` when it is `GenerationMixin`'s)."""
    for klass in cls.__mro__:
        if "generate" in klass.__dict__:
            return None if klass is GenerationMixin else klass
    return None


def calls_up(klass: type) -> bool:
    """The class's source (the override and its helpers, e.g. Whisper's windowing) calls `super().generate(...)` /
    `GenerationMixin.generate(...)`; unreadable source counts as calling up (the safe side: left alone)."""
    try:
        source = inspect.getsource(klass)
    except (OSError, TypeError):
        return True
    return bool(_CALLS_UP.search(source))


def runs_the_loop(function: Any) -> bool:
    """The override calls a decoding loop (`self._sample(...)`, ...) itself, as MusicGen does (Bark's delegates to sub-models)."""
    try:
        return bool(_RUNS_THE_LOOP.search(inspect.getsource(function)))
    except (OSError, TypeError):
        return False


def own_loop_classes(models: Iterable[Any]) -> tuple[type, ...]:
    """Classes whose `generate` override must be wrapped for these models (each once)."""
    found: list[type] = []
    for model in models:
        klass = defining_class(type(model))
        if klass is not None and klass not in found and not calls_up(klass) and runs_the_loop(klass.__dict__["generate"]):
            found.append(klass)
    return tuple(found)
