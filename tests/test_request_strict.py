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


ENTRY_MODULE = '''
from json import dumps as imported
from os import system


def generate(model, tokenizer, inputs, generation):
    return model.generate(**tokenizer(inputs["prompt"], return_tensors="pt"), **generation)


class Generator:
    def __call__(self, model, tokenizer, inputs, generation):
        return None


not_callable = 3
'''

# reference -> what the refusal says (the module `entry.py` lies beside the request)
ENTRY_CASES = {
    "entry:nope": "module 'entry' has no callable 'nope'",
    "entry:not_callable": "is int 3, not a function",
    "entry:Generator": "is type",
    "entry:system": "is builtin_function_or_method <built-in function system>, not a function",
    "entry:imported": "'imported' is defined in 'json', not in 'entry' (which imports it); name the module that defines it: 'json:dumps'",
    "os:system": "'os' is part of Python's standard library",
    "sys:exit": "'sys' is part of Python's standard library",
}


@pytest.mark.parametrize("field", ["[entrypoint] callable", "[model] loader"])
@pytest.mark.parametrize("reference", sorted(ENTRY_CASES))
def test_user_code_must_be_a_function_its_module_defines(field: str, reference: str, tmp_path: Path, tiny_lm: Path) -> None:
    """`module:nope`, `os:system` and `sys:exit` used to plan fine (the module was only located, never imported)."""
    (tmp_path / "entry.py").write_text(ENTRY_MODULE)
    text = tiny_request(tiny_lm)
    if field == "[entrypoint] callable":
        text += f'[entrypoint]\ncallable = "{reference}"\n'
    else:
        text = text.replace("[model]\n", f'[model]\nloader = "{reference}"\n')
    store = tmp_path / "store"
    proc = run_cli("plan", write_request(tmp_path, text), "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "Traceback" not in message, message
    assert f"{field} {reference!r}" in message and ENTRY_CASES[reference] in message, message
    assert not store.exists()


def test_a_function_the_module_defines_plans(tmp_path: Path, tiny_lm: Path) -> None:
    (tmp_path / "entry.py").write_text(ENTRY_MODULE)
    request = write_request(tmp_path, tiny_request(tiny_lm) + '[entrypoint]\ncallable = "entry:generate"\n')
    proc = run_cli("plan", request, "--store", tmp_path / "store")
    assert proc.returncode == 0, proc.stderr


SWEEP = '[sweep]\nname = "s"\nrequest = "base.toml"\n'


@pytest.mark.parametrize(("executor", "named"), [
    ("num_gpus = inf", "[sweep.executor] num_gpus = inf in sweep file"),
    ("num_gpus = nan", "[sweep.executor] num_gpus = nan in sweep file"),
    ("num_gpus = -1", "[sweep.executor] num_gpus = -1"),
    ("num_cpus = true", "[sweep.executor] num_cpus = True"),
    ('workers = "2"', "[sweep.executor] workers = '2'"),
])
def test_a_sweep_executor_value_of_the_wrong_kind_is_refused(executor: str, named: str, tmp_path: Path, tiny_lm: Path) -> None:
    write_request(tmp_path, tiny_request(tiny_lm), name="base.toml")
    sweep = write_request(tmp_path, SWEEP + f'[sweep.executor]\nkind = "ray"\n{executor}\n', name="sweep.toml")
    store = tmp_path / "store"
    proc = run_cli("sweep", "plan", sweep, "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and named in message and "Traceback" not in message, message
    assert not store.exists()


def test_a_json_sweep_file_with_a_key_given_twice_is_refused(tmp_path: Path, tiny_lm: Path) -> None:
    """The last `retries` silently won."""
    write_request(tmp_path, tiny_request(tiny_lm), name="base.toml")
    sweep = write_request(tmp_path, '{"sweep": {"name": "s", "request": "base.toml", "retries": 1, "retries": 2}}', name="sweep.json")
    store = tmp_path / "store"
    proc = run_cli("sweep", "plan", sweep, "--store", store)
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 2 and "'retries' appears twice" in message and "Traceback" not in message, message
    assert not store.exists()


def _scalar_types(annotation: object) -> set[type]:
    """The plain scalar types (`int`, `float`, `bool`, `str`) a field's annotation admits, through unions and `Annotated`."""
    from typing import Annotated, Union, get_args, get_origin
    import types

    origin = get_origin(annotation)
    if origin is Annotated:
        return _scalar_types(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_scalar_types(arg) for arg in get_args(annotation)))
    return {annotation} & {int, float, bool, str}  # type: ignore[arg-type]


def _models(root: type) -> list[type]:
    """`root` and every model nested in its fields."""
    from typing import get_args

    from pydantic import BaseModel

    found, stack = [], [root]
    while stack:
        model = stack.pop()
        if model in found:
            continue
        found.append(model)
        for field in model.model_fields.values():
            nested = [field.annotation, *get_args(field.annotation)]
            nested += [inner for arg in nested for inner in get_args(arg)]
            stack += [a for a in nested if isinstance(a, type) and issubclass(a, BaseModel)]
    return found


# What each scalar type must refuse: a boolean is not a number, a number is not a boolean or a string, a string is no number.
CONFUSIONS = {int: (True, "1", 1.5, 1.0), float: (True, "1", "1e3"), bool: (1, 0, "true"), str: (1, True, 1.5)}


def test_every_request_and_sweep_field_refuses_values_of_another_type() -> None:
    """Strict everywhere, not only where a case was reported: every scalar field of the request and sweep file models."""
    from pydantic import ValidationError

    from genrun.schemas import Request
    from genrun.schemas.sweep import SweepFile

    minimal = {"Request": {"name": "x", "model": {"path": "m"}}, "ModelSpec": {"path": "m"}, "ChatMessage": {"role": "user", "content": "x"},
               "EntrypointSpec": {"callable": "m:f"}, "SweepFile": {"sweep": {"name": "s", "request": "r"}},
               "SweepBody": {"name": "s", "request": "r"}, "DatasetSpec": {"path": "d"}}
    checked = []
    for model in _models(Request) + _models(SweepFile):
        base = minimal.get(model.__name__, {})
        model.model_validate(base)  # the minimal table is valid
        for name, field in model.model_fields.items():
            types_ = _scalar_types(field.annotation)
            for wanted in types_:
                for wrong in CONFUSIONS[wanted]:
                    if type(wrong) in types_:
                        continue  # the field also takes this type
                    with pytest.raises(ValidationError):
                        model.model_validate({**base, field.alias or name: wrong})
                    checked.append(f"{model.__name__}.{name} = {wrong!r}")
    assert len(checked) > 60 and "Request.seed = True" in checked and "ExecutorSpec.num_gpus = '1'" in checked, checked
