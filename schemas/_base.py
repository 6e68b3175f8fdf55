"""Shared base for every artifact model: frozen, strict, documented by field docstrings."""

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Base of every schema model: unknown keys are refused, loaded objects are immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]
"""A number a person wrote: an integer or a float, never a boolean, a string or inf/nan (for `float | None` fields,
where `Field(strict=True)` cannot reach through the union)."""

MAX_PATH_BYTES = 4096
"""Longest path Linux opens (PATH_MAX); a longer one fails every file call with 'File name too long'."""
MAX_NAME_BYTES = 255
"""Longest single file or directory name (NAME_MAX on Linux and macOS file systems)."""


def _fits_a_file_system(path: str) -> str:
    """Refuse, in the request, a path no file system opens (the OS would say 'File name too long' wherever it is used)."""
    if not path:
        raise ValueError("an empty path names no file; give a file or directory")
    size = len(path.encode("utf-8", "surrogateescape"))
    longest = max((len(part.encode("utf-8", "surrogateescape")) for part in path.split("/")), default=0)
    if size > MAX_PATH_BYTES or longest > MAX_NAME_BYTES:
        raise ValueError(f"a path of {size:,} bytes (longest name {longest:,} bytes) is longer than a file system allows "
                         f"(at most {MAX_PATH_BYTES:,} bytes, {MAX_NAME_BYTES} per name); give the file's real path")
    return path


PathText = Annotated[str, AfterValidator(_fits_a_file_system), Field(json_schema_extra={"minLength": 1, "maxLength": MAX_PATH_BYTES})]
"""A file or directory path as a person writes it: not empty, and short enough for a file system to open."""
