"""`diff` compares artifact models field by field: a field added to a model is compared without editing diff."""

from pathlib import Path

import orjson
from pydantic import create_model

from genrun.analysis.diff import NOT_COMPARED, compared_fields, model_changes
from genrun.schemas import Environment, GenerationConfigBeforeGenerate, Result, layout

LM = Path(__file__).parent / "fixtures" / "format-1" / "20261201T003156Z-tiny-6f6cc2"  # format 1, migrated on load


def _result() -> Result:
    return Result.model_validate_json((LM / layout.RESULT).read_bytes())


def test_a_field_added_to_a_model_is_compared() -> None:
    extended = create_model("ResultWithSeed", __base__=Result, sampler_seed=(int | None, None))
    base = _result().model_dump()
    a, b = extended(**base, sampler_seed=1), extended(**base, sampler_seed=2)
    assert "sampler_seed" in compared_fields(extended)
    assert [(c.path, c.a, c.b) for c in model_changes(a, b)] == [("sampler_seed", 1, 2)]


def test_every_field_is_compared_except_the_declared_ones() -> None:
    for model in (Result, Environment, GenerationConfigBeforeGenerate):
        skipped = {n for base in model.__mro__ for n in NOT_COMPARED.get(base, {})}
        assert set(compared_fields(model)) == set(model.model_fields) - skipped
    assert "schema_version" not in compared_fields(Environment) and "timings" not in compared_fields(Result)


def test_nested_fields_are_compared_leaf_by_leaf() -> None:
    environment = orjson.loads((LM / layout.ENVIRONMENT).read_bytes())
    a = Environment.model_validate(environment)
    b = Environment.model_validate(environment | {"cpu": environment["cpu"] | {"logical_cores": 64}})
    assert [(c.path, c.b) for c in model_changes(a, b)] == [("cpu.logical_cores", 64)]
    assert model_changes(a, a) == ()
