"""Does the installed transformers still have the private methods the instrumentation hooks?

genrun records the prompt length and the effective config through two *private* methods that
generate calls on `self` (`_prepare_generated_length`, `_get_stopping_criteria`), and reads a
parameter by name (`input_ids_length`). A future transformers may rename any of them. The check
runs once when this module is imported (`IMPORT_CHECK`) and again when a run starts (so a change
made after import is seen); every hook whose method or parameters are missing is left out: the
run still works, with reduced evidence, and `generation-calls.json` names the problem and the
transformers version.
"""

import inspect
from typing import NamedTuple

import transformers
from transformers.generation.utils import GenerationMixin

EXPECTED_PARAMETERS: dict[str, tuple[str, ...]] = {
    "_prepare_generated_length": ("generation_config", "has_default_max_length", "inputs_tensor", "input_ids_length"),
    "_get_stopping_criteria": ("generation_config", "stopping_criteria"),
}
"""Hooked private method -> the parameters genrun reads from its arguments."""


class SelfCheck(NamedTuple):
    """Which hooks are usable on the installed transformers."""

    transformers_version: str
    """`transformers.__version__`."""
    usable: frozenset[str]
    """Hooked methods present with the expected parameters."""
    problems: tuple[str, ...]
    """One sentence per unusable hook, naming the method, what changed and the consequence."""


CONSEQUENCES = {
    "_prepare_generated_length": "prompt length comes from the streamed prompt and has_default_max_length is not recorded",
    "_get_stopping_criteria": "no effective-config file and no per-row stop evidence (stop reasons fall back to unknown)",
}


def run_self_check() -> SelfCheck:
    """Inspect `GenerationMixin` now (a few `inspect.signature` calls)."""
    version = transformers.__version__
    usable: set[str] = set()
    problems: list[str] = []
    for name, parameters in EXPECTED_PARAMETERS.items():
        method = getattr(GenerationMixin, name, None)
        if method is None:
            problems.append(f"transformers {version}: GenerationMixin.{name} does not exist; {CONSEQUENCES[name]}")
            continue
        try:
            present = set(inspect.signature(method).parameters)
        except (TypeError, ValueError) as exc:
            problems.append(f"transformers {version}: GenerationMixin.{name} has no readable signature ({exc}); {CONSEQUENCES[name]}")
            continue
        missing = [p for p in parameters if p not in present]
        if missing:
            problems.append(f"transformers {version}: GenerationMixin.{name} lacks parameter(s) {', '.join(missing)}; {CONSEQUENCES[name]}")
            continue
        usable.add(name)
    return SelfCheck(version, frozenset(usable), tuple(problems))


IMPORT_CHECK = run_self_check()
"""The result when the instrumentation was imported."""
