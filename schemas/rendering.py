"""Pure value helpers that runner and analysis share: byte sizes for people, values made JSON-ready.

Torch-free and dependency-free, so analysis may import it; one place for each so the CLI, the
budget refusals, live progress and the report all print sizes the same way.
"""

from collections.abc import Callable, Mapping
from typing import Any

_BYTE_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def human_bytes(n: int | float) -> str:
    """`1.50 GiB`, `12.3 MiB`, `812.0 KiB`, `17 B`: binary units, two decimals from GiB up."""
    for unit, size in _BYTE_UNITS:
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}" if size >= 2**30 else f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def jsonable(value: Any, leaf: Callable[[Any], Any] = str) -> Any:
    """Plain JSON values: mappings (keys as str) and sequences/sets (as lists) recursed, any other value through `leaf`."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, leaf) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, leaf) for v in value]
    return leaf(value)


def array_or(describe: Callable[[Any], str]) -> Callable[[Any], Any]:
    """A leaf (or orjson `default`): arrays and tensors as nested lists (`tolist()`), anything else described by `describe`."""

    def leaf(value: Any) -> Any:
        tolist = getattr(value, "tolist", None)
        return tolist() if callable(tolist) else describe(value)

    return leaf


def describe_timings(timings: Any, unit: str = "token") -> str:
    """`checks 0.12 s, imports 4.10 s, …, generate 0.60 s (first token 0.03 s, decode 0.52 s), evidence 0.05 s = total 6.21 s`.

    `timings` is a `Timings` (or the report's summary of one); `unit` what the run counted (`token`, `frame`, `step`).
    With `phases` the parts sum to the total; generation's own parts are inside `generate`. Without (snapshots written
    before phases were recorded): load, first, decode, total.
    """
    if getattr(timings, "phases", None) is None:
        return describe_phases(timings, unit)
    return describe_phases(timings, unit) + f" = total {timings.total_s:.2f} s"


def after_first(unit: str) -> str:
    """What generation after the first unit is called: `decode` for tokens and frames; a pipeline's `later steps`
    (a diffusion step decodes nothing)."""
    return "decode" if unit in ("token", "frame") else f"later {unit}s"


def describe_phases(timings: Any, unit: str = "token") -> str:
    """`describe_timings` without ` = total …` when `timings` has phases (what `genrun run` prints under the plan's share)."""
    phases = getattr(timings, "phases", None)
    inner = [(f"first {unit}", timings.first_token_s), (after_first(unit), timings.decode_s)]
    if phases is None:
        parts = [("load", timings.load_s), *inner, ("total", timings.total_s)]
        return ", ".join(f"{name} {value:.2f} s" for name, value in parts if value is not None)
    shown = []
    for field, value in phases.model_dump().items():
        if value is None:
            continue
        text = f"{field.removesuffix('_s')} {value:.2f} s"
        if field == "generate_s" and any(v is not None for _, v in inner):
            text += " (" + ", ".join(f"{name} {v:.2f} s" for name, v in inner if v is not None) + ")"
        shown.append(text)
    return ", ".join(shown)
