"""A request's mistakes are refused before torch or transformers is imported (issue 41, item 4).

Importing torch and transformers takes most of a minute on a loaded machine; a typo in `[generation]` or a wrong
`[model] path` must not wait for it. Each case runs the real `genrun plan` in a fresh interpreter whose
`sys.meta_path` makes torch and transformers unimportable (their modules can be found, as on any machine where
they are installed, but executing one raises and is recorded): the refusal must come out whole (exit 2, naming
the key and the fix), nothing may be written, and no blocked import may have been attempted.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, PROCESS_TIMEOUT_S, REPO, tiny_request, write_request
from _refusal_helpers import store_content, store_with_a_bystander
from test_request_refusals import CASES as REFUSALS

from genrun.runner.backends.transformers._transformers_keys import fields_from_source, generation_problems, quick_generation_problems

BLOCKED_ATTEMPT = "BLOCKED IMPORT ATTEMPTED:"

PLAN_WITHOUT_TORCH = r'''
import importlib.abc, importlib.machinery, sys

BLOCKED = ("torch", "transformers")

class RefusingLoader(importlib.abc.Loader):
    def create_module(self, spec):
        print("BLOCKED IMPORT ATTEMPTED:", spec.name, file=sys.stderr, flush=True)
        raise ImportError(f"import of {spec.name} blocked: a request's mistakes are refused without it")
    def exec_module(self, module):
        raise AssertionError("unreachable")

class BlockHeavyImports(importlib.abc.MetaPathFinder):
    """The modules are found where they are installed, but loading one fails and says so on stderr."""
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] not in BLOCKED:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            spec.loader = RefusingLoader()
        return spec

sys.meta_path.insert(0, BlockHeavyImports())
from genrun.runner.cli import main
sys.exit(main(sys.argv[1:]))
'''

QUICK_CASES = {name: REFUSALS[name] for name in ("generation typo", "generation wrong type")} | {
    "a generation key genrun sets itself": (dict(generation="max_new_tokens = 4\noutput_scores = true"),
                                            "[generation] output_scores is set by genrun itself"),
}
"""The `[generation]` refusals of tests/test_request_refusals.py, and one more: each must come without torch."""


def _plan_without_torch(request: Path, store: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PLAN_WITHOUT_TORCH, "plan", str(request), "--store", str(store)],
                          cwd=REPO, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S)


@pytest.mark.parametrize("case", list(QUICK_CASES))
def test_generation_mistake_refused_without_importing_torch_or_transformers(case: str, tmp_path: Path, tiny_lm: Path) -> None:
    overrides, expected = QUICK_CASES[case]
    store, before = store_with_a_bystander(tmp_path)
    proc = _plan_without_torch(write_request(tmp_path, tiny_request(tiny_lm, **overrides)), store)
    assert BLOCKED_ATTEMPT not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert store_content(store) == before


def test_wrong_model_path_refused_without_importing_torch_or_transformers(tmp_path: Path) -> None:
    not_a_model = tmp_path / "weights"
    not_a_model.mkdir()
    store, before = store_with_a_bystander(tmp_path)
    proc = _plan_without_torch(write_request(tmp_path, tiny_request(not_a_model)), store)
    assert BLOCKED_ATTEMPT not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert f"[model] path '{not_a_model}' is the directory {not_a_model}, which holds no config.json" in proc.stderr
    assert store_content(store) == before


def test_the_blocker_is_real(tmp_path: Path, tiny_lm: Path) -> None:
    """A correct request gets past the quick checks and needs transformers: the blocker stops it and says so (the
    cases above would otherwise prove nothing)."""
    proc = _plan_without_torch(write_request(tmp_path, tiny_request(tiny_lm)), tmp_path / "store")
    assert f"{BLOCKED_ATTEMPT} transformers" in proc.stderr or f"{BLOCKED_ATTEMPT} torch" in proc.stderr, proc.stderr
    assert proc.returncode != 0


def test_field_names_read_from_source_are_those_of_the_installed_generation_config() -> None:
    from transformers import GenerationConfig

    assert fields_from_source() == tuple(sorted(k for k in GenerationConfig().to_dict() if not k.startswith("_")))


def test_quick_check_says_what_the_full_check_says(tiny_lm: Path) -> None:
    generation = {"max_new_token": 5, "do_sample": False}
    quick = quick_generation_problems(generation, tiny_lm / "config.json", trust_remote_code=False)
    assert quick == generation_problems(generation) == [
        "unknown key 'max_new_token' in [generation]; did you mean 'max_new_tokens'?"]


def test_a_model_whose_generate_takes_more_arguments_is_left_to_the_full_check(tiny_lm: Path) -> None:
    """Whisper's `generate(language=...)`: an unknown config field may be the model's own argument, which only the
    model class can tell; the quick check defers (returns nothing) instead of refusing a valid request."""
    whisper = EXAMPLES / "models" / "tiny-whisper" / "config.json"
    assert quick_generation_problems({"language": "en", "max_new_tokens": 4}, whisper, trust_remote_code=False) == []
    [refused] = quick_generation_problems({"language": "en"}, tiny_lm / "config.json", trust_remote_code=False)
    assert refused.startswith("unknown key 'language' in [generation]; valid keys are: ")
    assert quick_generation_problems({"language": "en"}, tiny_lm / "config.json", trust_remote_code=True) == []
