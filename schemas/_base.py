"""Shared base for every artifact model: frozen, strict, documented by field docstrings."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Base of every schema model: unknown keys are refused, loaded objects are immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
