"""Pre-flight budget (`token-budget.json`): will the prompt plus the requested output fit the
context and the device memory? Computed from config files and the tokenizer only, before any
weights are loaded, so a run that cannot fit is refused in seconds instead of failing after hours.

This module holds what every backend shares: dtype sizes, the memory fit (the device and its free memory
as the backend's runtime reads them) and the refusals. A decoder's KV-cache math and the transformers length rules
are in the transformers backend's package.
"""

from typing import NamedTuple

from genrun.schemas import Request, TokenBudget
from genrun.schemas.progress import Unit
from genrun.schemas.rendering import human_bytes

from .errors import BudgetRefused
from .runtime import NEUTRAL_RUNTIME, Runtime

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1}


class MemoryFit(NamedTuple):
    """The memory half of `token-budget.json`, shared by every backend's estimate."""

    margin_bytes: int
    required_bytes: int
    device: str
    device_memory_free_bytes: int | None
    device_memory_total_bytes: int | None
    fits_memory: bool | None


def memory_fit(device: str, margin_fraction: float, needed_bytes: int, runtime: Runtime = NEUTRAL_RUNTIME) -> MemoryFit:
    """needed (weights + KV or latents + activations) + a margin of the device's total, vs its free memory, as the backend's
    `runtime` resolves the device and reads its memory (the neutral one: `auto` is the CPU, its /proc/meminfo)."""
    memory = runtime.device_memory(runtime.resolve_device(device))
    margin = round((memory.total_bytes or 0) * margin_fraction)
    required = needed_bytes + margin
    fits = None if memory.free_bytes is None else required <= memory.free_bytes
    return MemoryFit(margin, required, memory.device, memory.free_bytes, memory.total_bytes, fits)


def with_refusals(draft: TokenBudget, refusals: tuple[str, ...], force: bool) -> TokenBudget:
    """Record the refusals, and whether `--force` overrode them (plan enforces them before writing anything)."""
    return draft.model_copy(update={"refusals": refusals, "forced": bool(refusals) and force})


def refusals_for(budget: TokenBudget, unit_word: str = "max_new_tokens") -> tuple[str, ...]:
    """Human reasons the plan must not run, each with its fix; empty when it fits. `--force` is never among the fixes: a
    forced plan records these as what it went past, and `enforce` offers it once (`FORCE_ADVICE`)."""
    reasons = []
    limit = budget.context_limit  # set whenever fits_context is (None: no context limit known)
    if budget.fits_context is False and limit is not None and (budget.prompt_tokens or 0) >= limit:
        prompt = budget.prompt_tokens or 0
        reasons.append(
            f"the prompt is too long: {prompt:,} tokens, but the model's context is {limit:,} tokens; "
            f"cut at least {prompt - limit + 1:,} tokens from [input] to generate anything "
            f"({prompt - limit + (budget.requested_units or 0):,} to keep {unit_word} = {budget.requested_units or 0:,}), "
            "or use a model with a longer context"
        )
    elif budget.fits_context is False and limit is not None:
        allowed = limit - (budget.prompt_tokens or 0)
        reasons.append(
            f"prompt ({budget.prompt_tokens:,} tokens) + budget ({budget.requested_units:,}) = {budget.effective_max_length:,} "
            f"exceeds the model's context limit {limit:,}; lower [generation] {unit_word} to at most {max(allowed, 0):,}"
        )
    if budget.fits_memory is False:
        kv = ("" if budget.kv_bytes_at_budget is None else
              f" + KV {human_bytes(budget.kv_bytes_at_budget)} for {budget.rows_per_request} row(s) x {budget.effective_max_length or 0:,} tokens")
        reasons.append(
            f"needs ~{human_bytes(budget.required_bytes)} (weights {human_bytes(budget.weight_bytes)}{kv} + activations {human_bytes(budget.activation_bytes_estimate)} "
            f"+ margin {human_bytes(budget.margin_bytes)}) but {budget.device} has {human_bytes(budget.device_memory_free_bytes or 0)} free; "
            "lower the budget or the batch, use a smaller dtype, or free memory"
        )
    return tuple(reasons)


FORCE_ADVICE = "or pass --force to run anyway (recorded in token-budget.json as forced)"
"""The last line of a budget refusal: the one place `--force` is offered (a forced plan's recorded refusals never say it)."""


def enforce(budget: TokenBudget) -> None:
    """Raise BudgetRefused (exit 3) naming the numbers and each fix, then `--force`, unless the plan was forced."""
    if budget.refusals and not budget.forced:
        raise BudgetRefused("pre-flight refused the plan:" + "".join(f"\n  - {r}" for r in budget.refusals) + f"\n  {FORCE_ADVICE}")



def unit_budget(request: Request, *, unit: Unit, units: int | None, weight_bytes: int, force: bool, rows: int = 1, working_bytes: int = 0,
                refusals: tuple[str, ...] = (), units_key: str = "max_new_tokens") -> TokenBudget:
    """`token-budget.json` for a backend that is not a token language model: no prompt, context or KV cache, only the units
    it plans (`units`, `None`: the backend decides as it runs), the rows it runs side by side, and whether the weights plus
    `working_bytes` (activations, latents, an engine's own buffers) fit the device's free memory with the request's margin.

    `refusals` are the backend's own (each with its fix); a memory refusal is added here, naming `units_key`, the request
    key that sets `units`. `force` records them instead of refusing, as for every budget."""
    memory = memory_fit(request.model.device, request.budget.memory_margin_fraction, weight_bytes + working_bytes)
    draft = TokenBudget(
        units=unit, prompt_tokens=None, batch_size=rows, requested_units=units, requested_units_source=None if units is None else "request",
        effective_max_length=None, context_limit=None, fits_context=None, kv_bytes_per_token=None, rows_per_request=rows,
        kv_bytes_at_budget=None, weight_bytes=weight_bytes, activation_bytes_estimate=working_bytes, **memory._asdict(),
        domain=None, refusals=(), forced=False,
    )
    return with_refusals(draft, refusals_for(draft, units_key) + refusals, force)
