"""Strict means strict: booleans are not integers, strings are not numbers, a JSON key given twice is refused."""

import json
import tomllib
from pathlib import Path

import pytest

from conftest import run_cli, tiny_request, write_request

# case -> (TOML request edit, what the refusal names)
CASES = {
    "seed true": (lambda t: t.replace("seed = 0", "seed = true"), "seed"),
    "seed float": (lambda t: t.replace("seed = 0", "seed = 1.0"), "seed"),
    "copy integer": (lambda t: t.replace('[input]\n', "[input]\ncopy = 1\n"), "copy"),
    "every_seconds string": (lambda t: t + '[progress]\nevery_seconds = "1e3"\n', "every_seconds"),
    "require_approval string": (lambda t: t + '[policy]\nrequire_approval = "true"\n', "require_approval"),
    "every_units true": (lambda t: t + "[progress]\nevery_units = true\n", "every_units"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_of_the_wrong_type_is_refused_not_coerced(case: str, tmp_path: Path, tiny_lm: Path) -> None:
    edit, field = CASES[case]
    request = write_request(tmp_path, edit(tiny_request(tiny_lm)))
    store = tmp_path / "store"
    proc = run_cli("plan", request, "--store", store)
    assert proc.returncode == 2 and field in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not store.exists()


def test_a_json_request_with_a_key_given_twice_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    body = json.dumps(tomllib.loads(tiny_request(tiny_lm)))
    duplicated = body.replace('"seed": 0', '"seed": 0, "seed": 7')
    assert duplicated != body
    request = write_request(tmp_path, duplicated, name="request.json")
    store = tmp_path / "store"
    proc = run_cli("plan", request, "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "'seed' appears twice" in message and "Traceback" not in message, message
    assert not store.exists()


def test_a_sweep_with_infinite_gpus_is_refused() -> None:
    from pydantic import ValidationError

    from genrun.schemas.sweep import ExecutorSpec

    with pytest.raises(ValidationError, match="num_gpus"):
        ExecutorSpec.model_validate({"kind": "ray", "num_gpus": float("inf")})
    with pytest.raises(ValidationError, match="workers"):
        ExecutorSpec.model_validate({"kind": "local", "workers": True})
