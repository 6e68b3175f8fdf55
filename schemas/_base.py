"""Shared base for every artifact model: frozen, strict, documented by field docstrings."""

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Base of every schema model: unknown keys are refused, loaded objects are immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A number a person wrote: an integer or a float, never a boolean, a string or inf/nan (for `float | None` fields,
where `Field(strict=True)` cannot reach through the union)."""
