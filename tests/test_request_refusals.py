"""Every refusal of a bad request: exit code 2, a message naming table/key/value/fix, and an untouched store.

Each case runs the real `genrun plan` CLI in a subprocess against a store directory that must stay
exactly as it was (here: never created).
"""

from pathlib import Path

import pytest

from conftest import run_cli, tiny_request, write_request

from _refusal_helpers import store_content, store_with_a_bystander

CASES = {
    "generation typo": (
        dict(generation="max_new_token = 5"),
        "unknown key 'max_new_token' in [generation]; did you mean 'max_new_tokens'?",
    ),
    "top-level typo (a setting written outside any table)": (
        dict(top="audio_duration_s = 0.1"),
        "unknown key 'audio_duration_s' at the top level",
    ),
    "unknown table": (
        dict(tables="[progres]\nevery_units = 4"),
        "unknown key 'progres' at the top level; did you mean 'progress'?",
    ),
    "nested typo": (
        dict(tables="[budget]\nrows_per_reqest = 2"),
        "unknown key 'rows_per_reqest' in [budget]; did you mean 'rows_per_request'?",
    ),
    "generation wrong type": (
        dict(generation='max_new_tokens = "lots"'),
        "[generation] max_new_tokens = 'lots' must be an integer",
    ),
    "empty prompt": (
        dict(prompt=""),
        "[input] prompt = '': String should have at least 1 character",
    ),
    "progress cadence zero": (
        dict(tables="[progress]\nevery_units = 0"),
        "[progress] every_units = 0: Input should be greater than or equal to 1",
    ),
    "frame units without a rate": (
        dict(tables='[units]\nname = "frame"'),
        "needs 'per_second'",
    ),
    "a name the snapshot id cannot hold (explained in words, not by its regular expression)": (
        dict(name="my run!"),
        "top-level key 'name' = 'my run!': not of the allowed form: Short run name; part of the snapshot id: 1 to 64 letters",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_with_exit_2_and_store_untouched(case: str, tmp_path: Path, tiny_lm: Path) -> None:
    overrides, expected = CASES[case]
    request = write_request(tmp_path, tiny_request(tiny_lm, **overrides))
    store = tmp_path / "store"
    proc = run_cli("plan", request, "--store", store)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert "should match pattern" not in proc.stderr
    assert not store.exists()


def _assert_refused(request: Path, store: Path, *fragments: str) -> str:
    proc = run_cli("plan", request, "--store", store)
    assert proc.returncode == 2, proc.stderr
    message = " ".join(proc.stderr.split())  # rich wraps long lines on stderr
    for fragment in fragments:
        assert fragment in message, message
    assert not store.exists()
    return message


def test_both_prompt_and_prompts(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm).replace("[input]\n", '[input]\nprompts = ["count down from 2 :"]\n')
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "exactly one of 'prompt', 'prompts' or 'messages'",
                    "found 'prompt' and 'prompts'")


def test_wrong_top_level_type(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm).replace("seed = 0", 'seed = "zero"')
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "top-level key 'seed' = 'zero'", "valid integer")


def test_empty_prompt_in_batch(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm).replace('prompt = "count down from 5 :"', 'prompts = ["count down from 2 :", ""]')
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "prompts[1] is empty")


def test_missing_model_path(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tmp_path / "no-such-model")
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "[model] path", "does not exist")


def test_hub_id_not_in_local_cache(tmp_path: Path) -> None:
    text = tiny_request(Path("no-org/no-such-model"))
    message = _assert_refused(write_request(tmp_path, text), tmp_path / "store", "no-org/no-such-model",
                              "local Hugging Face cache")
    assert "never downloads" in message


def test_not_utf8(tmp_path: Path, tiny_lm: Path) -> None:
    path = tmp_path / "request.toml"
    path.write_bytes(tiny_request(tiny_lm).replace("count down", "co\xe9unt").encode("latin-1"))
    _assert_refused(path, tmp_path / "store", "is not UTF-8 text", "0xe9", "save it as UTF-8")


def test_not_toml(tmp_path: Path) -> None:
    _assert_refused(write_request(tmp_path, "name = \n[model"), tmp_path / "store", "is not valid TOML")


def test_not_json(tmp_path: Path) -> None:
    _assert_refused(write_request(tmp_path, '{"name": "x",', name="request.json"), tmp_path / "store", "is not valid JSON")


def test_json_request_with_unknown_key(tmp_path: Path, tiny_lm: Path) -> None:
    text = ('{"name": "j", "model": {"path": "%s"}, "input": {"prompt": "count down from 3 :"},'
            ' "generation": {"max_new_tokns": 4}}' % tiny_lm)
    _assert_refused(write_request(tmp_path, text, name="request.json"), tmp_path / "store",
                    "unknown key 'max_new_tokns' in [generation]; did you mean 'max_new_tokens'?")


def test_absurdly_large(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm) + "# " + "x" * (2 << 20) + "\n"
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "requests are at most 1,048,576 bytes")


def test_wrong_extension(tmp_path: Path, tiny_lm: Path) -> None:
    _assert_refused(write_request(tmp_path, tiny_request(tiny_lm), name="request.yaml"), tmp_path / "store",
                    "extension '.yaml'", "use a .toml or .json file")


def test_missing_request_file(tmp_path: Path) -> None:
    _assert_refused(tmp_path / "absent.toml", tmp_path / "store", "does not exist")


def test_entrypoint_module_not_found(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm, tables='[entrypoint]\ncallable = "no_such_module_xyz:run"')
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "[entrypoint] callable", "no_such_module_xyz")


def test_several_problems_reported_together(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm, generation="max_new_token = 5\ntemprature = 0.5")
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "2 problems", "'max_new_tokens'", "'temperature'")


def test_causal_lm_needs_an_input(tmp_path: Path, tiny_lm: Path) -> None:
    text = tiny_request(tiny_lm).replace('prompt = "count down from 5 :"\n', "")
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "[input] is empty", "'prompt', 'prompts' or 'messages'")


def test_a_backend_table_the_chosen_backend_does_not_own_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    """`[loop]` belongs to the loop backend: on the transformers backend it is an unknown table, refused at plan."""
    text = tiny_request(tiny_lm) + '\n[loop]\ncallable = "my_loop:run"\n'
    _assert_refused(write_request(tmp_path, text), tmp_path / "store", "unknown key 'loop' at the top level",
                    "backend 'transformers' owns no tables")


def test_backend_tables_round_trip_through_the_normalised_request() -> None:
    from genrun.schemas import Request

    request = Request.model_validate({"name": "x", "model": {"path": "m"}, "engine": {"max_model_len": 64}})
    assert request.backend_tables == {"engine": {"max_model_len": 64}}
    assert Request.model_validate_json(request.model_dump_json()) == request
    # a plain unknown value is still an unknown key, never a table
    with pytest.raises(ValueError, match="engin"):
        Request.model_validate({"name": "x", "model": {"path": "m"}, "engin": 3})


@pytest.mark.parametrize("generation, problem", [
    ("max_new_tokens = -5", "max_new_tokens = -5 must be at least 1"),
    ("max_length = 2.5", "max_length = 2.5 must be an integer, e.g. max_length = 256"),
])
def test_what_the_request_alone_shows_wrong_is_refused_before_torch_is_imported(tmp_path: Path, generation: str, problem: str) -> None:
    """A refusal the request file alone justifies costs no model-library import (torch takes seconds under load)."""
    import subprocess
    import sys

    from conftest import REPO, TINY_LM

    request = write_request(tmp_path, tiny_request(TINY_LM, generation=generation))
    probe = (f"import sys; from genrun.runner.cli import main; code = main(['run', {str(request)!r}, '--store', {str(tmp_path / 's')!r}]); "
             "assert 'torch' not in sys.modules, 'torch imported before the refusal'; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert problem in done.stderr and not (tmp_path / "s").exists()


@pytest.mark.parametrize("model_path", [".", "..", "~", "/"])
def test_a_model_directory_without_config_json_is_refused_before_it_is_walked(
        model_path: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`/` used to be walked for a minute (remote code, then every file hashed) before transformers refused it."""
    import os

    from genrun.runner.model_identity import MAX_MODEL_ENTRIES

    walked: list[str] = []
    real_walk = os.walk
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: walked.append(str(top)) or real_walk(top, *a, **k))
    store, before = store_with_a_bystander(tmp_path)
    request = write_request(tmp_path, tiny_request(Path(model_path)))
    proc = run_cli("plan", request, "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in message, message
    # which refusal comes first depends on the directory: more than MAX_MODEL_ENTRIES entries (`/`, maybe `~`) is refused
    # before the backend looks for config.json; either names the path and the fix
    reasons = ("holds no config.json", f"holds more than {MAX_MODEL_ENTRIES:,} files and folders")
    assert f"[model] path {model_path!r}" in message and any(reason in message for reason in reasons), message
    assert walked == [], walked  # refused before the model directory (or anything) was walked
    assert store_content(store) == before


@pytest.mark.parametrize("field", ["[model] processor", "[input] audio", "[input] images"])
def test_a_path_longer_than_a_file_system_allows_is_refused(field: str, tmp_path: Path, tiny_lm: Path) -> None:
    """A 100,000-character path raised `OSError: File name too long` where it was first opened."""
    table, key = field.strip("[").split("] ")
    value = "x" * 100_000
    text = tiny_request(tiny_lm).replace(f"[{table}]\n", f'[{table}]\n{key} = "{value}"\n')
    store, before = store_with_a_bystander(tmp_path)
    proc = run_cli("plan", write_request(tmp_path, text), "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in message, message
    assert field in message and "longer than a file system allows" in message and "100,000 bytes" in message, message
    assert len(message) < 1000  # the value is named, not printed
    assert store_content(store) == before


def test_a_tokenizer_that_fails_on_the_prompt_is_refused_naming_its_file(tmp_path: Path, tiny_lm: Path) -> None:
    """tokenizer.json names `<unk>` as its unknown token but its vocabulary lacks it: encoding an unknown word raised a raw
    tokenizers `Exception` from the budget."""
    import json
    import shutil

    model = tmp_path / "no-unk"
    shutil.copytree(tiny_lm, model)
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    del tokenizer["model"]["vocab"]["<unk>"]
    tokenizer["added_tokens"] = [t for t in tokenizer["added_tokens"] if t["content"] != "<unk>"]
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    store, before = store_with_a_bystander(tmp_path)
    proc = run_cli("plan", write_request(tmp_path, tiny_request(model, prompt="hello there")), "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in message, message
    assert "[input] cannot be tokenised" in message and str(model / "tokenizer.json") in message and "re-save" in message, message
    assert store_content(store) == before


@pytest.mark.parametrize(("config", "named"), [
    ("fifo", "holds a config.json that is a FIFO"),
    ("{}", "transformers cannot use"),
    ("not json", "transformers cannot use"),
])
def test_a_config_json_transformers_cannot_use_is_refused_naming_it(config: str, named: str, tmp_path: Path) -> None:
    import os

    model = tmp_path / "model"
    model.mkdir()
    if config == "fifo":
        os.mkfifo(model / "config.json")  # reading it would block forever
    else:
        (model / "config.json").write_text(config)
    store, before = store_with_a_bystander(tmp_path)
    proc = run_cli("plan", write_request(tmp_path, tiny_request(model)), "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in message, message
    assert "[model] path" in message and named in message and "config.json" in message, message
    assert store_content(store) == before


def test_a_model_directory_too_large_for_a_model_is_refused_before_it_is_walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A backend that reads no config.json (the loop) was handed `/`: its remote-code scan and hashing walked every file."""
    import os

    from genrun.runner.model_identity import MAX_MODEL_ENTRIES

    (tmp_path / "myloop.py").write_text("def generate(model_dir, inputs, generation, recorder):\n    return None\n")
    text = 'name = "t"\n[model]\npath = "/"\nbackend = "loop"\n[loop]\ncallable = "myloop:generate"\n[input]\nprompt = "hi"\n'
    walked: list[str] = []
    real_walk = os.walk
    monkeypatch.setattr(os, "walk", lambda top, *a, **k: walked.append(str(top)) or real_walk(top, *a, **k))
    store, before = store_with_a_bystander(tmp_path)
    proc = run_cli("plan", write_request(tmp_path, text), "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in message, message
    assert f"[model] path '/' is the directory /, which holds more than {MAX_MODEL_ENTRIES:,} files and folders" in message, message
    assert walked == [], walked
    assert store_content(store) == before


def test_a_folder_given_as_the_request_is_named_as_a_folder(tmp_path: Path, tiny_lm: Path) -> None:
    """`genrun plan examples`: "is a directory", with the requests it holds, not "has extension ''"."""
    folder = tmp_path / "requests"
    folder.mkdir()
    write_request(folder, tiny_request(tiny_lm))
    (request,) = folder.iterdir()
    store = tmp_path / "store"
    proc = run_cli("plan", folder, "--store", store)
    assert proc.returncode == 2, proc.stderr
    assert f"request file {folder} is a directory (it holds {request.name}); give one .toml or .json request file in it" in proc.stderr
    assert "has extension" not in proc.stderr and not store.exists()
