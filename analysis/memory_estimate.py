"""The plan's memory estimate as its parts, in one line for the CLI and the report.

`required_bytes` alone hides that on a small model most of it is the safety margin (a fraction
of the device's *total* memory, `[budget] memory_margin_fraction`): showing weights, KV cache,
activations and margin separately says which one to act on. Standard library only.
"""

from typing import NamedTuple, Protocol

from genrun.schemas.rendering import human_bytes


class BudgetBytes(Protocol):
    """The `TokenBudget` fields this module reads (a protocol, so a loaded dict-backed view works too)."""

    required_bytes: int
    weight_bytes: int
    kv_bytes_at_budget: int | None
    activation_bytes_estimate: int
    margin_bytes: int
    device: str
    device_memory_total_bytes: int | None


class MemoryPart(NamedTuple):
    """One term of `required_bytes`."""

    name: str
    bytes: int


def memory_parts(budget: BudgetBytes) -> tuple[MemoryPart, ...]:
    """weights + KV cache + activations + margin = `required_bytes` (token-budget.json's own numbers)."""
    return (
        MemoryPart("weights", budget.weight_bytes),
        MemoryPart("KV cache", budget.kv_bytes_at_budget or 0),
        MemoryPart("activations", budget.activation_bytes_estimate),
        MemoryPart("margin", budget.margin_bytes),
    )


def describe_memory(budget: BudgetBytes) -> str:
    """`~2.35 GiB of cpu: the model 1.3 MiB (weights 309.3 KiB + KV cache 11.0 KiB + activations 1.0 MiB) + margin 2.34 GiB
    (10% of cpu's 23.4 GiB, kept free whatever the model's size)`: the model's own share first, since on a small model
    the margin (a floor of free memory, a fraction of the device's total) is nearly all of the total."""
    *model, margin = memory_parts(budget)
    terms = " + ".join(f"{part.name} {human_bytes(part.bytes)}" for part in model)
    total = budget.device_memory_total_bytes
    share = f" ({margin.bytes / total:.0%} of {budget.device}'s {human_bytes(total)}, kept free whatever the model's size)" if total else ""
    return (f"~{human_bytes(budget.required_bytes)} of {budget.device}: the model {human_bytes(sum(p.bytes for p in model))} ({terms})"
            f" + {margin.name} {human_bytes(margin.bytes)}{share}")
