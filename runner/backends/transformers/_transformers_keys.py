"""Check `[generation]` against what transformers' generate really accepts, at plan time.

transformers' `GenerationConfig(**kwargs)` stores unknown kwargs as attributes without a word,
and `generate(**kwargs)` forwards unknown ones to the model: a typo there silently
drops the setting the user meant (the run goes on with the default). So keys are checked against the fields of a default `GenerationConfig`, and a few common fields
are type-checked.

A mistake in a key is refused before torch or transformers is imported (`quick_generation_problems`): importing
them takes most of a minute on a loaded machine, and a typo deserves an answer in seconds. The field names are read
from the installed transformers' own source (`GenerationConfig.__init__`), so they are always those of the version
that will run; `tests/test_quick_refusals.py` checks them against a real `GenerationConfig()`.
"""

import ast
import importlib.util
import json
import re
from collections.abc import Collection
from functools import cache
from pathlib import Path
from typing import Any
from genrun.backends import unknown_key_message


# Types transformers does not enforce itself; a wrong type otherwise fails deep inside generate.
_INT_FIELDS = {"max_new_tokens", "max_length", "min_new_tokens", "min_length", "num_beams", "top_k",
               "num_return_sequences", "no_repeat_ngram_size", "num_beam_groups"}
_FLOAT_FIELDS = {"temperature", "top_p", "min_p", "typical_p", "max_time", "repetition_penalty", "length_penalty"}
_BOOL_FIELDS = {"do_sample", "use_cache", "early_stopping", "return_dict_in_generate", "output_scores"}
_POSITIVE_FIELDS = {"max_new_tokens", "max_length", "num_beams", "num_return_sequences"}
# genrun captures outputs itself; these would change what generate returns.
_RUNNER_OWNED = {"return_dict_in_generate", "output_scores", "output_logits", "output_attentions",
                 "output_hidden_states", "transformers_version"}


def generation_config_fields() -> list[str]:
    """Public fields of a default transformers GenerationConfig (from its source when it can be read, else imported)."""
    from_source = fields_from_source()
    if from_source is not None:
        return list(from_source)
    from transformers import GenerationConfig

    return sorted(k for k in GenerationConfig().to_dict() if not k.startswith("_"))


def generation_problems(generation: dict[str, Any], model_arguments: Collection[str] = ()) -> list[str]:
    """Every unknown, runner-owned or mistyped `[generation]` key (then transformers' own value validation).

    `model_arguments`: parameters the model's own `generate` override adds (Whisper's `language`, `task`);
    they are no generation-config fields, so transformers' config validation never sees them."""
    problems = _key_problems(generation, generation_config_fields(), model_arguments)
    if not problems:
        problems.extend(_library_validation({k: v for k, v in generation.items() if k not in model_arguments}))
    return problems


def quick_generation_problems(generation: dict[str, Any], config_file: Path, trust_remote_code: bool) -> list[str]:
    """`generation_problems` without transformers' value validation, decided without importing torch or transformers;
    empty when that cannot be decided so (the full check at the end of validation then decides).

    An unknown key may still be a parameter the model's own `generate` adds (Whisper's `language`): it is refused
    here only when the model's folder in transformers defines no `generate` (and no remote code could)."""
    fields = fields_from_source()
    if fields is None:
        return []
    if any(key not in fields for key in generation) and _may_add_generate_arguments(config_file, trust_remote_code):
        return []
    return _key_problems(generation, fields, ())


def _key_problems(generation: dict[str, Any], valid: Collection[str], model_arguments: Collection[str]) -> list[str]:
    problems = []
    for key, value in generation.items():
        if key in model_arguments:
            continue
        if key not in valid:
            problems.append(unknown_key_message(("generation",), key, sorted({*valid, *model_arguments})))
        elif key in _RUNNER_OWNED:
            problems.append(f"[generation] {key} is set by genrun itself (it records ids, scores are not kept); remove it")
        elif (problem := _type_problem(key, value)) is not None:
            problems.append(problem)
    return problems


def _transformers_source() -> Path | None:
    """The installed transformers package's folder, found without importing it."""
    spec = importlib.util.find_spec("transformers")
    locations = spec.submodule_search_locations if spec is not None else None
    return Path(locations[0]) if locations else None


@cache
def fields_from_source() -> tuple[str, ...] | None:
    """The public attributes `GenerationConfig.__init__` sets, read from the installed transformers' source (sorted);
    `None` when it cannot be read or does not look like a generation config (then transformers is imported instead)."""
    source = _transformers_source()
    try:
        tree = ast.parse((source / "generation" / "configuration_utils.py").read_text(encoding="utf-8")) if source else None
    except (OSError, SyntaxError, ValueError):
        return None
    config_class = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GenerationConfig"), None) if tree else None
    init = next((n for n in config_class.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None) if config_class else None
    if init is None:
        return None
    names = {
        target.attr
        for node in ast.walk(init) if isinstance(node, (ast.Assign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"
        and not target.attr.startswith("_")
    }
    return tuple(sorted(names)) if {"max_new_tokens", "do_sample"} <= names else None


def _may_add_generate_arguments(config_file: Path, trust_remote_code: bool) -> bool:
    """Whether the model class this checkpoint loads could add parameters to `generate` (True when it cannot be told
    from `config.json` and transformers' source: remote code, an unknown `model_type`)."""
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True  # transformers reads it next and names what is wrong
    model_type = config.get("model_type") if isinstance(config, dict) else None
    source = _transformers_source()
    if trust_remote_code or "auto_map" in config or not isinstance(model_type, str) or source is None:
        return True
    return _folder_defines_generate(source / "models", model_type.replace("-", "_"), set())


def _folder_defines_generate(models: Path, name: str, seen: set[str]) -> bool:
    """Whether a module of `models/<name>/` (Whisper's is `generation_whisper.py`), or of a model folder they import
    from, defines a `generate` method."""
    seen.add(name)
    folder = models / name
    if not folder.is_dir():
        return True
    for module in folder.glob("*.py"):
        text = module.read_text(encoding="utf-8", errors="replace")
        if "def generate(" in text:
            return True
        for other in set(re.findall(r"^\s*from \.\.(\w+)\b", text, flags=re.MULTILINE)) - seen:
            if _folder_defines_generate(models, other, seen):
                return True
    return False


def _type_problem(key: str, value: Any) -> str | None:
    if key in _INT_FIELDS and (isinstance(value, bool) or not isinstance(value, int)):
        return f"[generation] {key} = {value!r} must be an integer, e.g. {key} = 256"
    if key in _FLOAT_FIELDS and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"[generation] {key} = {value!r} must be a number"
    if key in _BOOL_FIELDS and not isinstance(value, bool):
        return f"[generation] {key} = {value!r} must be true or false"
    if key in _POSITIVE_FIELDS and value < 1:
        return f"[generation] {key} = {value!r} must be at least 1"
    if key == "stop_strings" and not (
        (isinstance(value, str) and value) or (isinstance(value, list) and value and all(isinstance(s, str) and s for s in value))
    ):
        return f"[generation] stop_strings = {value!r} must be a non-empty string or a list of non-empty strings"
    if key == "eos_token_id" and not (
        isinstance(value, int) or (isinstance(value, list) and all(isinstance(i, int) for i in value))
    ):
        return f"[generation] eos_token_id = {value!r} must be an integer or a list of integers"
    return None


def _library_validation(generation: dict[str, Any]) -> list[str]:
    """transformers' own strict validation of the values (e.g. temperature <= 0 with sampling)."""
    from transformers import GenerationConfig

    try:
        GenerationConfig(**generation).validate(strict=True)
    except (ValueError, TypeError) as exc:  # TypeError: a wrong shape (`suppress_tokens = 5`) fails inside validate
        return [f"[generation] transformers refuses these values: {str(exc).strip()}"]
    return []
